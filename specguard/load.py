"""Closed-loop load at a fixed concurrency: C workers, each sends its next request when its
previous one finishes, for a fixed number of requests, so every run does the same work.

All runs of a cell share one event loop and one connection pool (`LoadGenerator`), so a
measured run pays no connection set-up that the warmup run has not already paid. Every wait is
bounded: a read timeout per request (no bytes for that long) and a deadline per run after which
the unfinished requests are cancelled and counted as failed.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

import httpx

from specguard.client import ROUTES, RequestOptions, RequestRecord, build_body, make_http_client, send_request
from specguard.workload import Workload


@dataclass(frozen=True)
class LoadSettings:
    concurrency: int
    num_requests: int
    api: str = "native"
    read_timeout_s: float = 60.0  # no bytes for this long fails the request
    run_timeout_s: float = 600.0  # the whole run
    api_key: str | None = None
    model: str = "default"
    extra_body: dict | None = None

    def __post_init__(self) -> None:
        if self.concurrency <= 0:
            raise ValueError(f"concurrency must be positive, got {self.concurrency}")
        if self.num_requests < self.concurrency:
            raise ValueError(f"a run needs at least as many requests ({self.num_requests}) as concurrency ({self.concurrency})")


@dataclass
class RunResult:
    """The raw outcome of one run: one record per request, in send order."""

    concurrency: int
    requests: list[RequestRecord] = field(default_factory=list)
    start_s: float = 0.0
    end_s: float = 0.0
    timed_out: bool = False


async def run_closed_loop(client: httpx.AsyncClient, workload: Workload, settings: LoadSettings) -> RunResult:
    """One run on an open client. Bodies are encoded before the clock starts."""
    options = RequestOptions(
        api=settings.api, output_len=workload.spec.output_len, model=settings.model, extra_body=settings.extra_body
    )
    bodies = [build_body(workload.prompt(i), options) for i in range(settings.num_requests)]
    route = ROUTES[settings.api]
    result = RunResult(concurrency=settings.concurrency)
    records: list[RequestRecord | None] = [None] * settings.num_requests
    next_index = 0

    async def worker() -> None:
        nonlocal next_index
        while next_index < settings.num_requests:
            i = next_index
            next_index += 1
            records[i] = await send_request(client, route, bodies[i], settings.api, i)

    result.start_s = time.perf_counter()
    tasks = [asyncio.create_task(worker()) for _ in range(settings.concurrency)]
    done, pending = await asyncio.wait(tasks, timeout=settings.run_timeout_s)
    for t in pending:
        t.cancel()
    if pending:
        result.timed_out = True
        await asyncio.gather(*pending, return_exceptions=True)
    for t in done:
        if t.exception() is not None:
            raise t.exception()  # a bug in the client, not a server failure
    result.end_s = time.perf_counter()

    for i, rec in enumerate(records):
        if rec is None:  # cancelled in flight or never sent
            reason = f"cancelled: run deadline of {settings.run_timeout_s:g}s reached"
            rec = RequestRecord(index=i, send_s=result.end_s, end_s=result.end_s, error=reason)
        result.requests.append(rec)
    return result


class LoadGenerator:
    """A private event loop and connection pool for the runs of one cell (synchronous API,
    so pytest-benchmark can time each run)."""

    def __init__(self, base_url: str, settings: LoadSettings) -> None:
        self.settings = settings
        self._loop = asyncio.new_event_loop()
        self._client = make_http_client(base_url, max_connections=settings.concurrency,
                                        api_key=settings.api_key, read_timeout_s=settings.read_timeout_s)

    def run(self, workload: Workload) -> RunResult:
        return self._loop.run_until_complete(run_closed_loop(self._client, workload, self.settings))

    def close(self) -> None:
        try:
            self._loop.run_until_complete(self._client.aclose())
        finally:
            self._loop.close()

    def __enter__(self) -> "LoadGenerator":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def run_once(base_url: str, workload: Workload, settings: LoadSettings) -> RunResult:
    """A single run with its own loop and pool (tools and tests)."""
    with LoadGenerator(base_url, settings) as gen:
        return gen.run(workload)
