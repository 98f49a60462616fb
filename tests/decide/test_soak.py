"""decide/soak.py: a soak's windows decided on their change points, the worse way only."""

from __future__ import annotations

import numpy as np
import pytest

from specguard.decide.result import Half, SoakMetric
from specguard.decide.soak import SoakSettings, decide_soak
from specguard.labels import Verdict

SETTINGS = SoakSettings(warmup_windows=1, alpha=0.001, min_change=0.03)


def windows(accept: list[float], step_ms: list[float]) -> dict[SoakMetric, list[float | None]]:
    tok = [600.0 * a / 3.0 * 5.0 / s for a, s in zip(accept, step_ms)]
    return {SoakMetric.ACCEPT_LENGTH: list(accept), SoakMetric.STEP_TIME: list(step_ms),
            SoakMetric.THROUGHPUT: tok, SoakMetric.ITL_P99: [20.0] * len(accept)}


def noisy(level: float, n: int, sd: float, seed: int) -> list[float]:
    return list(level * np.exp(np.random.default_rng(seed).normal(0, sd, n)))


def test_acceptance_that_decays_from_a_window_fails_naming_the_drafter_and_the_window():
    accept = noisy(3.0, 7, 0.004, 1) + noisy(2.7, 6, 0.004, 2)  # -10 % from window 7
    verdict, soak = decide_soak(windows(accept, noisy(5.0, 13, 0.004, 3)), SETTINGS)
    assert verdict == Verdict.FAIL and soak.half == Half.DRAFTER and soak.windows == 12 and soak.warmup == 1
    shift = next(s for s in soak.shifts if s.metric == SoakMetric.ACCEPT_LENGTH)
    assert shift.window == 7 and shift.ratio == pytest.approx(0.9, abs=0.01) and shift.high < 1


def test_a_slower_engine_names_the_engine_and_a_faster_one_is_not_a_failure():
    step = noisy(5.0, 6, 0.004, 4) + noisy(5.3, 7, 0.004, 5)
    verdict, soak = decide_soak(windows(noisy(3.0, 13, 0.004, 6), step), SETTINGS)
    assert verdict == Verdict.FAIL and soak.half == Half.ENGINE
    faster = noisy(5.0, 6, 0.004, 4) + noisy(4.6, 7, 0.004, 5)
    verdict, soak = decide_soak(windows(noisy(3.0, 13, 0.004, 6), faster), SETTINGS)
    assert verdict == Verdict.PASS and not soak.shifts


def test_a_steady_soak_passes_and_the_warm_up_window_is_left_out():
    accept = [2.5] + noisy(3.0, 12, 0.004, 7)  # a cold first window would read as a rise, then a fall
    verdict, soak = decide_soak(windows(accept, noisy(5.0, 13, 0.004, 8)), SETTINGS)
    assert verdict == Verdict.PASS and soak.shifts == () and soak.half == Half.NEITHER


def test_too_few_windows_is_not_measured():
    verdict, soak = decide_soak(windows([3.0, 3.0, 3.0], [5.0, 5.0, 5.0]), SETTINGS)
    assert verdict == Verdict.ERROR and soak.windows == 2


def test_a_ramp_is_placed_where_it_begins_and_a_stalled_window_is_left_out():
    n = 21
    ramp = np.clip((np.arange(n) - 6) / (n - 7), 0, 1)  # flat to window 6, then down 10 % by the end
    accept = list(3.0 * (1 - 0.10 * ramp) * np.exp(np.random.default_rng(9).normal(0, 0.003, n)))
    step = noisy(5.0, n, 0.004, 10)
    step[12] *= 1 / 0.7  # one stalled window: tok/s dips 30 %, step time with it
    verdict, soak = decide_soak(windows(accept, step), SETTINGS)
    shift = next(s for s in soak.shifts if s.metric == SoakMetric.ACCEPT_LENGTH)
    assert verdict == Verdict.FAIL and soak.half == Half.DRAFTER and abs(shift.window - 7) <= 1, soak
    assert soak.stalled == (12,) and SoakMetric.STEP_TIME not in {s.metric for s in soak.shifts}
    steady, _ = decide_soak(windows(noisy(3.0, n, 0.003, 11), step), SETTINGS)
    assert steady == Verdict.PASS  # the stall alone fails nothing
