"""One value per results file for each cell (configuration x level) and metric: the series the
change-point detection reads.

A file's value is the mean over the cell's measured runs (what the gates compare; warmup runs
are left out); the speculation ratio is a speculative configuration's mean tok/s over its
reference's at the same level in the same file. A file where the cell errored, or that lacks
the metric (older files have no `step_time_ms`; no accept length without speculation), has no
point: the series skips it and keeps every point's file position.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal

from specguard.report.schema import CellDoc, ResultsDoc
from specguard.timeline.files import ResultsFile


@dataclass(frozen=True)
class Metric:
    key: str  # the --metric name
    label: str  # as the text and the plots name it
    unit: str
    worse: Literal["down", "up"]  # which direction is a regression
    run_key: str  # the runs[] field read (the speculation ratio reads output_throughput of two cells)


METRICS = {m.key: m for m in (
    Metric("tok_s", "tok/s", "tok/s", "down", "output_throughput"),
    Metric("accept_length", "accept length", "", "down", "accept_length"),
    Metric("step_time_ms", "step time", "ms", "up", "step_time_ms"),
    Metric("spec_ratio", "speculation ratio", "", "down", "output_throughput"),  # a ratio: no unit
)}
SPEC_RATIO = "spec_ratio"


@dataclass
class Series:
    """One cell's metric over the history: `positions[i]` is the file (index into the history's
    files) whose value is `values[i]`."""

    config: str
    level: str
    metric: Metric
    positions: list[int] = field(default_factory=list)
    values: list[float] = field(default_factory=list)

    @property
    def name(self) -> str:
        return f"{self.config} {self.level} {self.metric.label}"


def run_mean(cell: CellDoc, key: str) -> float | None:
    """Mean of the finite numbers the cell's measured runs hold under `key` (None when none do)."""
    xs = [float(v) for r in cell["runs"] if isinstance(v := r.get(key), (int, float)) and math.isfinite(v)]
    return sum(xs) / len(xs) if xs else None


def file_values(doc: ResultsDoc, metrics: Iterable[Metric]) -> dict[tuple[str, str, str], float]:
    """(config, level, metric key) -> this file's value, for every measured cell."""
    cells = {(c["config"], c["level"]): c for c in doc["cells"] if not c["error"] and c["runs"]}
    references = {c["name"]: c.get("reference") for c in doc["configs"]}
    out: dict[tuple[str, str, str], float] = {}
    for (config, level), cell in cells.items():
        for metric in metrics:
            value = run_mean(cell, metric.run_key)
            if metric.key == SPEC_RATIO:
                ref_cell = cells.get((references.get(config) or "", level))
                ref = run_mean(ref_cell, metric.run_key) if ref_cell else None
                value = value / ref if value is not None and ref else None
            if value is not None and value > 0:
                out[(config, level, metric.key)] = value
    return out


def build_series(files: list[ResultsFile], metrics: list[Metric]) -> list[Series]:
    """Every cell x metric that at least one file has, in first-seen order."""
    series: dict[tuple[str, str, str], Series] = {}
    for position, f in enumerate(files):
        for (config, level, key), value in file_values(f.doc, metrics).items():
            s = series.setdefault((config, level, key), Series(config, level, METRICS[key]))
            s.positions.append(position)
            s.values.append(value)
    configs = {key[0]: None for key in series}  # first seen: the suite's order
    config_order = {name: i for i, name in enumerate(configs)}
    metric_order = {m.key: i for i, m in enumerate(metrics)}
    return sorted(series.values(), key=lambda s: (config_order[s.config], _level_order(s.level), metric_order[s.metric.key]))


def _level_order(level: str) -> tuple[str, float]:
    """c4 before c16: by kind, then by number."""
    return level[0], float(level[1:]) if level[1:].replace(".", "", 1).isdigit() else math.inf
