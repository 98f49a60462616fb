"""Synthetic results histories with a known step, for the accuracy benchmark
(benchmarks/history_accuracy.py), the tests and a demonstration of `specguard history`:

    python -m specguard.timeline.synthetic OUT_DIR [--files 30] [--step-at 20] [--step -0.05] [--seed 0]

Each file is a session of two configurations, `baseline` and `eagle3` (EAGLE-3 with `baseline`
as its reference), at concurrency 16, 3 measured runs per cell, with the shipped suite's noise:
each launch (configuration x file) moves its step time by sd `launch_sd` (1 %), each run by
sd `run_sd` (1 %); accept length varies 0.3 % per launch and per run. tok/s is concurrency x accept
length / step time, so it carries both. From file `step_at` (1-based) on, eagle3's step time is
scaled so that its tok/s moves by `step` (e.g. -0.05: 5 % slower engine); accept length does
not move. Files are a day apart, each with its own commit; the engine version changes at the step.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import numpy as np

from specguard.report.results import SCHEMA, SCHEMA_VERSION
from specguard.report.summary import cell_summary

CONCURRENCY = 16
RUNS = 3
# configuration -> (step time ms, accept length: None without speculation)
BASE: dict[str, tuple[float, float | None]] = {"baseline": (20.0, None), "eagle3": (30.0, 3.0)}
START = datetime(2026, 5, 1, 2, 0, tzinfo=timezone.utc)


def _run(step_ms: float, accept: float | None) -> dict[str, Any]:
    tok_s = CONCURRENCY * (accept or 1.0) * 1000 / step_ms
    return {"concurrency": CONCURRENCY, "num_requests": 4 * CONCURRENCY, "completed": 4 * CONCURRENCY, "failed": 0,
            "duration_s": 4 * 64 * CONCURRENCY / tok_s, "output_throughput": tok_s, "accept_length": accept,
            "step_time_ms": step_ms, "latency_ms": {}, "errors": [], "warnings": []}


def _cell(name: str, rng: np.random.Generator, scale: float, run_sd: float, launch_sd: float) -> dict[str, Any]:
    base_step_ms, base_accept = BASE[name]
    launch_step, launch_accept = rng.normal(0, launch_sd), rng.normal(0, 0.003)
    runs = []
    for _ in range(RUNS):
        step_ms = base_step_ms * scale * math.exp(launch_step + rng.normal(0, run_sd))
        accept = base_accept * math.exp(launch_accept + rng.normal(0, 0.003)) if base_accept else None
        runs.append(_run(step_ms, accept))
    return {"config": name, "level": f"c{CONCURRENCY}", "error": None, "warnings": [], "wall_s": 10.0,
            "summary": cell_summary(runs), "runs": runs, "warmup_runs": []}


def synthetic_doc(index: int, rng: np.random.Generator, *, step_at: int | None = None, step: float = -0.05,
                  run_sd: float = 0.01, launch_sd: float = 0.01) -> dict[str, Any]:
    """File number `index` (1-based) of a history whose eagle3 tok/s moves by `step` from file `step_at`."""
    after = step_at is not None and index >= step_at
    scale = 1 / (1 + step) if after else 1.0  # step time scaled: tok/s moves by exactly `step`
    configs, servers = [], {}
    for name in BASE:
        spec = BASE[name][1] is not None
        configs.append({"name": name, "engine": "emulator", "model_path": "/models/m",
                        "speculative_algorithm": "EAGLE3" if spec else None, "reference": "baseline" if spec else None})
        servers[name] = {"engine": "emulator", "command": [], "attached": False, "checks": [], "failure": None,
                         "failure_skipped": False, "mode": "launched", "differences": [],
                         "effective_args": {"engine_version": "0.5.24" if after else "0.5.23"}}
    cells = [_cell(name, rng, scale if name == "eagle3" else 1.0, run_sd, launch_sd) for name in BASE]
    return {"schema": SCHEMA, "schema_version": SCHEMA_VERSION, "created": (START + timedelta(days=index - 1)).isoformat(),
            "specguard_version": "0.1.0", "session_id": f"{index:012x}", "suite": "synthetic.toml",
            "environment": {"python": "3", "platform": "synthetic", "gpu": "none",
                            "git_commit": hashlib.sha1(f"synthetic-{index}".encode()).hexdigest()},
            "options": {"require_baselines": False, "update_baselines": False, "baseline_dir": "b", "attached": False},
            "sweep": {"concurrency": [CONCURRENCY], "repeats": RUNS}, "workload": {}, "tolerances": {},
            "configs": configs, "servers": servers, "cells": cells, "decisions": [], "holm_failures": [],
            "crossovers": {}, "baseline_updates": [], "outcome": {"status": "ok", "exit_status": 0, "failed_tests": []}}


def synthetic_history(n_files: int, seed: int, **kwargs: Any) -> list[dict[str, Any]]:
    rng = np.random.default_rng(seed)
    return [synthetic_doc(i, rng, **kwargs) for i in range(1, n_files + 1)]


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
    p.add_argument("--step-at", type=int, default=20, help="first file (1-based) of the step; 0: none")
    p.add_argument("--step", type=float, default=-0.05, help="eagle3's relative tok/s change at the step")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    docs = synthetic_history(args.files, args.seed, step_at=args.step_at or None, step=args.step)
    paths = write_history(args.directory, docs)
    print(f"wrote {len(paths)} results files to {args.directory}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
