"""Stream-as-fast-as-possible mode (``--emulator-firehose N``), for measuring clients.

With the performance model on, a client is only ever asked for what the modelled GPU produces.
To find out how many events a *client* can take, the server must not be the bottleneck: here a
streamed request skips the scheduler and gets the exact SGLang-shaped stream (one token per
event) that the normal path would send, pre-encoded once per request shape and written N events
per write, yielding to the event loop between writes so concurrent streams interleave as they
do on a real server. Timing fields are zero, every request gets the same id, and the metrics
counters do not move. Non-streamed requests and /health_generate still use the model.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from aiohttp import web

from specguard.emulator.model import GenRequest
from specguard.emulator.responses import SSE_DONE, CompletionFormat, NativeFormat, RequestContext
from specguard.emulator.tokens import OutputText

SSE_HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
FIREHOSE_ID = "firehose"
# What changes a pre-encoded stream's bytes: format, incremental, include_usage, model, prompt and output tokens.
StreamKey = tuple[type, bool | None, bool, str, int, int]


class Firehose:
    """Pre-encoded streams, keyed by everything that changes their bytes."""

    def __init__(self, out: OutputText, events_per_write: int) -> None:
        if events_per_write < 1:
            raise ValueError("--emulator-firehose needs at least 1 event per write")
        self.out = out
        self.events_per_write = events_per_write
        self._cache: dict[StreamKey, list[bytes]] = {}

    def writes(self, make_format: Callable[[RequestContext], NativeFormat | CompletionFormat],
               prompt_tokens: int, max_new_tokens: int, model: str) -> list[bytes]:
        """The whole stream of one request, as the byte strings to write in turn."""
        req = GenRequest(prompt_tokens, max_new_tokens)
        req.admit_ms = req.first_token_ms = req.finish_ms = 0.0
        ctx = RequestContext(rid=FIREHOSE_ID, req=req, out=self.out, wall_s=lambda ms: ms / 1000.0,
                             spec_draft_tokens=None, model=model)
        fmt = make_format(ctx)
        key: StreamKey = (type(fmt), getattr(fmt, "incremental", None), ctx.include_usage, model, prompt_tokens, max_new_tokens)
        cached = self._cache.get(key)
        if cached is None:
            cached = self._cache[key] = self._encode(fmt, max_new_tokens)
        return cached

    def _encode(self, fmt: NativeFormat | CompletionFormat, n: int) -> list[bytes]:
        events = [fmt.event(k - 1, (k, 0, 0), k == n) for k in range(1, n + 1)]
        events[-1] += fmt.closing((n, 0, 0)) + SSE_DONE
        step = self.events_per_write
        return ["".join(events[i:i + step]).encode() for i in range(0, n, step)]

    async def serve(self, request: web.Request, writes: list[bytes]) -> web.StreamResponse:
        resp = web.StreamResponse(headers=SSE_HEADERS)
        await resp.prepare(request)
        for data in writes:
            await resp.write(data)
            await asyncio.sleep(0)  # let the other streams write too
        return resp
