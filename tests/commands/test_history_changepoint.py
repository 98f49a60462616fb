"""specguard.decide.changepoint, the change-point module of `specguard history` (and of the soak
test): its typed API on plain series, fixed seeds. Its rates over many histories are
benchmarks/history_accuracy.py's."""

from __future__ import annotations

import math

import numpy as np
import pytest

from specguard.decide.changepoint import ChangePoint, detect


def noisy(n: int, seed: int, sd: float = 0.012, level: float = 100.0) -> np.ndarray:
    return level * np.exp(np.random.default_rng(seed).normal(0, sd, n))


@pytest.mark.parametrize("seed", range(5))
def test_a_5pct_step_is_placed_with_its_ratio_inside_the_interval(seed):
    x = noisy(30, seed)
    x[18:] *= 0.95
    points = detect(x)
    assert [p.index for p in points] == [18], points
    p = points[0]
    assert isinstance(p, ChangePoint) and p.p < 0.001 and p.interval[0] < 0.95 < p.interval[1]
    assert p.ratio == pytest.approx(p.after / p.before)
    assert p.before == pytest.approx(math.exp(np.log(x[:18]).mean()))  # geometric means of the segments
    assert p.after == pytest.approx(math.exp(np.log(x[18:]).mean()))


@pytest.mark.parametrize("seed", range(5))
def test_a_stationary_series_has_none(seed):
    assert detect(noisy(30, 100 + seed)) == []


def test_two_shifts_up_and_down_are_both_found_and_a_lone_odd_value_is_not_a_shift():
    x = noisy(90, 7)
    x[30:60] *= 1.06
    x[75] *= 0.7  # one odd value between two ordinary ones (min_size 2)
    assert [p.index for p in detect(x)] == [30, 60]
    assert detect(x)[0].ratio > 1 > detect(x)[1].ratio


def test_the_newest_value_alone_can_start_a_shift_only_when_min_size_last_allows():
    x = noisy(30, 3)
    x[-1] *= 0.9
    assert [p.index for p in detect(x, min_size_last=1)] == [29]
    assert detect(x, min_size_last=2) == []


def test_min_change_drops_significant_but_small_shifts_of_a_near_constant_series():
    x = np.array([3.0] * 15 + [2.997] * 15)  # -0.1 %: significant (no noise), too small to report
    assert detect(x) == []
    assert [p.index for p in detect(x, min_change=0.0)] == [15]


def test_the_scale_of_the_series_does_not_matter():
    x = noisy(40, 11)
    x[25:] *= 1.04
    assert [p.index for p in detect(x)] == [p.index for p in detect(x * 1e-3)] == [p.index for p in detect(x * 1e4)]


def test_alpha_is_the_merge_steps_level():
    x = noisy(30, 5)
    x[15:] *= 0.985  # 1.5 %: about 3 sd of a segment mean difference
    strict, loose = detect(x, alpha=1e-6), detect(x, alpha=0.05)
    assert strict == [] and [p.index for p in loose] == [15], (strict, loose)
    assert 1e-6 <= loose[0].p < 0.05


@pytest.mark.parametrize("series, says", [
    ([1.0, 2.0, 0.0, 1.0], "positive"), ([1.0, float("nan")], "finite"), ([[1.0, 2.0]], "one-dimensional"),
])
def test_bad_series_are_a_value_error(series, says):
    with pytest.raises(ValueError, match=says):
        detect(series)


@pytest.mark.parametrize("kwargs", [{"alpha": 0.0}, {"alpha": 1.0}, {"min_size": 0}, {"min_size_last": 0}, {"min_change": 1.0}])
def test_bad_settings_are_a_value_error(kwargs):
    with pytest.raises(ValueError, match="detect:"):
        detect([1.0] * 10, **kwargs)


def test_short_series_have_none():
    assert detect([]) == [] and detect([1.0]) == [] and detect([1.0, 2.0]) == []
