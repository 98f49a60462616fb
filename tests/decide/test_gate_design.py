"""The gate design: launches as units, relaunch on suspicion, the must-win speculation gate, the
history's spread with its degrees of freedom, and the one crossover estimator (its edges:
tests/decide/test_crossover.py)."""

import math
from pathlib import Path

import numpy as np
import pytest
from gate_support import history_gate, result, speculation_gate

from research.study.truth import within_factor
from specguard.config import ConfigError, Tolerances, parse_suite
from specguard.decide.crossover import estimate_crossover, first_crossing
from specguard.decide.gates import (
    GateDesign,
    design_of,
    final_failures,
    relaunch_plan,
    session_spread,
)
from specguard.decide.prior import HistoryOf, Origin, Prior, SpreadEstimate, SpreadSource, between_variance
from specguard.decide.stats import Criterion, RatioEstimate, compare_launch_sets, compare_launches, history_spread
from specguard.labels import Verdict
from specguard.report.verdict_text import message, relaunch_reason

PASS, FAIL, INCONCLUSIVE = Verdict.PASS, Verdict.FAIL, Verdict.INCONCLUSIVE

TOL = Tolerances()  # prior 1 %, day share 0.5 %


def _est(ratio, low, high, p=0.5):
    return RatioEstimate(ratio, low, high, 1.0, p, 10.0, 0.95, 0.01, SpreadSource())


def _width(e):
    return math.log(e.high) - math.log(e.low)


def test_more_launches_narrow_the_interval_only_by_their_own_share():
    rng = np.random.default_rng(1)
    hist = [list(100 * np.exp(rng.normal(0, 0.003, 3))) for _ in range(5)]
    one = [[100.0, 100.2, 99.8]]
    two = one + [[100.1, 99.9, 100.0]]
    crit, spread = Criterion(0.97, 0.99), SpreadEstimate(1e-4, 12)
    w1 = _width(compare_launches(one, hist, crit, Prior(0.01, day_sd=0.005), spread=spread))
    w2 = _width(compare_launches(two, hist, crit, Prior(0.01, day_sd=0.005), spread=spread))
    all_day = _width(compare_launches(two, hist, crit, Prior(0.01, day_sd=0.01), spread=spread))
    assert w2 < 0.9 * w1  # a second launch averages the launch part
    assert all_day == pytest.approx(w1, rel=0.1)  # when the whole spread is the day's, relaunching buys nothing


def test_history_spread_enters_with_its_degrees_of_freedom():
    measured = SpreadEstimate(1e-4, 4.0)
    var, dof, _ = between_variance(0.01, measured, 8.0)
    assert var == pytest.approx(1e-4) and dof == 12.0
    assert between_variance(0.01, None, math.inf)[1] == math.inf
    hist = [[100.0, 100.1, 99.9], [101.0, 101.1, 100.9], [99.0, 99.1, 98.9]]
    crit = Criterion(0.97, 0.999)
    t = compare_launches([[100.0, 100.1, 99.9]], hist, crit, Prior(0.01, dof=2.0))
    known = compare_launches([[100.0, 100.1, 99.9]], hist, crit, Prior(0.01, dof=math.inf))
    assert t.dof < 10 and known.dof > 1e3 and _width(t) > _width(known)  # few dof: a t quantile, not the normal one


def test_history_spread_is_the_variance_of_session_locations():
    rng = np.random.default_rng(2)
    offsets = rng.normal(0, 0.02, 400)
    hist = [list(np.exp(o + rng.normal(0, 0.001, 3))) for o in offsets]
    est = history_spread(hist)
    assert est.dof == 399 and math.sqrt(est.var) == pytest.approx(0.02, rel=0.1)
    assert history_spread([[1.0, 1.0]]) is None
    pooled = session_spread({("a", 1): hist[:5], ("a", 4): hist[5:10], ("b", 1): hist[10:15]})
    assert pooled.dof == 8  # K - 1 per configuration, not per cell: a configuration's cells share its launch


def test_a_configuration_counts_in_the_session_spread_by_its_median_level():
    """decide/gates.py session_spread: a stored session whose runs stalled at one level moves that
    level's spread, not the configuration's; a mean over levels would have doubled the estimate."""
    offsets = (0.0, 0.01, -0.01, 0.005, -0.005)
    at = {level: [[100 * math.exp(o) * f for f in (1.0, 1.001, 0.999)] for o in offsets] for level in (1, 4, 16)}
    quiet = session_spread({("a", c): h for c, h in at.items()})
    at[4][2] = [v * (0.7 if i else 1.0) for i, v in enumerate(at[4][2])]  # two of three runs stalled at 0.7x
    stalled = session_spread({("a", c): h for c, h in at.items()})
    assert math.sqrt(stalled.var) == pytest.approx(math.sqrt(quiet.var), rel=0.2) and stalled.dof == quiet.dof == 4
    assert history_spread(at[4]).var > 4 * quiet.var  # what that level alone would have said
    assert session_spread({("a", 1): at[1], ("b", 1): at[16]}).origin == Origin(HistoryOf.CONFIGURATIONS, 2)


def test_the_session_s_history_checks_a_prior_the_cell_s_own_history_lets_through():
    """decide/stats.py checking_history: K = 3 cells' own 2 dof let a prior at half the truth
    through; the session's pooled history (12 dof here) contradicts it at SESSION_CHECK_P, and the
    comparison then uses the session's spread with its dof. A session that agrees leaves the prior."""
    own = [[100.0, 100.1, 99.9], [100.2, 100.3, 100.1], [99.9, 100.0, 99.8]]  # 0.15 %: no contradiction
    crit = Criterion(0.97, 0.999)
    wide = SpreadEstimate(0.02**2, 12.0, Origin(HistoryOf.CONFIGURATIONS, 3))
    alone = compare_launches([[100.0, 100.1, 99.9]], own, crit, Prior(0.01, day_sd=0.005))
    checked = compare_launches([[100.0, 100.1, 99.9]], own, crit, Prior(0.01, day_sd=0.005, session=wide))
    agreeing = compare_launches([[100.0, 100.1, 99.9]], own, crit,
                                Prior(0.01, day_sd=0.005, session=SpreadEstimate(0.0105**2, 12.0)))
    assert alone.between_source.dropped_prior_sd is None and alone.between_sd < 0.01
    assert checked.between_sd == pytest.approx(0.02) and checked.dof < alone.dof  # 12 dof, not the prior's 16 + 2
    assert checked.between_source == SpreadSource(prior=False, history=Origin(HistoryOf.CONFIGURATIONS, 3),
                                                   dropped_prior_sd=0.01, launches=(1,))
    assert agreeing.between_sd == pytest.approx(alone.between_sd) and agreeing.between_source.prior


def test_a_stalled_run_does_not_fail_an_unchanged_cell():
    hist = [[100.0, 100.3, 99.7], [100.5, 100.2, 100.8], [99.6, 99.9, 99.4], [100.1, 100.0, 99.8], [99.9, 100.2, 100.1]]
    stalled = [[100.1, 70.0, 99.9]]
    res = history_gate("throughput", "x", 4, stalled, hist, tolerance=0.03, prior_between_sd=0.01,
                              alpha_cell=0.01 / 28, rule="significant")
    assert res.verdict != FAIL and res.estimate.ratio == pytest.approx(1.0, abs=0.01)


def test_false_fails_match_alpha_with_day_and_launch_noise():
    rng = np.random.default_rng(3)
    alpha, fails, n = 0.05, 0, 1500
    for _ in range(n):
        def session(launches):
            day = rng.normal(0, 0.005)
            return [list(100 * np.exp(day + rng.normal(0, 0.00866) + rng.normal(0, 0.004, 3))) for _ in range(launches)]
        hist = [session(1)[0] for _ in range(5)]
        est = compare_launches(session(2), hist, Criterion(1.0, 1 - 2 * alpha), Prior(0.01, day_sd=0.005))
        fails += est.p_value < alpha
    assert 0.02 < fails / n < 0.07  # calibrated: neither anti-conservative nor dead


def test_must_win_gate_tests_the_declared_gain_with_launches_as_units():
    rng = np.random.default_rng(4)
    ref = [list(100 * np.exp(rng.normal(0, 0.002, 3))) for _ in range(2)]
    slower = [list(95 * np.exp(rng.normal(0, 0.002, 3))) for _ in range(2)]
    faster = [list(110 * np.exp(rng.normal(0, 0.002, 3))) for _ in range(2)]
    tol = Tolerances()
    lose = speculation_gate("eagle3", 16, slower, ref, "baseline", must_win=True, tol=tol, alpha_cell=0.01 / 28)
    win = speculation_gate("eagle3", 16, faster, ref, "baseline", must_win=True, tol=tol, alpha_cell=0.01 / 28)
    assert lose.verdict == FAIL and lose.failed and lose.launches == 2
    assert win.verdict == PASS and "confidently below 1.00x" in message(win)
    hist = [r for r in ref]  # the reference's stored sessions when it was not measured in this session
    stored = speculation_gate("eagle3", 16, faster, None, "baseline", must_win=True, tol=tol,
                           alpha_cell=0.01 / 28, reference_history=hist)
    assert stored.estimate.ratio == pytest.approx(1.1, rel=0.01)
    with pytest.raises(ValueError):
        speculation_gate("eagle3", 16, faster, None, "baseline", must_win=True, tol=tol, alpha_cell=0.01)


def test_paired_speculation_cancels_the_day():
    a = [[110.0, 110.1, 109.9]]
    b = [[100.0, 100.1, 99.9]]
    crit = Criterion(1.0, 0.99)
    assert _width(compare_launch_sets(a, b, crit, Prior(0.01, day_sd=0.0099))) < 0.5 * _width(
        compare_launch_sets(a, b, crit, Prior(0.01, day_sd=0.0)))


def _result(gate, config, c, p, verdict=PASS, stage=1):
    return result(gate, config, c, verdict, _est(1.0, 0.9, 1.1, p), stage=stage)


def test_relaunch_plan_names_whom_and_why():
    refs = {"baseline": None, "eagle3": "baseline", "mtp": "baseline"}
    stage1 = [_result("throughput", "eagle3", 16, 0.01), _result("throughput", "mtp", 16, 0.2),
              _result("speculation", "mtp", 4, 0.03), _result("throughput", "baseline", 1, 0.5)]
    plan = relaunch_plan(stage1, refs, 0.05)
    assert set(plan) == {"eagle3", "mtp", "baseline"}
    assert "p = 0.01 < 0.05" in relaunch_reason(plan["eagle3"][0])
    assert relaunch_reason(plan["baseline"][0]).startswith("reference of speculation mtp c4")
    unenforced = result("speculation", "mtp", 64, PASS, _est(0.8, 0.7, 0.9, 1e-6), enforced=False)
    assert relaunch_plan([unenforced], refs) == {}
    # the losing rule: eagle3 relaunched for its throughput cell brings the baseline along only
    # where a must-win speculation cell leans to a loss (p < losing_p), never on its own
    leaning = [_result("throughput", "eagle3", 16, 0.01), _result("speculation", "eagle3", 16, 0.3)]
    assert set(relaunch_plan(leaning, refs, 0.05)) == {"eagle3"}  # losing_p 0: off
    plan = relaunch_plan(leaning, refs, 0.05, 0.5)
    assert set(plan) == {"eagle3", "baseline"} and "leans to a loss" in relaunch_reason(plan["baseline"][0])
    assert relaunch_reason(plan["baseline"][0]).startswith("reference of speculation eagle3 c16")
    assert set(relaunch_plan([_result("throughput", "eagle3", 16, 0.01), _result("speculation", "eagle3", 16, 0.7)],
                             refs, 0.05, 0.5)) == {"eagle3"}  # winning side: the reference stays
    assert relaunch_plan([_result("speculation", "eagle3", 16, 0.3)], refs, 0.05, 0.5) == {}  # nothing relaunched
    assert GateDesign().reference_losing_p == 0.5


def test_final_failures_lets_stage_two_supersede_an_inconclusive_stage_one():
    tol = Tolerances(inconclusive="fail")
    stage1 = [_result("throughput", "eagle3", 16, 0.02, INCONCLUSIVE), _result("throughput", "mtp", 16, 0.3, INCONCLUSIVE)]
    stage2 = [_result("throughput", "eagle3", 16, 0.4, PASS, stage=2)]
    failing = final_failures(stage1, stage2, tol, GateDesign())
    assert [(r.config, r.stage) for r in failing] == [("mtp", 1)]


def test_screen_rule_lets_the_pooled_decision_supersede_a_stage_one_fail():
    # "screen": stage 1 spends no alpha where a relaunch happened; the pooled stage-2 decision is
    # the test's only verdict, a stage-1 fail included (its p < alpha_cell <= relaunch_p relaunched it).
    tol = Tolerances()
    stage1 = [_result("throughput", "eagle3", 16, 1e-6, FAIL), _result("throughput", "mtp", 16, 0.3, PASS)]
    stage2 = [_result("throughput", "eagle3", 16, 0.2, PASS, stage=2)]
    assert final_failures(stage1, stage2, tol, GateDesign()) == []
    assert [(r.config, r.stage) for r in final_failures(stage1, [], tol, GateDesign())] == [("eagle3", 1)]  # attach mode
    with pytest.raises(ValueError, match="relaunch_p 0.001 is below family_alpha 0.01"):
        final_failures(stage1, stage2, tol, GateDesign(suspicion_p=0.001))
    assert final_failures(stage1, [], tol, GateDesign(suspicion_p=0.001, relaunch="off"))  # nothing screens: no bound


def test_crossover_is_interpolated_on_log_concurrency_with_an_interval():
    assert first_crossing([32, 64], [1.078, 0.648]) == pytest.approx(32 * 2 ** (math.log(1.078) / math.log(1.078 / 0.648)))
    ratios = {16: _est(1.31, 1.28, 1.34), 32: _est(1.078, 1.05, 1.11), 64: _est(0.648, 0.63, 0.67)}
    x = estimate_crossover(ratios)
    assert 32 < x.low < x.estimate < x.high < 64 and (x.last_ahead, x.first_behind) == (32, 64)
    assert 35 <= x.estimate < 36
    ahead = estimate_crossover({1: _est(1.5, 1.4, 1.6), 4: _est(1.2, 1.1, 1.3)})
    assert ahead.estimate is None and ahead.above_range
    behind = estimate_crossover({1: _est(0.9, 0.85, 0.95), 4: _est(0.8, 0.7, 0.9)})
    assert behind.below_range and behind.estimate is None
    assert within_factor(40.0, 35.9, 1.25) and not within_factor(48.0, 35.9, 1.25)
    assert within_factor(None, None, 1.25) and not within_factor(None, 35.9, 1.25)


def test_suite_keys_for_launches_and_relaunch_are_checked(tmp_path):
    raw = {"servers": {"b": {"engine": "emulator", "model_path": "/m"}}, "advanced": {"relaunch": "always"}}
    with pytest.raises(ConfigError, match="advanced.relaunch"):
        parse_suite(raw, tmp_path / "s.toml")
    with pytest.raises(ConfigError, match="advanced.launches"):
        parse_suite({**raw, "advanced": {"launches": 0}}, tmp_path / "s.toml")
    ok = parse_suite({**raw, "advanced": {"launches": 2, "relaunch": "off"}}, tmp_path / "s.toml")
    assert ok.sweep.launches == 2 and ok.sweep.max_launches == 3
    with pytest.raises(ConfigError, match="advanced.max_launches = 1: must be >= advanced.launches \\(2\\)"):
        parse_suite({**raw, "advanced": {"launches": 2, "max_launches": 1}}, tmp_path / "s.toml")
    two = parse_suite({**raw, "advanced": {"max_launches": 2}}, tmp_path / "s.toml")
    assert design_of(two).max_launches == 2 and design_of(ok).max_launches == 3
    assert design_of(ok) == GateDesign(launches=2, relaunch="off")


def test_family_alphas_split_the_family_by_gate_weight_and_skip_report_only_tests():
    from specguard.decide.gates import family_alphas

    tests = [("throughput", True)] * 12 + [("accept_length", True)] * 8 + [("speculation", True)] * 6 \
        + [("speculation", False)] * 2
    equal = family_alphas(tests, 0.01, GateDesign(gate_weights=(("throughput", 1.0), ("accept_length", 1.0),
                                                                ("speculation", 1.0))))
    assert equal[0] == pytest.approx(0.01 / 26) and equal[-1] == pytest.approx(0.01 / 26)  # 26 tests can fail
    a = family_alphas(tests, 0.01)  # the default weights: throughput 1, accept length 0.25, must-win speculation 2
    total = 12 + 8 * 0.25 + 6 * 2.0
    assert a[0] == pytest.approx(0.01 / total) and a[12] == pytest.approx(0.0025 / total)
    assert a[20] == pytest.approx(0.02 / total)
    assert sum(x for x, (_, enforced) in zip(a, tests) if enforced) == pytest.approx(0.01)  # the family bound


def test_must_win_gate_falls_back_to_the_sessions_spread_without_stored_sessions_at_its_level():
    """No stored session of either configuration at this level: the spread pooled over the
    session's cells (``spread``) is the estimate; with the pair's histories, theirs is."""
    loud = SpreadEstimate(4e-4, 12.0, Origin(HistoryOf.CELLS, 4))  # the session's other cells spread 2 %
    args = ("eagle3", 16, [[104.0, 104.2, 103.9]], [[100.0, 100.1, 99.9]], "baseline")
    kw = dict(must_win=True, tol=Tolerances(), alpha_cell=0.001, spread=loud)
    empty = speculation_gate(*args, pair_histories=([], []), **kw)
    quiet = [[100.0, 100.1, 99.9], [100.2, 100.3, 100.1], [99.9, 100.0, 99.8]]
    own = speculation_gate(*args, pair_histories=(quiet, quiet), **kw)
    assert empty.estimate.between_source.history == loud.origin != own.estimate.between_source.history
    assert empty.estimate.between_sd > own.estimate.between_sd


def test_must_win_gate_uses_the_pairs_histories_when_given():
    rng = np.random.default_rng(4)
    spec_hist = [list(110 * np.exp(rng.normal(0, 0.03) + rng.normal(0, 0.002, 3))) for _ in range(5)]
    ref_hist = [list(100 * np.exp(rng.normal(0, 0.03) + rng.normal(0, 0.002, 3))) for _ in range(5)]
    tol = Tolerances()
    kw = dict(must_win=True, tol=tol, alpha_cell=0.001)
    prior_only = speculation_gate("eagle3", 16, [[104.0, 104.2, 103.9]], [[100.0, 100.1, 99.9]], "baseline", **kw)
    paired = speculation_gate("eagle3", 16, [[104.0, 104.2, 103.9]], [[100.0, 100.1, 99.9]], "baseline",
                           pair_histories=(spec_hist, ref_hist), **kw)
    assert paired.estimate.between_sd > 1.5 * prior_only.estimate.between_sd  # histories that spread 3 % widen it
    assert _width(paired.estimate) > _width(prior_only.estimate)


def test_the_cell_prior_check_raises_a_prior_its_history_contradicts_and_names_it():
    rng = np.random.default_rng(6)
    hist = [list(100 * np.exp(rng.normal(0, 0.03) + rng.normal(0, 0.002, 3))) for _ in range(5)]  # 3 % spread
    kw = dict(tolerance=0.03, prior_between_sd=0.005, alpha_cell=0.001, rule="significant")
    checked = history_gate("throughput", "b", 4, [[99.0, 99.1, 98.9]], hist, **kw)
    off = history_gate("throughput", "b", 4, [[99.0, 99.1, 98.9]], hist, design=GateDesign(prior_check_p=0.0), **kw)
    assert checked.estimate.between_source == SpreadSource(prior=False, history=Origin(HistoryOf.SESSIONS, 5),
                                                            dropped_prior_sd=0.005, launches=(1,))
    assert checked.estimate.between_sd > 2 * off.estimate.between_sd  # 16 pseudo dof at 0.5 % no longer drown 3 %
    right = history_gate("throughput", "b", 4, [[99.0, 99.1, 98.9]], hist, **{**kw, "prior_between_sd": 0.03})
    assert right.estimate.between_source.prior  # a prior the history agrees with stands


# -- the statistics audit (issue 23) -------------------------------------------------------------
def _relaunched_history(rng, sessions, launches_of, day=0.005, launch=0.00866, run=0.003):
    """Stored sessions of day + launch + run noise: each a SessionRuns of launches_of(k) launches."""
    from specguard.decide.stats import SessionRuns

    out = []
    for k in range(sessions):
        d = rng.normal(0, day)
        out.append(SessionRuns([list(100 * np.exp(d + rng.normal(0, launch) + rng.normal(0, run, 3)))
                                for _ in range(launches_of(k))]))
    return out


def test_a_relaunched_stored_session_counts_as_its_launches_not_one_flat_sample():
    # Half the stored sessions were relaunched (3 launches). Read flat, a session's location
    # averages three launch offsets and its runs' spread absorbs them, so the history's spread
    # reads low; read as launches, it is the one-launch spread sb = 1 % (day 0.5 % + launch 0.87 %).
    rng = np.random.default_rng(11)
    hist = _relaunched_history(rng, 600, lambda k: 3 if k % 2 else 1)
    by_launch = history_spread(hist)
    flat = history_spread([list(s) for s in hist])
    assert math.sqrt(by_launch.var) == pytest.approx(0.01, rel=0.1) and by_launch.dof == 599
    assert math.sqrt(flat.var) < 0.9 * math.sqrt(by_launch.var)  # 0.82 %: a third of the variance lost
    single = _relaunched_history(np.random.default_rng(12), 5, lambda k: 1)
    assert history_spread(single) == history_spread([list(s) for s in single])  # one launch: as before


def test_comparisons_with_relaunched_stored_sessions_keep_their_false_fail_rate():
    rng = np.random.default_rng(13)
    alpha, n, fails = 0.05, 1200, 0
    for _ in range(n):
        hist = _relaunched_history(rng, 5, lambda k: 1 + 2 * (k % 2))
        cur = _relaunched_history(rng, 1, lambda k: 1)[0].launches
        est = compare_launches(cur, hist, Criterion(1.0, 1 - 2 * alpha), Prior(0.01, day_sd=0.005),
                               pool=history_spread(hist))
        fails += est.p_value < alpha
    assert 0.025 < fails / n < 0.075  # calibrated with the launch as the unit in the history too


def test_the_history_reader_groups_a_stored_sessions_runs_by_launch():
    from specguard.session.history import _by_launch
    from specguard.store.baseline_file import RunSample, StoredSession

    runs = [RunSample(i, lid, tok, 100, 1.0, 4, 0, None, 0, step_time_ms=ms)
            for i, (lid, tok, ms) in enumerate([("L1", 100.0, 5.0), ("L1", 101.0, 5.1), ("L2", 97.0, None),
                                                  ("L2", 98.0, 5.2), ("L3", 99.0, 4.9)])]
    session = StoredSession("s", "2026-12-01", {}, runs)
    tok = _by_launch(session, "throughputs")
    assert list(tok) == [100.0, 101.0, 97.0, 98.0, 99.0] and tok.launches == ((100.0, 101.0), (97.0, 98.0), (99.0,))
    rates = _by_launch(session, "step_rates")  # a run without a step time leaves its launch, not the session
    assert rates.launches == ((200.0, 1e3 / 5.1), (1e3 / 5.2,), (1e3 / 4.9,))
    one = _by_launch(StoredSession("t", "2026-12-01", {}, runs[:2]), "throughputs")
    assert one.launches == ((100.0, 101.0),)


def test_a_contradicted_prior_is_dropped_not_credited_with_its_pseudo_dof():
    # Before: the prior raised to the history's S and still counted as 16 pseudo dof, so 5 stored
    # sessions (4 dof) entered with 20. Now the contradicting history stands alone, with its 4.
    from specguard.decide.prior import between_estimate

    hist = SpreadEstimate(0.024**2, 4.0, Origin(HistoryOf.SESSIONS, 5))
    var, dof, source = between_estimate(0.012 / 2, hist, hist, 16.0)  # 4 * 16 = 64 > chi2(4) 95 % = 9.49
    assert (var, dof) == (pytest.approx(0.024**2), 4.0) and source.dropped_prior_sd == 0.006 and not source.prior
    agrees = SpreadEstimate(0.011**2, 4.0, Origin(HistoryOf.SESSIONS, 5))
    var, dof, source = between_estimate(0.01, agrees, agrees, 16.0)
    assert dof == 20.0 and var == pytest.approx((16 * 0.01**2 + 4 * 0.011**2) / 20) and source == SpreadSource(history=agrees.origin)


def test_the_prior_weight_has_one_default():
    import inspect

    from specguard.config import PRIOR_BETWEEN_DOF

    assert inspect.signature(Prior).parameters["dof"].default == PRIOR_BETWEEN_DOF
    assert GateDesign().prior_dof == Tolerances().prior_between_dof == PRIOR_BETWEEN_DOF


def test_inconclusive_fail_warns_once_on_one_line_where_the_suite_sets_it(tmp_path, capsys):
    from specguard.config import load_suite

    text = (Path(__file__).resolve().parents[2] / "perf_tests" / "suite.toml").read_text()
    path = tmp_path / "suite.toml"
    path.write_text(text.replace('inconclusive = "pass"', 'inconclusive = "fail"'))
    load_suite(path)
    load_suite(path)
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"specguard: warning: {path}: advanced.inconclusive = 'fail': an ")
    assert "family_alpha no longer bounds false fails" in err[0]
    quiet = tmp_path / "quiet.toml"
    quiet.write_text(text)
    load_suite(quiet)
    assert capsys.readouterr().err == ""


def test_the_prior_check_level_is_a_design_parameter():
    # A history whose statistic (K - 1) S^2 / prior^2 lies between chi2(4)'s 95 % and 99 %
    # quantiles (9.49, 13.28): contradicted at 5 %, not at the default 1 %.
    hist = [[100.0 * math.exp(x)] * 3 for x in (-0.022, -0.01, 0.0, 0.01, 0.022)]  # statistic 11.7
    own = history_spread(hist)
    assert 9.49 < own.dof * own.var / 0.01**2 < 13.28
    kw = dict(tolerance=0.03, prior_between_sd=0.01, alpha_cell=0.001, rule="significant")
    default = history_gate("throughput", "b", 4, [[99.0, 99.1, 98.9]], hist, **kw)
    looser = history_gate("throughput", "b", 4, [[99.0, 99.1, 98.9]], hist, design=GateDesign(prior_check_p=0.05), **kw)
    assert default.estimate.between_source.dropped_prior_sd is None and default.estimate.dof > 16
    assert looser.estimate.between_source.dropped_prior_sd == 0.01 and looser.estimate.dof < default.estimate.dof
