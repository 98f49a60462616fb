"""One streamed request over HTTP, timed where its bytes arrive -> `RequestRecord`.

Requests are pre-encoded bytes sent on a kept-alive `http1.Connection`, whose `data_received`
stamps every read with `time.perf_counter()` before any parsing and feeds the SSE parser
directly (docs/research/client.md says why this is not httpx's or aiohttp's client: per request and per
event they cost several times more CPU, and their timestamps are taken late, in a reading task).
"""

from __future__ import annotations

import json
import time
from array import array
from dataclasses import dataclass, field

from specguard import __version__
from specguard.measure.http1 import Connection, ConnectionFailed, Endpoint, ReadTimeout
from specguard.measure.sse import StreamParser, StreamProtocolError, StreamSummary
from specguard.workload import Prompt

APIS = ("native", "openai", "chat")
ROUTES = {"native": "/generate", "openai": "/v1/completions", "chat": "/v1/chat/completions"}


@dataclass(slots=True)
class RequestRecord:
    """Everything measured about one request; times are `time.perf_counter()` seconds."""

    index: int
    send_s: float
    end_s: float = 0.0
    event_s: array[float] = field(default_factory=lambda: array("d"))  # arrival of token-bearing events
    event_tokens: array[int] = field(default_factory=lambda: array("I"))  # new tokens in each event (1 if estimated)
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    spec_verify_ct: int | None = None
    spec_num_correct_drafts: int | None = None  # accepted drafted tokens, bonus excluded (SGLang)
    spec_num_proposed_drafts: int | None = None
    spec_correct_drafts_histogram: list[int] | None = None  # [k]: verify steps that accepted exactly k drafts
    tokens_estimated: bool = False  # per-event counts unknown: metrics spread the usage total
    server_ttft_s: float | None = None  # the server's own view, when its stream reports it
    server_e2e_s: float | None = None
    http_status: int | None = None
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def first_token_s(self) -> float | None:
        return self.event_s[0] if self.event_s else None


@dataclass(frozen=True)
class RequestOptions:
    api: str = "native"
    output_len: int = 128
    model: str = "default"  # the OpenAI routes' "model" field
    extra_body: dict[str, object] | None = None  # engine-specific additions (e.g. vLLM's return_token_ids)


def build_body(prompt: Prompt, options: RequestOptions) -> bytes:
    """The exact JSON bytes for one request: greedy, fixed output length, streamed."""
    if options.api not in APIS:
        raise ValueError(f"api must be one of {APIS}, got {options.api!r}")
    n = options.output_len
    if options.api == "native":
        body: dict[str, object] = {
            "sampling_params": {"max_new_tokens": n, "temperature": 0, "ignore_eos": True},
            "stream": True,
        }
        if prompt.input_ids is not None:
            body["input_ids"] = list(prompt.input_ids)
        else:
            body["text"] = prompt.text
    else:
        body = {
            "model": options.model,
            "max_tokens": n,
            "temperature": 0,
            "ignore_eos": True,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if options.api == "openai":
            body["prompt"] = list(prompt.input_ids) if prompt.input_ids is not None else prompt.text
        else:
            text = prompt.text if prompt.text is not None else " ".join(map(str, prompt.input_ids or ()))
            body["messages"] = [{"role": "user", "content": text}]
    if options.extra_body:
        body.update(options.extra_body)
    return json.dumps(body, separators=(",", ":")).encode()


def encode_request(endpoint: Endpoint, route: str, body: bytes, api_key: str | None) -> bytes:
    """The full HTTP request for one body, built before the clock starts."""
    headers = {"Content-Type": "application/json", "Accept": "text/event-stream", "User-Agent": f"specguard/{__version__}"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    return endpoint.request_bytes("POST", route, body, headers)


async def send_request(conn: Connection, request: bytes, api: str, index: int, read_timeout_s: float) -> RequestRecord:
    """Send one streamed request; failures are recorded on the record, never raised."""
    parser = StreamParser("native" if api == "native" else "openai")
    record = RequestRecord(index=index, send_s=time.perf_counter())
    try:
        status, error_body, last_rx_s = await conn.exchange(request, parser.feed, read_timeout_s)
        record.http_status = status
        record.end_s = last_rx_s
        if status != 200:
            record.error = f"HTTP {status}: {error_body[:500].decode('utf-8', 'replace')}"
        else:
            summary = parser.close()
            record.prompt_tokens = summary.prompt_tokens
            record.completion_tokens = summary.completion_tokens
            record.spec_verify_ct = summary.spec_verify_ct
            record.spec_num_correct_drafts = summary.spec_num_correct_drafts
            record.spec_num_proposed_drafts = summary.spec_num_proposed_drafts
            record.spec_correct_drafts_histogram = summary.spec_correct_drafts_histogram
            record.tokens_estimated = parser.tokens_estimated
            record.server_ttft_s = summary.server_ttft_s
            record.server_e2e_s = summary.server_e2e_s
            record.error = _stream_error(summary, parser)
    except StreamProtocolError as exc:
        record.end_s = time.perf_counter()
        record.error = f"bad stream: {exc}"
    except ReadTimeout as exc:
        record.end_s = time.perf_counter()
        record.error = f"timeout: no data for the read timeout ({exc})"
    except ConnectionFailed as exc:
        record.end_s = time.perf_counter()
        record.error = f"connection error: {exc}"
    record.event_s = parser.event_s
    record.event_tokens = parser.event_tokens
    return record


def _stream_error(summary: StreamSummary, parser: StreamParser) -> str | None:
    """Why a 200 stream still failed: in-stream error, cut off, or missing server counts."""
    if summary.error:
        return summary.error
    if not summary.done:
        return "stream cut: ended without [DONE]"
    if summary.completion_tokens is None:
        return "server reported no completion token count"
    if not parser.tokens_estimated and parser.streamed_tokens != summary.completion_tokens:
        return (f"token count mismatch: stream carried {parser.streamed_tokens} tokens, "
                f"server reported {summary.completion_tokens}")
    return None
