"""Change points of one series, found by Apache Otava (Hunter's E-divisive with a Student t-test
merge step: Fleming et al., "Hunter: Using Change Point Detection to Hunt for Performance
Regressions", ICPE 2023), not by code of our own.

otava is imported here, lazily: `specguard history` is the only command that needs it, and it is
installed without its dependencies (docs/history.md says why), so a missing otava is one line
with the install command, not an ImportError at `specguard` start-up.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

from specguard.timeline.series import Series

OTAVA_INSTALL = "pip install --no-deps apache-otava==0.8.0"
# E-divisive's split step looks at windows of this many files (otava's window_len); a history
# shorter than it is one window. 30 nightly files: about a month.
SPLIT_WINDOW = 30
MIN_POINTS = 4  # fewer files cannot hold a change with two files on each side worth a test
DEFAULT_MAX_PVALUE = 0.001  # otava's default; benchmarks/history_accuracy.py measures it
DEFAULT_MIN_CHANGE = 0.01  # changes under 1 % are merged away (a near-constant accept length would make any shift "significant")


class OtavaMissing(RuntimeError):
    """apache-otava is not installed."""


@dataclass(frozen=True)
class ChangePoint:
    """A shift in one series: it starts at file `position` (index into the history's files)."""

    series: Series
    position: int
    mean_before: float
    mean_after: float
    p_value: float

    @property
    def change(self) -> float:
        """after / before - 1."""
        return self.mean_after / self.mean_before - 1

    @property
    def worse(self) -> bool:
        """A regression: the metric moved in its worse direction."""
        return self.change < 0 if self.series.metric.worse == "down" else self.change > 0


def otava_analysis() -> Any:
    """otava.analysis, or OtavaMissing saying how to install it."""
    try:
        return importlib.import_module("otava.analysis")
    except ImportError:
        raise OtavaMissing(f"apache-otava is not installed: {OTAVA_INSTALL} (docs/history.md)") from None


def change_points(series: Series, max_pvalue: float = DEFAULT_MAX_PVALUE, min_change: float = DEFAULT_MIN_CHANGE,
                  analysis: Any = None) -> list[ChangePoint]:
    """The series' change points, oldest first, each with the means of its two neighbouring
    segments and the merge step's two-sided t-test p-value between them."""
    if len(series.values) < MIN_POINTS:
        return []
    analysis = analysis or otava_analysis()
    found, _weak = analysis.compute_change_points(list(series.values), window_len=SPLIT_WINDOW,
                                                  max_pvalue=max_pvalue, min_magnitude=min_change)
    return [ChangePoint(series, series.positions[int(cp.index)], float(cp.stats.mean_1), float(cp.stats.mean_2),
                        float(cp.stats.pvalue)) for cp in found]
