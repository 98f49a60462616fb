"""Closed-loop load at a fixed concurrency: C workers, each sends its next request when its
previous one finishes, for a fixed number of requests, so every run does the same work.

Open-loop load (`request_rate`): requests are sent at seeded Poisson arrival times whatever the
server's pace, at most `concurrency` in flight (a request due while the cap is full waits for a
free connection, and its latency counts from when it was due: the wait is the server's doing).
The arrival times are drawn once per run from the seed, so every run and every process sends on
the same schedule. SGLang 0.5.23's bench_serving draws exponential gaps (benchmark/serving.py,
get_request: np.random.exponential(1/request_rate), unseeded); `burstiness` follows the gamma
convention of vLLM's benchmark_serving (shape = burstiness, mean gap 1/rate; 1 is Poisson, < 1
burstier, > 1 more even), which SGLang 0.5.23 does not have.

All runs of a cell share one `LoadGenerator`: one event loop and one kept-alive connection per
closed-loop worker, so a measured run pays no connection set-up that the warmup run has not
already paid. Above `AUTO_WORKERS_PER_PROCESS` concurrent streams (or when asked) the workers
are spread over processes (`specguard.measure.workers`), each with its own loop and connections, and
their records merged. Every wait is bounded: a read timeout per request (no bytes for that
long) and a deadline per run after which unfinished requests are cancelled and counted failed.
"""

from __future__ import annotations

import asyncio
import math
import os
import time
from array import array
from dataclasses import dataclass, field

import numpy as np

from specguard.measure.client import ROUTES, RequestOptions, RequestRecord, build_body, encode_request, send_request
from specguard.measure.http1 import Connection, Endpoint
from specguard.workload import Workload

WORKERS_ENV = "SPECGUARD_CLIENT_WORKERS"
AUTO_WORKERS_PER_PROCESS = 512  # concurrent streams one process takes before another is started


@dataclass(frozen=True)
class LoadSettings:
    concurrency: int
    num_requests: int
    api: str = "native"
    read_timeout_s: float = 60.0  # no bytes for this long fails the request
    run_timeout_s: float = 600.0  # the whole run
    api_key: str | None = None
    model: str = "default"
    extra_body: dict[str, object] | None = None
    workers: int | None = None  # client processes; None: $SPECGUARD_CLIENT_WORKERS, else by concurrency
    # Open loop: mean arrivals per second (None: closed loop); `concurrency` is then the cap on
    # requests in flight, and `burstiness` the gamma shape of the gaps (1.0 = Poisson).
    request_rate: float | None = None
    burstiness: float = 1.0
    arrival_seed: int = 0

    def __post_init__(self) -> None:
        if self.concurrency <= 0:
            raise ValueError(f"concurrency must be positive, got {self.concurrency}")
        if self.request_rate is not None:
            if not (math.isfinite(self.request_rate) and self.request_rate > 0):
                raise ValueError(f"request rate must be a positive number of requests/s, got {self.request_rate}")
            if not (math.isfinite(self.burstiness) and self.burstiness > 0):
                raise ValueError(f"burstiness must be > 0 (1 = Poisson), got {self.burstiness}")
            if self.num_requests <= 0:
                raise ValueError(f"a run needs at least one request, got {self.num_requests}")
        elif self.num_requests < self.concurrency:
            raise ValueError(f"a run needs at least as many requests ({self.num_requests}) as concurrency ({self.concurrency})")
        if self.workers is not None and self.workers <= 0:
            raise ValueError(f"workers must be positive, got {self.workers}")


@dataclass
class RunResult:
    """The raw outcome of one run: one record per request, in index order."""

    concurrency: int
    requests: list[RequestRecord] = field(default_factory=list)
    start_s: float = 0.0
    end_s: float = 0.0
    timed_out: bool = False
    client_cpu_s: float = 0.0  # CPU time of every client process during the run
    processes: int = 1
    turnaround_s: array[float] = field(default_factory=lambda: array("d"))  # last byte in -> next request out, per worker
    load_model: str = ""  # "closed-loop c=16" or "poisson 8 req/s, cap 64" (load_model())


def load_model(settings: LoadSettings) -> str:
    """The run's load model in words, as results and reports print it."""
    if settings.request_rate is None:
        return f"closed-loop c={settings.concurrency}"
    shape = "poisson" if settings.burstiness == 1.0 else f"gamma(burstiness {settings.burstiness:g})"
    return f"{shape} {settings.request_rate:g} req/s, cap {settings.concurrency}"


def arrival_offsets_s(settings: LoadSettings) -> np.ndarray:
    """Seconds from the run's start at which each request is due (open loop): cumulative gaps of
    mean 1/rate, gamma with shape `burstiness` (exponential at 1), from `arrival_seed`; the first
    request is due at 0."""
    rate, shape = settings.request_rate, settings.burstiness
    if rate is None:
        raise ValueError("arrival times need a request rate")
    gaps = np.random.default_rng(settings.arrival_seed).gamma(shape, 1.0 / (rate * shape), settings.num_requests)
    gaps[0] = 0.0
    return np.cumsum(gaps)


def client_processes(settings: LoadSettings) -> int:
    """How many processes drive the run: as asked, else one per AUTO_WORKERS_PER_PROCESS streams,
    never more than the cores this process may use minus one (the server may need one)."""
    asked = settings.workers or int(os.environ.get(WORKERS_ENV, "0") or 0)
    if asked:
        return min(asked, settings.concurrency)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, min(math.ceil(settings.concurrency / AUTO_WORKERS_PER_PROCESS), cores - 1))


def encode_requests(base_url: str, workload: Workload, settings: LoadSettings) -> list[bytes]:
    """Every request of a run as the bytes to write, built before the clock starts."""
    options = RequestOptions(api=settings.api, output_len=workload.spec.output_len, model=settings.model,
                             extra_body=settings.extra_body)
    endpoint = Endpoint.from_url(base_url)
    route = ROUTES[settings.api]
    return [encode_request(endpoint, route, build_body(workload.prompt(i), options), settings.api_key)
            for i in range(settings.num_requests)]


async def run_requests(conns: list[Connection], requests: list[bytes], settings: LoadSettings,
                       first_index: int = 0, start_at_s: float | None = None) -> RunResult:
    """One closed-loop run of `requests` with one worker per connection (request i is numbered
    first_index + i). `start_at_s` (perf_counter) lines up runs in several processes.
    With `settings.request_rate` the run is open loop instead (run_open_loop)."""
    if settings.request_rate is not None:
        return await run_open_loop(conns, requests, settings, first_index, start_at_s)
    if start_at_s is not None:
        await asyncio.sleep(max(0.0, start_at_s - time.perf_counter()))
    n = len(requests)
    records: list[RequestRecord | None] = [None] * n
    next_i = 0
    api, read_timeout_s = settings.api, settings.read_timeout_s

    result = RunResult(concurrency=len(conns), load_model=load_model(settings))
    turnaround = result.turnaround_s

    async def worker(conn: Connection) -> None:
        nonlocal next_i
        prev_end_s = None
        while next_i < n:
            i = next_i
            next_i += 1
            rec = records[i] = await send_request(conn, requests[i], api, first_index + i, read_timeout_s)
            if prev_end_s is not None:
                turnaround.append(rec.send_s - prev_end_s)
            prev_end_s = rec.end_s

    cpu0 = time.process_time()
    result.start_s = time.perf_counter()
    tasks = [asyncio.create_task(worker(c)) for c in conns]
    done, pending = await asyncio.wait(tasks, timeout=settings.run_timeout_s)
    for t in pending:
        t.cancel()
    if pending:
        result.timed_out = True
        await asyncio.gather(*pending, return_exceptions=True)
    for t in done:
        exc = t.exception()
        if exc is not None:
            raise exc  # a bug in the client, not a server failure
    result.end_s = time.perf_counter()
    result.client_cpu_s = time.process_time() - cpu0

    for i, rec in enumerate(records):
        if rec is None:  # cancelled in flight or never sent
            reason = f"cancelled: run deadline of {settings.run_timeout_s:g}s reached"
            rec = RequestRecord(index=first_index + i, send_s=result.end_s, end_s=result.end_s, error=reason)
        result.requests.append(rec)
    return result


async def run_open_loop(conns: list[Connection], requests: list[bytes], settings: LoadSettings,
                        first_index: int = 0, start_at_s: float | None = None) -> RunResult:
    """Send request i at its arrival time (arrival_offsets_s, the whole run's schedule, of which
    this process sends indices first_index..), on a free connection of `conns` (the in-flight
    cap). A request's send time is when it was due, so a queue at the cap counts as latency (as a
    user would see it). Bounded: the run deadline cancels whatever is still waiting or running."""
    if start_at_s is not None:
        await asyncio.sleep(max(0.0, start_at_s - time.perf_counter()))
    n = len(requests)
    offsets = arrival_offsets_s(settings)[first_index:first_index + n].tolist()
    records: list[RequestRecord | None] = [None] * n
    api, read_timeout_s = settings.api, settings.read_timeout_s
    result = RunResult(concurrency=len(conns), load_model=load_model(settings))
    free: asyncio.Queue[Connection] = asyncio.Queue()
    for c in conns:
        free.put_nowait(c)

    async def one(i: int, due_s: float) -> None:
        conn = await free.get()
        try:
            rec = await send_request(conn, requests[i], api, first_index + i, read_timeout_s)
            rec.send_s = min(rec.send_s, due_s)  # waiting for a free connection is part of the latency
            records[i] = rec
        finally:
            free.put_nowait(conn)

    async def dispatch() -> None:
        tasks = []
        for i, offset in enumerate(offsets):
            due_s = result.start_s + offset
            delay = due_s - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(one(i, due_s)))
        try:
            await asyncio.gather(*tasks)
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    cpu0 = time.process_time()
    result.start_s = time.perf_counter() if start_at_s is None else start_at_s
    task = asyncio.create_task(dispatch())
    done, pending = await asyncio.wait([task], timeout=settings.run_timeout_s)
    if pending:
        task.cancel()
        result.timed_out = True
        await asyncio.gather(task, return_exceptions=True)
    elif (exc := task.exception()) is not None:
        raise exc  # a bug in the client, not a server failure
    result.end_s = time.perf_counter()
    result.client_cpu_s = time.process_time() - cpu0
    for i, rec in enumerate(records):
        if rec is None:
            reason = f"cancelled: run deadline of {settings.run_timeout_s:g}s reached"
            rec = RequestRecord(index=first_index + i, send_s=result.end_s, end_s=result.end_s, error=reason)
        result.requests.append(rec)
    return result
