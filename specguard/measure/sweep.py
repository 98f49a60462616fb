"""Measuring one cell (configuration x concurrency): flush, warmup runs discarded, then repeats.

One measurement serves every test of the cell. Server-side accept-length sources are read
around each run so they can be checked against the run's own requests.

Every run starts from a flushed cache. SGLang refuses to flush while any request runs or waits
(HTTP 400), so a server busy with traffic specguard did not send would never be measured
cleanly: the flush waits a bounded time for idle, then the cell ends as not measured
(`CellMeasurement.server_busy`), saying how many requests were running and waiting.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import httpx

from specguard.config import SweepConfig
from specguard.engines.base import Engine, ServerBusy
from specguard.labels import Level
from specguard.measure.generator import LoadGenerator
from specguard.measure.load import LoadSettings
from specguard.measure.metrics import RunMetrics, RunSeries, outliers, summarize_run, workload_categories
from specguard.measure.progress import ForeignTraffic, Progress, RunStarted
from specguard.notes import Note, NoteKind
from specguard.server import ServerHandle
from specguard.workload import Workload

# driver(run_once, warmup, repeats): calls run_once warmup + repeats times (pytest-benchmark's
# pedantic mode is one such driver; the default is a plain loop).
Driver = Callable[[Callable[[], None], int, int], None]
# How long a cell that failed waits for its server's process to be reaped before calling it alive:
# a crash refuses connections before it exits (seen once on 7 Dec: tests/measure/test_faults.py read "alive").
EXIT_GRACE_S = 2.0
FLUSH_TIMEOUT_S = 30.0  # how long a flush waits for the server to go idle before the cell is given up


@dataclass
class CellMeasurement(RunSeries):
    config: str
    concurrency: int
    runs: list[RunMetrics] = field(default_factory=list)  # measured runs, warmup excluded
    warmup_runs: list[RunMetrics] = field(default_factory=list)
    error: str | None = None  # the cell could not be measured; never a pass
    server_busy: bool = False  # error is "busy with traffic specguard did not send" (ServerBusy)
    notes: list[Note] = field(default_factory=list)  # its runs' and its own (notes.NoteKind)
    wall_s: float = 0.0

    @property
    def failed_requests(self) -> int:
        return sum(r.failed for r in self.runs + self.warmup_runs)


def plain_driver(run_once: Callable[[], None], warmup: int, repeats: int) -> None:
    for _ in range(warmup + repeats):
        run_once()


@dataclass(frozen=True)
class CellLoad:
    """What every run of a cell sends: `concurrency` clients (closed loop), or with `request_rate`
    Poisson arrivals at that rate (`burstiness`: the gamma shape) with `concurrency` the in-flight
    cap and `num_requests` per run (default: the closed loop's); the sweep's API unless `api` is
    given; the caller's `extra_body` fields; with `slo_ms` every run has its goodput."""

    concurrency: int
    api: str | None = None
    extra_body: dict[str, object] | None = None
    request_rate: float | None = None
    burstiness: float = 1.0
    num_requests: int | None = None
    slo_ms: dict[str, float] | None = None

    @property
    def level_name(self) -> str:
        """The level as ids and messages name it: `c16`, or `r8` in an open loop (a fractional rate,
        which `specguard bench` allows and no sweep level has, as `r0.5`)."""
        rate = self.request_rate
        if rate is None:
            return Level(self.concurrency).name
        return Level(int(rate), rate=True).name if float(rate).is_integer() else f"r{rate:g}"


@dataclass(frozen=True)
class RunControl:
    """How a cell's runs are driven and judged: `driver` calls each run (pytest-benchmark's
    pedantic mode is one), `progress` gets a line per run, request failures above `max_failed`
    make the cell an error, and a flush waits `flush_timeout_s` for a busy server to go idle."""

    driver: Driver = plain_driver
    progress: Progress | None = None
    max_failed: int = 0
    flush_timeout_s: float = FLUSH_TIMEOUT_S


def measure_cell(handle: ServerHandle, workload: Workload, sweep: SweepConfig, load: CellLoad,
                 control: RunControl = RunControl()) -> CellMeasurement:
    """Measure a cell; request failures above `control.max_failed` make the cell an error with the
    first errors; a server that stays busy with others' requests makes it a not-measured cell
    (`server_busy`). Prompts with categories give every run per-category summaries."""
    engine, progress, concurrency = handle.engine, control.progress, load.concurrency
    cell = CellMeasurement(config=handle.name, concurrency=concurrency)
    settings = cell_load_settings(handle, workload, sweep, load)
    all_runs: list[RunMetrics] = []
    started = time.monotonic()

    with handle.control_client() as client, LoadGenerator(handle.base_url, settings) as generator:
        busy = foreign_traffic(engine, client)
        if busy:
            cell.notes.append(busy)
            if progress:
                progress(ForeignTraffic(handle.name, load.level_name, int(busy["running"]), int(busy["waiting"])))

        def run_once() -> None:
            i = len(all_runs)
            if progress:
                progress(RunStarted(handle.name, load.level_name, i, sweep.warmup, sweep.repeats))
            if not handle.alive():
                code = handle.process.returncode if handle.process is not None else None
                raise ServerGone(f"server {handle.name!r} exited (code {code})")
            all_runs.append(measure_run(handle, client, generator, workload, flush_timeout_s=control.flush_timeout_s,
                                        slo_ms=load.slo_ms))

        try:
            control.driver(run_once, sweep.warmup, sweep.repeats)
        except ServerBusy as exc:
            cell.error, cell.server_busy = str(exc), True
        except (ServerGone, httpx.HTTPError, RuntimeError) as exc:
            cell.error = f"{type(exc).__name__}: {exc}"

    cell.wall_s = time.monotonic() - started
    cell.warmup_runs = all_runs[: sweep.warmup]
    cell.runs = all_runs[sweep.warmup:]
    _judge_cell(cell, handle, control.max_failed, sweep.repeats)
    return cell


def cell_load_settings(handle: ServerHandle, workload: Workload, sweep: SweepConfig, load: CellLoad) -> LoadSettings:
    """The load of every run of a cell: the sweep's API unless `load.api` is given, the engine's
    fields for that route under the caller's `load.extra_body` (the caller's value wins a clash),
    the server's served model name and API key, and the workload's seed for the arrival times."""
    api = load.api or sweep.api
    extra_body = load.extra_body
    route_body = handle.engine.route_extra_body(api)
    if route_body:
        extra_body = {**route_body, **(extra_body or {})}
    return LoadSettings(
        concurrency=load.concurrency,
        num_requests=load.num_requests or sweep.num_requests(load.concurrency),
        api=api,
        read_timeout_s=sweep.read_timeout_s,
        run_timeout_s=sweep.run_timeout_s,
        api_key=handle.api_key,
        model=handle.effective.raw.get("served_model_name") or "default",
        extra_body=extra_body,
        request_rate=load.request_rate,
        burstiness=load.burstiness,
        arrival_seed=workload.spec.seed,
    )


def run_categories(workload: Workload, num_requests: int) -> list[str] | None:
    """Request index -> prompt category for a run, or None when no prompt has one (the runs
    then carry no per-category summaries)."""
    categories = workload_categories(workload, num_requests)
    return categories if any(categories) else None


def measure_run(handle: ServerHandle, client: httpx.Client, generator: LoadGenerator, workload: Workload, *,
                flush_timeout_s: float, slo_ms: dict[str, float] | None) -> RunMetrics:
    """One run from a flushed cache, with the server's own accept lengths and token count read
    around it (before and after snapshots of its metrics) to check the requests against."""
    engine = handle.engine
    categories = run_categories(workload, generator.settings.num_requests)
    engine.flush_cache(client, flush_timeout_s)
    before = engine.metrics_snapshot(client)
    run = generator.run(workload)
    after = engine.metrics_snapshot(client)
    metrics = summarize_run(run, engine.server_accept_lengths(client, before, after), engine.accept_length_source,
                            slo_ms=slo_ms, categories=categories,
                            server_accepted_drafts=engine.server_accepted_drafts(before, after))
    metrics.spec_num_steps = engine.steps_in_use(handle.effective, after)
    idle = engine.idle_spec_counters(before, after) if metrics.total_output_tokens else None
    if idle:  # the counters the step time and accept length come from did not move: unmeasured
        metrics.step_time_ms = None
        if not metrics.total_verify_ct:
            metrics.accept_length = None
        metrics.notes.append(idle)
    if metrics.failed == 0:
        disagreement = engine.token_count_disagreement(before, after, metrics.total_output_tokens)
        if disagreement:
            metrics.notes.append(disagreement)
    return metrics


class ServerGone(RuntimeError):
    pass


def foreign_traffic(engine: Engine, client: httpx.Client, settle_s: float = 0.5) -> Note | None:
    """A note when the server's /metrics shows requests running or waiting before specguard
    sends any (someone else's traffic would be measured with ours); None when idle or unknown.

    SGLang's queue gauges hold the last batch's values until the scheduler's next idle pass
    (metrics_reporter.py _maybe_log_idle_metrics), so a non-zero reading is read again once
    after `settle_s` before it is reported."""
    depth = None
    for attempt in range(2):
        try:
            depth = engine.queue_depth(client)
        except httpx.HTTPError:
            return None
        if not depth or depth == (0, 0):
            return None
        if attempt == 0:
            time.sleep(settle_s)
    assert depth is not None
    running, waiting = depth
    return Note.of(NoteKind.SERVER_BUSY, running=running, waiting=waiting)


def _judge_cell(cell: CellMeasurement, handle: ServerHandle, max_failed: int, repeats: int) -> None:
    failed = cell.failed_requests
    if failed > max_failed:
        first = [e for r in cell.warmup_runs + cell.runs for e in r.errors][:3]
        counted = f"{failed} failed requests (allowed {max_failed}); first: " + " | ".join(first)
        cell.error = counted if cell.error is None else f"{cell.error}; {counted}"
    if cell.error is None and len(cell.runs) < repeats:
        cell.error = f"only {len(cell.runs)} of {repeats} runs completed"
    if cell.error is not None and not handle.alive_after(EXIT_GRACE_S):
        cell.error += f"\nserver exited; log tail:\n{handle.log_tail()}"
    for r in cell.runs:
        cell.notes.extend(r.notes)
    for idx in outliers(cell.throughputs):
        cell.notes.append(Note.of(NoteKind.OUTLIER_RUN, run=idx + 1, tok_s=cell.throughputs[idx]))
