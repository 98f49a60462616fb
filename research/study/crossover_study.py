"""The crossover estimate on a sweep whose truth lies between its levels (the seed-A profile's)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from functools import partial
from typing import Any

import numpy as np

from research.study.noise import Noise
from research.study.plan import GateSettings, gate_tests
from research.study.run import wilson
from research.study.simulate import Launch, reference_of, seed_of, simulate_launch
from research.study.truth import CROSSOVER_FACTOR, true_crossover_c, within_factor
from specguard.config import Suite
from specguard.decide.crossover import estimate_crossover
from specguard.decide.gates import CellRuns, GateTest, ReferenceSide, must_win_gate
from specguard.decide.result import Against, Versus
from specguard.decide.stats import RatioEstimate
from specguard.labels import SPECULATION, GateLabel, Level


def _stage1_ratio(g: GateSettings, spec: list[Launch], ref: list[Launch], spec_name: str, ref_name: str, c: int,
                  alpha: float) -> RatioEstimate | None:
    """The speculation estimate at level c a design reads the crossover from: its stage 1; None
    where that cell ended "not measured" (its runs disagree: a stall, decide/consistency.py)."""
    d = g.gate_design()
    n_l = 1 if d.sequential else d.launches
    tol = g.tolerances
    side = ReferenceSide(Versus(Against.REFERENCE, ref_name), launches=[launch[c][0] for launch in ref[:n_l]])
    result = must_win_gate(GateTest(GateLabel(SPECULATION), spec_name, Level(c), alpha, enforced=False),
                           CellRuns([launch[c][0] for launch in spec[:n_l]]), side, tol.speculation_min_gain,
                           d.prior(tol.prior_between_sd), d.rule(tol.fail_rule))
    return result.estimate


def _crossover_session(suite: Suite, noise: Noise, designs: Sequence[GateSettings], seed: int, index: int) -> list[float | None]:
    names = list(suite.servers)
    spec_name = next(n for n, c in suite.servers.items() if c.speculative)
    ref = reference_of(suite.servers[spec_name])
    day = float(np.random.default_rng([seed, index, 12]).normal(0.0, noise.day_pct / 100)) if noise.day_pct else 0.0
    max_l = max(1 if g.gate_design().sequential else g.gate_design().launches for g in designs)
    runs = {n: [simulate_launch(suite, n, seed_of(seed, index, 5, k, j), designs[0].repeats, noise, None, day)
                for k in range(max_l)] for j, n in enumerate(names) if n in (spec_name, ref)}
    alpha = suite.tolerances.family_alpha / gate_tests(suite)
    out: list[float | None] = []
    for g in designs:
        ratios = {c: _stage1_ratio(g, runs[spec_name], runs[ref], spec_name, ref, c, alpha) for c in suite.sweep.concurrency}
        measured = {c: r for c, r in ratios.items() if r is not None}
        # a level not measured leaves no crossover to read: the session counts as a miss
        out.append(estimate_crossover(measured).estimate if len(measured) == len(ratios) else None)
    return out


def crossover_study(suite: Suite, noise: Noise, designs: Sequence[GateSettings], sessions: int, seed: int,
                    jobs: int = 1) -> dict[str, Any]:
    """How often each design's crossover estimate lands within CROSSOVER_FACTOR of the truth on
    ``suite`` (the seed-A profile's sweep: the truth, c35.9, lies between the levels 32 and 64)."""
    spec_name = next(n for n, c in suite.servers.items() if c.speculative)
    truth = true_crossover_c(suite, spec_name, noise.bias)
    started = time.monotonic()
    work = partial(_crossover_session, suite, noise, list(designs), seed)
    if jobs > 1:
        import multiprocessing

        with multiprocessing.get_context("fork").Pool(jobs) as pool:
            per = list(pool.imap(work, range(sessions)))
    else:
        per = [work(i) for i in range(sessions)]
    rows = []
    for k, g in enumerate(designs):
        est = [p[k] for p in per]
        hits = sum(within_factor(e, truth, CROSSOVER_FACTOR) for e in est)
        known = [e for e in est if e is not None]
        rows.append({"design": g.design, "within_1_25x": hits / sessions, "ci95": wilson(hits, sessions),
                     "median_estimate": float(np.median(known)) if known else None,
                     "without_estimate": len(est) - len(known)})
    return {"suite": str(suite.path), "config": spec_name, "true_crossover_c": truth, "sessions": sessions,
            "rows": rows, "elapsed_s": round(time.monotonic() - started, 1)}
