"""The soak test of one configuration: closed-loop load at `[soak] concurrency` for `duration_s`,
measured in windows (one run each, its request count following the last window's rate so a
window lasts about `window_s`), then decided on the windows' change points (decide/soak.py).

Bounded in time and count: the soak stops at `duration_s` (a window that started keeps its
requests; each request is bounded by the sweep's read and run timeouts) and after at most
MAX_WINDOWS_FACTOR x the planned windows, whichever comes first.
"""

from __future__ import annotations

import math
import time
from dataclasses import replace

from specguard.decide.gates import GateTest
from specguard.decide.result import GateResult, Problem, SoakMetric, Why
from specguard.decide.soak import SoakSettings, decide_soak
from specguard.labels import SOAK, GateLabel, Level, Verdict
from specguard.measure.metrics import RunMetrics
from specguard.measure.sweep import CellLoad, Progress, RunControl, measure_cell
from specguard.session.options import RunOptions
from specguard.session.parts import SessionParts

MAX_WINDOWS_FACTOR = 3  # windows far shorter than window_s (a fast server) stop the soak at 3x the plan
FIRST_WINDOW_REQUESTS_PER_CLIENT = 4


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
    suite, soak = parts.suite, parts.suite.soak
    test = GateTest(GateLabel(SOAK), name, Level(soak.concurrency), soak.alpha)
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
            return test.problem(Verdict.ERROR, Problem(Why.UNAVAILABLE, f"soak {name} window {len(windows)}: "
                                                                         f"{cell.error or 'no run'}")), windows
        windows.append(cell.runs[0])
        wall_s = max(time.monotonic() - window_started, 1e-3)
        requests = min(max(soak.concurrency, round(requests * soak.window_s / wall_s)), requests * 4)
        if progress:
            progress(f"soak {name} c{soak.concurrency}: window {len(windows)}/{planned} ({wall_s:.0f} s, "
                     f"{cell.runs[0].output_throughput:.0f} tok/s)")
    series = {m: [window_value(r, m) for r in windows] for m in SoakMetric}
    verdict, found = decide_soak(series, SoakSettings(soak.warmup_windows, soak.alpha, soak.min_change))
    if verdict == Verdict.ERROR:
        return test.problem(verdict, Problem(Why.TOO_FEW_RUNS, count=found.windows)), windows
    accept = [a for a in series[SoakMetric.ACCEPT_LENGTH][soak.warmup_windows:] if a is not None]
    return test.result(verdict, soak=found, current=accept[-1] if accept else None,
                       reference=accept[0] if accept else None), windows
