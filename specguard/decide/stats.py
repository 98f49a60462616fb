"""Deciding "regressed or not" from noisy runs without false alarms.

Everything works on log values, so effects are ratios and a tolerance tau is the threshold
log(1 - tau). Variance lives at two levels (Kalibera & Jones): runs within a server launch, and
launches (sessions). A comparison with a stored baseline from another launch must include the
between-launch spread: the declared prior, pooled with the stored history's own spread with its
degrees of freedom, never assumed zero.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
from scipy import special

from specguard.config import FAIL_RULES
from specguard.decide.prior import (
    HistoryOf,
    Origin,
    Prior,
    SpreadEstimate,
    SpreadSource,
    between_estimate,
    checking_history,
)
from specguard.labels import Verdict


@dataclass(frozen=True)
class Rule:
    """How an estimate becomes a verdict: the fail rule (config.FAIL_RULES) and the one-sided level
    of a pass (None: the fail interval's lower bound)."""

    fail_rule: str = "significant"
    pass_confidence: float | None = 0.95


@dataclass(frozen=True)
class Criterion:
    """What a comparison tests: the ratio it is judged against (``threshold``), the two-sided level
    of its interval (``confidence``), and how the estimate becomes a verdict (``rule``; without a
    pass level, a pass needs the interval's lower bound)."""

    threshold: float
    confidence: float
    rule: Rule = Rule(pass_confidence=None)


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
    between_source: SpreadSource
    test_at: float | None = None  # None (older results files): the threshold
    # "pass" is a non-inferiority claim (a one-sided test that the ratio is above the threshold: one
    # side of a TOST, since a speed-up never fails),
    # made at its own level: a wrong pass misses a regression in one cell, a wrong fail is a false
    # alarm of the whole gate, so only the fail side needs the family's (Holm's) tiny per-cell alpha.
    # None (older results files): pass needs ``low``, the fail interval's bound.
    pass_low: float | None = None
    pass_confidence: float | None = None

    def outcome(self) -> Verdict:
        tested_at = self.threshold if self.test_at is None else self.test_at
        if self.high < tested_at and self.ratio < self.threshold:  # significant, and beyond the threshold
            return Verdict.FAIL
        if (self.low if self.pass_low is None else self.pass_low) >= self.threshold:
            return Verdict.PASS
        return Verdict.INCONCLUSIVE


def _logs(values: Sequence[float], what: str) -> np.ndarray:
    arr = np.asarray(values, dtype=float)
    if arr.size == 0:
        raise ValueError(f"no {what} samples")
    if np.any(~np.isfinite(arr)) or np.any(arr <= 0):
        raise ValueError(f"{what} samples must be positive and finite, got {list(values)}")
    logs: np.ndarray = np.log(arr)
    return logs


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


def _finish(diff: float, var_parts: list[tuple[float, float]], criterion: Criterion, between_sd: float,
            between_source: SpreadSource) -> RatioEstimate:
    """CI and p-value from a log difference and (variance, dof) parts (Welch-Satterthwaite), and
    with the rule's pass confidence the one-sided lower bound a pass needs."""
    threshold, confidence, pass_confidence = criterion.threshold, criterion.confidence, criterion.rule.pass_confidence
    test_at = null_ratio(threshold, criterion.rule.fail_rule)
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
    pass_low = None
    if pass_confidence is not None:
        if not 0.5 <= pass_confidence < 1:
            raise ValueError(f"pass confidence {pass_confidence}; use a one-sided level in [0.5, 1), e.g. 0.95")
        q1 = float(special.stdtrit(dof, pass_confidence)) if math.isfinite(dof) else float(special.ndtri(pass_confidence))
        pass_low = math.exp(diff - q1 * se)
    return RatioEstimate(
        ratio=math.exp(diff), low=math.exp(diff - q * se), high=math.exp(diff + q * se), threshold=threshold,
        p_value=p, dof=dof, confidence=confidence, between_sd=between_sd, between_source=between_source,
        test_at=test_at, pass_low=pass_low, pass_confidence=pass_confidence,
    )


def compare_sessions(a: Sequence[float], b: Sequence[float], *, threshold: float, launch_sd: float,
                     confidence: float, rule: str = "beyond-tolerance") -> RatioEstimate:
    """a / b for two server launches measured in one session (e.g. speculation vs its reference).

    Each launch carries its own offset, so 2 * launch_sd^2 is added to Welch's variance.
    """
    la, lb = _logs(a, "a"), _logs(b, "b")
    va = float(la.var(ddof=1)) if la.size > 1 else 0.0
    vb = float(lb.var(ddof=1)) if lb.size > 1 else 0.0
    parts = [(va / la.size, la.size - 1.0), (vb / lb.size, lb.size - 1.0), (2 * launch_sd**2, math.inf)]
    return _finish(float(la.mean() - lb.mean()), parts, Criterion(threshold, confidence, Rule(rule, None)), launch_sd,
                   SpreadSource())


def holm_adjust(p_values: Sequence[float], weights: Sequence[float] | None = None) -> list[float]:
    """Holm step-down adjusted p-values (family-wise error control, any dependence); with
    ``weights``, the weighted Holm procedure (Holm 1979): a test's p is compared with
    alpha * w_i / (sum of the remaining weights), so with weights proportional to the per-test
    alphas of a weighted Bonferroni split its first step is exactly the per-test decision."""
    m = len(p_values)
    w = [1.0] * m if weights is None else [float(x) for x in weights]
    if len(w) != m or any(not x > 0 for x in w):
        raise ValueError(f"holm_adjust: need one positive weight per p-value, got {list(w)} for {m}")
    order = sorted(range(m), key=lambda i: p_values[i] / w[i])
    remaining = sum(w)
    adjusted = [0.0] * m
    running = 0.0
    for i in order:
        running = max(running, min(1.0, p_values[i] / w[i] * remaining))
        adjusted[i] = running
        remaining -= w[i]
    return adjusted


# -- launches as the unit of replication -------------------------------------------------------
class SessionRuns(list[float]):
    """A stored session's runs in order (a list of floats, as every gate reads a session), with
    the server launches they came from: ``launches`` holds each launch's runs. A session that was
    relaunched is a session of L launches, as this session's own are, not one flat sample: its
    launch offsets are between-launch spread, not run-to-run spread. A plain list is a session of
    one launch."""

    def __init__(self, launches: Sequence[Sequence[float]]) -> None:
        kept = [[float(v) for v in launch] for launch in launches if len(launch)]
        super().__init__(v for launch in kept for v in launch)
        self.launches: tuple[tuple[float, ...], ...] = tuple(tuple(launch) for launch in kept)


def session_launches(session: Sequence[float]) -> tuple[tuple[float, ...], ...]:
    """A stored session's launches (``SessionRuns.launches``); a plain list is one launch."""
    launches = getattr(session, "launches", None)
    return launches if launches else (tuple(float(v) for v in session),)


def history_spread(history: Sequence[Sequence[float]]) -> SpreadEstimate | None:
    """Between-session variance of one cell's stored sessions (K - 1 dof) as a one-launch
    session's, less the share the runs' own spread explains; None with fewer than 2 sessions.
    Sessions may hold several launches (``SessionRuns``)."""
    return _history_spread_cached(tuple(session_launches(s) for s in history if len(s)))


@functools.lru_cache(maxsize=4096)
def _history_spread_cached(history: tuple[tuple[tuple[float, ...], ...], ...]) -> SpreadEstimate | None:
    """The study decides the same stored sessions many times (stages, gates, grid points)."""
    return _history_spread(history)


def _history_spread(history: Sequence[Sequence[Sequence[float]]]) -> SpreadEstimate | None:
    """Sessions of launches. A session's location is the mean of its launches' medians, so
    Var(location) = sd2 + sl2 / L + c sw2 / (n L) for a session of L launches (day sd2, launch
    sl2, runs sw2); the one-launch variance sb2 = sd2 + sl2 adds back the launch share that
    averaging L launches removed, sl2 (1 - mean 1/L), with sl2 from the launches' spread within
    each relaunched session. With one launch per session this is var(locations) - c sw2 / n."""
    sessions = [_launch_logs(s, "baseline") for s in history]
    if len(sessions) < 2:
        return None
    sw2, _ = _robust_within_var([g for s in sessions for g in s])
    n_h = _runs_per_launch(sessions)
    c_n = _loc_var_factor(n_h) * sw2 / n_h
    inv_l = float(np.mean([1 / len(s) for s in sessions]))
    locations = np.array([_session_loc(s) for s in sessions])
    var = float(locations.var(ddof=1)) - c_n * inv_l
    relaunched = [s for s in sessions if len(s) > 1]
    if relaunched:
        ss = sum(float(((np.array([_loc(g) for g in s]) - _session_loc(s)) ** 2).sum()) for s in relaunched)
        sl2 = max(ss / sum(len(s) - 1 for s in relaunched) - c_n, 0.0)
        var += sl2 * (1 - inv_l)
    return SpreadEstimate(max(var, 0.0), float(len(sessions) - 1), Origin(HistoryOf.SESSIONS, len(sessions)))


STALL_MADS = 5.0  # a run this many robust sds below its launch's median is a stall: out of the within variance (not Gaussian)
# Variance of the median of n normal values, over sigma^2 / n (n = 3: 0.449 sigma^2; large n: pi / 2).
_MEDIAN_VAR = {1: 1.0, 2: 1.0, 3: 1.35, 4: 1.19, 5: 1.43}


def _median(g: np.ndarray) -> float:
    """np.median of a small 1-d array, the same value (the middle one, or the mean of the two
    middle ones), without numpy's per-call overhead: the study calls it ~10^7 times."""
    s: list[float] = sorted(g.tolist())
    n = len(s)
    if n == 0:
        return math.nan
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2


def _loc(g: np.ndarray) -> float:
    """A launch's (or stored session's) location: the median of its runs' logs, so that one
    stalled run of three does not move it; equal to the mean for two runs."""
    return _median(g)


def _loc_var_factor(n: float) -> float:
    return _MEDIAN_VAR.get(int(round(n)), math.pi / 2)


def _robust_within_var(groups: Sequence[np.ndarray]) -> tuple[float, float]:
    """Pooled within-launch variance of logs with stalls set aside: runs more than STALL_MADS
    robust sds (pooled over all groups) below their group's median do not enter it."""
    resid = np.concatenate([g - _median(g) for g in groups if g.size > 1]) if any(g.size > 1 for g in groups) else np.array([])
    nonzero = np.abs(resid[resid != 0])
    rsd = 1.4826 * _median(nonzero) if nonzero.size else 0.0
    kept = [g[g >= _median(g) - STALL_MADS * rsd] if rsd > 0 else g for g in groups]
    return _pooled_within_var(kept)


def _launch_logs(launches: Sequence[Sequence[float]], what: str) -> list[np.ndarray]:
    out = [_logs(launch, what) for launch in launches if len(launch)]
    if not out:
        raise ValueError(f"no {what} samples")
    return out


def _session_loc(launches: Sequence[np.ndarray]) -> float:
    """A session's location: the mean of its launches' locations (as this session's launches pool)."""
    return float(np.mean([_loc(g) for g in launches]))


def _runs_per_launch(sessions: Sequence[Sequence[np.ndarray]]) -> float:
    return float(np.mean([g.size for s in sessions for g in s]))


def _launch_spread(groups: Sequence[np.ndarray], sw2: float) -> SpreadEstimate | None:
    """Launch-to-launch variance within one session from its L launches (L - 1 dof)."""
    if len(groups) < 2:
        return None
    means = np.array([_loc(g) for g in groups])
    n = float(np.mean([g.size for g in groups]))
    return SpreadEstimate(max(float(means.var(ddof=1)) - _loc_var_factor(n) * sw2 / n, 0.0), float(len(groups) - 1),
                          Origin(HistoryOf.LAUNCHES, len(groups)))


def _day_fraction(prior: Prior) -> float:
    """The share of the between-session variance common to every launch of one session."""
    return min(prior.day_sd**2 / prior.between_sd**2, 1.0) if prior.between_sd > 0 else 0.0


def _combine(a: tuple[float, float], b: SpreadEstimate | None) -> tuple[float, float]:
    """(var, dof) updated with another estimate of the same variance."""
    var, dof = a
    if b is None or b.dof <= 0 or math.isinf(dof):
        return a
    return (var * dof + b.var * b.dof) / (dof + b.dof), dof + b.dof


def compare_launches(current: Sequence[Sequence[float]], history: Sequence[Sequence[float]], criterion: Criterion,
                     prior: Prior, *, spread: SpreadEstimate | None = None,
                     pool: SpreadEstimate | None = None) -> RatioEstimate:
    """This session's L launches (runs of each) against K stored sessions; the launch is the unit,
    in the stored sessions too (a relaunched one is a ``SessionRuns`` of L_k launches).

    The between-session variance sb2 (of a one-launch session) splits into a day part shared by
    every launch of a session (fraction prior_day_sd^2 / prior_between_sd^2) and a launch part
    that relaunching averages away:

        Var(log ratio) = sd2 + sl2 / L + c sw2 / (n L)  +  mean_k(sd2 + sl2 / L_k + c sw2 / (n L_k)) / K

    sb2 from ``between_estimate`` (prior and the history's spread: ``spread`` where given, else
    this cell's); sl2 also learns from the L launches' own spread. ``pool``: the history that
    checks the prior at ``prior.check_p`` (``checked_prior``; None: the prior is not checked).
    """
    cur = _launch_logs(current, "current")
    sessions = [_launch_logs(session_launches(s), "baseline") for s in history if len(s)]
    if not sessions:
        raise ValueError("no baseline sessions to compare with")
    sw2, dof_w = _robust_within_var([*cur, *(g for s in sessions for g in s)])
    measured = spread if spread is not None else history_spread(history)
    day_frac = _day_fraction(prior)
    check, check_p = checking_history(prior, pool)
    sb2, dof_b, source = between_estimate(prior.between_sd, measured, check, prior.dof, check_p)
    sd2 = day_frac * sb2
    sl2, dof_l = _combine(((1 - day_frac) * sb2, dof_b), _launch_spread(cur, sw2))
    k, n_l = len(sessions), len(cur)
    inv_l = float(np.mean([1 / len(s) for s in sessions]))  # the stored sessions' mean 1 / L_k
    n_h = _runs_per_launch(sessions)
    n_r = float(np.mean([g.size for g in cur]))
    diff = float(np.mean([_loc(g) for g in cur]) - np.mean([_session_loc(s) for s in sessions]))
    within = _loc_var_factor(n_r) * sw2 / (n_r * n_l) + _loc_var_factor(n_h) * sw2 * inv_l / (n_h * k)
    parts = [(within, dof_w), (sd2 * (1 + 1 / k) + sb2 * (1 - day_frac) * inv_l / k, dof_b),
             (sl2 / n_l, dof_l)]
    src = replace(source, widened=prior.widened if source.prior else 1.0, launches=(n_l,))
    return _finish(diff, parts, criterion, math.sqrt(sb2), src)


def compare_launch_sets(a: Sequence[Sequence[float]], b: Sequence[Sequence[float]], criterion: Criterion,
                        prior: Prior, *, spread: SpreadEstimate | None = None,
                        pool: SpreadEstimate | None = None) -> RatioEstimate:
    """a / b for two configurations launched in the same session (La and Lb launches).

    The day part is shared by both and cancels; each launch carries its own offset (launch part
    sl2 of the between-session variance, learnt from prior, history and both sides' launches):

        Var(log ratio) = sl2 (1/La + 1/Lb) + sw2_a / n_a + sw2_b / n_b
    """
    la, lb = _launch_logs(a, "a"), _launch_logs(b, "b")
    sw2a, dofa = _robust_within_var(la)
    sw2b, dofb = _robust_within_var(lb)
    day_frac = _day_fraction(prior)
    sb2, dof_b, source = between_estimate(prior.between_sd, spread, pool, prior.dof, prior.check_p)
    sl = ((1 - day_frac) * sb2, dof_b)
    sl = _combine(sl, _launch_spread(la, sw2a))
    sl2, dof_l = _combine(sl, _launch_spread(lb, sw2b))
    ra, rb = float(np.mean([g.size for g in la])), float(np.mean([g.size for g in lb]))
    diff = float(np.mean([_loc(g) for g in la]) - np.mean([_loc(g) for g in lb]))
    parts = [(_loc_var_factor(ra) * sw2a / (ra * len(la)), max(dofa, 1.0)),
             (_loc_var_factor(rb) * sw2b / (rb * len(lb)), max(dofb, 1.0)), (sl2 * (1 / len(la) + 1 / len(lb)), dof_l)]
    return _finish(diff, parts, criterion, math.sqrt(sl2), replace(source, launches=(len(la), len(lb))))


@dataclass(frozen=True)
class Trend:
    """A series' log-linear trend over its runs in time order."""

    change: float  # fitted relative change from the first run to the last (e.g. -0.09)
    p_value: float  # one-sided: small = confidently falling


def downward_trend(values: Sequence[float]) -> Trend | None:
    """The fitted trend of log(values) against run order (least squares) and the one-sided
    p-value of "not falling" (Student's t on the slope, n - 2 dof); None below 4 runs (two dof
    at least) or when the values do not vary (a deterministic series has no noise to compare with)."""
    y = _logs(values, "trend")
    n = y.size
    if n < 4 or float(np.ptp(y)) == 0.0:
        return None
    x = np.arange(n, dtype=float)
    x -= x.mean()
    slope = float((x * (y - y.mean())).sum() / (x * x).sum())
    resid = y - y.mean() - slope * x
    se2 = float((resid * resid).sum()) / (n - 2) / float((x * x).sum())
    change = math.expm1(slope * (n - 1))
    if se2 <= 0:
        return Trend(change, 0.0 if slope < 0 else 1.0)
    t = slope / math.sqrt(se2)
    return Trend(change, float(special.stdtr(n - 2, t)))
