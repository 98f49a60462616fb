"""How well `specguard history` finds a step in a results history, and how often it finds one that
is not there: synthetic histories (specguard/timeline/synthetic.py: two configurations at c16,
3 runs per cell) through the command's own code (per-file values from the documents, the change
points, the exit rule).

    python benchmarks/history_accuracy.py [--histories 1000] [--files 30] [--seed 0] [--json FILE]
        [--run-sd 0.005] [--launch-sd 0.0087] [--day-sd 0.005] [--stall-rate 0.02]
        [--detector specguard|otava] [--file-value median|mean]

Noise: the gate study's `gpu` levels (docs/research/gate-study.md): the day (sd 0.5 %, every configuration
of a file together: day-to-day drift), the launch (0.87 %, so that two sessions differ by 1 %), the
run (0.5 %) and stalls (1 run in 50 at 0.7x). `--run-sd 0.01 --launch-sd 0.01 --day-sd 0
--stall-rate 0` is the benchmark's model before the study's levels were added (a file's tok/s
noisier: sd 1.26 % against 1.11 %, docs/research/evidence/history/oracle.txt).

Scenarios, each over --histories generated histories of --files files:
- step -5 % and step -3 %: eagle3's tok/s moves from a file drawn uniformly with at least 5 files
  on each side; a hit is a tok/s change point within +-1 file of the truth (goals with stalls:
  >= 0.95 and >= 0.9).
- recent: the -5 % step in the newest 5 files (file n-4 .. n, drawn uniformly): how often the exit
  code is 1, the nightly job's alarm.
- stationary: no step; false change points per 100 files of a series, for eagle3's tok/s series
  and over all 6 series, and how often a history would exit 1 (any worse change point, any
  series, in the newest 5 files; goal <= 1 %).
Each rate is printed with its 95 % interval (Wilson for proportions, Garwood for counts).

`--detector otava` runs the same histories through Apache Otava 0.8.0's
`compute_change_points` (window 30, as `specguard history` used it before its own detector;
`pip install --no-deps apache-otava==0.8.0` first), and `--file-value mean` reduces each file to
the mean of its runs (the value before the median): the before/after comparison of docs/history.md.
"""

from __future__ import annotations

import argparse
import importlib
import json
import math
import statistics
import sys
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
from scipy import stats

from specguard.decide.changepoint import ChangePoint
from specguard.report.results import validate
from specguard.timeline.detect import DEFAULT_MAX_PVALUE, DEFAULT_MIN_CHANGE, SeriesChange, change_points
from specguard.timeline.files import ResultsFile
from specguard.timeline.series import METRICS, Reducer, Series, build_series
from specguard.timeline.synthetic import Noise, engine_step, synthetic_history

WINDOW = 5
MARGIN = 5  # files on each side of a step in the "step" scenarios
Detector = Callable[[Series], list[SeriesChange]]


def otava_detector(max_pvalue: float, min_change: float) -> Detector:
    """Otava 0.8.0 as `specguard history` called it before (window 30), for the comparison."""
    try:
        analysis = importlib.import_module("otava.analysis")
    except ImportError:
        sys.exit("history_accuracy: --detector otava needs apache-otava: pip install --no-deps apache-otava==0.8.0")

    def detector(series: Series) -> list[SeriesChange]:
        if len(series.values) < 4:
            return []
        found, _ = analysis.compute_change_points(list(series.values), window_len=30, max_pvalue=max_pvalue,
                                                  min_magnitude=min_change)
        return [SeriesChange(series, series.positions[int(cp.index)],
                             ChangePoint(int(cp.index), float(cp.stats.mean_1), float(cp.stats.mean_2),
                                         float(cp.stats.pvalue), (math.nan, math.nan))) for cp in found]
    return detector


class Bench:
    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.noise = Noise(args.run_sd, args.launch_sd, args.day_sd, args.stall_rate)
        self.reduce: Reducer = statistics.median if args.file_value == "median" else statistics.fmean
        self.detector: Detector = (otava_detector(args.max_pvalue, args.min_change) if args.detector == "otava" else
                                   lambda s: change_points(s, args.max_pvalue, args.min_change))

    def detect(self, seed: int, step_at: int | None = None, step: float = -0.05) -> tuple[int, list[SeriesChange]]:
        """(number of series, every change point) of one generated history, as `specguard history` finds them."""
        docs = synthetic_history(self.args.files, seed, steps=engine_step(step_at, step), noise=self.noise)
        files = [ResultsFile(Path(f"nightly-{i:03d}.json"), datetime.fromisoformat(d["created"]), validate(d))
                 for i, d in enumerate(docs, 1)]
        series = build_series(files, list(METRICS.values()), self.reduce)
        return len(series), [p for s in series for p in self.detector(s)]


def is_tok_s(p: SeriesChange) -> bool:
    return p.series.config == "eagle3" and p.series.metric.key == "tok_s"


def rate(k: int, n: int) -> dict[str, float]:
    """A proportion with its 95 % Wilson interval."""
    z, p = 1.959964, k / n
    centre, half = (p + z * z / (2 * n)) / (1 + z * z / n), z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return {"rate": p, "low": max(0.0, centre - half), "high": min(1.0, centre + half), "n": n}


def per_100(k: int, files: int) -> dict[str, float]:
    """Events per 100 files with the 95 % Garwood (exact Poisson) interval."""
    low = stats.chi2.ppf(0.025, 2 * k) / 2 if k else 0.0
    high = stats.chi2.ppf(0.975, 2 * (k + 1)) / 2
    return {"rate": 100 * k / files, "low": 100 * low / files, "high": 100 * high / files, "files": files}


def step_scenario(bench: Bench, rng: np.random.Generator, step: float, seed0: int) -> dict[str, Any]:
    n, files = bench.args.histories, bench.args.files
    hits = misplaced = 0
    for h in range(n):
        step_at = int(rng.integers(MARGIN + 1, files - MARGIN + 1))  # 1-based first file after the step
        found = [p.position + 1 for p in bench.detect(seed0 + h, step_at, step)[1] if is_tok_s(p)]
        hits += any(abs(f - step_at) <= 1 for f in found)
        misplaced += sum(abs(f - step_at) > 1 for f in found)
    return {"step": step, "hit": rate(hits, n), "misplaced_tok_s": per_100(misplaced, n * files)}


def recent_scenario(bench: Bench, rng: np.random.Generator, seed0: int) -> dict[str, Any]:
    n, files = bench.args.histories, bench.args.files
    alarms, by_position = 0, {}
    for h in range(n):
        step_at = int(rng.integers(files - WINDOW + 1, files + 1))
        points = bench.detect(seed0 + h, step_at, -0.05)[1]
        alarm = any(p.worse and p.position >= files - WINDOW for p in points)
        alarms += alarm
        hit, count = by_position.get(step_at, (0, 0))
        by_position[step_at] = (hit + alarm, count + 1)
    return {"exit_1": rate(alarms, n), "exit_1_by_step_file": {k: round(v[0] / v[1], 3) for k, v in sorted(by_position.items())}}


def stationary_scenario(bench: Bench, seed0: int) -> dict[str, Any]:
    n, files = bench.args.histories, bench.args.files
    tok_s = total = alarms = n_series = 0
    for h in range(n):
        count, points = bench.detect(seed0 + h)
        n_series += count
        tok_s += sum(is_tok_s(p) for p in points)
        total += len(points)
        alarms += any(p.worse and p.position >= files - WINDOW for p in points)
    return {"series": n_series, "false_tok_s": per_100(tok_s, n * files),
            "false_any_series": per_100(total, n_series * files), "false_exit_1": rate(alarms, n)}


def show(r: dict[str, float], percent: bool = True) -> str:
    if "files" in r:
        return f"{r['rate']:.2f} [{r['low']:.2f}, {r['high']:.2f}]"
    if percent:
        return f"{r['rate']:.1%} [{r['low']:.1%}, {r['high']:.1%}]"
    return f"{r['rate']:.3f} [{r['low']:.3f}, {r['high']:.3f}]"


def report(args: argparse.Namespace, result: dict[str, Any]) -> None:
    print(f"{args.histories} histories of {args.files} files each, detector {args.detector}, file value {args.file_value}; "
          f"sd {args.run_sd:.2%} per run, {args.launch_sd:.2%} per launch, {args.day_sd:.2%} per day, stalls "
          f"{args.stall_rate:g} of runs at 0.7x; p < {args.max_pvalue:g}, changes >= {args.min_change:.0%}; seed {args.seed}")
    for key, goal in (("step_5", ">= 0.95"), ("step_3", ">= 0.9")):
        s = result[key]
        print(f"step {s['step']:+.0%} (>= {MARGIN} files each side): tok/s change point within +-1 file "
              f"{show(s['hit'], percent=False)} (goal {goal}); misplaced tok/s change points per 100 files "
              f"{show(s['misplaced_tok_s'])}")
    r, z = result["recent"], result["stationary"]
    print(f"step -5% in the newest {WINDOW} files: exit 1 in {show(r['exit_1'])}; by the step's file {r['exit_1_by_step_file']}")
    print(f"stationary: false change points per 100 files {show(z['false_tok_s'])} (eagle3 tok/s), "
          f"{show(z['false_any_series'])} (any of {z['series'] // args.histories} series); "
          f"false exit 1 in {show(z['false_exit_1'])} of histories (goal <= 1%)")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--histories", type=int, default=1000)
    p.add_argument("--files", type=int, default=30)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-pvalue", type=float, default=DEFAULT_MAX_PVALUE)
    p.add_argument("--min-change", type=float, default=DEFAULT_MIN_CHANGE)
    p.add_argument("--run-sd", type=float, default=0.005, help="per-run sd of step time (fraction)")
    p.add_argument("--launch-sd", type=float, default=0.0087, help="per-launch sd of step time (fraction)")
    p.add_argument("--day-sd", type=float, default=0.005, help="per-file sd shared by every configuration (fraction)")
    p.add_argument("--stall-rate", type=float, default=0.02, help="share of runs that stall at 0.7x")
    p.add_argument("--detector", choices=("specguard", "otava"), default="specguard")
    p.add_argument("--file-value", choices=("median", "mean"), default="median",
                   help="median: specguard history's (runs that disagree leave the file out); mean: before")
    p.add_argument("--json", dest="json_path", type=Path)
    args = p.parse_args()
    bench, rng, started = Bench(args), np.random.default_rng(args.seed), time.monotonic()
    base = 100_000 * args.seed
    result = {"argv": sys.argv[1:], "files": args.files, "histories": args.histories, "noise": vars(bench.noise),
              "detector": args.detector, "file_value": args.file_value, "max_pvalue": args.max_pvalue,
              "min_change": args.min_change,
              "step_5": step_scenario(bench, rng, -0.05, base), "step_3": step_scenario(bench, rng, -0.03, base + 30_000),
              "recent": recent_scenario(bench, rng, base + 10_000), "stationary": stationary_scenario(bench, base + 20_000)}
    report(args, result)
    print(f"({time.monotonic() - started:.0f} s)")
    if args.json_path:
        args.json_path.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
