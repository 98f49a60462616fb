"""A soak's decision: per metric, the change points of its windows (decide/changepoint.py, the
module the nightly history uses), and the first one that went the worse way.

A window's accept length falling is the drafter; its step time rising is the engine; tok/s
falling is what users feel (whichever half moved). Tail latency (ITL p99) is reported the same way
and never fails by itself: it moves with batch composition as much as with decay. The windows are
consecutive runs of one server under the same load, so a slow trend (a decay over the whole soak)
is also placed: binary segmentation cuts a ramp where its two halves differ most.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from specguard.decide.changepoint import detect
from specguard.decide.result import Half, Soak, SoakMetric, SoakShift
from specguard.labels import Verdict

# A metric's worse direction: +1 when a rise is worse (step time, latency), -1 when a fall is
WORSE = {SoakMetric.ACCEPT_LENGTH: -1, SoakMetric.STEP_TIME: 1, SoakMetric.THROUGHPUT: -1, SoakMetric.ITL_P99: 1}
GATING = (SoakMetric.ACCEPT_LENGTH, SoakMetric.STEP_TIME, SoakMetric.THROUGHPUT)
MIN_WINDOWS = 3  # measured windows (after warm-up) a decision needs


@dataclass(frozen=True)
class SoakSettings:
    warmup_windows: int
    alpha: float
    min_change: float


def worse_shift(metric: SoakMetric, series: Sequence[float | None], first_window: int,
                settings: SoakSettings) -> SoakShift | None:
    """The first change point of `series` (measured windows, oldest first; None: not measured)
    that goes the worse way, numbered as the soak's windows (warm-up included); None if none."""
    values = [v for v in series if v is not None and v > 0]
    if len(values) < MIN_WINDOWS or len(values) != len(series):
        return None
    for point in detect(values, alpha=settings.alpha, min_change=settings.min_change, min_size=2, min_size_last=2):
        if (point.ratio - 1) * WORSE[metric] > 0:
            low, high = point.interval
            return SoakShift(metric, first_window + point.index, point.before, point.after, low, high, point.p)
    return None


def decide_soak(windows: dict[SoakMetric, list[float | None]], settings: SoakSettings) -> tuple[Verdict, Soak]:
    """Every metric's first worse change point after the warm-up windows; the soak fails when
    accept length, step time or tok/s has one, and names the half that moved."""
    measured = {m: s[settings.warmup_windows:] for m, s in windows.items()}
    count = max((len(s) for s in measured.values()), default=0)
    if count < MIN_WINDOWS:
        return Verdict.ERROR, Soak(count, settings.warmup_windows, (), Half.NEITHER)
    shifts = tuple(s for m, series in measured.items()
                   if (s := worse_shift(m, series, settings.warmup_windows, settings)) is not None)
    metrics = {s.metric for s in shifts}
    drafter, engine = SoakMetric.ACCEPT_LENGTH in metrics, SoakMetric.STEP_TIME in metrics
    half = Half.BOTH if drafter and engine else Half.DRAFTER if drafter else Half.ENGINE if engine else Half.NEITHER
    failed = any(m in GATING for m in metrics)
    return Verdict.FAIL if failed else Verdict.PASS, Soak(count, settings.warmup_windows, shifts, half)
