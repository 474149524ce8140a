"""An OpenAI SSE byte stream -> Ollama NDJSON records, as the proxy's body transform.

Input is whatever the backend sends, chunked anywhere: an event, a line or a UTF-8 sequence may
be split across chunks, so bytes are framed by line before anything is decoded. Every outcome
ends in exactly one closing record: `done: true` after a finished answer, or `{"error": ...}`
when the backend reports an error or the stream stops before the answer is finished, so a
client never sees a silent cut.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from router.errors import BadGateway, sanitize
from router.forwarding import Event, SSEParser, encode_line, error_message
from router.ollama.responses import (
    Kind,
    done_reason,
    final_record,
    metrics,
    ollama_tool_calls,
    reasoning_text,
    rfc3339,
)


class _Translator:
    def __init__(
        self, kind: Kind, model: str, started_ns: int, load_ns: int, clock: Callable[[], int]
    ) -> None:
        self.kind, self.model, self.clock = kind, model, clock
        self.started_ns, self.load_ns = started_ns, load_ns
        self.first_token_ns: int | None = None
        self.finish: str | None = None
        self.usage: Any = None
        self.timings: Any = None
        self.calls: dict[int, dict[str, str]] = {}
        self.ended = False

    def on_event(self, name: str, data: bytes) -> list[dict[str, Any]]:
        text = data.decode("utf-8", "replace").strip()
        if not text and name != "error":
            return []
        if text == "[DONE]":
            return self._close()
        try:
            obj = json.loads(text)
        except ValueError:
            obj = None
        if name == "error" or (isinstance(obj, dict) and "error" in obj):
            return self.fail(error_message(obj, text))
        if not isinstance(obj, dict):
            return self.fail("the backend sent an unreadable stream event")
        if obj.get("usage") is not None:
            self.usage = obj["usage"]
        if obj.get("timings") is not None:
            self.timings = obj["timings"]
        choices = obj.get("choices")
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            return []  # the usage-only chunk, or a keep-alive
        return self._choice(choices[0])

    def at_eof(self) -> list[dict[str, Any]]:
        if self.finish is None:
            return self.fail("the backend stream ended before the answer was finished")
        return self._close()

    def _choice(self, choice: dict[str, Any]) -> list[dict[str, Any]]:
        delta = choice.get("delta")
        if isinstance(delta, dict):
            content, thinking = _text(delta.get("content")), reasoning_text(delta)
            self._collect_calls(delta.get("tool_calls"))
        else:  # /v1/completions (raw generate)
            content, thinking = _text(choice.get("text")), ""
        out = []
        if content or thinking:
            out.append(self._record(content, thinking))
        if isinstance(choice.get("finish_reason"), str):
            self.finish = choice["finish_reason"]
        return out

    def _collect_calls(self, deltas: Any) -> None:
        # OpenAI streams a tool call in pieces keyed by index; Ollama sends it whole.
        for n, piece in enumerate(deltas if isinstance(deltas, list) else []):
            if not isinstance(piece, dict):
                continue
            index = piece.get("index", n)
            call = self.calls.setdefault(index if isinstance(index, int) else n, {})
            if isinstance(piece.get("id"), str):
                call["id"] = piece["id"]
            fn = piece.get("function")
            fn = fn if isinstance(fn, dict) else {}
            if isinstance(fn.get("name"), str):
                call["name"] = call.get("name", "") + fn["name"]
            if isinstance(fn.get("arguments"), str):
                call["arguments"] = call.get("arguments", "") + fn["arguments"]
            self._mark_first_token()

    def _record(self, content: str, thinking: str, **extra: Any) -> dict[str, Any]:
        self._mark_first_token()
        head: dict[str, Any] = {"model": self.model, "created_at": rfc3339(self.clock())}
        if self.kind == "chat":
            message: dict[str, Any] = {"role": "assistant", "content": content}
            if thinking:
                message["thinking"] = thinking
            head["message"] = message | extra
        else:
            head["response"] = content
            if thinking:
                head["thinking"] = thinking
        return head | {"done": False}

    def _close(self) -> list[dict[str, Any]]:
        self.ended = True
        out = []
        if self.calls and self.kind == "chat":
            openai_calls = [
                {
                    "id": c.get("id"),
                    "function": {"name": c.get("name"), "arguments": c.get("arguments")},
                }
                for _, c in sorted(self.calls.items())
            ]
            try:
                out.append(self._record("", "", tool_calls=ollama_tool_calls(openai_calls)))
            except BadGateway as err:
                return self.fail(err.message)
        now = self.clock()
        counters = metrics(
            self.usage,
            self.timings,
            self.started_ns,
            now,
            load_ns=self.load_ns,
            first_token_ns=self.first_token_ns,
        )
        out.append(final_record(self.kind, self.model, now, done_reason(self.finish), counters))
        return out

    def fail(self, message: str) -> list[dict[str, Any]]:
        self.ended = True
        return [{"error": sanitize(message)}]

    def _mark_first_token(self) -> None:
        if self.first_token_ns is None:
            self.first_token_ns = self.clock()


class NdjsonStream:
    """The proxy's body transform for a streamed answer: SSE bytes in, Ollama records out.

    `started_ns` (and `clock`) are wall-clock nanoseconds; `load_ns` is the time the router
    spent starting the backend for this request, reported as Ollama's load_duration.
    """

    def __init__(
        self,
        kind: Kind,
        public_model: str,
        started_ns: int,
        *,
        load_ns: int = 0,
        clock: Callable[[], int] = time.time_ns,
    ) -> None:
        self._parser = SSEParser()
        self._state = _Translator(kind, public_model, started_ns, load_ns, clock)

    def feed(self, chunk: bytes) -> bytes:
        if self._state.ended:
            return b""  # after the closing record the backend's rest has no reader
        return self._records(self._parser.feed(chunk))

    def flush(self) -> bytes:
        if self._state.ended:
            return b""
        out = self._records(self._parser.close())
        if self._state.ended:
            return out
        return out + b"".join(map(encode_line, self._state.at_eof()))

    def fail(self, message: str) -> bytes:
        """The backend was cut off: the one closing record, unless it was already sent."""
        if self._state.ended:
            return b""
        return b"".join(map(encode_line, self._state.fail(message)))

    def _records(self, events: list[Event]) -> bytes:
        out: list[bytes] = []
        for name, data in events:
            out.extend(map(encode_line, self._state.on_event(name, data)))
            if self._state.ended:
                break
        return b"".join(out)


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""
