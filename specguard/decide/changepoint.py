"""Change points in a series of positive values, oldest first: a nightly history's per-file values,
a soak's windows, any time series. Self-contained (numpy and scipy only, nothing of specguard), so
the soak test can take it as it is.

Two steps, both on log values (a shift is a ratio, whatever the metric's scale):

1. **Split** (binary segmentation: Scott and Knott 1974; Vostrikova 1981). A segment is cut where
   the between-segment sum of squares n_a n_b / n (mean_a - mean_b)^2 is largest, the maximum
   likelihood place of one shift in the mean; both halves are cut again while the cut's t-test
   (below) is significant at `alpha`. (A looser level here proposes more cuts for the merge to
   remove; tried at 0.01 and 0.05 on the history benchmark, it placed steps no better and raised
   more false alarms.)
2. **Merge** (the significance step of Hunter: Fleming et al., ICPE 2023, which keeps E-divisive's
   candidates only while a t-test between neighbouring segments is significant). Each candidate is
   tested between the segments on either side of it, bounded by its neighbouring candidates: a
   two-sided Student t-test with the variance pooled over both (the noise is the same on both sides
   of a shift, and pooling lets a one-value newest segment be tested). The weakest candidate that
   fails (p >= alpha, or a shift under `min_change`) is removed and its neighbours are tested
   again, until every candidate passes. Each survivor is then moved to the best cut between its
   neighbours, and the merge repeats while a place moved.

Measured against Apache Otava 0.8.0 (E-divisive means + t-test merge) on the history benchmark:
benchmarks/history_accuracy.py, docs/history.md.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

MAX_ROUNDS = 10  # merge-and-move rounds; a round that moves no point ends it (2-3 in practice)


@dataclass(frozen=True)
class ChangePoint:
    """A shift that starts at `index`: values[index] is the first of the new segment."""

    index: int
    before: float  # geometric mean of the segment before (to the previous change point)
    after: float  # geometric mean of the segment after (to the next change point)
    p: float  # two-sided pooled t-test of the log values of the two segments
    interval: tuple[float, float]  # the (1 - alpha) confidence interval of after / before

    @property
    def ratio(self) -> float:
        return self.after / self.before


@dataclass(frozen=True)
class _Segments:
    """Cumulative sums of the log series: any segment's count, mean and sum of squares in O(1)."""

    s1: np.ndarray
    s2: np.ndarray

    @classmethod
    def of(cls, logs: np.ndarray) -> _Segments:
        return cls(np.concatenate([[0.0], np.cumsum(logs)]), np.concatenate([[0.0], np.cumsum(logs * logs)]))

    def mean(self, lo: int, hi: int) -> float:
        return float(self.s1[hi] - self.s1[lo]) / (hi - lo)

    def ss(self, lo: int, hi: int) -> float:
        """Sum of squared deviations from the segment's mean (never below 0 from rounding)."""
        total = float(self.s1[hi] - self.s1[lo])
        return max(float(self.s2[hi] - self.s2[lo]) - total * total / (hi - lo), 0.0)

    def best_cut(self, lo: int, hi: int, first: int, last: int) -> int | None:
        """The cut in [first, last] of segment [lo, hi) with the largest between-segment sum of squares."""
        if first > last:
            return None
        cuts = np.arange(first, last + 1)
        n_a, n_b = cuts - lo, hi - cuts
        diff = (self.s1[hi] - self.s1[cuts]) / n_b - (self.s1[cuts] - self.s1[lo]) / n_a
        return int(cuts[int(np.argmax(n_a * n_b / (hi - lo) * diff * diff))])

    def test(self, lo: int, cut: int, hi: int, alpha: float) -> tuple[float, float, float]:
        """(p, low, high) of the pooled t-test of [lo, cut) against [cut, hi); low and high bound
        the difference of log means at 1 - alpha."""
        n_a, n_b = cut - lo, hi - cut
        diff = self.mean(cut, hi) - self.mean(lo, cut)
        df = n_a + n_b - 2
        if df < 1:
            return 1.0, -math.inf, math.inf
        se = math.sqrt((self.ss(lo, cut) + self.ss(cut, hi)) / df * (1 / n_a + 1 / n_b))
        if se == 0.0:
            return (0.0 if diff else 1.0), diff, diff
        half = float(stats.t.ppf(1 - alpha / 2, df)) * se
        return float(2 * stats.t.sf(abs(diff) / se, df)), diff - half, diff + half


def detect(series: Sequence[float], *, alpha: float = 0.001, min_change: float = 0.01, min_size: int = 2,
           min_size_last: int = 1) -> list[ChangePoint]:
    """The change points of `series` (positive values, oldest first), oldest first.

    alpha: the significance level (two-sided) of the split and of the merge. min_change: the smallest relative
    shift kept (0.01: 1 %), so that a near-constant series does not make a 0.1 % wobble a change.
    min_size: the fewest values of any segment but the newest, which needs `min_size_last`
    (1: the newest value alone can start a shift; the caller decides what a shift that new means).
    """
    values = np.asarray(series, dtype=float)
    if values.ndim != 1 or not np.all(np.isfinite(values)) or np.any(values <= 0):
        raise ValueError("detect: the series must be one-dimensional, finite and positive")
    if min_size < 1 or min_size_last < 1 or not 0 < alpha < 1 or not 0 <= min_change < 1:
        raise ValueError(f"detect: min_size {min_size} and min_size_last {min_size_last} must be >= 1, "
                         f"alpha {alpha} in (0, 1), min_change {min_change} in [0, 1)")
    seg, n = _Segments.of(np.log(values)), len(values)
    sizes = _Sizes(min_size, min_size_last, n)
    cuts = sorted(_split(seg, 0, n, sizes, alpha))
    for _ in range(MAX_ROUNDS):
        cuts = _merge(seg, cuts, n, alpha, min_change)
        moved = _move(seg, cuts, n, sizes)
        if moved == cuts:
            break
        cuts = moved
    return [_point(seg, lo, cut, hi, alpha) for lo, cut, hi in _neighbours(cuts, n)]


@dataclass(frozen=True)
class _Sizes:
    interior: int
    last: int
    n: int

    def cut_range(self, lo: int, hi: int) -> tuple[int, int]:
        """The cuts of [lo, hi) that leave both sides their fewest values."""
        return lo + self.interior, hi - (self.last if hi == self.n else self.interior)


def _split(seg: _Segments, lo: int, hi: int, sizes: _Sizes, alpha: float) -> list[int]:
    cut = seg.best_cut(lo, hi, *sizes.cut_range(lo, hi))
    if cut is None or seg.test(lo, cut, hi, alpha)[0] >= alpha:
        return []
    return [cut, *_split(seg, lo, cut, sizes, alpha), *_split(seg, cut, hi, sizes, alpha)]


def _neighbours(cuts: list[int], n: int) -> list[tuple[int, int, int]]:
    bounds = [0, *cuts, n]
    return list(zip(bounds, bounds[1:], bounds[2:]))


def _merge(seg: _Segments, cuts: list[int], n: int, alpha: float, min_change: float) -> list[int]:
    """Remove the weakest failing cut until every cut passes between its neighbours."""
    cuts = list(cuts)
    while cuts:
        failing = []
        for i, (lo, cut, hi) in enumerate(_neighbours(cuts, n)):
            p = seg.test(lo, cut, hi, alpha)[0]
            shift = abs(math.expm1(seg.mean(cut, hi) - seg.mean(lo, cut)))
            if p >= alpha or shift < min_change:
                failing.append((p, -shift, i))
        if not failing:
            break
        del cuts[max(failing)[2]]
    return cuts


def _move(seg: _Segments, cuts: list[int], n: int, sizes: _Sizes) -> list[int]:
    """Each cut at the best place between its neighbours (left to right, each seeing the moves before)."""
    cuts = list(cuts)
    for i in range(len(cuts)):
        lo, hi = (cuts[i - 1] if i else 0), (cuts[i + 1] if i + 1 < len(cuts) else n)
        best = seg.best_cut(lo, hi, *sizes.cut_range(lo, hi))
        cuts[i] = cuts[i] if best is None else best
    return cuts


def _point(seg: _Segments, lo: int, cut: int, hi: int, alpha: float) -> ChangePoint:
    p, low, high = seg.test(lo, cut, hi, alpha)
    return ChangePoint(cut, math.exp(seg.mean(lo, cut)), math.exp(seg.mean(cut, hi)), p, (math.exp(low), math.exp(high)))
