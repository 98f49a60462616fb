"""Measuring one cell (configuration x concurrency): flush, warmup runs discarded, then repeats.

One measurement serves every test of the cell. Server-side accept-length sources are read
around each run so they can be checked against the run's own requests.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

import httpx

from specguard.config import SweepConfig
from specguard.measure.generator import LoadGenerator
from specguard.measure.load import LoadSettings
from specguard.measure.metrics import RunMetrics, outliers, summarize_run
from specguard.server import ServerHandle
from specguard.workload import Workload

# driver(run_once, warmup, repeats): calls run_once warmup + repeats times (pytest-benchmark's
# pedantic mode is one such driver; the default is a plain loop).
Driver = Callable[[Callable[[], None], int, int], None]
Progress = Callable[[str], None]


@dataclass
class CellMeasurement:
    config: str
    concurrency: int
    runs: list[RunMetrics] = field(default_factory=list)  # measured runs, warmup excluded
    warmup_runs: list[RunMetrics] = field(default_factory=list)
    error: str | None = None  # the cell could not be measured; never a pass
    warnings: list[str] = field(default_factory=list)
    wall_s: float = 0.0

    @property
    def throughputs(self) -> list[float]:
        return [r.output_throughput for r in self.runs]

    @property
    def accept_lengths(self) -> list[float]:
        return [r.accept_length for r in self.runs if r.accept_length is not None]

    @property
    def failed_requests(self) -> int:
        return sum(r.failed for r in self.runs + self.warmup_runs)


def plain_driver(run_once: Callable[[], None], warmup: int, repeats: int) -> None:
    for _ in range(warmup + repeats):
        run_once()


def measure_cell(handle: ServerHandle, workload: Workload, sweep: SweepConfig, concurrency: int, *,
                 api: str | None = None, extra_body: dict | None = None, max_failed: int = 0, driver: Driver = plain_driver,
                 progress: Progress | None = None) -> CellMeasurement:
    """Measure a cell; request failures above `max_failed` make the cell an error with the first errors."""
    engine = handle.engine
    cell = CellMeasurement(config=handle.name, concurrency=concurrency)
    settings = LoadSettings(
        concurrency=concurrency,
        num_requests=sweep.num_requests(concurrency),
        api=api or sweep.api,
        read_timeout_s=sweep.read_timeout_s,
        run_timeout_s=sweep.run_timeout_s,
        api_key=handle.api_key,
        model=handle.effective.raw.get("served_model_name") or "default",
        extra_body=extra_body,
    )
    total = sweep.warmup + sweep.repeats
    all_runs: list[RunMetrics] = []
    started = time.monotonic()

    with handle.control_client() as client, LoadGenerator(handle.base_url, settings) as generator:

        def run_once() -> None:
            i = len(all_runs)
            if progress:
                phase = "warmup" if i < sweep.warmup else f"run {i - sweep.warmup + 1}/{sweep.repeats}"
                progress(f"{handle.name} c{concurrency} {phase} ({i + 1}/{total})")
            if not handle.alive():
                raise ServerGone(f"server {handle.name!r} exited (code {handle.process.returncode})")
            engine.flush_cache(client)
            before = engine.metrics_snapshot(client)
            run = generator.run(workload)
            after = engine.metrics_snapshot(client)
            metrics = summarize_run(run, engine.server_accept_lengths(client, before, after), engine.accept_length_source)
            if metrics.failed == 0:
                disagreement = engine.token_count_disagreement(before, after, metrics.total_output_tokens)
                if disagreement:
                    metrics.warnings.append(disagreement)
            all_runs.append(metrics)

        try:
            driver(run_once, sweep.warmup, sweep.repeats)
        except (ServerGone, httpx.HTTPError, RuntimeError) as exc:
            cell.error = f"{type(exc).__name__}: {exc}"

    cell.wall_s = time.monotonic() - started
    cell.warmup_runs = all_runs[: sweep.warmup]
    cell.runs = all_runs[sweep.warmup:]
    _judge_cell(cell, handle, max_failed, sweep.repeats)
    return cell


class ServerGone(RuntimeError):
    pass


def _judge_cell(cell: CellMeasurement, handle: ServerHandle, max_failed: int, repeats: int) -> None:
    failed = cell.failed_requests
    if failed > max_failed:
        first = [e for r in cell.warmup_runs + cell.runs for e in r.errors][:3]
        counted = f"{failed} failed requests (allowed {max_failed}); first: " + " | ".join(first)
        cell.error = counted if cell.error is None else f"{cell.error}; {counted}"
    if cell.error is None and len(cell.runs) < repeats:
        cell.error = f"only {len(cell.runs)} of {repeats} runs completed"
    if cell.error is not None and not handle.alive():
        cell.error += f"\nserver exited; log tail:\n{handle.log_tail()}"
    for r in cell.runs:
        cell.warnings.extend(r.warnings)
    for idx in outliers(cell.throughputs):
        cell.warnings.append(f"run {idx + 1} tok/s {cell.throughputs[idx]:.1f} is > 5 MADs from the median (kept)")
