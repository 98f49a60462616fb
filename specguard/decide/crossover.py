"""Where speculation stops paying: one estimator for the pytest summary, `specguard recommend`
and the gate study.

The speculation ratio spec/reference is interpolated linearly in log ratio against log
concurrency; the crossover is where it first reaches 1. Its interval comes from the same
interpolation of the per-level interval bounds: the lower bounds reach 1 first (the earliest
plausible crossover), the upper bounds last (the latest). The bounds are pointwise (each
level's interval at the confidence it was computed with), not simultaneous.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Sequence

from specguard.decide.stats import RatioEstimate


@dataclass(frozen=True)
class CrossoverEstimate:
    """Crossover concurrency (None: not within the measured levels) with its interval."""

    estimate: float | None  # None: ahead at every level (above_range) or behind from the first (below_range)
    low: float | None  # None: may lie at or below the first level
    high: float | None  # None: may lie beyond the last level
    below_range: bool  # behind already at the first level
    above_range: bool  # ahead at every level
    last_ahead: int | None  # last level before the first one where the estimate is below 1
    first_behind: int | None

    def describe(self) -> str:
        if self.below_range:
            return "speculation is behind from the first measured concurrency"
        if self.above_range:
            tail = "" if self.high is None else f" (it may cross by c{self.high:.0f})"
            return "speculation is ahead at every measured concurrency" + tail
        lo = "?" if self.low is None else f"{self.low:.0f}"
        hi = "?" if self.high is None else f"{self.high:.0f}"
        return f"crossover at c{self.estimate:.1f} [{lo}, {hi}]"


def first_crossing(levels: Sequence[float], ratios: Sequence[float]) -> float | None:
    """First concurrency where ``ratios`` reach 1, interpolated on log ratio vs log concurrency
    between the levels around it; levels[0] when already below there, None when never below."""
    for i, r in enumerate(ratios):
        if r < 1.0:
            if i == 0:
                return float(levels[0])
            c0, c1, v0, v1 = levels[i - 1], levels[i], math.log(ratios[i - 1]), math.log(r)
            t = v0 / (v0 - v1) if v0 != v1 else 0.0
            return math.exp(math.log(c0) + t * (math.log(c1) - math.log(c0)))
    return None


def estimate_crossover(ratios: Mapping[int, RatioEstimate]) -> CrossoverEstimate:
    """The crossover of a speculative configuration from its per-level speculation estimates."""
    levels = sorted(ratios)
    if not levels:
        return CrossoverEstimate(None, None, None, False, True, None, None)
    point = [ratios[c].ratio for c in levels]
    est = first_crossing(levels, point)
    low = first_crossing(levels, [ratios[c].low for c in levels])
    high = first_crossing(levels, [ratios[c].high for c in levels])
    below = point[0] < 1.0
    if low is not None and low <= levels[0] and ratios[levels[0]].low < 1.0:
        low = None  # the lower bound is below 1 at the first level: no lower limit within the sweep
    first_behind = next((c for c in levels if ratios[c].ratio < 1.0), None)
    last_ahead = None if first_behind is None else next((c for c in reversed(levels) if c < first_behind), None)
    if below:
        est = None
    return CrossoverEstimate(est, low, high, below, first_behind is None, last_ahead, first_behind)


def within_factor(estimate: float | None, truth: float | None, factor: float, levels: Sequence[int]) -> bool:
    """Scoring for the study: |log(estimate / truth)| <= log(factor). "Not within the sweep" on
    both sides counts as a hit only when it is the same side."""
    if truth is None or estimate is None:
        return truth is None and estimate is None
    return abs(math.log(estimate / truth)) <= math.log(factor)


__all__ = ["CrossoverEstimate", "estimate_crossover", "first_crossing", "within_factor"]
