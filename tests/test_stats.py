"""The statistics behind the gates: coverage, false alarms and power on simulated data."""

import math

import numpy as np
import pytest

from specguard.decide.stats import FAIL, INCONCLUSIVE, PASS, compare_sessions, compare_to_history, holm_adjust
from specguard.measure.metrics import outliers


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
    assert est.outcome() != FAIL


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


@pytest.mark.parametrize("bad", [[], [0.0, 1.0], [float("nan"), 1.0], [-1.0, 2.0]])
def test_bad_samples_raise_clear_errors(bad):
    with pytest.raises(ValueError):
        compare_to_history(bad, [[1.0, 1.0]], threshold=0.95, prior_between_sd=0.01, confidence=0.95)


def _drop_history(drop: float) -> tuple[list[float], list[list[float]]]:
    base = [[1000, 1002, 998], [1004, 1001, 1003], [997, 999, 1000]]
    return [1000 * (1 - drop) * f for f in (1.0, 1.001, 0.999)], base


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
    assert est.outcome() != FAIL


def test_holm_never_fails_a_drop_estimated_within_the_tolerance():
    from specguard.decide.gates import history_gate, holm_failures

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
