"""What a sweep or a soak reports while it measures, as data: measure/ and session/soak.py make
these events, the live progress line (plugin/live.py) counts runs from them, and report/progress.py
words each one (``progress_text``). Levels are named as ids name them (c16, r8)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class RunStarted:
    """Run ``index`` (0-based, warm-up runs first) of a cell's ``warmup`` + ``repeats`` starts."""

    config: str
    level: str
    index: int
    warmup: int
    repeats: int


@dataclass(frozen=True)
class ForeignTraffic:
    """Before a cell: the server already had requests that specguard did not send."""

    config: str
    level: str
    running: int
    waiting: int


@dataclass(frozen=True)
class SoakStarted:
    """A soak begins; each window is appended to ``log_path`` as it closes."""

    config: str
    log_path: str


@dataclass(frozen=True)
class SoakWindow:
    """Window ``window`` (1-based) of ``planned`` closed. A loaded soak has its level and the
    window's wall time; a passive one (``level`` "") has what the server served, or no traffic
    (``tok_s`` None)."""

    config: str
    level: str
    window: int
    planned: int
    tok_s: float | None
    wall_s: float | None = None
    accept_length: float | None = None


ProgressEvent = RunStarted | ForeignTraffic | SoakStarted | SoakWindow
Progress = Callable[[ProgressEvent], None]

__all__ = ["ForeignTraffic", "Progress", "ProgressEvent", "RunStarted", "SoakStarted", "SoakWindow"]
