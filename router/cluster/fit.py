"""Whether a replica's node can take its model without stopping anything (issue 25).

Pure: from what the node's snapshot said (its devices' free bytes, the model's memory when
resident, its estimate when known and the node's own verdict from its dry run when sent). The
node's verdict wins over the arithmetic here: it also knows what memory does not say, such as
a lane that holds one runtime at a time under `residency: lane` or an unload policy. The
replica choice (replicas.choose_replica) prefers a
node where the model is resident or fits without eviction; a node that says nothing of memory
(an older peer, or one whose estimate failed) is taken as fitting, so the choice stays what
it was before nodes reported memory.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from enum import IntEnum

from router.cluster.protocol import DeviceMemory, NodeModel


class Fit(IntEnum):
    """Lower is better: the tiers of the replica choice."""

    RESIDENT = 0  # loaded (or loading) there: nothing to load
    FITS = 1  # fits the node's free memory now, or the node did not say
    EVICTS = 2  # a load there would stop other runtimes first


def fit_of(model: NodeModel, devices: Sequence[DeviceMemory]) -> Fit:
    if model.memory is not None or model.loaded:
        return Fit.RESIDENT
    if model.evicts is not None:  # the node's dry run said (a newer node)
        return Fit.EVICTS if model.evicts else Fit.FITS
    if model.estimate is None or not devices:
        return Fit.FITS
    return Fit.FITS if fits_free(model.estimate, devices) else Fit.EVICTS


def fits_free(estimate: Mapping[str, int], devices: Sequence[DeviceMemory]) -> bool:
    """Every device the estimate needs has that much free (a device the node lacks: no)."""
    free = {d.device: d.free for d in devices}
    return all(need <= free.get(device, -1) for device, need in estimate.items() if need > 0)


__all__ = ["Fit", "fit_of", "fits_free"]
