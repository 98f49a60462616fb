"""The statistics behind the gates: coverage, false alarms and power on simulated data."""

import math

import numpy as np
import pytest

from specguard.stats import FAIL, INCONCLUSIVE, PASS, compare_sessions, compare_to_history, holm_adjust, outliers


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
