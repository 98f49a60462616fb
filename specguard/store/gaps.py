"""Why a cell has no stored session to compare with, as data (report/verdict_text.py words it).

A gap is about one configuration's baseline file: the cell's own (its history gates), or the
reference's standing in for a reference not measured in this session (the speculation gate).
"""

from __future__ import annotations

from dataclasses import dataclass

from specguard.labels import Level, TextEnum
from specguard.store.baseline_file import FieldDifference


class GapKind(TextEnum):
    NO_FILE = "no-file"  # no baseline file for the configuration
    NO_ENTRIES = "no-entries"  # a file that holds no environment
    NO_CELL = "no-cell"  # this environment is recorded, but not at this level
    OTHER_ENVIRONMENT = "other-environment"  # recorded in other environments only (differing: the newest one's fields)
    NO_CATEGORY = "no-category"  # recorded without this prompt category's accept lengths
    NO_FIGURES = "no-figures"  # recorded without the figure the gate compares (metric)
    UNREADABLE = "unreadable"  # a damaged, foreign or newer file (detail: the loader's line)


@dataclass(frozen=True)
class HistoryGap:
    kind: GapKind
    config: str  # whose baseline file
    path: str
    level: Level
    differing: tuple[FieldDifference, ...] = ()  # OTHER_ENVIRONMENT
    category: str = ""  # NO_CATEGORY: the prompt category
    metric: str = ""  # NO_FIGURES: the series with no values (session/cells.py names: "step_rates", ...)
    record_command: str = ""  # the command that records this cell (a cell's own gaps; "" for a reference's)
    detail: str = ""  # UNREADABLE: the file's problem, as the loader words it (it names the file)
