"""The lending settings' layers, pure (router/lending/settings.py): default < config
file < saved value, a batch validated whole (one bad entry changes nothing), `null` back to the
config file's value, and the sample window within the analytics retention."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from router.config import LendingSettings
from router.errors import BadRequest
from router.lending.settings import (
    INFO,
    KEYS,
    apply_batch,
    listing,
    resolve,
    usable_saved,
)

RETENTION = 30 * 86400.0
CONFIG = LendingSettings.model_validate({"scheduling_backend_depth": 3, "offload_probe_idle": 7})


def good_value(key: str) -> st.SearchStrategy[Any]:
    info = INFO[key]
    if info.type == "boolean":
        return st.booleans()
    if info.type == "integer":
        assert info.min is not None and info.max is not None
        return st.integers(info.min, info.max)
    return st.floats(0.001, 86400.0)


def bad_value(key: str) -> st.SearchStrategy[Any]:
    info = INFO[key]
    if info.type == "boolean":
        return st.sampled_from([0, 1, "true", 2.5, [], {}])
    if info.type == "integer":
        assert info.min is not None and info.max is not None
        return st.one_of(
            st.integers(max_value=info.min - 1),
            st.integers(min_value=info.max + 1),
            st.sampled_from([True, "3", 2.5, []]),
        )
    return st.sampled_from([0, -1, "0s", "-5s", "soon", True, [], {}, float("inf")])


good_batches = st.dictionaries(st.sampled_from(KEYS), st.none()).flatmap(
    lambda d: st.fixed_dictionaries({k: good_value(k) for k in d})
)


@given(good_batches)
def test_each_saved_value_wins_over_the_config_file_which_wins_over_the_default(
    saved: dict[str, Any],
) -> None:
    saved.pop("scheduling_sample_window", None)  # bounded by the retention, tested apart
    values = resolve(CONFIG, saved)
    for key in KEYS:
        want = saved.get(key, getattr(CONFIG, key))
        assert getattr(values, key) == pytest.approx(want), key
    shown = {row["key"]: row for row in listing(CONFIG, saved, values)["settings"]}
    assert list(shown) == list(KEYS)
    assert shown["scheduling_backend_depth"]["default"] == 2
    assert shown["scheduling_backend_depth"]["config"] == 3
    for key in KEYS:
        assert shown[key]["saved"] == saved.get(key)
        assert shown[key]["effective"] == getattr(values, key)


@given(
    good_batches,
    st.sampled_from(KEYS).flatmap(lambda k: st.tuples(st.just(k), bad_value(k))),
    st.data(),
)
def test_one_invalid_value_refuses_the_whole_batch_naming_its_key(
    batch: dict[str, Any], bad: tuple[str, Any], data: st.DataObject
) -> None:
    key, value = bad
    batch.pop("scheduling_sample_window", None)
    saved = {"scheduling_min_samples": 50}
    before = dict(saved)
    items = list(batch.items())
    at = data.draw(st.integers(0, len(items)))
    mixed = dict([*items[:at], (key, value), *items[at:]])
    mixed[key] = value  # a good entry of the same key must not hide the bad one
    with pytest.raises(BadRequest) as caught:
        apply_batch(mixed, saved, CONFIG, RETENTION)
    assert caught.value.param == key
    assert saved == before


@given(good_batches)
def test_a_good_batch_is_saved_in_its_keys_type(batch: dict[str, Any]) -> None:
    batch.pop("scheduling_sample_window", None)
    saved, values = apply_batch(batch, {}, CONFIG, RETENTION)
    assert set(saved) == set(batch)
    for key, value in batch.items():
        assert getattr(values, key) == pytest.approx(value)
        assert isinstance(saved[key], bool) == (INFO[key].type == "boolean")


def test_durations_as_text_unknown_keys_and_null() -> None:
    saved, values = apply_batch(
        {"scheduling_grant_ttl": "45s", "offload_probe_idle": "2m"}, {}, CONFIG, RETENTION
    )
    assert saved == {"scheduling_grant_ttl": 45.0, "offload_probe_idle": 120.0}
    assert values.offload_probe_idle == 120.0
    saved, values = apply_batch({"offload_probe_idle": None}, saved, CONFIG, RETENTION)
    assert saved == {"scheduling_grant_ttl": 45.0} and values.offload_probe_idle == 7.0
    for batch in ({"nope": 1}, {"nope": None}, {"cluster.scheduling_grant_ttl": 5}):
        with pytest.raises(BadRequest) as caught:
            apply_batch(batch, saved, CONFIG, RETENTION)
        assert caught.value.param == next(iter(batch))
    with pytest.raises(BadRequest):
        apply_batch(["scheduling_grant_ttl"], saved, CONFIG, RETENTION)
    assert apply_batch({"scheduling_min_samples": 40.0}, {}, CONFIG, RETENTION)[0] == {
        "scheduling_min_samples": 40
    }


@given(st.floats(1.0, 10 * RETENTION))
def test_the_sample_window_stays_within_the_raw_retention(window: float) -> None:
    if window <= RETENTION:
        assert apply_batch({"scheduling_sample_window": window}, {}, CONFIG, RETENTION)[1]
        return
    with pytest.raises(BadRequest) as caught:
        apply_batch({"scheduling_sample_window": window}, {}, CONFIG, RETENTION)
    assert caught.value.param == "scheduling_sample_window"
    assert "raw_retention" in caught.value.message


def test_saved_values_the_config_no_longer_allows_are_left_out_at_start() -> None:
    saved = {"scheduling_sample_window": 2 * 86400.0, "gone_key": 3, "scheduling_backend_depth": 9}
    kept, dropped = usable_saved(CONFIG, saved, raw_retention=86400.0)
    assert kept == {"scheduling_backend_depth": 9}
    assert len(dropped) == 2 and any("gone_key" in d for d in dropped)


def test_each_key_is_described_with_its_type_and_range() -> None:
    assert INFO["scheduling_backend_depth"].type == "integer"
    assert (INFO["scheduling_backend_depth"].min, INFO["scheduling_backend_depth"].max) == (1, 64)
    assert INFO["scheduling_grant_ttl"].type == "duration"
    assert INFO["offload_hold_for_faster_helper"].type == "boolean"
    assert all(info.description for info in INFO.values())
