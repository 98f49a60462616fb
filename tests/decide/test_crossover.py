"""Where speculation stops paying: the one crossover estimator (decide/crossover.py) and its edges.

`specguard recommend`, the results file's `crossovers`, the report's plots and the gate study
all read this estimator; each test pins one edge a plausible one-line bug would break (docs/research/mutation.md).
"""

from __future__ import annotations

import math

import pytest

from specguard.decide.crossover import CrossoverEstimate, estimate_crossover, first_crossing
from specguard.decide.prior import SpreadSource
from specguard.decide.stats import RatioEstimate


def est(ratio: float, low: float | None = None, high: float | None = None) -> RatioEstimate:
    """A hand-made speculation estimate: only ratio and interval matter here."""
    return RatioEstimate(ratio=ratio, low=ratio * 0.98 if low is None else low, high=ratio * 1.02 if high is None else high,
                         threshold=1.0, p_value=0.5, dof=10.0, confidence=0.95, between_sd=0.01, between_source=SpreadSource())


def between(c0: float, c1: float, v0: float, v1: float) -> float:
    """Where log v crosses 0 on the line through (log c0, log v0) and (log c1, log v1)."""
    return math.exp(math.log(c0) + math.log(v0) / (math.log(v0) - math.log(v1)) * (math.log(c1) - math.log(c0)))


# -- which levels the crossover lies between ---------------------------------------------------
def test_the_crossover_lies_between_the_level_just_before_the_first_loss_and_the_first_loss():
    ratios = {1: est(1.6, 1.5, 1.7), 4: est(1.4, 1.3, 1.5), 16: est(1.1, 1.05, 1.15), 64: est(0.9, 0.85, 0.95)}
    x = estimate_crossover(ratios)
    assert (x.last_ahead, x.first_behind, x.confident) == (16, 64, True)
    assert x.estimate == pytest.approx(between(16, 64, 1.1, 0.9), rel=1e-12)
    assert x.low == pytest.approx(between(16, 64, 1.05, 0.85), rel=1e-12)
    assert x.high == pytest.approx(between(16, 64, 1.15, 0.95), rel=1e-12)


def test_levels_are_sorted_whatever_the_dict_order():
    ordered = {1: est(1.6, 1.5, 1.7), 4: est(1.4, 1.3, 1.5), 16: est(1.1, 1.05, 1.15), 64: est(0.9, 0.85, 0.95)}
    shuffled = {c: ordered[c] for c in (64, 16, 1, 4)}
    assert estimate_crossover(shuffled) == estimate_crossover(ordered)


def test_the_crossover_is_the_first_loss_even_if_speculation_wins_again_later():
    ratios = {1: est(1.5, 1.4, 1.6), 4: est(0.95, 0.9, 0.99), 16: est(1.2, 1.1, 1.3), 64: est(0.8, 0.7, 0.9)}
    x = estimate_crossover(ratios)
    assert (x.last_ahead, x.first_behind, x.confident) == (1, 4, True)
    assert 1 < x.estimate < 4


@pytest.mark.parametrize("before, after", [
    (est(1.05, 0.97, 1.13), est(0.9, 0.85, 0.95)),  # the last win's interval reaches below 1
    (est(1.1, 1.05, 1.15), est(0.97, 0.9, 1.04)),  # the first loss's interval reaches above 1
    (est(1.1, 1.0, 1.2), est(0.9, 0.85, 0.95)),  # low exactly 1 is not a confident win
    (est(1.1, 1.05, 1.15), est(0.9, 0.8, 1.0)),  # high exactly 1 is not a confident loss
])
def test_not_confidently_resolved(before, after):
    x = estimate_crossover({4: before, 16: after})
    assert (x.last_ahead, x.first_behind, x.confident) == (4, 16, False)
    assert 4 < x.estimate < 16


# -- outside the measured levels -----------------------------------------------------------------
def test_behind_from_the_first_level_has_no_estimate():
    x = estimate_crossover({1: est(0.9, 0.85, 0.95), 4: est(0.8, 0.7, 0.9)})
    assert (x.estimate, x.below_range, x.above_range, x.last_ahead, x.first_behind) == (None, True, False, None, 1)
    assert (x.low, x.high) == (None, 1.0)  # the latest plausible crossover: the first level's upper bound is behind


def test_ahead_at_every_level_has_no_estimate():
    x = estimate_crossover({1: est(1.5), 4: est(1.3), 16: est(1.1), 64: est(1.02, 0.95, 1.09)})
    assert (x.estimate, x.high, x.below_range, x.above_range) == (None, None, False, True)
    assert (x.first_behind, x.confident) == (None, False)


def test_a_ratio_of_exactly_one_is_not_a_loss():
    x = estimate_crossover({1: est(1.2), 4: est(1.0)})
    assert x.above_range and x.estimate is None and x.first_behind is None


def test_no_levels():
    assert estimate_crossover({}) == CrossoverEstimate(None, None, None, False, True, None, None)


# -- the interval's ends -----------------------------------------------------------------------
def test_a_level_confidently_ahead_rules_out_a_crossover_below_it():
    """c1 is not resolved (its lower bound reaches below 1) but c4 and c16 are confidently ahead:
    the earliest plausible crossover is where the lower bounds drop below 1 after c16, not c1."""
    ratios = {1: est(1.12, 0.95, 1.3), 4: est(1.4, 1.2, 1.6), 16: est(1.2, 1.05, 1.35), 64: est(0.7, 0.6, 0.8)}
    x = estimate_crossover(ratios)
    assert x.low == pytest.approx(between(16, 64, 1.05, 0.6), rel=1e-12)
    assert 16 < x.low < x.estimate < x.high < 64


def test_no_level_confidently_ahead_leaves_the_lower_end_open():
    ratios = {4: est(1.05, 0.9, 1.2), 16: est(1.02, 0.95, 1.1), 64: est(0.8, 0.7, 0.9)}
    x = estimate_crossover(ratios)
    assert x.low is None and 16 < x.estimate < x.high < 64


def test_a_level_confidently_ahead_beyond_the_crossover_does_not_move_the_lower_end():
    """The ratio dips below 1 at c4 and recovers at c16: only levels up to the crossover bound it."""
    ratios = {1: est(1.5, 1.3, 1.7), 4: est(0.95, 0.9, 1.0), 16: est(1.3, 1.2, 1.4), 64: est(0.8, 0.7, 0.9)}
    x = estimate_crossover(ratios)
    assert x.low == pytest.approx(between(1, 4, 1.3, 0.9), rel=1e-12)
    assert x.high == pytest.approx(between(16, 64, 1.4, 0.9), rel=1e-12)  # the upper bounds first behind at c64


def test_the_upper_end_is_open_while_every_upper_bound_stays_above_one():
    ratios = {4: est(1.2, 1.1, 1.3), 16: est(0.97, 0.9, 1.04), 64: est(0.95, 0.85, 1.05)}
    x = estimate_crossover(ratios)
    assert x.high is None and x.low == pytest.approx(between(4, 16, 1.1, 0.9), rel=1e-12)
    assert not x.confident


def test_first_crossing_edges():
    assert first_crossing([4, 16], [1.0, 0.5]) == pytest.approx(4.0)  # exactly 1 at a level: crosses right after it
    assert first_crossing([4, 16], [1.0, 1.0]) is None
    assert first_crossing([4, 16], [0.5, 0.4]) == 4.0  # already below at the first level
    assert first_crossing([], []) is None


# -- one estimator behind every output ---------------------------------------------------------
def test_recommend_the_results_file_and_the_plot_read_the_same_crossover():
    from synthetic_results import MTP, SEED_A, make_doc

    from specguard.report import crossovers, recommend

    doc = make_doc(SEED_A, {"mtp": MTP})
    rec = recommend.recommend(doc)
    curve = rec.ratios["mtp"]
    direct = estimate_crossover({r.concurrency: r.estimate for r in curve})
    assert rec.crossover == crossovers.crossing(curve) == direct
    saved = crossovers.crossovers(doc)["mtp"]
    assert (saved["estimate"], saved["low"], saved["high"], saved["last_win"], saved["first_loss"], saved["confident"]) == \
        (direct.estimate, direct.low, direct.high, direct.last_ahead, direct.first_behind, direct.confident)
