"""Runs that disagree (decide/consistency.py), and what the gates do with them: a launch whose
median cannot be trusted is set aside, a cell with no launch left is not measured (never a fail,
never a pass), and the relaunch plan measures it again. The rates are benchmarks/stall_robustness.py's."""

from __future__ import annotations

import numpy as np
import pytest
from gate_support import history_gate, speculation_gate, step_gate

from specguard.config import Tolerances
from specguard.decide.consistency import (
    RUN_OUTLIER,
    SetAside,
    StallBasis,
    consistent_launches,
    disagreement,
    outlier_limit,
    robust_log_sd,
    steps_per_s,
)
from specguard.decide.gates import RelaunchWhy, relaunch_plan, runs_disagree
from specguard.decide.result import Why
from specguard.labels import Verdict
from specguard.report.results import decision_dict, decision_result
from specguard.report.verdict_text import message, relaunch_reason

# Five stored sessions of three quiet runs (0.5 %), as the gate audit's stall.py draws them.
HISTORY = [[100.2, 99.6, 100.4], [99.1, 99.8, 99.4], [100.9, 100.1, 100.5], [99.7, 100.3, 99.9], [100.6, 100.0, 99.5]]


@pytest.mark.parametrize("runs, disagrees", [
    ([70.0, 70.2, 100.0], True),  # two stalls of three: the median (70) is a stall
    ([95.0, 95.3, 66.5], False),  # one stall of a real drop: the fastest two agree, the median holds
    ([100.0, 70.0], True),  # two runs: the median is their mean
    ([100.0, 99.0], False),
    ([100.0], False),  # one run cannot disagree
    ([100.0, 100.5, 99.8, 70.0, 70.1], False),  # three of five agree with the fastest
    ([100.0, 70.5, 99.8, 70.0, 70.1], True),
])
def test_the_median_holds_while_the_fastest_runs_are_a_strict_majority(runs, disagrees):
    found = disagreement(runs, RUN_OUTLIER)
    assert (found is not None) == disagrees
    if found is not None:
        slow = [i + 1 for i, x in enumerate(runs) if x < max(runs) * (1 - RUN_OUTLIER)]
        assert found.runs == tuple(slow) and found.gap == pytest.approx(1 - min(runs) / max(runs))


def test_the_limit_widens_with_the_runs_own_scatter_but_never_below_ten_percent():
    assert outlier_limit(HISTORY) == RUN_OUTLIER  # 0.5 % runs: 5 robust sds is 2.5 %, the floor holds
    rng = np.random.default_rng(0)
    noisy = [list(100 * np.exp(rng.normal(0, 0.08, 3))) for _ in range(40)]  # a shared CPU: runs 8 % apart
    assert robust_log_sd(noisy) == pytest.approx(0.08, rel=0.25)
    assert outlier_limit(noisy) == pytest.approx(1 - np.exp(-5 * robust_log_sd(noisy)))
    assert outlier_limit(noisy) > 0.25  # such a machine's ordinary 20 % gap is no stall
    assert disagreement([100.0, 80.0, 81.0], outlier_limit(noisy)) is None
    assert robust_log_sd([]) == 0.0 and robust_log_sd([[5.0]]) == 0.0


def test_consistent_launches_keeps_the_launches_whose_median_holds_and_numbers_the_others():
    kept, aside = consistent_launches([[70.0, 70.1, 100.0], [99.8, 100.1, 100.3]], HISTORY)
    assert kept == [[99.8, 100.1, 100.3]]
    assert aside == (SetAside(1, (1, 2), pytest.approx(0.30), RUN_OUTLIER),)
    assert consistent_launches([[300.0, -1.0]])[1] == ()  # not a stall: the statistics name the bad value


# The study's per-run acceptance (6 Dec): eagle3 c1's run with high acceptance is the fast one.
HIGH_ACCEPTANCE_RUN = [718.0, 546.0, 533.0]
STEPS = [199.0, 201.0, 202.0]  # tok/s / accept lengths [3.61, 2.72, 2.64]: the steps per second agree


def test_a_speculative_cell_is_judged_on_its_steps_per_second_which_acceptance_does_not_move():
    assert consistent_launches([HIGH_ACCEPTANCE_RUN], HISTORY)[1]  # on tok/s: two "stalled" runs
    kept, aside = consistent_launches([HIGH_ACCEPTANCE_RUN], HISTORY, StallBasis([STEPS], [[s / 3.0 for s in
                                                                                      h] for h in HISTORY]))
    assert kept == [HIGH_ACCEPTANCE_RUN] and aside == ()
    stalled = StallBasis([[140.0, 141.0, 201.0]])  # two runs of three stalled, whatever they accepted
    kept, aside = consistent_launches([[500.0, 505.0, 720.0]], (), stalled)
    assert kept == [] and [(a.launch, a.runs) for a in aside] == [(1, (1, 2))]
    # a basis that does not match the runs run for run (a run without an accept length): tok/s itself
    assert consistent_launches([HIGH_ACCEPTANCE_RUN], HISTORY, StallBasis([STEPS[:2]]))[1]
    assert steps_per_s(HIGH_ACCEPTANCE_RUN, [3.61, 2.72, 2.64]) == pytest.approx([198.9, 200.7, 201.9], abs=0.1)
    assert steps_per_s(HIGH_ACCEPTANCE_RUN, [3.61, 2.72]) is None and steps_per_s([100.0], [0.0]) is None


def test_two_stalled_runs_of_three_are_not_measured_where_they_failed_unchanged_code():
    # the gate audit's section 2: at K = 5, [0.7, 0.7, 1.0] x the truth failed 1000 times in 1000
    stalled = [[70.1, 69.8, 100.2]]
    r = history_gate("throughput", "eagle3", 16, stalled, HISTORY, tolerance=0.03, prior_between_sd=0.01,
                     alpha_cell=0.01 / 38)
    assert r.verdict == Verdict.ERROR and runs_disagree(r.problem) and r.estimate is None
    assert r.problem.why == Why.RUNS_DISAGREE and r.set_aside[0].runs == (1, 2)
    assert message(r).startswith("throughput eagle3 c16: not measured: the runs of its launch disagree (up to 30.3% "
                                 "below the fastest run, limit 10.0%")
    assert "set aside: launch 1 runs 1, 2 up to 30.3% below its fastest (limit 10.0%); no launch left" in message(r)
    # and the step time, a rate the same stall slows, likewise
    s = step_gate("eagle3", 16, [[200 * 0.7, 200 * 0.7, 200.0]], [[200.0, 201.0, 199.0]] * 5, tolerance=0.05,
                  prior_between_sd=0.01, alpha_cell=0.01 / 38)
    assert s.verdict == Verdict.ERROR and runs_disagree(s.problem)
    # the accept length does not move with the machine: never set aside
    a = history_gate("accept_length", "eagle3", 16, [[2.1, 2.1, 3.0]], [[3.0, 3.0, 3.0]] * 5, tolerance=0.03,
                     prior_between_sd=0.003, alpha_cell=0.01 / 38)
    assert a.set_aside == () and a.verdict == Verdict.FAIL


def test_a_real_drop_with_one_stalled_run_still_fails_and_a_set_aside_launch_is_named():
    drop = [[95.1, 94.8, 66.4]]  # -5 %, run 3 stalled: the median holds
    r = history_gate("throughput", "eagle3", 16, drop, HISTORY, tolerance=0.03, prior_between_sd=0.01,
                     alpha_cell=0.01 / 38)
    assert r.verdict == Verdict.FAIL and r.set_aside == ()
    two = history_gate("throughput", "eagle3", 16, [[70.1, 69.8, 100.2], [95.1, 94.8, 95.3]], HISTORY, tolerance=0.03,
                       prior_between_sd=0.01, alpha_cell=0.01 / 38)
    assert two.launches == 1 and two.set_aside[0].launch == 1 and two.verdict != Verdict.ERROR
    assert "decided on the launches whose runs agree" in message(two)
    stored = decision_dict(two)
    assert stored["set_aside"] == [{"launch": 1, "runs": [1, 2], "gap": pytest.approx(0.3034, abs=1e-3),
                                    "limit": RUN_OUTLIER, "config": ""}]
    assert decision_result(stored) == two


def test_the_speculation_gate_names_whose_launch_it_set_aside():
    tol = Tolerances()
    r = speculation_gate("eagle3", 4, [[150.0, 151.0, 149.0]], [[70.0, 70.5, 100.0]], "baseline", must_win=True,
                         tol=tol, alpha_cell=0.01)
    assert r.verdict == Verdict.ERROR and r.set_aside == (SetAside(1, (1, 2), pytest.approx(0.30),
                                                                   pytest.approx(RUN_OUTLIER, abs=0.01), "baseline"),)
    assert "set aside: baseline launch 1 runs 1, 2" in message(r)
    both = speculation_gate("eagle3", 4, [[150.0, 151.0, 149.0]], [[70.0, 70.5, 100.0], [100.0, 100.5, 99.6]],
                            "baseline", must_win=True, tol=tol, alpha_cell=0.01)
    assert both.verdict == Verdict.PASS and both.set_aside[0].config == "baseline"


def test_a_cell_whose_runs_disagree_relaunches_its_configuration_and_the_reference_it_set_aside():
    own = history_gate("throughput", "eagle3", 16, [[70.1, 69.8, 100.2]], HISTORY, tolerance=0.03,
                       prior_between_sd=0.01, alpha_cell=0.01 / 38)
    spec = speculation_gate("mtp", 4, [[150.0, 151.0, 149.0]], [[70.0, 70.5, 100.0]], "baseline", must_win=True,
                            tol=Tolerances(), alpha_cell=0.01)
    plan = relaunch_plan([own, spec], {"eagle3": "baseline", "mtp": "baseline"})
    assert set(plan) == {"eagle3", "baseline"}  # mtp's own runs agreed: only its reference is measured again
    assert [w.why for w in plan["eagle3"]] == [RelaunchWhy.RUNS_DISAGREE]
    assert relaunch_reason(plan["eagle3"][0]) == "throughput eagle3 c16: its runs disagree (a stall?), measured again"
