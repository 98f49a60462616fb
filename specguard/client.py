"""One streamed request over HTTP, timed at the socket read.

httpx is the API; its transport is aiohttp's C-parsed HTTP/1.1 (httpx-aiohttp), because
httpx's default pure-Python transport costs several times more CPU per streamed event
(../shared/reference/client-performance.md). Request bodies are encoded up front.
"""

from __future__ import annotations

import json
import time
from array import array
from dataclasses import dataclass, field

import httpx
from httpx_aiohttp import AiohttpTransport

from specguard.sse import StreamParser, StreamProtocolError
from specguard.workload import Prompt

APIS = ("native", "openai", "chat")
ROUTES = {"native": "/generate", "openai": "/v1/completions", "chat": "/v1/chat/completions"}


@dataclass(slots=True)
class RequestRecord:
    """Everything measured about one request; times are `time.perf_counter()` seconds."""

    index: int
    send_s: float
    end_s: float = 0.0
    event_s: array = field(default_factory=lambda: array("d"))  # arrival of token-bearing events
    event_tokens: array = field(default_factory=lambda: array("d"))  # new tokens in each event
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    spec_verify_ct: int | None = None
    tokens_estimated: bool = False  # per-event counts spread from the usage total
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
    extra_body: dict | None = None  # engine-specific additions (e.g. vLLM's return_token_ids)


def build_body(prompt: Prompt, options: RequestOptions) -> bytes:
    """The exact JSON bytes for one request: greedy, fixed output length, streamed."""
    if options.api not in APIS:
        raise ValueError(f"api must be one of {APIS}, got {options.api!r}")
    n = options.output_len
    if options.api == "native":
        body: dict = {
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


def make_http_client(base_url: str, *, max_connections: int, api_key: str | None, read_timeout_s: float) -> httpx.AsyncClient:
    """One connection pool per run, sized so no request waits for a connection."""
    limits = httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections)
    headers = {"Content-Type": "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    timeout = httpx.Timeout(connect=10.0, read=read_timeout_s, write=10.0, pool=read_timeout_s)
    return httpx.AsyncClient(
        base_url=base_url, transport=AiohttpTransport(limits=limits), headers=headers, timeout=timeout
    )


async def send_request(client: httpx.AsyncClient, route: str, body: bytes, api: str, index: int) -> RequestRecord:
    """Send one streamed request; failures are recorded on the record, never raised."""
    parser = StreamParser("native" if api == "native" else "openai")
    clock = time.perf_counter
    record = RequestRecord(index=index, send_s=clock())
    try:
        async with client.stream("POST", route, content=body) as response:
            record.http_status = response.status_code
            if response.status_code != 200:
                text = (await response.aread())[:500].decode("utf-8", "replace")
                record.error = f"HTTP {response.status_code}: {text}"
            else:
                async for chunk in response.aiter_raw():
                    parser.feed(chunk, clock())
        record.end_s = clock()
        if record.error is None:
            summary = parser.close()
            record.prompt_tokens = summary.prompt_tokens
            record.completion_tokens = summary.completion_tokens
            record.spec_verify_ct = summary.spec_verify_ct
            record.tokens_estimated = parser.tokens_estimated
            record.error = _stream_error(summary, parser)
    except StreamProtocolError as exc:
        record.end_s = clock()
        record.error = f"bad stream: {exc}"
    except httpx.TimeoutException as exc:
        record.end_s = clock()
        record.error = f"timeout: no data for the read timeout ({type(exc).__name__})"
    except httpx.HTTPError as exc:
        record.end_s = clock()
        record.error = f"connection error: {type(exc).__name__}: {exc}"
    record.event_s = parser.event_s
    record.event_tokens = parser.event_tokens
    return record


def _stream_error(summary, parser: StreamParser) -> str | None:
    """Why a 200 stream still failed: in-stream error, cut off, or missing server counts."""
    if summary.error:
        return summary.error
    if not summary.done:
        return "stream cut: ended without [DONE]"
    if summary.completion_tokens is None:
        return "server reported no completion token count"
    streamed = sum(parser.event_tokens)
    if abs(streamed - summary.completion_tokens) > 1e-6:
        return f"token count mismatch: stream carried {streamed:g} tokens, server reported {summary.completion_tokens}"
    return None
