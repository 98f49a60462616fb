"""Where speculation stops paying: the one estimator behind the pytest summary, `specguard
recommend`, the report's plots and the gate study.

The speculation ratio spec/reference is interpolated linearly in log ratio against log
concurrency; the crossover is where it first drops below 1. Its interval comes from the same
interpolation of the per-level interval bounds: the upper bounds drop below 1 last (the latest
plausible crossover); the lower bounds drop below 1 first after the last level where speculation
is confidently ahead (the earliest: a level confidently ahead rules out a crossover below it).
The bounds are pointwise (each level's interval at the confidence it was computed with), not
simultaneous.

Edges: a ratio or bound of exactly 1 is neither behind nor confidently ahead; a curve already
behind at its first level has no estimate (``below_range``), one never behind has none either
(``above_range``); an interval end that may lie outside the measured levels is None.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from specguard.decide.stats import RatioEstimate


@dataclass(frozen=True)
class CrossoverEstimate:
    """Crossover concurrency (None: not within the measured levels) with its interval."""

    estimate: float | None  # None: ahead at every level (above_range) or behind from the first (below_range)
    low: float | None  # None: no level confidently ahead before it, so it may lie at or below the first level
    high: float | None  # None: may lie beyond the last level
    below_range: bool  # behind already at the first level
    above_range: bool  # ahead at every level
    last_ahead: int | None  # last level before the first one where the estimate is below 1
    first_behind: int | None
    # both levels around the crossover resolved: the last one confidently ahead (lower bound
    # above 1), the first one confidently behind (upper bound below 1)
    confident: bool = False


def first_crossing(levels: Sequence[float], ratios: Sequence[float]) -> float | None:
    """First concurrency where ``ratios`` drop below 1, interpolated on log ratio vs log
    concurrency between the levels around it; levels[0] when already below there, None when never below."""
    for i, r in enumerate(ratios):
        if r < 1.0:
            if i == 0:
                return float(levels[0])
            c0, c1, v0, v1 = levels[i - 1], levels[i], math.log(ratios[i - 1]), math.log(r)
            t = v0 / (v0 - v1) if v0 != v1 else 0.0
            return math.exp(math.log(c0) + t * (math.log(c1) - math.log(c0)))
    return None


def _lower_end(levels: Sequence[int], lows: Sequence[float], crossing: float | None) -> float | None:
    """Where the lower bounds drop below 1 after the last level confidently ahead (lower bound
    above 1) at or below ``crossing``, never beyond ``crossing``; None when no level is ahead."""
    ahead = [i for i, c in enumerate(levels) if lows[i] > 1.0 and (crossing is None or c <= crossing)]
    if not ahead:
        return None
    j = ahead[-1]
    low = first_crossing(levels[j:], lows[j:])
    return low if low is None or crossing is None else min(low, crossing)


def _resolved(ratios: Mapping[int, RatioEstimate], last_ahead: int | None, first_behind: int | None) -> bool:
    """Both levels around the crossover resolved: confidently ahead before it, confidently behind after."""
    return (last_ahead is not None and first_behind is not None and ratios[last_ahead].low > 1.0
            and ratios[first_behind].high < 1.0)


def estimate_crossover(ratios: Mapping[int, RatioEstimate]) -> CrossoverEstimate:
    """The crossover of a speculative configuration from its per-level speculation estimates."""
    levels = sorted(ratios)
    if not levels:
        return CrossoverEstimate(None, None, None, False, True, None, None)
    crossing = first_crossing(levels, [ratios[c].ratio for c in levels])
    low = _lower_end(levels, [ratios[c].low for c in levels], crossing)
    high = first_crossing(levels, [ratios[c].high for c in levels])
    first_behind = next((c for c in levels if ratios[c].ratio < 1.0), None)
    last_ahead = None if first_behind is None else next((c for c in reversed(levels) if c < first_behind), None)
    below = ratios[levels[0]].ratio < 1.0
    return CrossoverEstimate(None if below else crossing, low, high, below, first_behind is None, last_ahead,
                             first_behind, _resolved(ratios, last_ahead, first_behind))


__all__ = ["CrossoverEstimate", "estimate_crossover", "first_crossing"]
