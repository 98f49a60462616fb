"""The soak test of one configuration, decided on its windows' change points (decide/soak.py).

`[soak] mode = "load"`: closed-loop load at `[soak] concurrency` for `duration_s`, measured in
windows (one run each, its request count following the last window's rate so a window lasts
about `window_s`). `mode = "passive"`: no request is sent; every `window_s` the server's /metrics
counters are read (measure/passive.py), so a serving server is watched under its own traffic.
There tok/s follows the traffic, so only accept length decides (the drafter decaying, as in
sglang#37326); windows without traffic are skipped, and counted.

Bounded in time and count: the soak stops at `duration_s` (a load window that started keeps its
requests; each request is bounded by the sweep's read and run timeouts) and after at most
MAX_WINDOWS_FACTOR x the planned windows, whichever comes first.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, replace
from pathlib import Path

from specguard.config import SOAK_PASSIVE
from specguard.decide.gates import GateTest
from specguard.decide.result import GateResult, Problem, SoakMetric, Why
from specguard.decide.soak import MIN_WINDOWS, SoakSettings, decide_soak
from specguard.labels import SOAK, GateLabel, Level, Verdict
from specguard.measure.metrics import RunMetrics
from specguard.measure.passive import NoMetrics, passive_window, snapshot
from specguard.measure.progress import Progress, SoakStarted, SoakWindow
from specguard.measure.sweep import CellLoad, RunControl, measure_cell
from specguard.notes import Note, NoteKind
from specguard.session.options import RunOptions
from specguard.session.parts import SessionParts

MAX_WINDOWS_FACTOR = 3  # windows far shorter than window_s (a fast server) stop the soak at 3x the plan
FIRST_WINDOW_REQUESTS_PER_CLIENT = 4
PASSIVE_METRICS = (SoakMetric.ACCEPT_LENGTH,)  # what decides a passive soak: the rest moves with the traffic

Windows = tuple[list[RunMetrics], "Problem | None"]  # the windows measured, and why the soak stopped early


class WindowLog:
    """The soak's windows on disk as they close, one JSON line each (the results document's
    window fields and its number), so an interrupted soak keeps what it measured:
    ``{log_dir}/soak-{name}.jsonl``, started afresh by each soak of ``name``."""

    def __init__(self, log_dir: Path, name: str) -> None:
        log_dir.mkdir(parents=True, exist_ok=True)
        self.path = log_dir / f"soak-{name}.jsonl"
        self.path.write_text("")

    def append(self, window: RunMetrics, number: int) -> None:
        with self.path.open("a") as f:
            f.write(json.dumps({"window": number, **asdict(window)}) + "\n")
            f.flush()


def window_value(run: RunMetrics, metric: SoakMetric) -> float | None:
    if metric == SoakMetric.ITL_P99:
        value = run.latency_ms.get("p99_itl_ms")
        return value if value is not None and math.isfinite(value) else None
    return {SoakMetric.ACCEPT_LENGTH: run.accept_length, SoakMetric.STEP_TIME: run.step_time_ms,
            SoakMetric.THROUGHPUT: run.output_throughput}[metric]


def run_soak(parts: SessionParts, options: RunOptions, name: str,
             progress: Progress | None) -> tuple[GateResult, list[RunMetrics]]:
    """Soak `name` on its server (launched or attached as for its other tests) and decide; the
    result and the windows measured (every one, warm-up included)."""
    soak = parts.suite.soak
    test = GateTest(GateLabel(SOAK), name, Level(soak.concurrency), soak.alpha)
    passive = soak.mode == SOAK_PASSIVE
    log = WindowLog(options.log_dir, name)
    if progress:
        progress(SoakStarted(name, str(log.path)))
    windows, problem = (_passive_windows if passive else _load_windows)(parts, options, log, name, progress)
    if problem is not None:
        return test.problem(Verdict.ERROR, problem), windows
    metrics = PASSIVE_METRICS if passive else tuple(SoakMetric)
    series = {m: [window_value(r, m) for r in windows] for m in metrics}
    verdict, found = decide_soak(series, SoakSettings(soak.warmup_windows, soak.alpha, soak.min_change))
    if verdict == Verdict.ERROR:
        return test.problem(verdict, Problem(Why.TOO_FEW_RUNS, count=found.windows)), windows
    accept = [a for a in series[SoakMetric.ACCEPT_LENGTH][soak.warmup_windows:] if a is not None]
    return test.result(verdict, soak=found, current=accept[-1] if accept else None,
                       reference=accept[0] if accept else None), windows


def _load_windows(parts: SessionParts, options: RunOptions, log: WindowLog, name: str, progress: Progress | None) -> Windows:
    suite, soak = parts.suite, parts.suite.soak
    handle = parts.pool.get(name)
    cfg = parts.pool.config(name)
    one_window = replace(suite.sweep, warmup=0, repeats=1)
    planned = max(1, math.ceil(soak.duration_s / soak.window_s))
    requests = soak.concurrency * FIRST_WINDOW_REQUESTS_PER_CLIENT
    windows: list[RunMetrics] = []
    started = time.monotonic()
    while time.monotonic() - started < soak.duration_s and len(windows) < MAX_WINDOWS_FACTOR * planned:
        window_started = time.monotonic()
        load = CellLoad(soak.concurrency, api=handle.engine.choose_api(suite.sweep.api),
                        extra_body=handle.engine.request_extra_body(cfg), num_requests=requests)
        cell = measure_cell(handle, parts.pool.workload_for(name), one_window, load,
                            RunControl(max_failed=options.max_failed_requests))
        if cell.error or not cell.runs:
            return windows, Problem(Why.UNAVAILABLE, Note.of(NoteKind.SOAK_WINDOW_FAILED, config=name, window=len(windows),
                                                             error=cell.error or ""))
        windows.append(cell.runs[0])
        log.append(cell.runs[0], len(windows) - 1)
        wall_s = max(time.monotonic() - window_started, 1e-3)
        requests = min(max(soak.concurrency, round(requests * soak.window_s / wall_s)), requests * 4)
        if progress:
            progress(SoakWindow(name, load.level_name, len(windows), planned, cell.runs[0].output_throughput, wall_s))
    return windows, None


def _passive_windows(parts: SessionParts, _options: RunOptions, log: WindowLog, name: str,
                     progress: Progress | None) -> Windows:
    """Every window_s, the server's counters since the last reading; a window without traffic
    is skipped (counted in the problem when too few are left to decide)."""
    soak = parts.suite.soak
    handle = parts.pool.get(name)
    planned = max(1, math.ceil(soak.duration_s / soak.window_s))
    windows: list[RunMetrics] = []
    idle = 0
    started = time.monotonic()
    with handle.control_client() as client:
        try:
            before, at_s = snapshot(handle.engine, client), time.monotonic()
            for n in range(1, planned + 1):
                time.sleep(max(0.0, started + n * soak.window_s - time.monotonic()))
                after, now_s = snapshot(handle.engine, client), time.monotonic()
                window = passive_window(handle.engine, client, before, after, now_s - at_s)
                before, at_s = after, now_s
                if window is None:
                    idle += 1
                else:
                    windows.append(window)
                    log.append(window, len(windows) - 1)
                if progress:
                    progress(SoakWindow(name, "", n, planned, None if window is None else window.output_throughput,
                                        accept_length=None if window is None else window.accept_length))
        except NoMetrics as exc:
            return windows, Problem(Why.UNAVAILABLE, Note.of(NoteKind.SOAK_NO_METRICS, config=name, error=str(exc)))
    if len(windows) < soak.warmup_windows + MIN_WINDOWS:
        return windows, Problem(Why.UNAVAILABLE, Note.of(NoteKind.SOAK_TOO_QUIET, config=name, windows=len(windows),
                                                         planned=planned, idle=idle,
                                                         needed=soak.warmup_windows + MIN_WINDOWS))
    return windows, None
