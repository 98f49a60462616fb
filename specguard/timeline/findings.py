"""What `specguard history` found, in the form every output reads: the files in time order, the
series, the change points and the exit rule, with the commit range and engine version each change
point is attributed to (the text, the page and --json all say the same)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal

from specguard.labels import ExitCode
from specguard.store.documents import Document
from specguard.timeline.detect import SeriesChange
from specguard.timeline.files import ResultsFile
from specguard.timeline.schema import HistoryDoc
from specguard.timeline.series import Metric, Series


@dataclass
class History:
    files: list[ResultsFile]
    metrics: list[Metric]
    series: list[Series]
    points: list[SeriesChange]
    window: int
    max_pvalue: float  # the merge step's level: each change point's interval is at 1 - max_pvalue
    min_change: float

    def in_window(self, point: SeriesChange) -> bool:
        return point.position >= len(self.files) - self.window

    @property
    def alarms(self) -> list[SeriesChange]:
        """Change points in the worse direction that start in the newest `window` files."""
        return [p for p in self.points if p.worse and self.in_window(p)]

    @property
    def exit_status(self) -> ExitCode:
        return ExitCode.REGRESSION if self.alarms else ExitCode.OK

    def commit_range(self, point: SeriesChange) -> str:
        """The first file's commit after the previous file's (`before..after`: the range to bisect)."""
        f = self.files[point.position]
        before = self.files[point.position - 1] if point.position else None
        if before is not None and before.commit and before.commit != f.commit:
            return f"{before.commit}..{f.commit or '?'}"
        return f.commit or "?"

    def engine(self, point: SeriesChange) -> str:
        """The configuration's engine version at the first file, `old -> new` when it changed there."""
        config = point.series.config
        now = self.files[point.position].engine_version(config) or "?"
        old = self.files[point.position - 1].engine_version(config) if point.position else ""
        return f"{old} -> {now}" if old and old != now else now


HISTORY_SCHEMA: Final[Literal["specguard-history"]] = "specguard-history"
HISTORY: Document[HistoryDoc] = Document(HISTORY_SCHEMA, 1, HistoryDoc, what="history file",
                                         make="write one with: specguard history DIR --json FILE")


def to_json(history: History) -> HistoryDoc:
    """The files in time order, every series' points and every change point (docs/history.md)."""
    files = history.files
    return {
        "schema": HISTORY_SCHEMA, "schema_version": HISTORY.version,
        "files": [{"path": str(f.path), "created": f.created.isoformat(), "git_commit": f.commit,
                   "session_id": f.doc["session_id"]} for f in files],
        "series": [{"config": s.config, "level": s.level, "metric": s.metric.key, "files": len(s.values),
                    "positions": [p + 1 for p in s.positions], "values": s.values,
                    "left_out": [p + 1 for p in s.left_out]} for s in history.series],
        "change_points": [{"config": p.series.config, "level": p.series.level, "metric": p.series.metric.key,
                           "file": str(files[p.position].path), "position": p.position + 1,
                           "created": files[p.position].created.isoformat(), "git_commit": files[p.position].commit,
                           "commit_range": history.commit_range(p),
                           "engine_version": files[p.position].engine_version(p.series.config),
                           "mean_before": p.mean_before, "mean_after": p.mean_after, "change": p.change,
                           "interval": [p.point.interval[0] - 1, p.point.interval[1] - 1],
                           "p_value": p.p_value, "worse": p.worse, "in_window": history.in_window(p)}
                          for p in history.points],
        "window": history.window, "max_pvalue": history.max_pvalue, "min_change": history.min_change,
        "exit_status": int(history.exit_status),
    }
