"""How far a sweep is and how long the rest should take, for the live progress line.

Run time grows with concurrency but not in proportion, so the remaining time is predicted per
cell from the per-run time measured at the same concurrency (any configuration), interpolated
on log-log axes between measured concurrencies, extrapolated from the two nearest ones.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

from specguard.measure.progress import ForeignTraffic, ProgressEvent, RunStarted, SoakStarted


def predict(per_run_s: dict[int, float], concurrency: int) -> float | None:
    """Seconds per run at `concurrency` from measured levels; None before any cell finished."""
    if not per_run_s:
        return None
    if concurrency in per_run_s:
        return per_run_s[concurrency]
    known = sorted(per_run_s)
    if len(known) == 1:
        return per_run_s[known[0]]
    below = [c for c in known if c < concurrency]
    above = [c for c in known if c > concurrency]
    if below and above:
        a, b = below[-1], above[0]
    elif below:
        a, b = below[-2], below[-1]
    else:
        a, b = above[0], above[1]
    slope = (math.log(per_run_s[b]) - math.log(per_run_s[a])) / (math.log(b) - math.log(a))
    return per_run_s[a] * math.exp(slope * (math.log(concurrency) - math.log(a)))


def run_phase(event: RunStarted) -> str:
    """A run's label: warmup, or "run k/N" counting the measured runs from 1."""
    if event.index < event.warmup:
        return "warmup"
    return f"run {event.index - event.warmup + 1}/{event.repeats}"


def progress_text(event: ProgressEvent) -> str:
    """What the progress line says of one event."""
    if isinstance(event, RunStarted):
        return f"{event.config} {event.level} {run_phase(event)} ({event.index + 1}/{event.warmup + event.repeats})"
    if isinstance(event, ForeignTraffic):
        return (f"{event.config} {event.level}: the server already has {event.running} running and "
                f"{event.waiting} waiting requests that specguard did not send")
    if isinstance(event, SoakStarted):
        return f"soak {event.config}: each window to {event.log_path} as it closes"
    if event.level:  # a loaded soak's window
        return (f"soak {event.config} {event.level}: window {event.window}/{event.planned} "
                f"({event.wall_s or 0:.0f} s, {event.tok_s or 0:.0f} tok/s)")
    seen = "no traffic" if event.tok_s is None else \
        f"accept length {event.accept_length or 0:.2f}, {event.tok_s:.0f} tok/s served"
    return f"soak {event.config} (passive): window {event.window}/{event.planned}: {seen}"


def format_duration(seconds: float) -> str:
    seconds = max(0, int(round(seconds)))
    return f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"


class SweepProgress:
    """The plan (cells in run order), what is done, and the text of the progress line."""

    def __init__(self, plan: list[tuple[str, int]], runs_per_cell: int,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.plan = list(dict.fromkeys(plan))
        self.runs_per_cell = runs_per_cell
        self.clock = clock
        self.started = clock()
        self.done: set[tuple[str, int]] = set()
        self.per_run: dict[int, list[float]] = {}
        self.current: tuple[str, int] | None = None
        self.run_index = 0  # runs started in the current cell (warmup included)
        self.run_started_at = self.started

    def begin_cell(self, config: str, concurrency: int) -> None:
        self.current = (config, concurrency)
        self.run_index = 0

    def run_started(self) -> None:
        self.run_index += 1
        self.run_started_at = self.clock()

    def end_cell(self, wall_s: float, runs: int) -> None:
        if self.current is None:
            return
        if runs > 0:
            self.per_run.setdefault(self.current[1], []).append(wall_s / runs)
        self.done.add(self.current)
        self.current = None

    def remaining_s(self) -> float | None:
        """Predicted seconds left: unfinished cells' runs at their predicted duration, minus the
        part of the current run already spent."""
        means = {c: sum(v) / len(v) for c, v in self.per_run.items()}
        total = 0.0
        for cell in self.plan:
            if cell in self.done:
                continue
            per = predict(means, cell[1])
            if per is None:
                return None
            runs = self.runs_per_cell - (max(self.run_index - 1, 0) if cell == self.current else 0)
            total += runs * per
            if cell == self.current and self.run_index:
                total -= min(self.clock() - self.run_started_at, per)
        return max(total, 0.0)

    def line(self, text: str) -> str:
        elapsed = self.clock() - self.started
        left = self.remaining_s()
        cells = f"cell {len(self.done) + 1}/{len(self.plan)}"
        eta = f", ~{format_duration(left)} left" if left is not None else ""
        return f"[specguard {format_duration(elapsed)}] {text} | {cells}{eta}"
