"""The last KV save and restore of each model, as the model page shows them (issue 33)."""

from __future__ import annotations

from router.records import EventBus
from router.records.kv_history import KvHistory, restore_warning


def test_the_newest_save_and_restore_of_each_model_with_a_warning_on_a_failed_restore() -> None:
    bus, history = EventBus(), KvHistory()
    bus.subscribe_callback(history.on_event)
    who = {"runtime": "chat-a@text", "model": "chat-a", "family": "llamacpp"}
    bus.publish("kv_cache", **who, action="save", result="ok", ms=5.0, slots=1, tokens=900)
    bus.publish("kv_cache", **who, action="restore", result="ok", ms=3.0, slots=1, tokens=900)
    bus.publish("kv_cache", **who, action="probe", result="passed", ms=9.0)  # not a save/restore
    bus.publish("ready", model="chat-a", action="restore", result="failed")  # another event
    seen = history.last("chat-a")
    assert seen["save"] is not None and seen["save"]["tokens"] == 900
    assert seen["restore"] is not None and seen["restore"]["result"] == "ok"
    assert seen["warning"] is None

    reason = "No available space in KV cache or invalid slot save file"
    bus.publish("kv_cache", **who, action="restore", result="failed", ms=2.0, reason=reason)
    seen = history.last("chat-a")
    assert seen["restore"] is not None and seen["restore"]["reason"] == reason
    assert seen["warning"] is not None and reason in seen["warning"]
    assert seen["save"] is not None and seen["save"]["result"] == "ok"  # the save is kept
    assert history.last("chat-b") == {"save": None, "restore": None, "warning": None}


def test_a_timed_out_restore_warns_and_an_empty_one_does_not() -> None:
    assert restore_warning({"result": "timeout", "reason": "no answer within 30s"}) is not None
    assert restore_warning({"result": "none", "slots": 0, "tokens": 0}) is None
    assert restore_warning(None) is None
