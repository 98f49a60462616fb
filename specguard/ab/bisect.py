"""Bisecting an ordered list of builds for the first bad one with A/B decisions.

The first build is assumed good and the last bad (neither is measured: that is the caller's
claim, and saying so is part of the output). Each step compares the good end (A) with the
midpoint (B) on one configuration's cells: a midpoint with a gate decided "different" for the
worse is bad, one whose every gate is decided and none worse is good; anything else (undecided at
the budget, or not measured) stops the bisect, naming the midpoint. For N builds the first bad is
one of N - 1, so it takes ceil(log2(N - 1)) decisions, at most ceil(log2 N).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from specguard.ab.decision import ERROR, UNDECIDED
from specguard.ab.rounds import BuildComparison

GOOD, BAD, UNDECIDED_BUILD, NOT_MEASURED = "good", "bad", "undecided", "not measured"
T = TypeVar("T")


def decisions_needed(n_builds: int) -> int:
    """A/B decisions a bisect of ``n_builds`` takes: the first bad build is one of n - 1."""
    return math.ceil(math.log2(n_builds - 1)) if n_builds > 2 else 0


def midpoint_verdict(cmp: BuildComparison) -> str:
    """bad: a gate different for the worse; good: every gate decided, none worse; else why not."""
    if cmp.regressions() or cmp.group_regressions():
        return BAD
    if cmp.not_measured():
        return NOT_MEASURED
    if any(c.decision in (UNDECIDED, ERROR) or c.error for c in cmp.cells):
        return UNDECIDED_BUILD
    return GOOD


@dataclass
class Step(Generic[T]):
    good: int  # index of the good end (A)
    candidate: int  # index of the midpoint (B)
    verdict: str
    detail: T


@dataclass
class BisectResult(Generic[T]):
    n_builds: int
    steps: list[Step[T]] = field(default_factory=list)
    first_bad: int | None = None  # index; None when a step could not decide
    good: int = 0  # the bracket when it ended: the last build known good ...
    bad: int = 0  # ... and the first known (or assumed) bad

    @property
    def stopped(self) -> Step[T] | None:
        """The step that could not decide, if any."""
        return next((s for s in self.steps if s.verdict not in (GOOD, BAD)), None)


def bisect(n_builds: int, decide: Callable[[int, int], tuple[str, T]]) -> BisectResult[T]:
    """Binary search for the first bad of builds 0..n-1 (0 good, n-1 bad by assumption);
    ``decide(good, candidate)`` -> (GOOD | BAD | anything else to stop, detail)."""
    if n_builds < 2:
        raise ValueError(f"bisect needs 2 builds at least, got {n_builds}")
    result: BisectResult[T] = BisectResult(n_builds, good=0, bad=n_builds - 1)
    while result.bad - result.good > 1:
        mid = (result.good + result.bad) // 2
        verdict, detail = decide(result.good, mid)
        result.steps.append(Step(result.good, mid, verdict, detail))
        if verdict == BAD:
            result.bad = mid
        elif verdict == GOOD:
            result.good = mid
        else:
            return result
    result.first_bad = result.bad
    return result


__all__ = ["BAD", "GOOD", "NOT_MEASURED", "UNDECIDED_BUILD", "BisectResult", "Step", "bisect", "decisions_needed",
           "midpoint_verdict"]
