"""Synthetic results histories with known steps, for the accuracy benchmark
(benchmarks/history_accuracy.py), the tests and a demonstration of `specguard history`:

    python -m specguard.timeline.synthetic OUT_DIR [--files 30] [--step-at 20] [--step -0.05] [--seed 0]
        [--day-sd 0.005] [--stall-rate 0.02] [--configs baseline,eagle3,mtp] [--levels 1,4,16,64]
        [--drafter-at 24 --drafter-config mtp]

Each file is one night's session: by default two configurations, `baseline` and `eagle3` (EAGLE-3
with `baseline` as its reference; `mtp` is a third), at concurrency 16, 3 measured runs per cell,
with the shipped suite's noise: each launch (configuration x file, shared by its levels) moves its
step time by sd `launch_sd` (1 %), each run by sd `run_sd` (1 %); accept length varies 0.3 % per
launch and per run. The gate study's other two levels are off unless asked: the day (every
configuration of a file moves together by sd `day_sd`: the machine's mood that night) and stalls
(a run stalls with probability `stall_rate`, its steps 1/0.7 longer). tok/s is concurrency x
accept length / step time, so it carries all of them. A `Step` from file `at` (1-based) on scales a
configuration's step time (engine) or accept length (drafter) so that its tok/s moves by `change`.
Files are a day apart, each with its own commit; a configuration's engine version changes at its
engine step.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Literal

import numpy as np

from specguard.report.results import SCHEMA, SCHEMA_VERSION
from specguard.report.summary import cell_summary

RUNS = 3
STALL_FACTOR = 0.7  # a stalled run's speed, as the gate study's stalls (docs/research/gate-study.md)
# configuration -> (step time ms at c16, accept length: None without speculation, algorithm)
BASE: dict[str, tuple[float, float | None, str | None]] = {
    "baseline": (20.0, None, None), "eagle3": (30.0, 3.0, "EAGLE3"), "mtp": (28.0, 2.5, "NEXTN")}
START = datetime(2026, 5, 1, 2, 0, tzinfo=timezone.utc)


@dataclass(frozen=True)
class Step:
    """From file `at` (1-based) on, `config`'s tok/s moves by `change` through its engine (step
    time) or its drafter (accept length)."""

    config: str
    at: int
    change: float
    part: Literal["engine", "drafter"] = "engine"


@dataclass(frozen=True)
class Noise:
    run_sd: float = 0.01
    launch_sd: float = 0.01
    day_sd: float = 0.0
    stall_rate: float = 0.0


def _run(level: int, step_ms: float, accept: float | None) -> dict[str, Any]:
    tok_s = level * (accept or 1.0) * 1000 / step_ms
    return {"concurrency": level, "num_requests": 4 * level, "completed": 4 * level, "failed": 0,
            "duration_s": 4 * 64 * level / tok_s, "output_throughput": tok_s, "accept_length": accept,
            "step_time_ms": step_ms, "latency_ms": {}, "errors": [], "notes": []}


def _launch(name: str, level_list: Sequence[int], rng: np.random.Generator, scales: tuple[float, float],
            day: float, noise: Noise) -> list[dict[str, Any]]:
    """One launch's cells, one per level: (step scale, accept scale) from the steps in force."""
    base_step_ms, base_accept, _ = BASE[name]
    launch_step, launch_accept = rng.normal(0, noise.launch_sd), rng.normal(0, 0.003)
    cells = []
    for level in level_list:
        runs = []
        for _ in range(RUNS):
            step_ms = base_step_ms * (1 + level / 16) / 2 * scales[0] * math.exp(day + launch_step + rng.normal(0, noise.run_sd))
            if noise.stall_rate and rng.random() < noise.stall_rate:
                step_ms /= STALL_FACTOR
            accept = base_accept * scales[1] * math.exp(launch_accept + rng.normal(0, 0.003)) if base_accept else None
            runs.append(_run(level, step_ms, accept))
        cells.append({"config": name, "level": f"c{level}", "error": None, "notes": [], "wall_s": 10.0,
                      "summary": cell_summary(runs), "runs": runs, "warmup_runs": []})
    return cells


def _scales(name: str, index: int, steps: Sequence[Step]) -> tuple[float, float]:
    step_scale = accept_scale = 1.0
    for s in steps:
        if s.config == name and index >= s.at:
            if s.part == "engine":
                step_scale /= 1 + s.change  # step time scaled: tok/s moves by exactly `change`
            else:
                accept_scale *= 1 + s.change
    return step_scale, accept_scale


def synthetic_doc(index: int, rng: np.random.Generator, *, steps: Sequence[Step] = (), noise: Noise = Noise(),
                  configs: Sequence[str] = ("baseline", "eagle3"), levels: Sequence[int] = (16,)) -> dict[str, Any]:
    """File number `index` (1-based) of a history with `steps`."""
    day = rng.normal(0, noise.day_sd) if noise.day_sd else 0.0
    config_docs, servers, cells = [], {}, []
    for name in configs:
        algorithm = BASE[name][2]
        config_docs.append({"name": name, "engine": "emulator", "model_path": "/models/m", "speculative_algorithm": algorithm,
                            "reference": "baseline" if algorithm else None})
        upgraded = any(s.config == name and s.part == "engine" and index >= s.at for s in steps)
        servers[name] = {"engine": "emulator", "command": [], "attached": False, "checks": [], "failure": None,
                         "failure_skipped": False, "mode": "launched", "differences": [],
                         "effective_args": {"engine_version": "0.5.24" if upgraded else "0.5.23"}}
        cells += _launch(name, levels, rng, _scales(name, index, steps), day, noise)
    return {"schema": SCHEMA, "schema_version": SCHEMA_VERSION, "created": (START + timedelta(days=index - 1)).isoformat(),
            "specguard_version": "0.1.0", "session_id": f"{index:012x}", "suite": "synthetic.toml",
            "environment": {"python": "3", "platform": "synthetic", "gpu": "none",
                            "git_commit": hashlib.sha1(f"synthetic-{index}".encode()).hexdigest()},
            "options": {"require_baselines": False, "update_baselines": False, "baseline_dir": "b", "attached": False},
            "sweep": {"concurrency": list(levels), "repeats": RUNS}, "workload": {}, "tolerances": {},
            "configs": config_docs, "servers": servers, "cells": cells, "decisions": [], "holm_failures": [],
            "crossovers": {}, "baseline_updates": [], "outcome": {"status": "ok", "exit_status": 0, "failed_tests": []}}


def synthetic_history(n_files: int, seed: int, **kwargs: Any) -> list[dict[str, Any]]:
    rng = np.random.default_rng(seed)
    return [synthetic_doc(i, rng, **kwargs) for i in range(1, n_files + 1)]


def engine_step(at: int | None, change: float = -0.05, config: str = "eagle3") -> tuple[Step, ...]:
    """The usual single change: `config`'s engine from file `at` (none when `at` is None)."""
    return () if at is None else (Step(config, at, change),)


def write_history(directory: Path, docs: list[dict[str, Any]]) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for i, doc in enumerate(docs, 1):
        path = directory / f"nightly-{i:03d}.json"
        path.write_text(json.dumps(doc, indent=1), encoding="utf-8")
        paths.append(path)
    return paths


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m specguard.timeline.synthetic", description=__doc__.split("\n\n")[0])
    p.add_argument("directory", type=Path)
    p.add_argument("--files", type=int, default=30)
    p.add_argument("--step-at", type=int, default=20, help="first file (1-based) of eagle3's engine step; 0: none")
    p.add_argument("--step", type=float, default=-0.05, help="eagle3's relative tok/s change at the step")
    p.add_argument("--drafter-at", type=int, default=0, help="first file of a drafter step (accept length); 0: none")
    p.add_argument("--drafter-config", default="eagle3")
    p.add_argument("--drafter-step", type=float, default=-0.05)
    p.add_argument("--configs", default="baseline,eagle3", help=f"comma-separated, of {', '.join(BASE)}")
    p.add_argument("--levels", default="16", help="concurrency levels, comma-separated")
    p.add_argument("--day-sd", type=float, default=0.0)
    p.add_argument("--stall-rate", type=float, default=0.0)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    unknown = [c for c in args.configs.split(",") + [args.drafter_config] if c not in BASE]
    if unknown:
        p.error(f"--configs/--drafter-config: {', '.join(unknown)}: not one of {', '.join(BASE)}")
    steps = engine_step(args.step_at or None, args.step)
    if args.drafter_at:
        steps += (Step(args.drafter_config, args.drafter_at, args.drafter_step, "drafter"),)
    docs = synthetic_history(args.files, args.seed, steps=steps, noise=Noise(day_sd=args.day_sd, stall_rate=args.stall_rate),
                             configs=args.configs.split(","), levels=[int(x) for x in args.levels.split(",")])
    paths = write_history(args.directory, docs)
    print(f"wrote {len(paths)} results files to {args.directory}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
