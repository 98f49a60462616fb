"""Incremental parsing of SGLang native and OpenAI-style SSE streams.

The client feeds raw bytes with the time they arrived; the parser turns them into per-event new
token counts without decoding the JSON of every event. SGLang's native stream resends the
cumulative `text` and `output_ids` in each event, so a full decode is O(tokens so far) per event;
the parser instead works on positions inside the received bytes (no copy of an event's payload),
finds the cumulative `completion_tokens` by searching back from the event's end, and decodes JSON
only for the last event's small `meta_info`, usage chunks and errors.
"""

from __future__ import annotations

import json
import re
from array import array
from dataclasses import dataclass
from typing import Any

_COMPLETION_KEY = b'"completion_tokens":'
_COMPLETION_LEN = len(_COMPLETION_KEY)
_IDS_KEY = b'"output_ids":['
_META_KEY = b'"meta_info":'
_INT = re.compile(rb"\s*(\d+)")
_TEXT = re.compile(rb'"(?:text|content|reasoning_content)":\s*"')  # a text delta, maybe empty (held-back bytes)
_DECODER = json.JSONDecoder()
_LF, _SPACE, _BRACE = 10, 32, 123  # b"\n"[0], b" "[0], b"{"[0]
_ERROR_KEY_STARTS = (b"e", b"o")  # first letter of the first key of an error payload


class StreamProtocolError(ValueError):
    """The server sent bytes that are not the SSE stream the API promises."""


@dataclass
class StreamSummary:
    """What a finished stream said about itself (server-side counts, never client guesses)."""

    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    spec_verify_ct: int | None = None
    # SGLang 0.5.23 puts these on the final event only (tokenizer_manager.py
    # _calculate_spec_decoding_metrics), or in the OpenAI routes' sglext.spec_tokens_details chunk.
    spec_num_correct_drafts: int | None = None  # accepted drafted tokens (bonus tokens excluded)
    spec_num_proposed_drafts: int | None = None  # verify_ct x (num_draft_tokens - 1), startup draft tokens
    spec_correct_drafts_histogram: list[int] | None = None  # [k] = verify steps that accepted exactly k drafts
    finish_reason: Any = None
    server_ttft_s: float | None = None  # SGLang's own first_token_latency (native streams)
    server_e2e_s: float | None = None  # SGLang's own e2e_latency (native streams)
    error: str | None = None
    done: bool = False  # saw `data: [DONE]`


def _error_message(obj: Any) -> str:
    err = obj.get("error") if isinstance(obj, dict) else None
    if isinstance(err, dict):
        code = err.get("code")
        msg = err.get("message", "")
        return f"server error {code}: {msg}" if code is not None else f"server error: {msg}"
    if isinstance(obj, dict) and obj.get("object") == "error":
        return f"server error {obj.get('code')}: {obj.get('message', '')}"
    return f"server error: {err!r}"


class StreamParser:
    """Per-request stream state; `feed` is the client's hot path.

    api: "native" (SGLang /generate), "openai" (/v1/completions or /v1/chat/completions).
    Each token-bearing event appends its arrival time to `event_s` and its new tokens to
    `event_tokens`. For OpenAI deltas without `token_ids` the per-event counts are unknown:
    each such event counts 1 and `tokens_estimated` is set, so metrics spread the server's total
    evenly over the events instead.
    """

    __slots__ = ("api", "event_s", "event_tokens", "summary", "tokens_estimated", "streamed_tokens",
                 "_buf", "_crlf", "_last")

    def __init__(self, api: str) -> None:
        if api not in ("native", "openai"):
            raise ValueError(f"unknown api {api!r}")
        self.api = api
        self.event_s = array("d")
        self.event_tokens = array("I")
        self.summary = StreamSummary()
        self.tokens_estimated = False
        self.streamed_tokens = 0  # sum of event_tokens (the cumulative count for native streams)
        self._buf = b""
        self._crlf: bool | None = None  # line endings, decided at the first line
        self._last: tuple[bytes, int, int, int] | None = None  # the last native event: payload span, its new tokens

    def feed(self, chunk: bytes, arrival_s: float | None) -> None:
        """Consume bytes that arrived at `arrival_s`; complete events are handled now."""
        data = self._buf + chunk if self._buf else chunk
        if self._crlf is None and not self._line_ending_known(data):
            self._buf = data
            return
        if self._crlf:
            data = data.replace(b"\r\n", b"\n")
        native = self.api == "native"
        find = data.find
        n = len(data)
        pos = 0
        while True:
            nl = find(b"\n", pos)
            if nl < 0 or nl + 1 >= n:  # a line end needs the byte after it: does the event end there?
                break
            if data[nl + 1] != _LF:  # several lines (multi-line data, other fields); rare
                end = find(b"\n\n", nl)
                if end < 0:
                    break
                self._multi_line_event(data[pos:end], arrival_s)
                pos = end + 2
                continue
            # the usual single-line event, handled on positions inside `data` (no copy for native)
            if data.startswith(b"data:", pos):
                p = pos + 5
                if p < nl and data[p] == _SPACE:
                    p += 1
                if native:
                    self._native(data, p, nl, arrival_s)
                else:
                    self._openai(data[p:nl], arrival_s)
            pos = nl + 2
        self._buf = data[pos:] if pos < n else b""

    def _line_ending_known(self, data: bytes) -> bool:
        """Decide the stream's line ending (CRLF or LF) from its first line; False until a
        whole line has arrived."""
        first = data.find(b"\n")
        if first < 0:
            return False
        self._crlf = first > 0 and data[first - 1] == 13
        return True

    def _multi_line_event(self, event: bytes, arrival_s: float | None) -> None:
        """An event of several lines (without its blank line): its `data:` lines joined."""
        payload = _joined_data(event)
        if payload is None:
            return
        if self.api == "native":
            self._native(payload, 0, len(payload), arrival_s)
        else:
            self._openai(payload, arrival_s)

    def close(self) -> StreamSummary:
        """End of the byte stream: decode what only the last event carries."""
        if self._buf.strip():
            # A final event without its blank line counts if complete; a torn one is a cut stream
            # (no [DONE]), reported by the caller.
            try:
                self.feed(b"\n\n", None)
            except StreamProtocolError:
                pass
            self._buf = b""
        if self.api == "native" and self._last is not None:
            self._native_final(*self._last)
        return self.summary

    # -- events -------------------------------------------------------------------------------
    def _native(self, data: bytes, p: int, end: int, arrival_s: float | None) -> None:
        if p >= end:
            return  # empty data: nothing to dispatch
        if data[p] != _BRACE:
            if data.startswith(b"[DONE]", p):
                self.summary.done = True
                return
            raise StreamProtocolError(f"native event is not a JSON object: {data[p:min(end, p + 200)]!r}")
        if data[p + 2:p + 3] in _ERROR_KEY_STARTS and _is_error(data, p, end):  # {"e... or {"o...
            self._error(data[p:end])
            return
        at = data.rfind(_COMPLETION_KEY, p, end)
        if at < 0:
            raise StreamProtocolError(f"native event without meta_info.completion_tokens: {data[p:min(end, p + 200)]!r}")
        m = _INT.match(data, at + _COMPLETION_LEN, end)
        if m is None:
            raise StreamProtocolError(f"completion_tokens is not an integer: {data[at:min(end, at + 60)]!r}")
        total = int(m.group(1))
        new = total - self.streamed_tokens
        self._last = (data, p, end, new)
        if new > 0 and arrival_s is not None:
            self.event_s.append(arrival_s)
            self.event_tokens.append(new)
            self.streamed_tokens = total
        elif new < 0:
            raise StreamProtocolError(f"completion_tokens went backwards ({self.streamed_tokens} -> {total})")

    def _native_final(self, data: bytes, p: int, end: int, last_new: int) -> None:
        at = data.rfind(_META_KEY, p, end)
        if at < 0:
            raise StreamProtocolError("last native event has no meta_info")
        try:
            meta, _ = _DECODER.raw_decode(data[at + len(_META_KEY):end].decode("utf-8", "replace").lstrip())
        except ValueError as exc:
            raise StreamProtocolError(f"invalid JSON in the last event's meta_info: {exc}") from exc
        if not isinstance(meta, dict):
            raise StreamProtocolError("the last event's meta_info is not an object")
        s = self.summary
        s.prompt_tokens = _int_or_none(meta.get("prompt_tokens"))
        s.completion_tokens = _int_or_none(meta.get("completion_tokens"))
        _spec_details(s, meta)
        s.finish_reason = meta.get("finish_reason")
        s.server_ttft_s = _float_or_none(meta.get("first_token_latency"))
        s.server_e2e_s = _float_or_none(meta.get("e2e_latency"))
        reason = s.finish_reason
        if isinstance(reason, dict) and reason.get("type") == "abort":
            # tokenizer_manager.py _handle_abort_req: finish_reason {"type": "abort", "message": ...},
            # and an incremental stream's abort event carries only the last id: not a count to check.
            s.error = f"server aborted the request: {reason.get('message') or 'no message'}"
            return
        self._check_final_ids(data, p, at, last_new)

    def _check_final_ids(self, data: bytes, p: int, meta_at: int, last_new: int) -> None:
        """The last event's output_ids must hold completion_tokens ids (cumulative streams) or
        that event's own new ids (`--incremental-streaming-output`: each event's output_ids is the
        delta since the previous event, tokenizer_manager.py _handle_batch_output, and queued
        deltas are concatenated by _coalesce_streaming_chunks); anything else is a server counting
        wrongly."""
        ids_at = data.find(_IDS_KEY, p, meta_at)
        total = self.summary.completion_tokens
        if ids_at < 0 or total is None:
            return  # no ids in this server's events: nothing to cross-check
        close = data.find(b"]", ids_at, meta_at)
        body = data[ids_at + len(_IDS_KEY):close]
        ids = body.count(b",") + 1 if body.strip() else 0
        if ids not in (total, last_new):
            raise StreamProtocolError(
                f"token count mismatch: the last event carries {ids} output ids, meta_info.completion_tokens says {total}")

    def _error(self, payload: bytes) -> None:
        try:
            obj = json.loads(payload)
        except ValueError as exc:
            raise StreamProtocolError(f"invalid JSON in error event: {payload[:200]!r}") from exc
        self.summary.error = _error_message(obj)

    def _openai(self, payload: bytes, arrival_s: float | None) -> None:
        if not payload:
            return
        if payload.startswith(b"[DONE]"):
            self.summary.done = True
            return
        if _is_error(payload, 0, len(payload)):
            self._error(payload)
            return
        if b'"choices":[]' in payload or b'"choices": []' in payload:
            self._openai_usage(payload)
            return
        if b'"usage":{' in payload and b'"completion_tokens"' in payload:
            self._openai_usage(payload)  # some servers put usage on the last content chunk
        if arrival_s is None:
            return
        ids_at = payload.find(b'"token_ids":[')
        if ids_at >= 0:
            body = payload[ids_at + 13:payload.find(b"]", ids_at)]
            new = body.count(b",") + 1 if body.strip() else 0
            if new:
                self.event_s.append(arrival_s)
                self.event_tokens.append(new)
                self.streamed_tokens += new
            return
        if _TEXT.search(payload) is None or b'"role":"assistant"' in payload and b'"content":""' in payload:
            return  # a finish chunk (no text) or the chat role preamble: no token
        self.tokens_estimated = True
        self.event_s.append(arrival_s)
        self.event_tokens.append(1)
        self.streamed_tokens += 1

    def _openai_usage(self, payload: bytes) -> None:
        try:
            obj = json.loads(payload)
        except ValueError as exc:
            raise StreamProtocolError(f"invalid JSON in usage chunk: {payload[:200]!r}") from exc
        if not isinstance(obj, dict):
            raise StreamProtocolError(f"usage chunk is not an object: {payload[:200]!r}")
        usage = obj.get("usage")
        if isinstance(usage, dict):  # SGLang's sglext chunk has "usage": null and comes first
            self.summary.prompt_tokens = _int_or_none(usage.get("prompt_tokens"))
            self.summary.completion_tokens = _int_or_none(usage.get("completion_tokens"))
        choices = obj.get("choices")
        for choice in choices if isinstance(choices, list) else ():
            if isinstance(choice, dict) and choice.get("finish_reason") is not None:
                self.summary.finish_reason = choice["finish_reason"]
        ext = obj.get("sglext")
        details = ext.get("spec_tokens_details") if isinstance(ext, dict) else None
        if isinstance(details, list):  # n > 1: one per choice, sorted by index (protocol.py SglExt)
            details = details[0] if details and isinstance(details[0], dict) else None
        if isinstance(details, dict):
            # protocol.py SpecTokensDetails: every key always serialised, zeros when unknown.
            _spec_details(self.summary, details)


def _spec_details(s: StreamSummary, src: dict[str, Any]) -> None:
    """Speculation counts of one request from a final meta_info or a spec_tokens_details object."""
    s.spec_verify_ct = _int_or_none(src.get("spec_verify_ct"))
    s.spec_num_correct_drafts = _int_or_none(src.get("spec_num_correct_drafts"))
    s.spec_num_proposed_drafts = _int_or_none(src.get("spec_num_proposed_drafts"))
    hist = src.get("spec_correct_drafts_histogram")
    if isinstance(hist, list) and hist and all(_int_or_none(h) is not None and h >= 0 for h in hist):
        s.spec_correct_drafts_histogram = hist


def _is_error(data: bytes, p: int, end: int) -> bool:
    """SGLang's in-stream `{"error": ...}` or an OpenAI-style `{"object": "error", ...}` payload."""
    if data.startswith(b'{"error"', p):
        return True
    return data.startswith(b'{"object":', p) and data.find(b'"error"', p + 10, min(end, p + 40)) >= 0


def _joined_data(event: bytes) -> bytes | None:
    """The `data:` content of a multi-line SSE event (lines joined with newlines), or None."""
    lines = []
    for line in event.split(b"\n"):
        if line.startswith(b"data:"):
            line = line[5:]
            lines.append(line[1:] if line[:1] == b" " else line)
    return b"\n".join(lines) if lines else None


def _int_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _float_or_none(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None
