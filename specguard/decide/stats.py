"""Deciding "regressed or not" from noisy runs without false alarms.

Everything works on log values, so effects are ratios and a tolerance tau is the threshold
log(1 - tau). Variance lives at two levels (Kalibera & Jones): runs within a server launch, and
launches (sessions). A comparison with a stored baseline from another launch must include the
between-launch spread; it is estimated from the stored history when there are enough sessions,
and otherwise comes from a declared prior instead of being assumed zero.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np
from scipy import special

from specguard.config import FAIL_RULES

PASS, FAIL, INCONCLUSIVE = "pass", "fail", "inconclusive"
MIN_SESSIONS_FOR_SPREAD = 3  # fewer stored sessions: the prior between-session spread is used


@dataclass(frozen=True)
class RatioEstimate:
    """current / reference with a confidence interval, and the one-sided p-value of
    H0: ratio >= test_at (small p = confidently below it). ``test_at`` is the threshold itself
    under the "beyond-tolerance" rule and 1 (no change) under "significant"."""

    ratio: float
    low: float
    high: float
    threshold: float
    p_value: float
    dof: float
    confidence: float
    between_sd: float  # the between-session spread used (log scale)
    between_source: str  # "prior" or "history of K sessions"
    test_at: float | None = None  # None (older results files): the threshold

    def outcome(self) -> str:
        tested_at = self.threshold if self.test_at is None else self.test_at
        if self.high < tested_at and self.ratio < self.threshold:  # significant, and beyond the threshold
            return FAIL
        if self.low >= self.threshold:
            return PASS
        return INCONCLUSIVE

    def describe(self) -> str:
        return f"{self.ratio:.3f} [{self.low:.3f}, {self.high:.3f}]"


def _logs(values: Sequence[float], what: str) -> np.ndarray:
    arr = np.asarray(values, dtype=float)
    if arr.size == 0:
        raise ValueError(f"no {what} samples")
    if np.any(~np.isfinite(arr)) or np.any(arr <= 0):
        raise ValueError(f"{what} samples must be positive and finite, got {list(values)}")
    return np.log(arr)


def _pooled_within_var(groups: Sequence[np.ndarray]) -> tuple[float, float]:
    """Pooled within-session variance of logs and its degrees of freedom."""
    ss = sum(float(((g - g.mean()) ** 2).sum()) for g in groups if g.size > 1)
    dof = sum(g.size - 1 for g in groups if g.size > 1)
    return (ss / dof, float(dof)) if dof > 0 else (0.0, 0.0)


def null_ratio(threshold: float, rule: str) -> float:
    """The ratio the one-sided test is made against under a fail rule."""
    if rule not in FAIL_RULES:
        raise ValueError(f"fail rule {rule!r}; use one of {', '.join(FAIL_RULES)}")
    return max(threshold, 1.0) if rule == "significant" else threshold


def _finish(diff: float, var_parts: list[tuple[float, float]], threshold: float, confidence: float,
            between_sd: float, between_source: str, test_at: float) -> RatioEstimate:
    """CI and p-value from a log difference and (variance, dof) parts (Welch-Satterthwaite)."""
    var = sum(v for v, _ in var_parts)
    if var <= 0:
        var = 1e-12
    denom = sum(v * v / d for v, d in var_parts if v > 0 and math.isfinite(d) and d > 0)
    dof = var * var / denom if denom > 0 else math.inf
    dof = max(dof, 1.0)
    se = math.sqrt(var)
    # scipy.special's t and normal functions, not frozen scipy.stats distributions: the same
    # numbers, without building a distribution object (and its docstring) on every call.
    z = (diff - math.log(test_at)) / se
    if math.isfinite(dof):
        q, p = float(special.stdtrit(dof, 0.5 + confidence / 2)), float(special.stdtr(dof, z))
    else:
        q, p = float(special.ndtri(0.5 + confidence / 2)), float(special.ndtr(z))
    return RatioEstimate(
        ratio=math.exp(diff), low=math.exp(diff - q * se), high=math.exp(diff + q * se), threshold=threshold,
        p_value=p, dof=dof, confidence=confidence, between_sd=between_sd, between_source=between_source,
        test_at=test_at,
    )


def compare_to_history(current: Sequence[float], history: Sequence[Sequence[float]], *, threshold: float,
                       prior_between_sd: float, confidence: float, rule: str = "beyond-tolerance") -> RatioEstimate:
    """This session's runs against K stored sessions (a prediction-interval comparison).

    Var(log ratio) = sb2 (this launch's own offset) + sw2/n_c + (sb2 + sw2/n_h)/K.
    sb2 is the larger of the declared prior and, with >= 3 sessions, the history's estimate:
    a few sessions can reveal more spread than declared, but are too few to trust less.
    """
    cur = _logs(current, "current")
    sessions = [_logs(s, "baseline") for s in history if len(s)]
    if not sessions:
        raise ValueError("no baseline sessions to compare with")
    sw2, dof_w = _pooled_within_var([cur, *sessions])
    means = np.array([s.mean() for s in sessions])
    k = len(sessions)
    n_h = float(np.mean([s.size for s in sessions]))
    prior2 = prior_between_sd**2
    sb2, source = prior2, "prior"
    if k >= MIN_SESSIONS_FOR_SPREAD:
        est = max(float(means.var(ddof=1)) - sw2 / n_h, 0.0)
        if est > prior2:
            sb2, source = est, f"history of {k} sessions"
    diff = float(cur.mean() - means.mean())
    within = sw2 / cur.size + sw2 / (n_h * k)
    between = sb2 * (1 + 1 / k)
    return _finish(diff, [(within, dof_w), (between, math.inf)], threshold, confidence, math.sqrt(sb2), source,
                   null_ratio(threshold, rule))


def compare_sessions(a: Sequence[float], b: Sequence[float], *, threshold: float, launch_sd: float,
                     confidence: float, rule: str = "beyond-tolerance") -> RatioEstimate:
    """a / b for two server launches measured in one session (e.g. speculation vs its reference).

    Each launch carries its own offset, so 2 * launch_sd^2 is added to Welch's variance.
    """
    la, lb = _logs(a, "a"), _logs(b, "b")
    va = float(la.var(ddof=1)) if la.size > 1 else 0.0
    vb = float(lb.var(ddof=1)) if lb.size > 1 else 0.0
    parts = [(va / la.size, la.size - 1.0), (vb / lb.size, lb.size - 1.0), (2 * launch_sd**2, math.inf)]
    return _finish(float(la.mean() - lb.mean()), parts, threshold, confidence, launch_sd, "prior",
                   null_ratio(threshold, rule))


def holm_adjust(p_values: Sequence[float]) -> list[float]:
    """Holm step-down adjusted p-values (family-wise error control, any dependence)."""
    m = len(p_values)
    order = sorted(range(m), key=lambda i: p_values[i])
    adjusted = [0.0] * m
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p_values[i]))
        adjusted[i] = running
    return adjusted
