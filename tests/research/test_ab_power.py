"""The A/B power simulation drives `specguard ab`'s own rounds (ab.rounds.BuildComparison) with
synthetic launches: a large engine slowdown in build B is found in that configuration's tok/s
cells, identical builds are not told apart, and the launches it counts are the rounds run."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from research.study.ab_power import AbCase, ab_rates, ab_run
from specguard.config import load_suite

SUITE = load_suite(Path(__file__).resolve().parents[2] / "perf_tests" / "suite.toml")


def test_a_ten_percent_slower_engine_is_decided_worse_in_its_own_configuration():
    rates = ab_rates(SUITE, AbCase(drop=0.10), n=5)
    assert rates["tok_s_caught"] == 1.0 and rates["fail_rate"] == 1.0


def test_identical_builds_are_not_called_different():
    rates = ab_rates(SUITE, AbCase(), n=5)
    assert rates["fail_rate"] == 0.0 and 1 <= rates["launches_per_build"] <= 4


def test_only_the_changed_configuration_moves():
    cmp = ab_run(SUITE, AbCase(drop=0.10), np.random.default_rng(1))
    assert {c.config for c in cmp.regressions()} == {"eagle3"}
    assert {c.gate for c in cmp.regressions()} >= {"throughput", "step_time"}
