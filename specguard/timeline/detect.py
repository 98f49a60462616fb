"""Change points of one history series (a cell's metric over the files): the series' values through
specguard.decide.changepoint, each point placed at its results file (docs/history.md)."""

from __future__ import annotations

from dataclasses import dataclass

from specguard.decide.changepoint import ChangePoint, detect
from specguard.timeline.series import Series

MIN_POINTS = 4  # fewer files cannot hold a change with two files before it worth a test
DEFAULT_MAX_PVALUE = 0.001  # benchmarks/history_accuracy.py measures it
DEFAULT_MIN_CHANGE = 0.01  # changes under 1 % are merged away (a near-constant accept length would make any shift "significant")
MIN_SEGMENT = 2  # files in every segment but the newest: one odd file between two others is not a shift
DETECTOR = "binary segmentation of log values, pooled t-test merge"


@dataclass(frozen=True)
class SeriesChange:
    """A shift in one series: it starts at file `position` (index into the history's files)."""

    series: Series
    position: int
    point: ChangePoint

    @property
    def mean_before(self) -> float:
        return self.point.before

    @property
    def mean_after(self) -> float:
        return self.point.after

    @property
    def p_value(self) -> float:
        return self.point.p

    @property
    def change(self) -> float:
        """after / before - 1."""
        return self.point.ratio - 1

    @property
    def worse(self) -> bool:
        """A regression: the metric moved in its worse direction."""
        return self.change < 0 if self.series.metric.worse == "down" else self.change > 0


def change_points(series: Series, max_pvalue: float = DEFAULT_MAX_PVALUE,
                  min_change: float = DEFAULT_MIN_CHANGE) -> list[SeriesChange]:
    """The series' change points, oldest first. The newest file alone may start one (the nightly
    alarm cannot wait a night); every other segment has at least MIN_SEGMENT files."""
    if len(series.values) < MIN_POINTS:
        return []
    points = detect(series.values, alpha=max_pvalue, min_change=min_change, min_size=MIN_SEGMENT, min_size_last=1)
    return [SeriesChange(series, series.positions[p.index], p) for p in points]
