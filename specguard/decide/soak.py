"""A soak's decision: per metric, the change points of its windows (decide/changepoint.py, the
module the nightly history uses), and the first one that went the worse way.

A window's accept length falling is the drafter; its step time rising is the engine; tok/s
falling is what users feel (whichever half moved). Tail latency (ITL p99) is reported the same way
and never fails by itself: it moves with batch composition as much as with decay.

Two refinements, measured on benchmarks/soak_accuracy.py:
- **Stalled windows are left out.** A window whose tok/s is below STALL_FACTOR x the median of
  its neighbours (two on each side) stalled (the machine, not the server, in the gate study's
  noise model): it is left out of every metric, and the result lists it. A lasting change is no
  stall: its later neighbours moved with it.
- **Where a slide begins.** Binary segmentation places a gradual decay (a ramp) where its two
  halves differ most, the middle of the ramp. For the metric that moved, a hinge (flat, then a
  straight line from a knot) is fitted beside the step; when the hinge fits better (smaller sum
  of squares on the log values, both with three parameters) the first degraded window is the
  window after its knot, else the step's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from specguard.decide.changepoint import detect
from specguard.decide.result import Half, Soak, SoakMetric, SoakShift
from specguard.labels import Verdict

# A metric's worse direction: +1 when a rise is worse (step time, latency), -1 when a fall is
WORSE = {SoakMetric.ACCEPT_LENGTH: -1, SoakMetric.STEP_TIME: 1, SoakMetric.THROUGHPUT: -1, SoakMetric.ITL_P99: 1}
GATING = (SoakMetric.ACCEPT_LENGTH, SoakMetric.STEP_TIME, SoakMetric.THROUGHPUT)
MIN_WINDOWS = 3  # measured windows (after warm-up) a decision needs
STALL_FACTOR = 0.8  # a window below this x its neighbours' median tok/s stalled
NEIGHBOURS = 2  # on each side


@dataclass(frozen=True)
class SoakSettings:
    warmup_windows: int
    alpha: float
    min_change: float


def stalled(tok_s: Sequence[float | None]) -> list[int]:
    """Indices of the windows whose tok/s is below STALL_FACTOR x their neighbours' median."""
    out = []
    for i, v in enumerate(tok_s):
        near = [x for x in (*tok_s[max(0, i - NEIGHBOURS):i], *tok_s[i + 1:i + 1 + NEIGHBOURS]) if x is not None]
        if v is not None and len(near) >= 2 and v < STALL_FACTOR * float(np.median(near)):
            out.append(i)
    return out


def _sse_step(y: np.ndarray, cut: int) -> float:
    a, b = y[:cut], y[cut:]
    return float(((a - a.mean()) ** 2).sum() + ((b - b.mean()) ** 2).sum())


def hinge_onset(y: np.ndarray, cut: int) -> int:
    """The first degraded index: the step's `cut`, or the window after the knot of the best hinge
    (flat to the knot, then linear) when that fits the log values better than the step."""
    t = np.arange(len(y), dtype=float)
    best_sse, best_knot = _sse_step(y, cut), None
    for knot in range(0, len(y) - 2):
        x = np.maximum(0.0, t - knot)
        design = np.column_stack([np.ones_like(t), x])
        coef, *_ = np.linalg.lstsq(design, y, rcond=None)
        sse = float(((y - design @ coef) ** 2).sum())
        if sse < best_sse:
            best_sse, best_knot = sse, knot
    return cut if best_knot is None else best_knot + 1


def worse_shift(metric: SoakMetric, series: Sequence[float], windows: Sequence[int],
                settings: SoakSettings) -> SoakShift | None:
    """The first change point of `series` (the kept windows' values, oldest first; `windows` their
    numbers in the soak, warm-up included) that goes the worse way, with where it began; None if none."""
    if len(series) < MIN_WINDOWS:
        return None
    for point in detect(series, alpha=settings.alpha, min_change=settings.min_change, min_size=2, min_size_last=2):
        if (point.ratio - 1) * WORSE[metric] > 0:
            low, high = point.interval
            onset = hinge_onset(np.log(np.asarray(series, dtype=float)), point.index)
            return SoakShift(metric, windows[onset], point.before, point.after, low, high, point.p)
    return None


def _metric_shift(metric: SoakMetric, series: Sequence[float | None], kept: list[int], first: int,
                  settings: SoakSettings) -> SoakShift | None:
    values = [series[i] for i in kept]
    if any(v is None or v <= 0 for v in values):
        return None  # a window without the figure: the metric is not decided
    return worse_shift(metric, [float(v) for v in values if v is not None], [first + i for i in kept], settings)


def _half(drafter: bool, engine: bool) -> Half:
    return Half.BOTH if drafter and engine else Half.DRAFTER if drafter else Half.ENGINE if engine else Half.NEITHER


def decide_soak(windows: dict[SoakMetric, list[float | None]], settings: SoakSettings) -> tuple[Verdict, Soak]:
    """Every metric's first worse change point after the warm-up windows, stalled windows left
    out; the soak fails when accept length, step time or tok/s has one, and names the half that moved."""
    first = settings.warmup_windows
    measured = {m: s[first:] for m, s in windows.items()}
    count = max((len(s) for s in measured.values()), default=0)
    left_out = stalled(measured.get(SoakMetric.THROUGHPUT, []))
    kept = [i for i in range(count) if i not in left_out]
    if len(kept) < MIN_WINDOWS:
        return Verdict.ERROR, Soak(count, first, (), Half.NEITHER, tuple(first + i for i in left_out))
    shifts = [s for metric, series in measured.items()
              if (s := _metric_shift(metric, series, kept, first, settings)) is not None]
    metrics = {s.metric for s in shifts}
    half = _half(SoakMetric.ACCEPT_LENGTH in metrics, SoakMetric.STEP_TIME in metrics)
    verdict = Verdict.FAIL if any(m in GATING for m in metrics) else Verdict.PASS
    return verdict, Soak(count, first, tuple(shifts), half, tuple(first + i for i in left_out))
