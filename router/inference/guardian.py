"""The request-time guardian check (docs/guardians.md): an image request for a text-only
model is answered by its assigned guardian, here or on another node. The assignments are
managed by the site route, router/api/site/guardians.py."""

from __future__ import annotations

from aiohttp import web

from router.appkeys import CATALOG, CLUSTER, GUARDIANS, SETTINGS
from router.cluster import Assignment, Target
from router.config import ModelConfig
from router.errors import BadRequest, ServiceUnavailable
from router.inference.relay import target_on
from router.records import RequestInfo

GUARDIAN_HINT = (
    "assign a guardian with POST /router/v1/site/guardian-models "
    '{"scope": "model", "model_id": "<this model>", "guardian": {"model_id": "<a multimodal model>"}}'
)


def answering(
    request: web.Request, config: ModelConfig, info: RequestInfo
) -> tuple[ModelConfig, Target | None]:
    """An image request for text-only `config`: the guardian's configuration here, or the
    relay target of a guardian on another node. The request keeps its model name (the answer
    says what the client asked for); analytics record the guardian in `answered_by`."""
    assignment = guardian_for(request, config)
    info.answered_by = assignment.guardian_model_id
    own = request.app[SETTINGS].cluster.node_id
    if assignment.guardian_node_id != own:
        service = request.app[CLUSTER]
        target = target_on(service, assignment.guardian_node_id, assignment.guardian_model_id)
        if target is None:
            raise ServiceUnavailable(
                f"guardian {assignment.guardian_model_id!r} on node "
                f"{assignment.guardian_node_id!r} is not available"
            )
        return config, target
    guardian = request.app[CATALOG].resolve(assignment.guardian_model_id)
    if guardian is None or guardian.id != assignment.guardian_model_id:
        raise ServiceUnavailable(
            f"guardian {assignment.guardian_model_id!r} assigned for {config.id!r} is not configured"
        )
    return guardian, None


def guardian_for(request: web.Request, config: ModelConfig) -> Assignment:
    """The assignment that answers an image request for text-only `config`, or a 400."""
    own = request.app[SETTINGS].cluster.node_id
    found = request.app[GUARDIANS].resolve(own, config.id)
    if found is None:
        raise BadRequest(
            f"model {config.id!r} cannot read images (it has no vision projector) and no "
            f"guardian model is assigned; {GUARDIAN_HINT}",
            param="messages",
        )
    return found
