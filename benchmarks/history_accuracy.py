"""How well `specguard history` finds a step in a results history, and how often it finds one that
is not there: synthetic histories (specguard/timeline/synthetic.py: two configurations at c16,
3 runs per cell, per-run sd 1 %, per-launch sd 1 %) through the command's own code (series from
the documents, apache-otava's change points, the exit rule).

    python benchmarks/history_accuracy.py [--histories 200] [--files 30] [--seed 0] [--json FILE]

Scenarios, each over --histories generated histories of --files files:
- step: eagle3's tok/s -5 % from a file drawn uniformly with at least 5 files on each side; a
  hit is a tok/s change point within +-1 file of the truth (goal: >= 95 %).
- recent: the same step in the newest 5 files (file n-4 .. n, drawn uniformly): how often the
  exit code is 1, the nightly job's alarm.
- stationary: no step; false change points per 100 files of a series (goal: <= 1), for eagle3's
  tok/s series and over all 6 series, and how often a history would exit 1 (any worse change
  point, any series, in the newest 5 files).
"""

from __future__ import annotations

import argparse
import json
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np

from specguard.report.results import validate
from specguard.timeline.detect import DEFAULT_MAX_PVALUE, DEFAULT_MIN_CHANGE, ChangePoint, change_points, otava_analysis
from specguard.timeline.files import ResultsFile
from specguard.timeline.series import METRICS, build_series
from specguard.timeline.synthetic import synthetic_history

WINDOW = 5
MARGIN = 5  # files on each side of a step in the "step" scenario


def history(args: argparse.Namespace, seed: int, **kwargs: Any) -> list[dict[str, Any]]:
    return synthetic_history(args.files, seed, run_sd=args.run_sd, launch_sd=args.launch_sd, **kwargs)


def detect(docs: list[dict[str, Any]], analysis: Any, max_pvalue: float, min_change: float) -> tuple[int, list[ChangePoint]]:
    """(number of series, every change point) for one history, as `specguard history` finds them."""
    files = [ResultsFile(Path(f"nightly-{i:03d}.json"), datetime.fromisoformat(d["created"]), validate(d))
             for i, d in enumerate(docs, 1)]
    series = build_series(files, list(METRICS.values()))
    return len(series), [p for s in series for p in change_points(s, max_pvalue, min_change, analysis)]


def is_tok_s(p: ChangePoint) -> bool:
    return p.series.config == "eagle3" and p.series.metric.key == "tok_s"


def step_scenario(args: argparse.Namespace, analysis: Any, rng: np.random.Generator) -> dict[str, Any]:
    hits = misplaced = 0
    for h in range(args.histories):
        step_at = int(rng.integers(MARGIN + 1, args.files - MARGIN + 1))  # 1-based first file after the step
        _, points = detect(history(args, args.seed + h, step_at=step_at, step=-0.05),
                           analysis, args.max_pvalue, args.min_change)
        found = [p.position + 1 for p in points if is_tok_s(p)]
        hits += any(abs(f - step_at) <= 1 for f in found)
        misplaced += sum(abs(f - step_at) > 1 for f in found)
    return {"histories": args.histories, "hit_rate": hits / args.histories,
            "misplaced_per_100_files": 100 * misplaced / (args.histories * args.files)}


def recent_scenario(args: argparse.Namespace, analysis: Any, rng: np.random.Generator) -> dict[str, Any]:
    alarms, by_position = 0, {}
    for h in range(args.histories):
        step_at = int(rng.integers(args.files - WINDOW + 1, args.files + 1))
        _, points = detect(history(args, 10_000 + args.seed + h, step_at=step_at, step=-0.05),
                           analysis, args.max_pvalue, args.min_change)
        alarm = any(p.worse and p.position >= args.files - WINDOW for p in points)
        alarms += alarm
        hit, n = by_position.get(step_at, (0, 0))
        by_position[step_at] = (hit + alarm, n + 1)
    return {"histories": args.histories, "exit_1_rate": alarms / args.histories,
            "exit_1_rate_by_step_file": {k: round(v[0] / v[1], 3) for k, v in sorted(by_position.items())}}


def stationary_scenario(args: argparse.Namespace, analysis: Any) -> dict[str, Any]:
    tok_s = total = alarms = n_series = 0
    for h in range(args.histories):
        count, points = detect(history(args, 20_000 + args.seed + h), analysis,
                               args.max_pvalue, args.min_change)
        n_series += count
        tok_s += sum(is_tok_s(p) for p in points)
        total += len(points)
        alarms += any(p.worse and p.position >= args.files - WINDOW for p in points)
    return {"histories": args.histories, "series": n_series,
            "false_per_100_files_tok_s": 100 * tok_s / (args.histories * args.files),
            "false_per_100_files_any_series": 100 * total / (n_series * args.files),
            "false_exit_1_rate": alarms / args.histories}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--histories", type=int, default=200)
    p.add_argument("--files", type=int, default=30)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-pvalue", type=float, default=DEFAULT_MAX_PVALUE)
    p.add_argument("--min-change", type=float, default=DEFAULT_MIN_CHANGE)
    p.add_argument("--run-sd", type=float, default=0.01, help="per-run sd of step time (fraction)")
    p.add_argument("--launch-sd", type=float, default=0.01, help="per-launch sd of step time (fraction)")
    p.add_argument("--json", dest="json_path", type=Path)
    args = p.parse_args()
    analysis, rng, started = otava_analysis(), np.random.default_rng(args.seed), time.monotonic()
    result = {"files": args.files, "run_sd": args.run_sd, "launch_sd": args.launch_sd, "max_pvalue": args.max_pvalue,
              "min_change": args.min_change,
              "step": step_scenario(args, analysis, rng), "recent": recent_scenario(args, analysis, rng),
              "stationary": stationary_scenario(args, analysis)}
    s, r, z = result["step"], result["recent"], result["stationary"]
    print(f"{args.histories} histories of {args.files} files each (sd {args.run_sd:.1%} per run, {args.launch_sd:.1%} per "
          f"launch), p < {args.max_pvalue:g}, changes >= {args.min_change:.0%}")
    print(f"step -5 % (>= {MARGIN} files each side): change point within +-1 file in {s['hit_rate']:.1%} (goal >= 95 %); "
          f"misplaced tok/s change points {s['misplaced_per_100_files']:.2f} per 100 files")
    print(f"step -5 % in the newest {WINDOW} files: exit 1 in {r['exit_1_rate']:.1%}; by the step's file "
          f"{r['exit_1_rate_by_step_file']}")
    print(f"stationary: false change points per 100 files {z['false_per_100_files_tok_s']:.2f} (eagle3 tok/s), "
          f"{z['false_per_100_files_any_series']:.2f} (any of {z['series'] // args.histories} series; goal <= 1); "
          f"false exit 1 in {z['false_exit_1_rate']:.1%} of histories")
    print(f"({time.monotonic() - started:.0f} s)")
    if args.json_path:
        args.json_path.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
