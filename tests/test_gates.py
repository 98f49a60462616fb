"""The gates' verdicts, messages and edge cases, and where speculation stops paying (crossover).

Each test pins one behaviour a plausible one-line bug would break (docs/mutation.md lists the
mutants these were written against): which level a crossover names, the interval level a cell's
alpha maps to, which verdicts count as failures, and which results Holm adds.
"""

from __future__ import annotations

import math

import pytest
from scipy import stats as sps

from specguard.config import Tolerances
from specguard.decide.gates import (ERROR, FAIL, INCONCLUSIVE, PASS, SKIP, GateResult, counts_as_failure, crossover,
                                    gate_confidence, history_gate, holm_failures, speculation_gate)
from specguard.decide.stats import RatioEstimate

BASE = [[1000, 1005, 995], [1010, 1000, 1002], [990, 995, 1000]]


def est(ratio: float, low: float | None = None, high: float | None = None, *, threshold: float = 1.0,
        p_value: float = 0.5, test_at: float | None = None) -> RatioEstimate:
    """A hand-made estimate: only the fields a test names matter."""
    return RatioEstimate(ratio=ratio, low=ratio * 0.98 if low is None else low, high=ratio * 1.02 if high is None else high,
                         threshold=threshold, p_value=p_value, dof=10.0, confidence=0.98, between_sd=0.01,
                         between_source="prior", test_at=test_at)


# -- crossover -------------------------------------------------------------------------------
def test_crossover_between_levels_names_the_level_just_before_the_first_loss():
    ratios = {1: est(1.6, 1.5, 1.7), 4: est(1.4, 1.3, 1.5), 16: est(1.1, 1.05, 1.15), 64: est(0.9, 0.85, 0.95)}
    assert crossover(ratios) == (16, 64, "crossover between c16 and c64 (confidently resolved)")


def test_crossover_levels_are_sorted_whatever_the_dict_order():
    ratios = {64: est(0.9, 0.85, 0.95), 16: est(1.1, 1.05, 1.15), 1: est(1.6, 1.5, 1.7), 4: est(1.4, 1.3, 1.5)}
    assert crossover(ratios)[:2] == (16, 64)


def test_crossover_is_the_first_loss_even_if_speculation_wins_again_later():
    ratios = {1: est(1.5, 1.4, 1.6), 4: est(0.95, 0.9, 0.99), 16: est(1.2, 1.1, 1.3), 64: est(0.8, 0.7, 0.9)}
    assert crossover(ratios) == (1, 4, "crossover between c1 and c4 (confidently resolved)")


@pytest.mark.parametrize("before, after", [
    (est(1.05, 0.97, 1.13), est(0.9, 0.85, 0.95)),  # the last win's interval reaches below 1
    (est(1.1, 1.05, 1.15), est(0.97, 0.9, 1.04)),  # the first loss's interval reaches above 1
    (est(1.1, 1.0, 1.2), est(0.9, 0.85, 0.95)),  # low exactly 1 is not a confident win
    (est(1.1, 1.05, 1.15), est(0.9, 0.8, 1.0)),  # high exactly 1 is not a confident loss
])
def test_crossover_not_confidently_resolved(before, after):
    assert crossover({4: before, 16: after}) == (4, 16, "crossover between c4 and c16 (not confidently resolved)")


def test_crossover_below_the_range():
    ratios = {1: est(0.9, 0.85, 0.95), 4: est(0.8, 0.7, 0.9)}
    assert crossover(ratios) == (None, 1, "speculation is behind from the first measured concurrency (1)")


def test_crossover_above_the_range_reports_the_highest_level():
    ratios = {1: est(1.5), 4: est(1.3), 16: est(1.1), 64: est(1.02, 0.95, 1.09)}
    assert crossover(ratios) == (64, None, "speculation is ahead at every measured concurrency")


def test_a_ratio_of_exactly_one_is_not_a_loss():
    assert crossover({1: est(1.2), 4: est(1.0)}) == (4, None, "speculation is ahead at every measured concurrency")


def test_crossover_with_no_levels():
    assert crossover({}) == (None, None, "speculation is ahead at every measured concurrency")


# -- interval level --------------------------------------------------------------------------
@pytest.mark.parametrize("alpha, level", [(0.01, 0.98), (0.025, 0.95), (0.0005, 0.999)])
def test_gate_confidence_is_the_two_sided_level_of_a_one_sided_test(alpha, level):
    assert gate_confidence(alpha) == pytest.approx(level)


def test_the_interval_upper_bound_is_the_one_sided_test_at_the_cell_alpha():
    """The cell fails at alpha iff the upper bound is below 1: p-value and bound must agree."""
    r = history_gate("throughput", "x", 1, [960, 962, 958], BASE, tolerance=0.03, prior_between_sd=0.01,
                     alpha_cell=0.01, rule="significant")
    e = r.estimate
    assert e.confidence == pytest.approx(0.98)
    q = sps.t.ppf(1 - 0.01, e.dof)
    se = (math.log(e.high) - math.log(e.ratio)) / q
    assert sps.t.cdf(math.log(e.ratio) / se, e.dof) == pytest.approx(e.p_value, rel=1e-6)


# -- history gate ----------------------------------------------------------------------------
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


# -- speculation gate ------------------------------------------------------------------------
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


# -- what counts as a failure ----------------------------------------------------------------
def _result(verdict: str, enforced: bool = True, e: RatioEstimate | None = None) -> GateResult:
    return GateResult("throughput", "x", 1, verdict, "m", e, enforced=enforced)


@pytest.mark.parametrize("verdict, inconclusive, expected", [
    (FAIL, "pass", True), (ERROR, "pass", True), (PASS, "pass", False), (SKIP, "pass", False),
    (INCONCLUSIVE, "pass", False), (INCONCLUSIVE, "fail", True), (PASS, "fail", False), (SKIP, "fail", False),
])
def test_counts_as_failure(verdict, inconclusive, expected):
    assert counts_as_failure(_result(verdict), Tolerances(inconclusive=inconclusive)) is expected


@pytest.mark.parametrize("verdict", [FAIL, ERROR, INCONCLUSIVE])
def test_results_that_are_not_enforced_never_count(verdict):
    assert counts_as_failure(_result(verdict, enforced=False), Tolerances(inconclusive="fail")) is False


def test_failed_property():
    assert _result(FAIL).failed and not _result(FAIL, enforced=False).failed
    assert not _result(ERROR).failed and not _result(INCONCLUSIVE).failed


# -- Holm --------------------------------------------------------------------------------------
def test_holm_adds_only_passing_or_inconclusive_cells_it_rejects_beyond_the_threshold():
    a = _result(INCONCLUSIVE, e=est(0.95, threshold=0.97, p_value=0.001))  # adjusted 0.004: rejected
    b = _result(FAIL, e=est(0.90, threshold=0.97, p_value=0.002))  # rejected, but already a failure
    c = _result(PASS, e=est(0.99, threshold=0.97, p_value=0.003))  # rejected, estimate within the tolerance
    d = _result(INCONCLUSIVE, e=est(0.95, threshold=0.97, p_value=0.2))  # not rejected
    assert holm_failures([a, b, c, d], family_alpha=0.05) == [a]


def test_holm_rejection_uses_the_adjusted_p_value_strictly_below_alpha():
    # m = 2: the smaller p is multiplied by 2
    a = _result(INCONCLUSIVE, e=est(0.95, threshold=0.97, p_value=0.02))
    b = _result(INCONCLUSIVE, e=est(0.95, threshold=0.97, p_value=0.5))
    assert holm_failures([a, b], family_alpha=0.05) == [a]  # 0.04 < 0.05
    assert holm_failures([a, b], family_alpha=0.04) == []  # 0.04 is not < 0.04
    assert holm_failures([a], family_alpha=0.03) == [a]  # alone: 0.02


def test_holm_ignores_unenforced_and_unestimated_results():
    lone = _result(INCONCLUSIVE, e=est(0.95, threshold=0.97, p_value=0.02))
    report_only = _result(INCONCLUSIVE, enforced=False, e=est(0.95, threshold=0.97, p_value=0.0001))
    error = _result(ERROR)
    # report_only and error do not enter the family: m = 1, lone's p stays 0.02
    assert holm_failures([lone, report_only, error], family_alpha=0.03) == [lone]


def test_holm_estimate_exactly_at_the_threshold_is_not_beyond_it():
    r = _result(INCONCLUSIVE, e=est(0.97, threshold=0.97, p_value=1e-6))
    assert holm_failures([r], family_alpha=0.05) == []


# -- launches as units (issue 14's functions: fields and wiring only; the statistics are
# tested in tests/test_gate_design.py) -------------------------------------------------------
from types import SimpleNamespace

from specguard.decide.gates import GateDesign, design_of, final_failures, launch_history_gate, must_win_gate


def test_design_of_reads_every_key_the_suite_declares():
    suite = SimpleNamespace(sweep=SimpleNamespace(launches=2, relaunch="off", relaunch_p=0.1),
                            tolerances=SimpleNamespace(prior_day_sd=0.004, prior_between_dof=6.0, spread_rule="max-known"))
    assert design_of(suite) == GateDesign(launches=2, relaunch="off", suspicion_p=0.1, prior_day_sd=0.004,
                                          prior_dof=6.0, spread_rule="max-known")
    assert design_of(SimpleNamespace(sweep=SimpleNamespace(), tolerances=SimpleNamespace())) == GateDesign()


def test_launch_history_gate_fields_and_message():
    r = launch_history_gate("throughput", "eagle3", 4, [[1000, 1001], [999, 1002]], BASE, tolerance=0.03,
                            prior_between_sd=0.01, alpha_cell=0.01, rule="significant", stage=2)
    assert (r.gate, r.config, r.concurrency, r.stage, r.launches, r.alpha) == ("throughput", "eagle3", 4, 2, 2, 0.01)
    assert r.message.startswith("throughput eagle3 c4: 1000 tok/s vs baseline (3 sessions) 999.7 tok/s")
    assert ", 2 launches -> " in r.message
    acc = launch_history_gate("accept_length", "eagle3", 4, [[3.0, 3.01]], [[3.0, 3.0]], tolerance=0.03,
                              prior_between_sd=0.003, alpha_cell=0.01, rule="significant")
    assert "tok/s" not in acc.message and "(1 session)" in acc.message and acc.stage == 1 and acc.launches == 1
    err = launch_history_gate("throughput", "mtp", 16, [[1000.0]], BASE, tolerance=0.03, prior_between_sd=0.01,
                              alpha_cell=0.01, rule="significant")
    assert (err.verdict, err.gate, err.message) == (ERROR, "throughput", "throughput mtp c16: only 1 samples; need >= 2")


def test_must_win_gate_fields_and_reference_sources():
    tol = Tolerances()
    r = must_win_gate("eagle3", 4, [[110, 111, 109]], [[100, 101, 99]], "baseline", must_win=True, tol=tol,
                      alpha_cell=0.01, stage=2)
    assert (r.gate, r.stage, r.launches, r.enforced, r.verdict) == ("speculation", 2, 1, True, PASS)
    h = must_win_gate("eagle3", 4, [[110, 111, 109]], None, "baseline (stored)", must_win=False, tol=tol,
                      alpha_cell=0.01, reference_history=[[100, 101, 99], [100, 100, 101]])
    assert not h.enforced and h.reference == pytest.approx(100.1666, rel=1e-4)
    with pytest.raises(ValueError, match="needs the reference's launches or its stored sessions"):
        must_win_gate("eagle3", 4, [[110, 111]], None, "baseline", must_win=True, tol=tol, alpha_cell=0.01)


def test_final_failures_halves_the_family_alpha_only_for_the_sequential_halves_rule():
    r = _result(INCONCLUSIVE, e=est(0.95, threshold=0.97, p_value=0.007))
    tol = Tolerances(family_alpha=0.01)
    assert final_failures([r], [], tol, GateDesign(relaunch="off")) == [r]  # 0.007 < 0.01
    assert final_failures([r], [], tol, GateDesign(relaunch="on-suspicion", stage_alpha_rule="halves")) == []  # >= 0.005
    assert final_failures([r], [], tol, GateDesign(relaunch="on-suspicion")) == [r]  # "screen": Holm at the family alpha


def test_the_suite_file_sets_the_pass_level_of_the_design(tmp_path):
    """[advanced] pass_confidence reaches the gates (GateDesign.pass_confidence)."""
    from specguard.config import load_suite
    from specguard.decide.gates import design_of
    suite = tmp_path / "suite.toml"
    suite.write_text('[advanced]\npass_confidence = 0.9\n\n[servers.baseline]\nengine = "emulator"\n'
                     'model_path = "/models/m"\n')
    assert design_of(load_suite(suite)).pass_confidence == 0.9
