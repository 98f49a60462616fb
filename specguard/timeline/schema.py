"""The shape of `specguard history --json` (docs/history.md), as typed dictionaries:
timeline/findings.py checks the document against it before it is written."""

from __future__ import annotations

from typing import Literal, TypedDict


class HistoryFileDoc(TypedDict):
    path: str
    created: str  # ISO 8601
    git_commit: str  # the first 10 hex digits ("" when the file has none)
    session_id: str


class HistorySeriesDoc(TypedDict):
    config: str
    level: str  # c16, r8
    metric: str
    files: int
    positions: list[int]  # files counted from 1, in time order
    values: list[float]
    left_out: list[int]


class HistoryChangeDoc(TypedDict):
    config: str
    level: str
    metric: str
    file: str
    position: int
    created: str
    git_commit: str
    commit_range: str
    engine_version: str
    mean_before: float
    mean_after: float
    change: float
    interval: list[float]  # the change as a fraction: [low, high]
    p_value: float
    worse: bool
    in_window: bool


class HistoryDoc(TypedDict):
    """`specguard history --json FILE` (docs/history.md)."""

    schema: Literal["specguard-history"]
    schema_version: int
    files: list[HistoryFileDoc]
    series: list[HistorySeriesDoc]
    change_points: list[HistoryChangeDoc]
    window: int
    max_pvalue: float
    min_change: float
    exit_status: int
