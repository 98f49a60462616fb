"""The noise-free model's answers the study scores against: where speculation really stops paying."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace

from research.study.simulate import reference_of, simulate_launch
from specguard.config import Suite
from specguard.decide.crossover import first_crossing

CROSSOVER_FACTOR = 1.25  # a crossover estimate counts as right within this factor of the truth


def true_crossovers(suite: Suite, bias: dict[str, float] | None = None) -> dict[str, int | None]:
    """First sweep level where speculation loses to its reference: the noise-free model, times
    the real-time client's bias where the study applies one."""
    bias = bias or {}
    tok = {(n, c): runs[0][0] * bias.get(f"{n} c{c}", 1.0)
           for n in suite.servers for c, runs in simulate_launch(suite, n, 0, 1, None).items()}
    out = {}
    for name, cfg in suite.servers.items():
        if cfg.speculative:
            ref = reference_of(cfg)
            loses = [c for c in suite.sweep.concurrency if tok[(name, c)] < tok[(ref, c)]]
            out[name] = loses[0] if loses else None
    return out


def true_crossover_c(suite: Suite, config: str, bias: dict[str, float] | None = None, points: int = 24) -> float | None:
    """The noise-free model's crossover concurrency of ``config``, located between the sweep's
    levels on a fine geometric grid (first point where speculation is behind), log-interpolated."""
    bias = bias or {}
    cfg = suite.servers[config]
    coarse = true_crossovers(suite, bias)[config]
    levels = suite.sweep.concurrency
    if coarse is None or coarse == levels[0]:
        return None if coarse is None else float(levels[0])
    lo = levels[levels.index(coarse) - 1]
    grid = sorted({int(round(lo * (coarse / lo) ** (i / points))) for i in range(points + 1)})
    fine = replace(suite, sweep=replace(suite.sweep, concurrency=grid))
    spec = simulate_launch(fine, config, 0, 1, None)
    reference = reference_of(cfg)
    ref = simulate_launch(fine, reference, 0, 1, None)

    def ratio(c: int) -> float:  # the client's bias is known only at the sweep's levels: interpolate it
        b = bias.get(f"{config} c{lo}", 1.0) / bias.get(f"{reference} c{lo}", 1.0)
        b2 = bias.get(f"{config} c{coarse}", 1.0) / bias.get(f"{reference} c{coarse}", 1.0)
        t = math.log(c / lo) / math.log(coarse / lo)
        return spec[c][0][0] / ref[c][0][0] * math.exp((1 - t) * math.log(b) + t * math.log(b2))

    return first_crossing(grid, [ratio(c) for c in grid])


def level_distance(levels: Sequence[int], a: int | None, b: int | None) -> int:
    """How many sweep levels apart two crossovers are (None = beyond the last level)."""
    idx: dict[int | None, int] = {c: i for i, c in enumerate(sorted(levels))}
    return abs(idx.get(a, len(levels)) - idx.get(b, len(levels)))


def within_factor(estimate: float | None, truth: float | None, factor: float) -> bool:
    """Scoring: |log(estimate / truth)| <= log(factor). "Not within the sweep" (None) on both
    sides counts as a hit."""
    if truth is None or estimate is None:
        return truth is None and estimate is None
    return abs(math.log(estimate / truth)) <= math.log(factor)
