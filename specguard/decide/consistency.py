"""When a launch's runs disagree, so that their median cannot be trusted.

A gate's location of a launch is the median of its runs, so one stalled run of three does not move
it. Two stalled runs of three do: [0.7, 0.7, 1.0] has the median 0.7, and the gate audit
(../shared/reference/gate-audit.md section 2) found that this alone makes attach mode fail
unchanged code in 1.4 % of suite runs at K = 5. The runs alone cannot tell one stall from two
(either way two agree and one is off), but a stall only ever slows a run down, so the direction
can: the runs within the outlier limit of the *fastest* run are the ones that did not stall, and
the median holds while they are a strict majority. [0.95, 0.95, 0.67] (one stall of a real drop)
keeps its median; [0.7, 0.7, 1.0] does not, and neither does [0.7, 1.0] (two runs).

The outlier limit adapts to the machine: at least RUN_OUTLIER, and wider where the runs' own
scatter says a 10 % gap is ordinary; on the CI machines' shared CPUs runs scatter by 5-30 % and a
fixed 10 % would call most cells inconsistent. The scatter is read from the lower quartile of the
runs' distances from their launch's median, pooled over every launch and stored session at hand:
a stalled run's distance is in the upper part, so with one stored session and a stall on each
side (two distances of four) the scatter is still the quiet runs'. A median would not be: there
it is half a stall, and the limit would open to 70 %.

Only rates are checked (tok/s, good requests/s, step rates): a stall slows them; an accept length
does not move with the machine. A speculative cell's tok/s moves with its runs' acceptance too: a
run whose requests happen to accept more is the fastest by 30 % (tok/s [718, 546, 533] at accept
lengths [3.61, 2.72, 2.64], the study's per-run acceptance), and the two ordinary runs would read as
stalled. So its stalls are judged on a ``StallBasis``: the server's decode steps per second (tok/s
÷ accept length), which a stall slows as it slows tok/s and acceptance does not move ([199, 201,
202] for those runs).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

RUN_OUTLIER = 0.10  # a stall is ~30 % off (0.7x); a quiet machine's runs scatter by 0.5-1.5 %
OUTLIER_SDS = 5.0  # ... or this many robust sds of the runs' log scatter, where that is wider
# The lower quartile of three normal runs' nonzero distances from their median, in sds (simulated,
# 200 000 launches: 0.314; two runs: 0.227, so two-run launches read a little quieter than they are).
_QUARTILE_SDS = 0.314


@dataclass(frozen=True)
class SetAside:
    """A launch (or, in attach mode, a measurement) whose runs disagree: no decision rests on it."""

    launch: int  # 1-based, in the cell's launch order
    runs: tuple[int, ...]  # 1-based runs slower than the fastest run by more than the limit
    gap: float  # the slowest of them, as a fraction below the fastest run
    limit: float  # the gap beyond which a run is outside the fastest run's cluster
    config: str = ""  # whose launch, where not the gate's own (the speculation gate's reference)


@dataclass(frozen=True)
class StallBasis:
    """The per-run values a series' stalls are judged on where they are not its own, shaped like its
    launches (one list per launch, run for run) and its stored sessions: a speculative cell's
    decode steps per second (``RunSeries.steps_per_s``). Where the shapes differ (a run without an
    accept length left out of one series) the series is judged on its own values."""

    launches: Sequence[Sequence[float]]
    history: Sequence[Sequence[float]] = ()


def steps_per_s(tok_s: Sequence[float], accept_lengths: Sequence[float]) -> list[float] | None:
    """Per run, tok/s ÷ accept length (a verify step makes accept-length tokens; measured runs:
    ``RunSeries.steps_per_s``), where every run has a positive accept length; None otherwise (the
    runs are judged on their tok/s)."""
    if not tok_s or len(accept_lengths) != len(tok_s) or not all(a > 0 for a in accept_lengths):
        return None
    return [t / a for t, a in zip(tok_s, accept_lengths, strict=True)]


def _same_shape(a: Sequence[Sequence[float]], b: Sequence[Sequence[float]]) -> bool:
    return len(a) == len(b) and all(len(x) == len(y) for x, y in zip(a, b, strict=True))


def robust_log_sd(groups: Sequence[Sequence[float]]) -> float:
    """The runs' scatter as a log sd: the lower quartile (the nearest distance at or below it) of
    the log distances of runs from their group's median, over every group of two or more positive runs (zero distances, a group's
    median run itself, left out), over _QUARTILE_SDS; 0.0 with nothing to pool."""
    distances: list[float] = []
    for g in groups:
        logs = sorted(math.log(x) for x in g if x > 0)
        if len(logs) < 2:
            continue
        n = len(logs)
        mid = logs[n // 2] if n % 2 else (logs[n // 2 - 1] + logs[n // 2]) / 2
        distances += [abs(x - mid) for x in logs if x != mid]
    if not distances:
        return 0.0
    distances.sort()
    # the lower quartile without interpolation: one launch's two distances give the smaller, not a
    # quarter of the way to a stall
    return distances[(len(distances) - 1) // 4] / _QUARTILE_SDS


def outlier_limit(groups: Sequence[Sequence[float]]) -> float:
    """The gap below the fastest run beyond which a run did not run like it (see the module)."""
    return max(RUN_OUTLIER, 1 - math.exp(-OUTLIER_SDS * robust_log_sd(groups)))


def disagreement(runs: Sequence[float], limit: float, launch: int = 1) -> SetAside | None:
    """The launch's runs outside its fastest run's cluster, when they are half of its runs or
    more (the median is one of them); None when the median holds (or there is one run)."""
    if len(runs) < 2:
        return None
    fastest = max(runs)
    slow = [i for i, x in enumerate(runs) if x < fastest * (1 - limit)]
    if 2 * (len(runs) - len(slow)) > len(runs):
        return None
    return SetAside(launch, tuple(i + 1 for i in slow), 1 - min(runs) / fastest, limit)


def consistent_launches(launches: Sequence[Sequence[float]], pooled_with: Sequence[Sequence[float]] = (),
                        basis: StallBasis | None = None) -> tuple[list[Sequence[float]], tuple[SetAside, ...]]:
    """The launches whose medians hold, and those set aside; the limit is pooled over the
    launches and ``pooled_with`` (the cell's stored sessions). With a ``basis`` of the same shape
    the runs are judged on it (its launches, the limit pooled with its history) and the launches
    kept are still ``launches``. A launch with a value that is not a positive number is kept: it
    is not a stall, and the statistics reject it by name."""
    judged, pool = launches, pooled_with
    if basis is not None and _same_shape(basis.launches, launches) and _same_shape(basis.history, pooled_with):
        judged, pool = basis.launches, basis.history
    limit = outlier_limit([*judged, *pool])
    kept: list[Sequence[float]] = []
    aside: list[SetAside] = []
    for i, (runs, seen) in enumerate(zip(launches, judged, strict=True)):
        found = disagreement(seen, limit, i + 1) if all(x > 0 and math.isfinite(x) for x in seen) else None
        if found is None:
            kept.append(runs)
        else:
            aside.append(found)
    return kept, tuple(aside)
