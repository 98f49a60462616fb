"""The statistics behind the gates: coverage, false alarms and power on simulated data."""

import math

import numpy as np
import pytest

from specguard.decide.prior import SpreadSource
from specguard.decide.stats import compare_sessions, holm_adjust
from specguard.labels import Verdict
from specguard.measure.metrics import outliers


def test_compare_sessions_ratio_and_inconclusive():
    est = compare_sessions([110, 111, 109], [100, 101, 99], threshold=1.0, launch_sd=0.01, confidence=0.95)
    assert est.ratio == pytest.approx(1.1, rel=1e-3) and est.outcome() == PASS
    close = compare_sessions([100.5, 101, 100], [100, 101, 99], threshold=1.0, launch_sd=0.02, confidence=0.95)
    assert close.outcome() == INCONCLUSIVE


def test_holm():
    assert holm_adjust([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    assert holm_adjust([]) == []


def test_outliers_reported():
    assert outliers([100, 101, 99, 100, 150]) == [4]
    assert outliers([1, 1, 1]) == []
    assert outliers([100, 150, 101]) == []  # too few runs to judge


# -- the formulas, against an independent re-derivation (statistics.md) ----------------------
# The oracle below uses the standard library's sample variance (n - 1) and scipy.stats' t
# distribution; stats.py uses numpy and scipy.special. Agreement to 1e-9 pins the variance
# formula, the degrees of freedom, the quantile and the p-value at once.
import statistics  # noqa: E402

from scipy import stats as sps  # noqa: E402

from specguard.decide.stats import RatioEstimate, null_ratio  # noqa: E402

FAIL, INCONCLUSIVE, PASS = Verdict.FAIL, Verdict.INCONCLUSIVE, Verdict.PASS


def test_compare_sessions_matches_welch_plus_two_launch_offsets():
    a, b = [110.0, 112.0, 109.0], [100.0, 101.5, 99.0, 100.5]
    la, lb = [math.log(v) for v in a], [math.log(v) for v in b]
    va, vb, launch = statistics.variance(la) / 3, statistics.variance(lb) / 4, 2 * 0.015**2
    var = va + vb + launch
    dof = var**2 / (va**2 / 2 + vb**2 / 3)
    diff = statistics.fmean(la) - statistics.fmean(lb)
    q = sps.t.ppf(0.5 + 0.95 / 2, dof)
    e = compare_sessions(a, b, threshold=1.05, launch_sd=0.015, confidence=0.95, rule="significant")
    assert e.ratio == pytest.approx(math.exp(diff), rel=1e-12)
    assert e.low == pytest.approx(math.exp(diff - q * math.sqrt(var)), rel=1e-9)
    assert e.high == pytest.approx(math.exp(diff + q * math.sqrt(var)), rel=1e-9)
    assert e.dof == pytest.approx(dof, rel=1e-9)
    assert e.test_at == 1.05  # significant: max(threshold, 1)
    assert e.p_value == pytest.approx(sps.t.cdf((diff - math.log(1.05)) / math.sqrt(var), dof), rel=1e-7)
    assert (e.between_sd, e.between_source) == (0.015, SpreadSource())


def test_compare_sessions_with_single_runs_uses_the_launch_prior_and_the_normal():
    e = compare_sessions([110.0], [100.0], threshold=1.0, launch_sd=0.02, confidence=0.95)
    se = math.sqrt(2) * 0.02
    assert e.dof == math.inf
    assert e.ratio == pytest.approx(1.1)
    assert e.low == pytest.approx(1.1 * math.exp(-sps.norm.ppf(0.975) * se), rel=1e-9)
    assert e.p_value == pytest.approx(sps.norm.cdf(math.log(1.1) / se), rel=1e-9)


def test_no_variance_at_all_gives_a_point_interval_not_a_division_by_zero():
    e = compare_sessions([110.0, 110.0], [100.0, 100.0], threshold=1.0, launch_sd=0.0, confidence=0.95)
    assert e.low == pytest.approx(1.1, rel=1e-5) and e.high == pytest.approx(1.1, rel=1e-5)
    assert e.outcome() == PASS


@pytest.mark.parametrize("threshold, rule, expected", [
    (0.97, "significant", 1.0), (1.05, "significant", 1.05), (0.97, "beyond-tolerance", 0.97),
    (1.05, "beyond-tolerance", 1.05),
])
def test_null_ratio(threshold, rule, expected):
    assert null_ratio(threshold, rule) == expected


def _e(ratio, low, high, threshold=0.97, test_at=None):
    return RatioEstimate(ratio, low, high, threshold, 0.5, 10.0, 0.98, 0.01, SpreadSource(), test_at)


@pytest.mark.parametrize("estimate, outcome", [
    (_e(0.95, 0.93, 0.969), FAIL),  # whole interval below the threshold (test_at None: the threshold)
    (_e(0.95, 0.93, 0.97), INCONCLUSIVE),  # high exactly at the tested ratio is not below it
    (_e(0.95, 0.93, 0.99, test_at=1.0), FAIL),  # significant against 1, estimate beyond the threshold
    (_e(0.97, 0.95, 0.99, test_at=1.0), INCONCLUSIVE),  # significant, estimate exactly at the threshold
    (_e(0.99, 0.97, 1.01), PASS),  # low exactly at the threshold passes
    (_e(0.99, 0.969, 1.01), INCONCLUSIVE),
])
def test_outcome_boundaries(estimate, outcome):
    assert estimate.outcome() == outcome


def test_describe():
    from specguard.report.verdict_text import ratio_text
    assert ratio_text(_e(0.95, 0.9312, 0.9688)) == "0.950 [0.931, 0.969]"


def test_holm_caps_at_one_and_keeps_the_order():
    assert holm_adjust([0.5, 0.6]) == [1.0, 1.0]
    assert holm_adjust([0.04, 0.01, 0.02]) == pytest.approx([0.04, 0.03, 0.04])
    assert holm_adjust([0.3]) == [0.3]


def test_compare_sessions_error_names_the_side():
    with pytest.raises(ValueError, match="no b samples"):
        compare_sessions([1.0], [], threshold=1.0, launch_sd=0.01, confidence=0.95)
    with pytest.raises(ValueError, match="a samples must be positive"):
        compare_sessions([float("inf")], [1.0], threshold=1.0, launch_sd=0.01, confidence=0.95)


def test_two_runs_against_one_gives_one_degree_of_freedom():
    """Welch with a single-run side: only the two-run side carries within variance (1 dof), so
    the interval uses t with 1 degree of freedom, not more."""
    e = compare_sessions([100.0, 110.0], [100.0], threshold=1.0, launch_sd=0.0, confidence=0.95)
    la = [math.log(100.0), math.log(110.0)]
    se = math.sqrt(statistics.variance(la) / 2)
    assert e.dof == pytest.approx(1.0)
    assert e.high == pytest.approx(math.exp(statistics.fmean(la) - math.log(100) + sps.t.ppf(0.975, 1) * se), rel=1e-9)


def test_unknown_rule_message_lists_the_rules():
    with pytest.raises(ValueError) as info:
        null_ratio(0.97, "maybe")
    assert str(info.value) == "fail rule 'maybe'; use one of significant, beyond-tolerance"


# -- the launch-level helpers (issue 14; their statistics are tested in tests/decide/test_gate_design.py)
from specguard.decide.prior import (  # noqa: E402
    HistoryOf,
    Origin,
    SpreadEstimate,
    between_variance,
    pool_spreads,
)


def test_between_variance_without_a_measurement_is_the_prior():
    assert between_variance(0.01, None, 8.0) == (pytest.approx(1e-4), 8.0, SpreadSource())
    assert between_variance(0.01, None, math.inf) == (pytest.approx(1e-4), math.inf, SpreadSource())
    assert between_variance(0.01, SpreadEstimate(4e-4, 0.0), 8.0)[1:] == (8.0, SpreadSource())


def test_between_variance_pools_prior_and_history_by_their_degrees_of_freedom():
    """8 pseudo-dof of (1 %)^2 and 4 dof of (2 %)^2: (8e-4 + 16e-4) / 12 with 12 dof; an infinite
    prior dof is a known prior, which no history moves."""
    five = Origin(HistoryOf.SESSIONS, 5)
    var, dof, source = between_variance(0.01, SpreadEstimate(4e-4, 4.0, five), 8.0)
    assert var == pytest.approx(2.4e-3 / 12) and dof == 12.0 and source == SpreadSource(history=five)
    assert between_variance(0.01, SpreadEstimate(4e-4, 4.0), math.inf) == (pytest.approx(1e-4), math.inf, SpreadSource())


def test_pool_spreads_weights_by_dof_and_skips_empty_estimates():
    pooled = pool_spreads([SpreadEstimate(1e-4, 2.0), SpreadEstimate(4e-4, 1.0), None, SpreadEstimate(9.0, 0.0)])
    assert pooled == SpreadEstimate(pytest.approx(2e-4), 3.0, Origin(HistoryOf.CELLS, 2))
    assert pool_spreads([None]) is None


# -- pass is an equivalence claim at its own level (Tolerances.pass_confidence) -----------------
from specguard.decide.prior import Prior  # noqa: E402
from specguard.decide.stats import Criterion, Rule, compare_launches  # noqa: E402


def _steady_case():
    """A 1 % drop with launch spread 1 %: far from failing, but the family-level interval (99.97 %)
    is too wide to call it within a 3 % tolerance."""
    history = [[100.0, 100.4, 99.6], [101.0, 100.6, 101.4], [99.0, 99.3, 98.7]]
    current = [[99.0, 99.2, 98.8]]
    return current, history


def test_pass_uses_the_one_sided_pass_level_not_the_family_interval():
    current, history = _steady_case()
    strict = compare_launches(current, history, Criterion(0.97, 1 - 2 * 0.00017), Prior(0.01))
    tost = compare_launches(current, history, Criterion(0.97, 1 - 2 * 0.00017, Rule("significant", 0.95)), Prior(0.01))
    # the same estimate and fail interval either way
    assert (strict.ratio, strict.low, strict.high, strict.p_value) == (tost.ratio, tost.low, tost.high, tost.p_value)
    assert strict.low < 0.97 and strict.outcome() == INCONCLUSIVE
    assert tost.pass_low >= 0.97 and tost.outcome() == PASS
    # the pass bound is the 95 % one-sided t bound of the same standard error and dof
    q = sps.t.ppf(0.5 + tost.confidence / 2, tost.dof)
    se = (math.log(tost.high) - math.log(tost.low)) / (2 * q)
    assert tost.pass_low == pytest.approx(math.exp(math.log(tost.ratio) - sps.t.ppf(0.95, tost.dof) * se), rel=1e-9)


def test_pass_level_never_turns_a_fail_into_a_pass():
    history = [[100.0, 100.2, 99.8], [100.5, 100.3, 100.7], [99.5, 99.7, 99.3]]
    est = compare_launches([[90.0, 90.1, 89.9]], history, Criterion(0.97, 0.999, Rule("significant", 0.6)),
                           Prior(0.005))
    assert est.outcome() == FAIL and est.pass_low < 0.97


def test_pass_confidence_outside_a_one_sided_level_is_refused():
    current, history = _steady_case()
    with pytest.raises(ValueError, match="pass confidence 1.2"):
        compare_launches(current, history, Criterion(0.97, 0.99, Rule("significant", 1.2)), Prior(0.01))


def test_results_without_a_pass_bound_keep_the_fail_interval_rule():
    est = RatioEstimate(ratio=0.99, low=0.96, high=1.02, threshold=0.97, p_value=0.2, dof=10, confidence=0.99,
                        between_sd=0.01, between_source=SpreadSource())
    assert est.outcome() == INCONCLUSIVE
    assert RatioEstimate(**{**est.__dict__, "pass_low": 0.975, "pass_confidence": 0.95}).outcome() == PASS


# -- weighted Holm and the checked prior (issue 14, second round) -------------------------------
from specguard.decide.prior import PRIOR_CHECK_P, checked_prior  # noqa: E402


def test_weighted_holm_first_step_is_the_weighted_bonferroni_and_equal_weights_are_holm():
    p = [0.004, 0.03, 0.2, 0.001]
    assert holm_adjust(p, [1, 1, 1, 1]) == pytest.approx(holm_adjust(p))
    # weights 3:1:1:1 (sum 6): test 0 is compared with alpha * 3/6, i.e. adjusted p = 0.004 * 6 / 3
    adj = holm_adjust(p, [3, 1, 1, 1])
    assert adj[3] == pytest.approx(0.001 * 6)  # smallest p / w first: 0.001 / 1 < 0.004 / 3
    assert adj[0] == pytest.approx(max(0.006, 0.004 / 3 * 5))  # then the remaining weight is 5
    assert adj[1] == pytest.approx(0.03 * 2) and adj[2] == pytest.approx(max(0.06, 0.2))
    with pytest.raises(ValueError, match="one positive weight per p-value"):
        holm_adjust(p, [1, 1, 0, 1])


def test_weighted_holm_keeps_the_family_error_under_the_global_null():
    rng = np.random.default_rng(5)
    w = [0.25] * 8 + [1.0] * 12 + [2.0] * 6
    hits = sum(min(holm_adjust(list(rng.uniform(size=26)), w)) < 0.05 for _ in range(4000))
    assert hits / 4000 < 0.05 + 3 * math.sqrt(0.05 * 0.95 / 4000)


def test_checked_prior_is_raised_only_when_the_pooled_history_contradicts_it():
    assert checked_prior(0.01, None) == 0.01
    assert checked_prior(0.01, SpreadEstimate(0.8e-4, 12.0)) == 0.01  # quieter: never lowered
    assert checked_prior(0.01, SpreadEstimate(2.1e-4, 12.0)) == 0.01  # 12 * 2.1 = 25.2 < chi2(12) 99 % = 26.2
    assert checked_prior(0.005, SpreadEstimate(1e-4, 12.0)) == pytest.approx(0.01)  # prior at half: 12 * 4 = 48 > 26.2
    # one dof: the statistic 1 * S^2 / prior^2 against chi2(1) 99 % = 6.63
    assert checked_prior(0.005, SpreadEstimate(1.65e-4, 1.0)) == 0.005  # 6.6 < 6.63
    assert checked_prior(0.005, SpreadEstimate(1.67e-4, 1.0)) == pytest.approx(math.sqrt(1.67e-4))  # 6.68 > 6.63
    assert checked_prior(0.005, SpreadEstimate(0.97e-4, 1.0), p=0.05) == pytest.approx(math.sqrt(0.97e-4))  # 3.84


def test_checked_prior_false_alarm_rate_is_its_level_when_the_prior_is_right():
    rng = np.random.default_rng(9)
    draws = [SpreadEstimate(1e-4 * rng.chisquare(12) / 12, 12.0) for _ in range(8000)]
    for p in (PRIOR_CHECK_P, 0.05):
        raised = sum(checked_prior(0.01, d, p) > 0.01 for d in draws)
        assert abs(raised / 8000 - p) < 3 * math.sqrt(p * (1 - p) / 8000)
    assert PRIOR_CHECK_P == 0.01


def test_a_half_prior_checked_against_the_pool_keeps_false_fails_at_alpha():
    # prior declared at 0.5 % while sessions spread 1 %: without the check the prior's 8 pseudo
    # dof pull the cell's spread down and unchanged code fails too often.
    rng = np.random.default_rng(11)
    alpha, n = 0.01, 1500
    fails = {True: 0, False: 0}
    for _ in range(n):
        hist = [list(100 * np.exp(rng.normal(0, 0.01) + rng.normal(0, 0.003, 3))) for _ in range(5)]
        cur = [list(100 * np.exp(rng.normal(0, 0.01) + rng.normal(0, 0.003, 3)))]
        pool = SpreadEstimate(1e-4 * rng.chisquare(12) / 12, 12.0)  # the other cells' histories
        for check in (True, False):
            e = compare_launches(cur, hist, Criterion(1.0, 1 - 2 * alpha), Prior(0.005), pool=pool if check else None)
            fails[check] += e.outcome() == FAIL
    assert fails[True] / n < alpha + 3 * math.sqrt(alpha / n) < fails[False] / n


# -- the launch-level helpers, pinned exactly (mutation survivors of decide/stats.py, run after8) -----
from specguard.decide import stats as _st  # noqa: E402


def test_history_spread_subtracts_the_runs_share_and_never_goes_below_zero():
    hist = [[100.0, 101.0, 99.0], [110.0, 111.0, 109.0], [90.0, 91.0, 89.0]]
    logs = [np.log(h) for h in hist]
    sw2 = sum(float(((g - g.mean()) ** 2).sum()) for g in logs) / 6  # no stall: every run kept
    means = np.array([np.median(g) for g in logs])
    want = float(means.var(ddof=1)) - 1.35 * sw2 / 3
    one_launch = [[h] for h in hist]  # _history_spread reads sessions of launches
    for est in (_st.history_spread(hist), _st._history_spread(one_launch)):
        assert est.var == pytest.approx(want, rel=1e-12) and est.dof == 2 and est.origin == Origin(HistoryOf.SESSIONS, 3)
    same = [[100.0, 101.0, 99.0]] * 3  # identical sessions: all the spread is the runs' own
    assert _st._history_spread([[h] for h in same]).var == 0.0 and _st.history_spread(same).var == 0.0
    assert _st._history_spread([[[100.0]]]) is None
    with pytest.raises(ValueError, match="baseline samples must be positive"):
        _st._history_spread([[[100.0, -1.0]], [[100.0, 100.0]]])


def test_median_of_one_two_three_and_none():
    assert _st._median(np.array([3.0])) == 3.0
    assert _st._median(np.array([4.0, 2.0])) == 3.0
    assert _st._median(np.array([5.0, 1.0, 2.0])) == 2.0
    assert math.isnan(_st._median(np.array([])))


def test_robust_within_var_sets_a_stalled_run_aside():
    steady = np.log(np.array([100.0, 101.0, 99.0, 100.5]))
    stalled = np.log(np.array([100.0, 100.8, 99.2, 60.0]))  # one run at 0.6x: a stall
    var, dof = _st._robust_within_var([steady, stalled])
    kept = [steady, stalled[:3]]
    want = sum(float(((g - g.mean()) ** 2).sum()) for g in kept) / 5
    assert (var, dof) == (pytest.approx(want, rel=1e-12), 5.0)


def test_checked_prior_raises_a_contradicted_prior_and_keeps_a_zero_dof_pool_out():
    big = SpreadEstimate(0.03**2, 10.0)
    assert checked_prior(0.01, big) == pytest.approx(0.03)
    assert checked_prior(0.0, big) == pytest.approx(0.03)
    assert checked_prior(0.01, SpreadEstimate(0.03**2, 0.0)) == 0.01
    assert checked_prior(0.01, SpreadEstimate(0.0105**2, 10.0)) == 0.01  # not contradicted


def test_compare_launches_pools_launches_exactly():
    history = [[100.0, 100.4, 99.6], [101.0, 100.6, 101.4], [99.0, 99.3, 98.7]]
    crit = _st.Criterion(0.97, 0.99)
    one = _st.compare_launches([[99.0, 99.2, 98.8]], history, crit, Prior(0.01))
    two = _st.compare_launches([[99.0, 99.2, 98.8], [99.5, 99.7, 99.3]], history, crit, Prior(0.01))
    three = Origin(HistoryOf.SESSIONS, 3)
    assert one.between_source == SpreadSource(history=three, launches=(1,))
    assert two.between_source == SpreadSource(history=three, launches=(2,))
    assert two.ratio == pytest.approx(math.exp((math.log(99.0) + math.log(99.5)) / 2
                                               - np.mean([np.median(np.log(h)) for h in history])), rel=1e-12)
    # a zero prior (no declared spread) is allowed: the day share is then 0
    zero = _st.compare_launches([[99.0, 99.2, 98.8]], history, crit, Prior(0.0))
    assert zero.high > zero.ratio > zero.low > 0


def test_compare_launches_within_part_shrinks_with_launches():
    """With no between-session spread at all, only the runs' part is left: n_r * n_l runs."""
    history = [[100.0, 101.0, 99.0]] * 3
    a = [[100.0, 101.0, 99.0]]
    b = [[100.0, 101.0, 99.0], [100.0, 101.0, 99.0]]
    crit, prior = _st.Criterion(0.97, 0.99), Prior(0.0, day_sd=0.0)
    ea, eb = _st.compare_launches(a, history, crit, prior), _st.compare_launches(b, history, crit, prior)
    half = lambda e: math.log(e.high / e.low) / 2  # noqa: E731
    assert half(eb) < half(ea)


def test_launch_sets_name_an_empty_side():
    with pytest.raises(ValueError, match="no b samples"):
        _st.compare_launch_sets([[100.0, 101.0]], [[]], _st.Criterion(1.0, 0.99), Prior(0.01))
    with pytest.raises(ValueError, match="no a samples"):
        _st.compare_launch_sets([[]], [[100.0, 101.0]], _st.Criterion(1.0, 0.99), Prior(0.01))


def test_only_beyond_tolerance_bounds_fails_of_a_drop_inside_the_tolerance():
    # The tolerance is the drop the *estimate* must pass under "significant", not a guarantee: a
    # true 2 % drop (inside 3 %) fails far more often than the cell's alpha there, which bounds
    # false fails of unchanged code only; "beyond-tolerance" tests H0 "ratio >= 1 - tolerance"
    # itself, so its alpha bounds fails of every drop within the tolerance (docs/statistics.md).
    rng = np.random.default_rng(21)
    alpha, n = 0.01, 600
    fails = {"significant": 0, "beyond-tolerance": 0}
    for _ in range(n):
        hist = [list(100 * np.exp(rng.normal(0, 0.01) + rng.normal(0, 0.003, 3))) for _ in range(5)]
        cur = [list(98 * np.exp(rng.normal(0, 0.01) + rng.normal(0, 0.003, 3)))]
        for rule in fails:
            est = compare_launches(cur, hist, Criterion(0.97, 1 - 2 * alpha, Rule(rule, None)), Prior(0.01),
                                   pool=_st.history_spread(hist))
            fails[rule] += est.outcome() == FAIL
    assert fails["significant"] / n > 5 * alpha
    assert fails["beyond-tolerance"] / n <= alpha
