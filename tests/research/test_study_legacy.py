"""The retired gates the study still compares against (research/study/legacy.py): the one-launch
comparison with the spread as known (``compare_to_history``), its throughput / accept-length and
speculation gates, the "halves" stage rule and the unchecked prior of on-suspicion-r1. The gate
study's legacy and on-suspicion-r1 rows (docs/gate-study.md) are decided by these."""

import math
import statistics

import numpy as np
import pytest
from scipy import stats as sps

from research.study.legacy import (
    MIN_SESSIONS_FOR_SPREAD,
    R1_RULES,
    compare_to_history,
    history_gate,
    speculation_gate,
    unchecked_history_gate,
    unchecked_must_win_gate,
)
from specguard.config import Tolerances
from specguard.decide.gates import (
    ERROR,
    FAIL,
    INCONCLUSIVE,
    PASS,
    GateDesign,
    GateResult,
    final_failures,
    holm_failures,
    launch_history_gate,
    must_win_gate,
)
from specguard.decide.stats import RatioEstimate

BASE = [[1000, 1005, 995], [1010, 1000, 1002], [990, 995, 1000]]


# -- the one-launch comparison with the between-session spread as known ----------------------
def test_clear_drop_fails_and_no_change_passes():
    base = [[1000, 1005, 995], [1010, 1000, 1002], [990, 995, 1000]]
    drop = compare_to_history([850, 852, 848], base, threshold=0.95, prior_between_sd=0.01, confidence=0.99)
    same = compare_to_history([1001, 999, 1003], base, threshold=0.95, prior_between_sd=0.01, confidence=0.99)
    assert drop.outcome() == FAIL and drop.p_value < 1e-3
    assert same.outcome() == PASS
    assert drop.ratio == pytest.approx(850 / 999.7, rel=1e-3)


def test_single_stored_session_uses_the_prior_not_zero():
    est = compare_to_history([1000, 1001, 999], [[1000, 1001, 999]], threshold=0.95, prior_between_sd=0.03,
                             confidence=0.95)
    assert est.between_source == "prior" and est.between_sd == 0.03
    assert est.high / est.low > 1.1  # the prior widens the interval far beyond the within-run spread


def test_small_drop_within_tolerance_is_not_a_failure():
    est = compare_to_history([980, 981, 979], [[1000, 1001, 999]] * 3, threshold=0.95, prior_between_sd=0.005,
                             confidence=0.99)
    assert est.low > 0.95  # the whole interval is within the 5 % tolerance: a pass, not merely "not a fail"
    assert est.outcome() == PASS


def test_false_fail_rate_with_between_session_drift_is_controlled():
    """A/A: within 1%, between-session 1%; the naive within-only test fails ~13% (statistics.md)."""
    rng = np.random.default_rng(1)
    fails = 0
    trials = 2000
    for _ in range(trials):
        hist = [list(np.exp(rng.normal(rng.normal(0, 0.01), 0.01, 3))) for _ in range(3)]
        cur = list(np.exp(rng.normal(rng.normal(0, 0.01), 0.01, 3)))
        est = compare_to_history(cur, hist, threshold=1.0, prior_between_sd=0.01, confidence=0.98)
        fails += est.outcome() == FAIL
    assert fails / trials < 0.02  # one-sided alpha 0.01, with slack for simulation error


def test_power_for_a_large_drop():
    rng = np.random.default_rng(2)
    hits = 0
    for _ in range(500):
        hist = [list(np.exp(rng.normal(rng.normal(0, 0.01), 0.01, 3))) for _ in range(3)]
        cur = list(np.exp(rng.normal(math.log(0.85) + rng.normal(0, 0.01), 0.01, 3)))
        hits += compare_to_history(cur, hist, threshold=0.95, prior_between_sd=0.01, confidence=0.98).outcome() == FAIL
    assert hits / 500 > 0.9


@pytest.mark.parametrize("bad", [[], [0.0, 1.0], [float("nan"), 1.0], [-1.0, 2.0]])
def test_bad_samples_raise_clear_errors(bad):
    with pytest.raises(ValueError):
        compare_to_history(bad, [[1.0, 1.0]], threshold=0.95, prior_between_sd=0.01, confidence=0.95)


def test_significant_rule_fails_a_real_drop_beyond_the_tolerance_the_strict_rule_cannot_confirm():
    cur, base = _drop_history(0.05)
    strict = compare_to_history(cur, base, threshold=0.97, prior_between_sd=0.01, confidence=0.999,
                                rule="beyond-tolerance")
    significant = compare_to_history(cur, base, threshold=0.97, prior_between_sd=0.01, confidence=0.999,
                                     rule="significant")
    assert strict.ratio == pytest.approx(significant.ratio)
    assert strict.high > 0.97 > strict.ratio  # the interval straddles the tolerance
    assert strict.outcome() == INCONCLUSIVE
    assert significant.high < 1.0 and significant.outcome() == FAIL
    assert significant.p_value < strict.p_value  # tested against 1, not against 0.97


def test_significant_rule_does_not_fail_a_real_drop_within_the_tolerance():
    cur, base = _drop_history(0.02)
    est = compare_to_history(cur, base, threshold=0.97, prior_between_sd=0.002, confidence=0.99, rule="significant")
    assert est.high < 1.0 and est.ratio > 0.97  # significant, but smaller than the tolerance
    assert est.low > 0.97 and est.outcome() == PASS  # the interval is within the tolerance too


def test_holm_never_fails_a_drop_estimated_within_the_tolerance():
    cur, base = _drop_history(0.02)
    small = history_gate("throughput", "x", 1, cur, base, tolerance=0.03, prior_between_sd=0.002, alpha_cell=0.005,
                          rule="significant")
    cur, base = _drop_history(0.045)
    big = history_gate("throughput", "x", 4, cur, base, tolerance=0.03, prior_between_sd=0.01, alpha_cell=1e-9,
                        rule="significant")
    assert small.estimate.p_value < 0.01 and big.verdict != FAIL and big.estimate.p_value < 0.01
    assert holm_failures([small, big], family_alpha=0.05) == [big]


def test_unknown_rule_is_a_clear_error():
    with pytest.raises(ValueError, match="fail rule 'maybe'"):
        compare_to_history([1.0, 1.0], [[1.0, 1.0]], threshold=0.95, prior_between_sd=0.01, confidence=0.95,
                           rule="maybe")


def _oracle_history(cur, hist, *, threshold, prior, confidence, rule):
    lc = [math.log(v) for v in cur]
    lh = [[math.log(v) for v in s] for s in hist]
    groups = [g for g in [lc, *lh] if len(g) > 1]
    ss = sum(sum((v - statistics.fmean(g)) ** 2 for v in g) for g in groups)
    dof_w = sum(len(g) - 1 for g in groups)
    sw2 = ss / dof_w
    means = [statistics.fmean(s) for s in lh]
    k, n_h = len(lh), statistics.fmean(len(s) for s in lh)
    sb2 = prior**2
    if k >= 3:
        sb2 = max(sb2, statistics.variance(means) - sw2 / n_h)
    within = sw2 / len(lc) + sw2 / (n_h * k)
    var = within + sb2 * (1 + 1 / k)
    dof = var**2 / (within**2 / dof_w)
    se = math.sqrt(var)
    diff = statistics.fmean(lc) - statistics.fmean(means)
    q = sps.t.ppf(0.5 + confidence / 2, dof)
    test_at = max(threshold, 1.0) if rule == "significant" else threshold
    p = sps.t.cdf((diff - math.log(test_at)) / se, dof)
    return (math.exp(diff), math.exp(diff - q * se), math.exp(diff + q * se), p, dof)


@pytest.mark.parametrize("cur, hist, prior, rule", [
    ([950, 960, 955], [[1000, 1005, 995], [1010, 1000, 1002], [990, 995, 1000]], 0.01, "significant"),
    ([950, 960, 955], [[1000, 1005, 995], [1010, 1000, 1002], [990, 995, 1000]], 0.01, "beyond-tolerance"),
    ([1000, 1001], [[1000, 1004, 996, 1001], [1100, 1096, 1102, 1099]], 0.02, "significant"),  # K = 2: prior only
    # history spread > prior
    ([1000, 1001, 1003, 998], [[1000, 1005], [1080, 1085], [930, 935], [1010, 1000]], 0.01, "significant"),
])
def test_compare_to_history_matches_the_formula(cur, hist, prior, rule):
    e = compare_to_history(cur, hist, threshold=0.97, prior_between_sd=prior, confidence=0.98, rule=rule)
    ratio, low, high, p, dof = _oracle_history(cur, hist, threshold=0.97, prior=prior, confidence=0.98, rule=rule)
    assert (e.ratio, e.low, e.high) == pytest.approx((ratio, low, high), rel=1e-9)
    assert e.p_value == pytest.approx(p, rel=1e-7) and e.dof == pytest.approx(dof, rel=1e-9)
    assert e.confidence == 0.98 and e.threshold == 0.97


def test_history_spread_is_the_sample_sd_of_session_means():
    """Sessions without within-run spread: the between-session sd is exactly the sample (n - 1) sd
    of the session means of logs. A population sd (ddof=0) would be sqrt(2/3) of it."""
    hist = [[100.0, 100.0], [105.0, 105.0], [110.0, 110.0]]
    e = compare_to_history([100.0, 100.0], hist, threshold=0.97, prior_between_sd=0.001, confidence=0.98)
    expected = statistics.stdev([math.log(100), math.log(105), math.log(110)])
    assert e.between_sd == pytest.approx(expected, rel=1e-12)
    assert e.between_source == "history of 3 sessions"


def test_history_spread_is_net_of_the_within_session_share():
    hist = [[100.0, 102.0], [105.0, 107.1], [110.0, 112.2]]
    e = compare_to_history([100.0, 102.0], hist, threshold=0.97, prior_between_sd=0.001, confidence=0.98)
    lh = [[math.log(v) for v in s] for s in hist]
    sw2 = statistics.fmean([statistics.variance(g) for g in [[math.log(100), math.log(102)], *lh]])
    expected = math.sqrt(statistics.variance([statistics.fmean(g) for g in lh]) - sw2 / 2)
    assert e.between_sd == pytest.approx(expected, rel=1e-9)


def test_fewer_than_three_sessions_never_estimate_the_spread():
    assert MIN_SESSIONS_FOR_SPREAD == 3
    wide = [[100.0, 100.5], [130.0, 130.5]]
    e = compare_to_history([100.0, 100.5], wide, threshold=0.97, prior_between_sd=0.01, confidence=0.98)
    assert e.between_source == "prior" and e.between_sd == 0.01


def test_history_quieter_than_the_prior_keeps_the_prior():
    quiet = [[1000.0, 1000.5], [1000.2, 1000.7], [1000.1, 1000.6]]
    e = compare_to_history([1000.0, 1000.5], quiet, threshold=0.97, prior_between_sd=0.02, confidence=0.98)
    assert e.between_source == "prior" and e.between_sd == 0.02


@pytest.mark.parametrize("current, history, match", [
    ([], [[1.0, 1.0]], "no current samples"),
    ([1.0, 0.0], [[1.0, 1.0]], "current samples must be positive and finite"),
    ([1.0, 1.0], [[1.0, -1.0]], "baseline samples must be positive and finite"),
    ([1.0, 1.0], [[]], "no baseline sessions to compare with"),
    ([1.0, 1.0], [], "no baseline sessions to compare with"),
])
def test_error_messages_name_the_side(current, history, match):
    with pytest.raises(ValueError, match=match):
        compare_to_history(current, history, threshold=0.95, prior_between_sd=0.01, confidence=0.95)


def test_single_run_sessions_rest_on_the_between_spread_alone():
    """No session has two runs: no within variance at all, the spread of the session means is the
    whole story (normal quantiles: it is treated as known)."""
    hist = [[990.0], [1000.0], [1010.0]]
    e = compare_to_history([1000.0], hist, threshold=0.97, prior_between_sd=0.001, confidence=0.95)
    sb = statistics.stdev([math.log(v[0]) for v in hist])
    assert e.between_sd == pytest.approx(sb, rel=1e-12) and e.dof == math.inf
    se = math.sqrt(sb**2 * (1 + 1 / 3))
    diff = math.log(1000.0) - statistics.fmean([math.log(v[0]) for v in hist])
    assert e.high == pytest.approx(math.exp(diff + sps.norm.ppf(0.975) * se), rel=1e-9)


def _drop_history(drop: float) -> tuple[list[float], list[list[float]]]:
    base = [[1000, 1002, 998], [1004, 1001, 1003], [997, 999, 1000]]
    return [1000 * (1 - drop) * f for f in (1.0, 1.001, 0.999)], base


def test_history_gate_fails_a_clear_drop_with_a_full_message():
    r = history_gate("throughput", "eagle3", 16, [850, 852, 848], BASE, tolerance=0.03, prior_between_sd=0.01,
                     alpha_cell=0.01, rule="significant")
    assert r.verdict == FAIL and r.failed and r.enforced
    assert r.message == ("throughput eagle3 c16: 850 tok/s vs baseline (3 sessions) 999.7 tok/s, ratio 0.850 "
                         "[0.827, 0.874] (98.00% CI, between-launch sd 1.0% from prior), tolerance 3%, "
                         "rule significant -> FAIL")
    assert (r.gate, r.config, r.concurrency, r.alpha) == ("throughput", "eagle3", 16, 0.01)
    assert r.current == pytest.approx(850.0) and r.reference == pytest.approx(2999 / 3)
    assert r.estimate.threshold == pytest.approx(0.97) and r.estimate.test_at == 1.0


def test_history_gate_accept_length_has_no_unit_and_one_session_is_singular():
    r = history_gate("accept_length", "eagle3", 16, [3.0, 3.01, 2.99], [[3.0, 3.0, 3.01]], tolerance=0.03,
                     prior_between_sd=0.003, alpha_cell=0.01, rule="beyond-tolerance")
    assert r.verdict == PASS and not r.failed
    assert r.message == ("accept_length eagle3 c16: 3 vs baseline (1 session) 3.003, ratio 0.999 [0.988, 1.010] "
                         "(98.00% CI, between-launch sd 0.3% from prior), tolerance 3%, rule beyond-tolerance -> PASS")
    assert r.estimate.test_at == pytest.approx(0.97)  # beyond-tolerance tests at the threshold itself


def test_history_gate_rule_is_passed_through():
    """A 5 % drop at a strict level: significant (fails) under one rule, inconclusive under the other."""
    cur = [950, 950.95, 949.05]
    base = [[1000, 1002, 998], [1004, 1001, 1003], [997, 999, 1000]]
    kw = dict(tolerance=0.03, prior_between_sd=0.01, alpha_cell=0.0005)
    assert history_gate("throughput", "x", 1, cur, base, rule="significant", **kw).verdict == FAIL
    assert history_gate("throughput", "x", 1, cur, base, rule="beyond-tolerance", **kw).verdict == INCONCLUSIVE


def test_history_gate_tolerance_sets_the_threshold():
    """A significant 4 % drop fails at tolerance 3 % and passes at 10 % (interval above 0.9)."""
    kw = dict(prior_between_sd=0.01, alpha_cell=0.01, rule="significant")
    tight = history_gate("throughput", "x", 1, [960, 962, 958], BASE, tolerance=0.03, **kw)
    loose = history_gate("throughput", "x", 1, [960, 962, 958], BASE, tolerance=0.1, **kw)
    assert tight.verdict == FAIL and tight.estimate.threshold == pytest.approx(0.97)
    assert loose.verdict == PASS and loose.estimate.threshold == pytest.approx(0.9)
    assert "tolerance 10%" in loose.message


def test_history_gate_prior_reaches_the_estimate():
    r = history_gate("throughput", "x", 1, [1000, 1001, 999], [[1000, 1001, 999]], tolerance=0.03,
                     prior_between_sd=0.04, alpha_cell=0.01, rule="significant")
    assert r.estimate.between_sd == 0.04


@pytest.mark.parametrize("current", [[], [1000.0]])
def test_history_gate_with_fewer_than_two_samples_is_an_error_not_a_verdict(current):
    r = history_gate("throughput", "mtp", 4, current, BASE, tolerance=0.03, prior_between_sd=0.01, alpha_cell=0.01,
                     rule="significant")
    assert r.verdict == ERROR and r.estimate is None and not r.failed
    assert r.message == f"throughput mtp c4: only {len(current)} samples; need >= 2"
    assert (r.gate, r.config, r.concurrency) == ("throughput", "mtp", 4)


def test_history_gate_with_exactly_two_samples_decides():
    r = history_gate("throughput", "x", 1, [1000, 1002], BASE, tolerance=0.03, prior_between_sd=0.01,
                     alpha_cell=0.01, rule="significant")
    assert r.verdict == PASS


# -- the one-launch speculation gate, on the prior alone -------------------------------------
def test_speculation_gate_win_where_it_must():
    r = speculation_gate("eagle3", 4, [110, 111, 109], [100, 101, 99], "baseline (this session)", must_win=True,
                         tol=Tolerances(), alpha_cell=0.01)
    assert r.verdict == PASS and r.enforced and not r.failed
    assert r.message == ("speculation eagle3 c4: 110 tok/s vs baseline (this session) 100 tok/s, ratio 1.100 "
                         "[1.059, 1.143] (98.00% CI, between-launch sd 1.0% from prior), must not be below 1.00x "
                         "(must win here) -> PASS")
    assert (r.gate, r.config, r.concurrency, r.alpha) == ("speculation", "eagle3", 4, 0.01)
    assert r.current == pytest.approx(110) and r.reference == pytest.approx(100)


def test_speculation_gate_loss_outside_the_must_win_range_only_reports():
    r = speculation_gate("eagle3", 64, [90, 91, 89], [100, 101, 99], "baseline", must_win=False,
                         tol=Tolerances(speculation_min_gain=0.05), alpha_cell=0.01)
    assert r.verdict == FAIL and not r.enforced and not r.failed
    assert r.message.endswith("must not be below 1.05x (report only) -> FAIL")
    assert r.estimate.threshold == pytest.approx(1.05)


def test_speculation_gate_loss_where_it_must_win_fails():
    r = speculation_gate("eagle3", 16, [90, 91, 89], [100, 101, 99], "baseline", must_win=True, tol=Tolerances(),
                         alpha_cell=0.01)
    assert r.verdict == FAIL and r.failed


def test_speculation_gate_min_gain_is_tested_not_just_printed():
    """+3 % with a required gain of 5 %: the gain is confidently short of 1.05 (fail), though above 1."""
    r = speculation_gate("eagle3", 4, [103, 103.1, 102.9], [100, 100.1, 99.9], "baseline", must_win=True,
                         tol=Tolerances(speculation_min_gain=0.05, prior_between_sd=0.001), alpha_cell=0.01)
    assert r.verdict == FAIL and r.estimate.ratio > 1.0


def test_speculation_gate_uses_the_tok_s_prior_for_the_launch_spread():
    r = speculation_gate("eagle3", 4, [110, 111, 109], [100, 101, 99], "baseline", must_win=True,
                         tol=Tolerances(prior_between_sd=0.03, prior_between_sd_accept=0.001), alpha_cell=0.01)
    assert r.estimate.between_sd == 0.03
    assert r.estimate.confidence == pytest.approx(0.98)




# -- on-suspicion-r1: "halves" and the unchecked prior ------------------------------------------
def _inconclusive(p: float) -> GateResult:
    e = RatioEstimate(0.95, 0.93, 0.97, 0.97, p, 10.0, 0.98, 0.01, "prior", 1.0)
    return GateResult("throughput", "x", 1, INCONCLUSIVE, "m", e, alpha=0.001)


def test_halves_runs_holm_at_half_the_family_alpha():
    tol = Tolerances(family_alpha=0.01)
    r = _inconclusive(0.007)
    assert R1_RULES.stage_alpha_share == 0.5
    assert R1_RULES.failures([r], tol, GateDesign()) == []  # 0.007 >= 0.005
    assert R1_RULES.failures([_inconclusive(0.004)], tol, GateDesign()) == [_inconclusive(0.004)]
    assert final_failures([r], [], tol, GateDesign()) == [r]  # the gates: Holm at the whole family alpha
    assert R1_RULES.failures([GateResult("throughput", "x", 1, FAIL, "m")], tol, GateDesign())[0].verdict == FAIL


def _contradicting_history(seed: int = 6) -> list[list[float]]:
    rng = np.random.default_rng(seed)
    return [list(100 * np.exp(rng.normal(0, 0.03) + rng.normal(0, 0.002, 3))) for _ in range(5)]  # 3 % spread


def test_the_unchecked_history_gate_keeps_a_prior_its_history_contradicts():
    hist = _contradicting_history()
    kw = dict(tolerance=0.03, prior_between_sd=0.005, alpha_cell=0.001, rule="significant")
    checked = launch_history_gate("throughput", "b", 4, [[99.0, 99.1, 98.9]], hist, **kw)
    unchecked = unchecked_history_gate("throughput", "b", 4, [[99.0, 99.1, 98.9]], hist, **kw)
    assert unchecked.estimate.between_source.startswith("prior + history")  # not "prior raised"
    assert checked.estimate.between_sd > 2 * unchecked.estimate.between_sd
    assert (unchecked.gate, unchecked.config, unchecked.concurrency, unchecked.alpha) == ("throughput", "b", 4, 0.001)
    assert unchecked.message.startswith("throughput b c4: ") and unchecked.message.endswith(unchecked.verdict.upper())


def test_the_unchecked_gates_equal_the_gates_where_nothing_contradicts_the_prior():
    """With a quiet history the check never fires: r1's gates differ from the gates only by it."""
    quiet = [[100.0, 100.1, 99.9], [100.2, 100.3, 100.1], [99.9, 100.0, 99.8]]
    kw = dict(tolerance=0.03, prior_between_sd=0.01, alpha_cell=0.001, rule="significant", stage=2)
    assert unchecked_history_gate("throughput", "b", 4, [[99.0, 99.1], [99.2, 99.0]], quiet, **kw) == \
        launch_history_gate("throughput", "b", 4, [[99.0, 99.1], [99.2, 99.0]], quiet, **kw)
    tol = Tolerances()
    args = ("eagle3", 16, [[104.0, 104.2, 103.9]], [[100.0, 100.1, 99.9]], "baseline")
    kw = dict(must_win=True, tol=tol, alpha_cell=0.001, pair_histories=(quiet, quiet))
    assert unchecked_must_win_gate(*args, **kw) == must_win_gate(*args, **kw)


def test_the_unchecked_must_win_gate_keeps_the_prior_the_pairs_histories_contradict():
    spec_hist, ref_hist = _contradicting_history(4), _contradicting_history(5)
    args = ("eagle3", 16, [[104.0, 104.2, 103.9]], [[100.0, 100.1, 99.9]], "baseline")
    kw = dict(must_win=True, tol=Tolerances(prior_between_sd=0.005), alpha_cell=0.001,
              design=GateDesign(prior_day_sd=0.0025), pair_histories=(spec_hist, ref_hist))
    checked, unchecked = must_win_gate(*args, **kw), unchecked_must_win_gate(*args, **kw)
    assert "contradicted" in checked.estimate.between_source and "contradicted" not in unchecked.estimate.between_source
    assert checked.estimate.between_sd > 1.5 * unchecked.estimate.between_sd  # the launch part of the raised prior
