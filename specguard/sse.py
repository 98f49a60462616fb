"""Incremental parsing of SGLang native and OpenAI-style SSE streams.

The client feeds raw bytes with the time they arrived; the parser turns them into per-event new
token counts without decoding the whole JSON of every event. SGLang's native stream resends the
cumulative `text` and `output_ids` in each event, so a full decode is O(tokens so far) per event;
the parser instead finds the cumulative `completion_tokens` from the end of the event and decodes
JSON only for the small final `meta_info`, usage chunks and errors.
"""

from __future__ import annotations

import json
import re
from array import array
from dataclasses import dataclass
from typing import Any

_COMPLETION_KEY = b'"completion_tokens":'
_META_KEY = b'"meta_info":'
_INT = re.compile(rb"\s*(\d+)")
_DONE = b"[DONE]"


class StreamProtocolError(ValueError):
    """The server sent bytes that are not the SSE stream the API promises."""


@dataclass
class StreamSummary:
    """What a finished stream said about itself (server-side counts, never client guesses)."""

    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    spec_verify_ct: int | None = None
    finish_reason: Any = None
    error: str | None = None
    done: bool = False  # saw `data: [DONE]`


def _decode_object_at(payload: bytes, start: int) -> Any:
    """Decode the JSON value that starts at `start` (used for the small trailing meta_info)."""
    text = payload[start:].decode("utf-8", "replace")
    value, _ = json.JSONDecoder().raw_decode(text.lstrip())
    return value


def _error_message(obj: Any) -> str:
    err = obj.get("error") if isinstance(obj, dict) else None
    if isinstance(err, dict):
        code = err.get("code")
        msg = err.get("message", "")
        return f"server error {code}: {msg}" if code is not None else f"server error: {msg}"
    return f"server error: {err!r}"


class StreamParser:
    """Per-request stream state; `feed` is the client's hot path.

    api: "native" (SGLang /generate), "openai" (/v1/completions or /v1/chat/completions).
    Each token-bearing event appends (arrival time, new tokens) to `event_s` / `event_tokens`.
    For OpenAI deltas without `token_ids`, per-event token counts are unknown until the usage
    chunk arrives; `tokens_estimated` is then set and counts are spread evenly over the events.
    """

    __slots__ = ("api", "event_s", "event_tokens", "summary", "tokens_estimated", "_buf", "_prev_total", "_last_native")

    def __init__(self, api: str) -> None:
        if api not in ("native", "openai"):
            raise ValueError(f"unknown api {api!r}")
        self.api = api
        self.event_s = array("d")
        self.event_tokens = array("d")
        self.summary = StreamSummary()
        self.tokens_estimated = False
        self._buf = b""
        self._prev_total = 0
        self._last_native: bytes | None = None

    def feed(self, chunk: bytes, arrival_s: float) -> None:
        """Consume bytes that arrived at `arrival_s`; complete events are handled now."""
        data = self._buf + chunk if self._buf else chunk
        if b"\r" in data:
            data = data.replace(b"\r\n", b"\n")
        parts = data.split(b"\n\n")
        self._buf = parts.pop()
        for part in parts:
            if part:
                self._event(part, arrival_s)

    def close(self) -> StreamSummary:
        """End of the byte stream: decode what only the last event carries."""
        if self._buf.strip():
            # A final event without its blank line counts if complete; a torn one is a cut stream
            # (no [DONE]), reported by the caller.
            try:
                self._event(self._buf, None)
            except StreamProtocolError:
                pass
            self._buf = b""
        if self.api == "native" and self._last_native is not None:
            self._native_final(self._last_native)
        elif self.api == "openai" and self.tokens_estimated:
            self._spread_estimated_counts()
        return self.summary

    # -- events -------------------------------------------------------------------------------
    def _event(self, part: bytes, arrival_s: float | None) -> None:
        payload = _data_payload(part)
        if payload is None:
            return  # comment or non-data field
        if payload == _DONE:
            self.summary.done = True
            return
        if payload[:12].startswith(b'{"error"') or payload[:10] == b'{"object":' and b'"error"' in payload[:40]:
            self._error(payload)
            return
        if self.api == "native":
            self._native_event(payload, arrival_s)
        else:
            self._openai_event(payload, arrival_s)

    def _error(self, payload: bytes) -> None:
        try:
            obj = json.loads(payload)
        except ValueError as exc:
            raise StreamProtocolError(f"invalid JSON in error event: {payload[:200]!r}") from exc
        self.summary.error = _error_message(obj)

    def _native_event(self, payload: bytes, arrival_s: float | None) -> None:
        at = payload.rfind(_COMPLETION_KEY)
        if at < 0:
            raise StreamProtocolError(f"native event without meta_info.completion_tokens: {payload[:200]!r}")
        m = _INT.match(payload, at + len(_COMPLETION_KEY))
        if m is None:
            raise StreamProtocolError(f"completion_tokens is not an integer: {payload[at:at + 60]!r}")
        total = int(m.group(1))
        new = total - self._prev_total
        self._last_native = payload
        if new > 0 and arrival_s is not None:
            self.event_s.append(arrival_s)
            self.event_tokens.append(new)
            self._prev_total = total
        elif new < 0:
            raise StreamProtocolError(f"completion_tokens went backwards ({self._prev_total} -> {total})")

    def _native_final(self, payload: bytes) -> None:
        at = payload.rfind(_META_KEY)
        if at < 0:
            raise StreamProtocolError("last native event has no meta_info")
        try:
            meta = _decode_object_at(payload, at + len(_META_KEY))
        except ValueError as exc:
            raise StreamProtocolError(f"invalid JSON in the last event's meta_info: {exc}") from exc
        s = self.summary
        s.prompt_tokens = _int_or_none(meta.get("prompt_tokens"))
        s.completion_tokens = _int_or_none(meta.get("completion_tokens"))
        s.spec_verify_ct = _int_or_none(meta.get("spec_verify_ct"))
        s.finish_reason = meta.get("finish_reason")

    def _openai_event(self, payload: bytes, arrival_s: float | None) -> None:
        if b'"choices":[]' in payload or b'"choices": []' in payload:
            self._openai_usage(payload)
            return
        if b'"usage":{' in payload and b'"completion_tokens"' in payload:
            self._openai_usage(payload)  # some servers put usage on the last content chunk
        if b'"role":"assistant"' in payload and b'"content":""' in payload:
            return  # the chat role preamble carries no token
        if arrival_s is None:
            return
        ids_at = payload.find(b'"token_ids":[')
        if ids_at >= 0:
            end = payload.find(b"]", ids_at)
            body = payload[ids_at + 13:end]
            new = body.count(b",") + 1 if body.strip() else 0
            if new:
                self.event_s.append(arrival_s)
                self.event_tokens.append(new)
            return
        self.tokens_estimated = True
        self.event_s.append(arrival_s)
        self.event_tokens.append(1.0)

    def _openai_usage(self, payload: bytes) -> None:
        try:
            obj = json.loads(payload)
        except ValueError as exc:
            raise StreamProtocolError(f"invalid JSON in usage chunk: {payload[:200]!r}") from exc
        usage = obj.get("usage") or {}
        self.summary.prompt_tokens = _int_or_none(usage.get("prompt_tokens"))
        self.summary.completion_tokens = _int_or_none(usage.get("completion_tokens"))
        for choice in obj.get("choices") or []:
            if choice.get("finish_reason") is not None:
                self.summary.finish_reason = choice["finish_reason"]
        details = obj.get("sglext", {}).get("spec_tokens_details") if isinstance(obj.get("sglext"), dict) else None
        if isinstance(details, dict):
            self.summary.spec_verify_ct = _int_or_none(details.get("spec_verify_ct"))

    def _spread_estimated_counts(self) -> None:
        total = self.summary.completion_tokens
        n = len(self.event_tokens)
        if total is None or n == 0:
            return
        share = total / n
        for i in range(n):
            self.event_tokens[i] = share


def _data_payload(part: bytes) -> bytes | None:
    """The `data:` content of one SSE event (multi-line data joined with newlines)."""
    if part.startswith(b"data:") and b"\n" not in part:
        return part[5:].strip()
    lines = [ln[5:].strip() for ln in part.split(b"\n") if ln.startswith(b"data:")]
    return b"\n".join(lines) if lines else None


def _int_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None
