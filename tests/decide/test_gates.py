"""The gates' verdicts, messages and edge cases.

Each test pins one behaviour a plausible one-line bug would break (docs/research/mutation.md lists the
mutants these were written against): the interval level a cell's alpha maps to, which verdicts
count as failures, and which results Holm adds. Where speculation stops paying is
tests/decide/test_crossover.py.
"""

from __future__ import annotations

import math
from pathlib import Path
from types import SimpleNamespace

import pytest
from gate_support import history_gate, result, speculation_gate
from scipy import stats as sps

from specguard.config import Tolerances
from specguard.decide.gates import (
    GateDesign,
    counts_as_failure,
    design_of,
    final_failures,
    gate_confidence,
    holm_failures,
)
from specguard.decide.prior import SpreadSource
from specguard.decide.result import GateResult
from specguard.decide.stats import RatioEstimate
from specguard.labels import Level, Verdict
from specguard.report.verdict_text import message

PASS, FAIL, INCONCLUSIVE, SKIP, ERROR = Verdict.PASS, Verdict.FAIL, Verdict.INCONCLUSIVE, Verdict.SKIP, Verdict.ERROR

BASE = [[1000, 1005, 995], [1010, 1000, 1002], [990, 995, 1000]]


def est(ratio: float, low: float | None = None, high: float | None = None, *, threshold: float = 1.0,
        p_value: float = 0.5, test_at: float | None = None) -> RatioEstimate:
    """A hand-made estimate: only the fields a test names matter."""
    return RatioEstimate(ratio=ratio, low=ratio * 0.98 if low is None else low, high=ratio * 1.02 if high is None else high,
                         threshold=threshold, p_value=p_value, dof=10.0, confidence=0.98, between_sd=0.01,
                         between_source=SpreadSource(), test_at=test_at)


# -- interval level --------------------------------------------------------------------------
@pytest.mark.parametrize("alpha, level", [(0.01, 0.98), (0.025, 0.95), (0.0005, 0.999)])
def test_gate_confidence_is_the_two_sided_level_of_a_one_sided_test(alpha, level):
    assert gate_confidence(alpha) == pytest.approx(level)


def test_the_interval_upper_bound_is_the_one_sided_test_at_the_cell_alpha():
    """The cell fails at alpha iff the upper bound is below 1: p-value and bound must agree."""
    r = history_gate("throughput", "x", 1, [[960, 962, 958]], BASE, tolerance=0.03, prior_between_sd=0.01,
                     alpha_cell=0.01, rule="significant")
    e = r.estimate
    assert e.confidence == pytest.approx(0.98)
    q = sps.t.ppf(1 - 0.01, e.dof)
    se = (math.log(e.high) - math.log(e.ratio)) / q
    assert sps.t.cdf(math.log(e.ratio) / se, e.dof) == pytest.approx(e.p_value, rel=1e-6)


# -- what counts as a failure ----------------------------------------------------------------
def _result(verdict: str, enforced: bool = True, e: RatioEstimate | None = None) -> GateResult:
    return result("throughput", "x", 1, verdict, e, enforced=enforced)


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


# -- launches as units (fields and wiring only; the statistics are tested in
# tests/decide/test_gate_design.py) ------------------------------------------------------------------


def test_design_of_reads_every_key_the_suite_declares():
    suite = SimpleNamespace(sweep=SimpleNamespace(launches=2, relaunch="off", relaunch_p=0.1, max_launches=2),
                            tolerances=SimpleNamespace(prior_day_sd=0.004, prior_between_dof=6.0, pass_confidence=0.9))
    assert design_of(suite) == GateDesign(launches=2, relaunch="off", suspicion_p=0.1, max_launches=2,
                                          prior_day_sd=0.004, prior_dof=6.0, pass_confidence=0.9)


def test_a_suite_without_advanced_keys_has_the_library_design():
    """The suite file's defaults and GateDesign's agree: a suite that sets nothing gets GateDesign()."""
    from specguard.config import Suite, SweepConfig, Tolerances
    from specguard.workload import WorkloadSpec
    suite = Suite(path=Path("s.toml"), servers={}, sweep=SweepConfig(), workload=WorkloadSpec(), tolerances=Tolerances())
    assert design_of(suite) == GateDesign()


def test_launch_history_gate_fields_and_message():
    r = history_gate("throughput", "eagle3", 4, [[1000, 1001], [999, 1002]], BASE, tolerance=0.03,
                     prior_between_sd=0.01, alpha_cell=0.01, rule="significant", stage=2)
    assert (str(r.gate), r.config, r.level, r.stage, r.launches, r.alpha) == ("throughput", "eagle3", Level(4), 2, 2, 0.01)
    assert message(r).startswith("throughput eagle3 c4: 1000 tok/s vs baseline (3 sessions) 999.7 tok/s")
    assert ", 2 launches -> " in message(r)
    acc = history_gate("accept_length", "eagle3", 4, [[3.0, 3.01]], [[3.0, 3.0]], tolerance=0.03,
                       prior_between_sd=0.003, alpha_cell=0.01, rule="significant")
    assert "tok/s" not in message(acc) and "(1 session)" in message(acc) and acc.stage == 1 and acc.launches == 1
    err = history_gate("throughput", "mtp", 16, [[1000.0]], BASE, tolerance=0.03, prior_between_sd=0.01,
                       alpha_cell=0.01, rule="significant")
    assert (err.verdict, str(err.gate), message(err)) == (ERROR, "throughput", "throughput mtp c16: only 1 samples; need >= 2")


def test_must_win_gate_fields_and_reference_sources():
    tol = Tolerances()
    r = speculation_gate("eagle3", 4, [[110, 111, 109]], [[100, 101, 99]], "baseline", must_win=True, tol=tol,
                         alpha_cell=0.01, stage=2)
    assert (str(r.gate), r.stage, r.launches, r.enforced, r.verdict) == ("speculation", 2, 1, True, PASS)
    h = speculation_gate("eagle3", 4, [[110, 111, 109]], None, "baseline", must_win=False, tol=tol,
                         alpha_cell=0.01, reference_history=[[100, 101, 99], [100, 100, 101]])
    assert not h.enforced and h.reference == pytest.approx(100.1666, rel=1e-4)
    assert "vs baseline (stored, 2 sessions, same environment) 100.2 tok/s" in message(h)
    with pytest.raises(ValueError, match="needs the reference's launches or its stored sessions"):
        speculation_gate("eagle3", 4, [[110, 111]], None, "baseline", must_win=True, tol=tol, alpha_cell=0.01)


def test_final_failures_runs_holm_at_the_whole_family_alpha_for_every_design():
    r = _result(INCONCLUSIVE, e=est(0.95, threshold=0.97, p_value=0.007))
    late = _result(INCONCLUSIVE, e=est(0.95, threshold=0.97, p_value=0.012))
    tol = Tolerances(family_alpha=0.01)
    for design in (GateDesign(relaunch="off"), GateDesign(relaunch="on-suspicion"), GateDesign(launches=2)):
        assert final_failures([r], [], tol, design) == [r]  # 0.007 < 0.01: no stage spends a share of it
        assert final_failures([late], [], tol, design) == []  # 0.012 >= 0.01


def test_the_suite_file_sets_the_pass_level_of_the_design(tmp_path):
    """[advanced] pass_confidence reaches the gates (GateDesign.pass_confidence)."""
    from specguard.config import load_suite
    from specguard.decide.gates import design_of
    suite = tmp_path / "suite.toml"
    suite.write_text('[advanced]\npass_confidence = 0.9\n\n[servers.baseline]\nengine = "emulator"\n'
                     'model_path = "/models/m"\n')
    assert design_of(load_suite(suite)).pass_confidence == 0.9


def test_every_test_of_the_default_suite_has_its_pinned_share_of_the_family_alpha():
    """The session's plan of the default suite (12 throughput, 12 step-time, 8 accept-length, 6
    must-win and 2 report-only speculation tests): weights 1, 1, 0.25, 2 and 0, so 38 shares.
    A report-only test spends nothing (it cannot fail) but reports at the smallest enforced
    level; the enforced alphas sum to the family alpha exactly."""
    from specguard.config import load_suite
    from specguard.session.options import RunOptions
    from specguard.session.plan import PlannedTest, Planner

    suite = load_suite(Path(__file__).resolve().parents[2] / "perf_tests" / "suite.toml")
    gates = {"baseline": ("throughput", "step_time"),
             "eagle3": ("throughput", "step_time", "accept_length", "speculation"),
             "mtp": ("throughput", "step_time", "accept_length", "speculation")}
    tests = [PlannedTest(n, c, g) for n, gs in gates.items() for c in suite.sweep.concurrency for g in gs]
    plan = Planner(suite, RunOptions(), GateDesign()).plan(tests)
    fam = suite.tolerances.family_alpha
    share = {"throughput": 1 / 38, "step_time": 1 / 38, "accept_length": 0.25 / 38, "speculation": 2 / 38}
    for t in tests:
        report_only = t.gate == "speculation" and t.level > 16  # speculation_must_win_up_to = 16
        want = fam * (share["accept_length"] if report_only else share[t.gate])
        assert plan.alpha_for(t.gate, t.config, t.level) == pytest.approx(want, rel=1e-12), t
    enforced = [plan.alpha_for(t.gate, t.config, t.level) for t in tests
                if not (t.gate == "speculation" and t.level > 16)]
    assert len(tests) == 40 and len(enforced) == 38 and sum(enforced) == pytest.approx(fam, rel=1e-12)


def test_a_prior_that_too_few_stored_sessions_check_counts_double_until_three_are_recorded():
    """decide/stats.py unchecked_prior: at K = 1 nothing checks the prior and at K = 2 one dof
    barely does, so a prior at half the truth would fail unchanged code; below K = 3 it counts
    double, and a 15 % drop still fails at K = 1."""
    sessions = [[1000.0 * (1 + 0.004 * k) + d for d in (0.0, 4.0, -4.0)] for k in range(3)]
    current = [[1000.0, 1004.0, 996.0]]
    used = {k: history_gate("throughput", "eagle3", 4, current, sessions[:k], tolerance=0.03, prior_between_sd=0.01,
                            alpha_cell=0.01 / 38).estimate for k in (1, 2, 3)}
    assert used[1].between_sd == pytest.approx(0.02) and used[1].between_source.widened == 2.0
    assert used[2].between_sd > 0.015 and used[2].between_source.widened == 2.0
    assert used[3].between_sd < 0.011 and used[3].between_source.widened == 1.0
    dropped = history_gate("throughput", "eagle3", 4, [[850.0, 853.0, 847.0]], sessions[:1], tolerance=0.03,
                           prior_between_sd=0.01, alpha_cell=0.01 / 38)
    assert dropped.verdict == FAIL
