"""One value per results file for each cell (configuration x level) and metric: the series the
change-point detection reads.

A file's value is the median of the cell's measured runs (warmup runs are left out), the location
the gates compare, so one stalled run does not move it. Where the gates would set the runs aside
as disagreeing (decide/consistency.py: the runs near the fastest run are not a strict majority, so
the median may be a stalled run; the limit pooled over the file's cells, as the gates pool it over
the launches at hand), the file gives the cell no point for that metric and is listed as left out
(docs/history.md). Only values a stall moves are checked: rates and step times, not accept
length; a speculative cell's tok/s is judged, as the gates judge it, on its runs' tok/s ÷ accept
length (decide/consistency.py ``StallBasis``: a run that accepted more is fast, not unstalled). The speculation
ratio is a speculative configuration's value over its reference's at the same level in the same
file. A file where the cell errored, or that lacks the metric (older files have no `step_time_ms`;
no accept length without speculation), has no point either: the series skips it and keeps every
point's file position.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Literal

from specguard.decide.consistency import RUN_OUTLIER, disagreement, outlier_limit, steps_per_s
from specguard.report.schema import CellDoc, ResultsDoc
from specguard.timeline.files import ResultsFile


@dataclass(frozen=True)
class Metric:
    key: str  # the --metric name
    label: str  # as the text and the plots name it
    unit: str
    worse: Literal["down", "up"]  # which direction is a regression
    run_key: str  # the runs[] field read (the speculation ratio reads output_throughput of two cells)
    stall: Literal["down", "up", ""] = ""  # which way a stalled run moves the runs[] field ("": it does not)


METRICS = {m.key: m for m in (
    Metric("tok_s", "tok/s", "tok/s", "down", "output_throughput", stall="down"),
    Metric("accept_length", "accept length", "", "down", "accept_length"),
    Metric("step_time_ms", "step time", "ms", "up", "step_time_ms", stall="up"),
    Metric("spec_ratio", "speculation ratio", "", "down", "output_throughput", stall="down"),  # a ratio: no unit
)}
SPEC_RATIO = "spec_ratio"


# A file's value from its cell's runs (finite numbers, at least one): the median; the benchmark
# (benchmarks/history_accuracy.py) also tries the mean.
Reducer = Callable[[list[float]], float]


@dataclass
class Series:
    """One cell's metric over the history: `positions[i]` is the file (index into the history's
    files) whose value is `values[i]`; `left_out` the files whose runs disagreed."""

    config: str
    level: str
    metric: Metric
    positions: list[int] = field(default_factory=list)
    values: list[float] = field(default_factory=list)
    left_out: list[int] = field(default_factory=list)

    @property
    def name(self) -> str:
        return f"{self.config} {self.level} {self.metric.label}"


def robust_value(xs: list[float], limit: float = RUN_OUTLIER, stall: str = "down",
                 reduce: Reducer = statistics.median, judged: list[float] | None = None) -> float | None:
    """The runs' median (or ``reduce``), or None when their runs disagree as the gates judge it
    (``consistency.disagreement`` at ``limit``, on ``judged`` where given, run for run; ``stall``:
    which way a stall moves them, "" for values a stall does not move, which are not checked)."""
    seen = judged if judged is not None and len(judged) == len(xs) else xs
    rates = [1 / x if stall == "up" else x for x in seen if x > 0]
    if stall and len(rates) == len(xs) and disagreement(rates, limit) is not None:
        return None
    return reduce(xs)


def cell_level(doc: ResultsDoc, cell: CellDoc) -> str:
    """A cell's level as the history names it (c16, r8): the one place that reads it from a document."""
    return cell["level"]


# (present, value): present is False when the file has no such value, value None when its runs disagree
_Found = tuple[bool, "float | None"]


def _runs(cell: CellDoc | None, key: str) -> list[float]:
    return [float(v) for r in cell["runs"] if isinstance(v := r.get(key), (int, float)) and math.isfinite(v)] if cell else []


def file_values(doc: ResultsDoc, metrics: Iterable[Metric],
                reduce: Reducer = statistics.median) -> dict[tuple[str, str, str], float | None]:
    """(config, level, metric key) -> this file's value for every measured cell that has the
    metric; None where the cell's runs (or its reference's, for the speculation ratio) disagree,
    judged at the limit pooled over the file's cells (``consistency.outlier_limit``)."""
    cells = {(c["config"], cell_level(doc, c)): c for c in doc["cells"] if not c["error"] and c["runs"]}
    references = {c["name"]: c.get("reference") for c in doc["configs"]}
    limits = {key: outlier_limit([_runs(c, key) for c in cells.values()]) for key in {m.run_key for m in metrics}}
    out: dict[tuple[str, str, str], float | None] = {}

    def value(cell: CellDoc | None, metric: Metric) -> _Found:
        xs = _runs(cell, metric.run_key)
        judged = (steps_per_s(xs, _runs(cell, "accept_length")) if metric.run_key == "output_throughput"
                  else None)
        return (True, robust_value(xs, limits[metric.run_key], metric.stall, reduce, judged)) if xs else (False, None)

    for (config, level), cell in cells.items():
        for metric in metrics:
            present, v = value(cell, metric)
            if metric.key == SPEC_RATIO:
                ref_cell = cells.get((references.get(config) or "", level))
                present, v = _ratio((present, v), value(ref_cell, metric))
            if present and (v is None or v > 0):
                out[(config, level, metric.key)] = v
    return out


def _ratio(value: _Found, reference: _Found) -> _Found:
    """A value over its reference's: absent when either is (or the reference is 0), None when
    either's runs disagree."""
    if not value[0] or not reference[0] or reference[1] == 0:
        return False, None
    if value[1] is None or reference[1] is None:
        return True, None
    return True, value[1] / reference[1]


def build_series(files: list[ResultsFile], metrics: list[Metric], reduce: Reducer = statistics.median) -> list[Series]:
    """Every cell x metric that at least one file has, in first-seen order."""
    series: dict[tuple[str, str, str], Series] = {}
    for position, f in enumerate(files):
        for (config, level, key), value in file_values(f.doc, metrics, reduce).items():
            s = series.setdefault((config, level, key), Series(config, level, METRICS[key]))
            if value is None:
                s.left_out.append(position)
            else:
                s.positions.append(position)
                s.values.append(value)
    configs = {key[0]: None for key in series}  # first seen: the suite's order
    config_order = {name: i for i, name in enumerate(configs)}
    metric_order = {m.key: i for i, m in enumerate(metrics)}
    return sorted(series.values(), key=lambda s: (config_order[s.config], _level_order(s.level), metric_order[s.metric.key]))


def _level_order(level: str) -> tuple[str, float]:
    """c4 before c16: by kind, then by number."""
    return level[0], float(level[1:]) if level[1:].replace(".", "", 1).isdigit() else math.inf
