"""`specguard ab`: the decision rule on synthetic launches (different / same / undecided, ABBA
order, stopping rules, closed testing, errors), the command line's one-line usage errors, and end to end
against emulators on 127.0.0.1 (launch mode and attach mode)."""

from __future__ import annotations

import json
import math
import re
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from specguard.ab import plan
from specguard.ab.builds import Build, BuildFlags, UsageError, ab_builds, parse_urls
from specguard.ab.decision import (
    DIFFERENT,
    MIN_LOOK_SHARE,
    POOLED_SHARE,
    SAME,
    UNDECIDED,
    Budget,
    GateCell,
    GateGroup,
    GateSpec,
    Look,
    abba_order,
    decide_round,
    look_estimate,
    look_shares,
    prior_check,
    run_spread,
    set_alphas,
    shown_ratio,
)
from specguard.ab.report import AB, render_text, results_doc
from specguard.ab.rounds import STEP_RATE, BuildComparison, LaunchResult, Selection
from specguard.ab.trend import Contrast, LaunchPoint, launch_location, trend_estimate
from specguard.cli import main
from specguard.config import load_suite
from specguard.decide.prior import HistoryOf, Origin, SpreadSource
from specguard.decide.stats import RatioEstimate
from specguard.labels import ACCEPT_LENGTH, SPECULATION, STEP_TIME, THROUGHPUT
from specguard.report.verdict_text import spread_source_text
from specguard.store.documents import DocumentError

REPO = Path(__file__).resolve().parents[2]
SPECS = {
    THROUGHPUT: GateSpec(THROUGHPUT, 0.05, 0.012, 1.0),
    STEP_TIME: GateSpec(STEP_TIME, 0.05, 0.012, 1.0, inverted=True),
    ACCEPT_LENGTH: GateSpec(ACCEPT_LENGTH, 0.05, 0.003, 0.25),
    SPECULATION: GateSpec(SPECULATION, 0.05, 0.012 * math.sqrt(2), 2.0),
}
BUDGET = Budget(family_alpha=0.01, pass_confidence=0.95, max_rounds=4)


class FakeLauncher:
    """Synthetic launches: each (build, configuration) has a true speed factor; every launch draws
    its own offset (``launch_sd``) and each of its 3 runs a little noise (``run_sd``), on a log
    scale. Records the order it was called in."""

    def __init__(self, factors: dict[tuple[str, str], float], *, launch_sd: float = 0.003, run_sd: float = 0.002,
                 seed: int = 1, errors: dict[tuple[str, str, int], str] | None = None,
                 skipped: set[tuple[str, str]] | None = None, levels: tuple[int, ...] = (4,),
                 level_factors: dict[tuple[str, str, int], float] | None = None, drift: float = 0.0) -> None:
        self.factors, self.drift = factors, drift  # drift: the machine's log speed change per launch
        self.levels, self.level_factors = levels, level_factors or {}
        self.launch_sd, self.run_sd = launch_sd, run_sd
        self.rng = np.random.default_rng(seed)
        self.errors = errors or {}
        self.skipped = skipped or set()
        self.calls: list[tuple[int, str, str]] = []

    def __call__(self, build: str, config: str, round_no: int) -> LaunchResult:
        self.calls.append((round_no, config, build))
        if (build, config) in self.skipped:
            return LaunchResult(build, config, round_no, error="the server does not serve it", skipped=True)
        if (build, config, round_no) in self.errors:
            return LaunchResult(build, config, round_no, error=self.errors[(build, config, round_no)])
        factor = self.factors.get((build, config), 1.0) * math.exp(self.rng.normal(0, self.launch_sd)
                                                                   + self.drift * len(self.calls))
        values = {}
        for level in self.levels:  # the levels share the launch's offset
            at = factor * self.level_factors.get((build, config, level), 1.0)
            runs = [at * math.exp(self.rng.normal(0, self.run_sd)) for _ in range(3)]
            values[level] = {THROUGHPUT: [1000 * r for r in runs], STEP_RATE: [200 * r for r in runs],
                             ACCEPT_LENGTH: [3.0 * math.exp(self.rng.normal(0, 0.001)) for _ in runs]}
        return LaunchResult(build, config, round_no, values=values)


def selection(*configs: str, speculative: tuple[str, ...] = (), references: dict[str, str] | None = None) -> Selection:
    return Selection(list(configs), [4], frozenset(speculative), references or {})


def run(sel: Selection, launcher: FakeLauncher, budget: Budget = BUDGET,
        specs: dict[str, GateSpec] | None = None) -> BuildComparison:
    cmp = BuildComparison(sel, specs or SPECS, budget, launcher)
    cmp.run()
    return cmp


def cell(cmp: BuildComparison, config: str, gate: str) -> GateCell:
    return next(c for c in cmp.cells if c.config == config and c.gate == gate)


# -- the decision rule --------------------------------------------------------------------------
def test_abba_order_over_four_rounds():
    assert [b for r in range(1, 5) for b in abba_order(r)] == list("ABBAABBA")
    with pytest.raises(ValueError):
        abba_order(0)


def test_a_large_slowdown_is_different_and_worse_once_each_build_has_two_launches():
    cmp = run(selection("base"), FakeLauncher({("B", "base"): 0.80}))
    tput, step = cell(cmp, "base", THROUGHPUT), cell(cmp, "base", STEP_TIME)
    assert (tput.decision, tput.direction(), tput.decided_round) == (DIFFERENT, "worse", 2)
    assert step.decision == DIFFERENT and step.direction() == "worse"
    assert [look.launches for look in tput.looks] == [2]  # no look, and no alpha spent, on one launch each
    assert cmp.rounds_run == 2 and cmp.exit_code() == 1


def test_with_a_budget_of_one_round_one_launch_each_decides():
    cmp = run(selection("base"), FakeLauncher({("B", "base"): 0.80}), Budget(0.01, 0.95, max_rounds=1))
    assert cell(cmp, "base", THROUGHPUT).decided_round == 1


def test_a_speedup_is_different_and_better_and_exits_0():
    cmp = run(selection("base"), FakeLauncher({("B", "base"): 1.25}))
    assert cell(cmp, "base", THROUGHPUT).direction() == "better"
    assert cmp.exit_code() == 0


def test_the_same_build_is_same_within_tolerance():
    cmp = run(selection("base"), FakeLauncher({}))
    assert {c.decision for c in cmp.cells} == {SAME}
    assert cmp.rounds_run == 2 and cmp.exit_code() == 0


def test_a_change_the_noise_hides_ends_undecided_at_the_budget():
    # 3 % launch-to-launch spread against a 5 % tolerance and a 3 % change: with the spread learnt
    # from four launches per build (the prior weighs nothing), this run resolves neither
    # "different" nor "same" (other seeds find it, or call it the same within 5 %: both true)
    specs = {g: GateSpec(g, s.tolerance, 0.03, s.weight, s.inverted) for g, s in SPECS.items()}
    cmp = run(selection("base"), FakeLauncher({("B", "base"): 0.97}, launch_sd=0.03, seed=4), specs=specs)
    tput = cell(cmp, "base", THROUGHPUT)
    assert tput.decision == UNDECIDED and [look.launches for look in tput.looks] == [2, 3, 4]
    assert cmp.rounds_run == 4 and cmp.exit_code() == 0
    launches = [(r, b) for r, _c, b in cmp._launcher.calls]  # type: ignore[attr-defined]
    assert [b for _r, b in launches] == list("ABBAABBA")


def test_a_small_significant_change_within_the_tolerance_is_different_not_same():
    # 2 % slower on a machine whose launches spread 0.05 % (declared 0.2 %): inside the 5 %
    # tolerance, and certainly a change
    specs = {g: GateSpec(g, s.tolerance, 0.002, s.weight, s.inverted) for g, s in SPECS.items()}
    cmp = run(selection("base"), FakeLauncher({("B", "base"): 0.98}, launch_sd=0.0005, run_sd=0.0005), specs=specs)
    tput = cell(cmp, "base", THROUGHPUT)
    assert tput.decision == DIFFERENT and tput.decided_look is not None
    _ratio, low, high = shown_ratio(tput.decided_look, tput.spec)
    assert 0.95 < low < high < 1  # equivalent as well: "different" wins


def test_decided_configurations_stop_and_the_reference_stays_for_the_speculation_ratio():
    # spec: its own cells are decided at once, but its speculation ratio (spec over ref within
    # each build) moves by 3 % under 2 % noise; ref stays launched as long as that ratio is open
    sel = selection("ref", "spec", speculative=("spec",), references={"spec": "ref"})
    launcher = FakeLauncher({("B", "spec"): 0.70, ("B", "ref"): 0.70 / 0.97}, launch_sd=0.02, seed=5)
    cmp = run(sel, launcher)
    ratio = cell(cmp, "spec", SPECULATION)
    rounds_of = {c: sorted({r for r, cfg, _b in launcher.calls if cfg == c}) for c in ("ref", "spec")}
    assert cell(cmp, "spec", THROUGHPUT).decided_round == 2
    if ratio.decision == UNDECIDED:
        assert rounds_of["ref"] == [1, 2, 3, 4] and rounds_of["spec"] == [1, 2, 3, 4]
    else:  # the pair stops together once the ratio is decided
        assert rounds_of["ref"] == rounds_of["spec"]
    for c in ("ref", "spec"):  # each round launches a configuration once per build, in ABBA order
        assert [b for r, cfg, b in launcher.calls if cfg == c] == [b for r in rounds_of[c] for b in abba_order(r)]


def test_a_configuration_whose_cells_are_all_decided_is_not_launched_again():
    specs = {g: GateSpec(g, s.tolerance, 0.03, s.weight, s.inverted) for g, s in SPECS.items()}
    launcher = FakeLauncher({("B", "fast"): 0.7, ("B", "noisy"): 0.97}, launch_sd=0.03, seed=3)
    cmp = run(selection("fast", "noisy"), launcher, specs=specs)
    fast_rounds = {r for r, c, _b in launcher.calls if c == "fast"}
    decided = max(c.decided_round or 0 for c in cmp.cells if c.config == "fast")
    assert decided and fast_rounds == set(range(1, decided + 1)) and cmp.rounds_run > decided
    assert {r for r, c, _b in launcher.calls if c == "noisy"} == set(range(1, cmp.rounds_run + 1))
    assert all(len(c.looks) == decided - 1 for c in cmp.cells if c.config == "fast")


def test_a_decided_cell_is_not_looked_at_again_while_its_configuration_continues():
    launcher = FakeLauncher({("B", "spec"): 0.98}, launch_sd=0.02, seed=4)
    cmp = run(selection("spec", speculative=("spec",)), launcher)
    accept = cell(cmp, "spec", ACCEPT_LENGTH)
    assert accept.decision == SAME and len(accept.looks) == 1
    assert cmp.rounds_run > 1


def _look(p_worse: float, ratio: float = 0.9, launches: int = 1) -> Look:
    est = RatioEstimate(ratio=ratio, low=ratio * 0.9, high=ratio * 1.1, threshold=0.95, p_value=p_worse, dof=20,
                        confidence=0.99, between_sd=0.01, between_source=SpreadSource(), test_at=1.0, pass_low=ratio * 0.95,
                        pass_confidence=0.95)
    return Look(1, launches, est, p_worse)


def _group_with(p_values: list[float], launches: int = 1, pooled: float | None = None) -> GateGroup:
    """One configuration's tok/s cells (one per level) with one look each; ``pooled``: the p of
    the test pooled over the levels, if it was looked at."""
    cells = [GateCell("c", i, SPECS[THROUGHPUT], looks=[_look(p, launches=launches)]) for i, p in enumerate(p_values)]
    set_alphas(cells, 0.01)
    group = GateGroup("c", THROUGHPUT, cells)
    if pooled is not None:
        group.looks.append(_look(pooled, launches=launches))
    return group


def test_closed_testing_gives_a_cell_the_alpha_of_its_group_less_one_once_the_group_is_rejected():
    one_look = Budget(0.01, 0.95, max_rounds=1)
    assert POOLED_SHARE == 0.8  # the smallest cell has the other 0.2 of the group's alpha
    group = _group_with([0.0004, 0.008])  # group alpha 0.01: its smallest cell 2 x 0.0004 / 0.2 < 0.01 rejects it
    decide_round([group], 1, one_look)
    assert [c.decision for c in group.cells] == [DIFFERENT, DIFFERENT]  # each p x (2 - 1) < 0.01
    assert group.decision == DIFFERENT and group.direction == "worse"
    group = _group_with([0.0004, 0.02])
    decide_round([group], 1, one_look)
    assert [c.decision for c in group.cells] == [DIFFERENT, UNDECIDED]
    group = _group_with([0.004, 0.004])  # below a cell's Bonferroni alpha (0.005), not below 0.2 of it
    decide_round([group], 1, one_look)
    assert group.decision == UNDECIDED and [c.decision for c in group.cells] == [UNDECIDED, UNDECIDED]


def test_a_drop_at_every_level_that_no_level_shows_alone_is_worse_across_the_levels():
    one_look = Budget(0.01, 0.95, max_rounds=1)
    group = _group_with([0.01] * 4, pooled=0.001)  # cells at 0.0025 each: none alone; pooled 0.001 / 0.8 < 0.01
    decide_round([group], 1, one_look)
    assert group.decision == DIFFERENT and group.direction == "worse"
    assert all(c.decision == UNDECIDED for c in group.cells)  # 3 x 0.01 > 0.01
    assert group.p_closed(one_look) == pytest.approx(0.00125)
    group = _group_with([0.003] * 4, pooled=0.001)  # 3 x 0.003 < 0.01: every level too
    decide_round([group], 1, one_look)
    assert all(c.decision == DIFFERENT for c in group.cells)
    group = _group_with([0.5] * 4, pooled=0.009)  # pooled 0.009 / 0.8 > 0.01
    decide_round([group], 1, one_look)
    assert group.decision == UNDECIDED


LEVELS = (1, 4, 16, 64)


def test_a_drop_at_every_level_is_worse_over_the_levels_in_the_table_and_the_document():
    sel = Selection(["plain", "other"], list(LEVELS))
    launcher = FakeLauncher({("B", "plain"): 0.97}, launch_sd=0.006, run_sd=0.004, seed=3, levels=LEVELS)
    cmp = run(sel, launcher)
    assert [(g.config, g.gate) for g in cmp.group_regressions()] == [("plain", THROUGHPUT), ("plain", STEP_TIME)]
    assert cmp.exit_code() == 1 and not any(g.config == "other" for g in cmp.group_regressions())
    doc = results_doc(cmp, [Build("A"), Build("B")], suite_path="s.toml", mode="launch", argv=["ab"])
    groups = {(g["config"], g["gate"]): g for g in doc["groups"]}
    tok_s = groups[("plain", THROUGHPUT)]
    assert tok_s["decision"] == DIFFERENT and tok_s["direction"] == "worse" and tok_s["levels"] == list(LEVELS)
    assert tok_s["ratio"] == pytest.approx(0.97, abs=0.02) and tok_s["p_closed"] <= tok_s["alpha"]
    assert groups[("other", THROUGHPUT)]["decision"] != DIFFERENT
    assert "throughput plain all levels" in doc["outcome"]["regressions"]
    text = render_text(cmp, [Build("A"), Build("B")], "title")
    assert re.search(r"^plain\s+all\s+tok/s\s+-\s+-\s+0\.9\d\d \[.*different \(worse\)", text, re.M), text
    assert "worse at one level or more: tok/s plain, step ms plain" in text


def test_a_large_drop_at_one_level_is_still_found_at_that_level_alone():
    sel = Selection(["plain", "other"], list(LEVELS))
    launcher = FakeLauncher({}, launch_sd=0.006, run_sd=0.004, seed=5, levels=LEVELS,
                            level_factors={("B", "plain", 64): 0.85})
    cmp = run(sel, launcher)
    worse = {(c.config, c.gate, c.level) for c in cmp.regressions()}
    assert ("plain", THROUGHPUT, 64) in worse and not any(level != 64 for _, _, level in worse), worse


def test_a_group_of_one_level_is_its_cell_and_is_not_reported_twice():
    cmp = run(selection("slow"), FakeLauncher({("B", "slow"): 0.7}))
    assert cmp.regressions() and not cmp.group_regressions() and cmp.exit_code() == 1
    doc = results_doc(cmp, [Build("A"), Build("B")], suite_path="s.toml", mode="launch", argv=["ab"])
    assert doc["groups"] == [] and not any(r.endswith("all levels") for r in doc["outcome"]["regressions"])
    text = render_text(cmp, [Build("A"), Build("B")], "title")
    assert not re.search(r"^slow\s+all\s", text, re.M) and "one level or more" not in text


def test_a_launch_location_is_the_median_run_of_its_logs_averaged_over_the_levels():
    # 2 levels: run k's log averaged over them, then the median over the runs (the shortest level's)
    assert launch_location([[100.0, 400.0, 50.0], [400.0, 100.0, 50.0, 7.0]]) == pytest.approx(math.log(200.0))
    assert launch_location([[100.0, 100.0, 1.0], [100.0, 100.0, 1.0]]) == pytest.approx(math.log(100.0))  # a stall
    assert launch_location([[1.0], []]) is None  # a level without runs: no location


def test_each_look_spends_its_obrien_fleming_share_of_the_cell_alpha():
    # four rounds give three looks (after 2, 3 and 4 launches per build): little alpha early, most last
    assert (BUDGET.first_look, BUDGET.looks) == (2, 3)
    shares = look_shares(BUDGET)
    assert sorted(shares) == [2, 3, 4] and sum(shares.values()) == pytest.approx(1.0)
    assert shares[2] < shares[3] < shares[4] and shares[4] > 0.85 and shares[2] >= 0.9 * MIN_LOOK_SHARE
    last = 0.01 * shares[4]  # alone in the family: alpha 0.01
    group = _group_with([1.1 * last], launches=4)
    decide_round([group], 1, BUDGET)
    assert group.cells[0].decision == UNDECIDED and group.cells[0].p_adjusted(BUDGET) == pytest.approx(0.011)
    group = _group_with([0.9 * last], launches=4)
    decide_round([group], 1, BUDGET)
    assert group.cells[0].decision == DIFFERENT and group.cells[0].direction() == "worse"
    group = _group_with([0.9 * last], launches=2)  # the same p at the first look is far from enough
    decide_round([group], 1, BUDGET)
    assert group.cells[0].decision == UNDECIDED


def test_a_build_that_does_not_start_is_not_measured_and_a_regression_still_wins():
    launcher = FakeLauncher({("B", "slow"): 0.7}, errors={("B", "broken", 1): "server 'broken' exited during start-up"})
    cmp = run(selection("broken", "slow"), launcher)
    assert all(c.error for c in cmp.cells if c.config == "broken")
    assert cmp.not_measured()[0].startswith("broken: round 1, build B: server 'broken' exited")
    assert cmp.exit_code() == 1  # slow's regression stands
    launcher = FakeLauncher({}, errors={("A", "broken", 1): "boom"})
    cmp = run(selection("broken", "fine"), launcher)
    assert cmp.exit_code() == 3
    assert [(r, c, b) for r, c, b in launcher.calls if c == "broken"] == [(1, "broken", "A")]  # B not launched


def test_attach_mode_drops_a_configuration_a_server_does_not_serve():
    sel = selection("ref", "spec", speculative=("spec",), references={"spec": "ref"})
    cmp = run(sel, FakeLauncher({}, skipped={("A", "ref")}))
    assert "ref" in cmp.dropped and not any(c.config == "ref" or c.gate == SPECULATION for c in cmp.cells)
    assert cmp.exit_code() == 0


def test_the_table_figures_are_the_decisions_locations_and_the_document_keeps_every_run():
    cmp = run(selection("spec", speculative=("spec",)), FakeLauncher({("B", "spec"): 0.9}, launch_sd=0.01, seed=2))
    doc = results_doc(cmp, [Build("A"), Build("B", server_args={"spec": ["--x"]})], suite_path="s.toml", mode="launch",
                      argv=["ab"])
    assert doc["schema"] == "specguard-ab" and doc["outcome"]["exit_code"] == 1
    by_gate = {r["gate"]: r for r in doc["cells"]}
    for row in by_gate.values():
        assert row["b"] / row["a"] == pytest.approx(row["ratio"])  # B / A is the table's B/A
        assert len(row["a_runs"]) == len(row["b_runs"]) == row["rounds"] == 2
    assert by_gate[STEP_TIME]["a"] == pytest.approx(5.0, rel=0.02)  # 200 steps/s shown as 5 ms
    assert by_gate[STEP_TIME]["ratio"] > 1 > by_gate[THROUGHPUT]["ratio"]


def test_the_ab_document_is_checked_before_it_is_written_and_round_trips(tmp_path):
    cmp = run(selection("spec", speculative=("spec",)), FakeLauncher({("B", "spec"): 0.9}, launch_sd=0.01, seed=2))
    doc = results_doc(cmp, [Build("A"), Build("B")], suite_path="s.toml", mode="launch", argv=["ab"])
    AB.save(doc, tmp_path / "ab.json")
    assert AB.load(tmp_path / "ab.json") == json.loads(json.dumps(doc))
    # where a look's spread comes from is data (the run's own launches, the prior only checked), not a phrase
    source = doc["cells"][0]["looks"][0]["between_source"]
    assert source["prior"] is False and source["launches"] and source["history"] is None, source
    doc["cells"][0]["looks"][0]["ratio"] = "0.9"
    with pytest.raises(DocumentError, match=r"cells\[0\]\.looks\[0\]\.ratio is \"0.9\"; expected float") as err:
        AB.save(doc, tmp_path / "bad.json")
    assert "\n" not in str(err.value) and not (tmp_path / "bad.json").exists()
    text = render_text(cmp, [Build("A"), Build("B")], "title")
    assert "different (worse)" in text and text.endswith("-> exit 1")
    # the run's own launch spread, beside the prior it was checked against
    spreads = doc["launch_spreads"]
    assert spreads[THROUGHPUT]["dof"] == 2 and spreads[THROUGHPUT]["prior_sd"] == SPECS[THROUGHPUT].prior_sd
    assert "launch spread in this run (decided on; the prior only checked): tok/s " in text
    assert not render_text(cmp, [Build("A"), Build("B")], "title", exit_code=False).endswith("-> exit 1")


def test_the_launch_spread_is_the_runs_own_and_the_prior_is_only_checked():
    steady = [[100.0, 100.1, 99.9], [100.2, 100.1, 100.0]]
    jumpy = [[100.0, 100.1, 99.9], [112.0, 112.1, 111.9]]  # 12 % between launches, the prior says 1.2 %
    calm = look_estimate(steady, steady, SPECS[THROUGHPUT], alpha_look=0.001, pass_confidence=0.95)
    wild = look_estimate(steady, jumpy, SPECS[THROUGHPUT], alpha_look=0.001, pass_confidence=0.95)
    assert calm.between_sd < 0.005 < SPECS[THROUGHPUT].prior_sd  # the prior weighs nothing
    assert wild.between_source == SpreadSource(prior=False, launches=(2, 2)) and wild.between_sd > 0.03
    others = run_spread([[jumpy], [steady]], ["x"])  # one configuration, two builds
    assert others is not None and others.dof == 2 and prior_check(others, SPECS[THROUGHPUT].prior_sd) is True
    assert prior_check(run_spread([[steady], [steady]], ["x"]), SPECS[THROUGHPUT].prior_sd) is False
    with_others = look_estimate(steady, steady, SPECS[THROUGHPUT], alpha_look=0.001, pass_confidence=0.95,
                                spread=others)
    assert with_others.between_source.history == Origin(HistoryOf.LAUNCHES, 4, ("x",)) and with_others.between_sd > 0.03
    assert spread_source_text(with_others.between_source) == "this run's launches of x and both builds' own launches"


# -- builds and selection -----------------------------------------------------------------------
def default_suite():
    return load_suite(REPO / "perf_tests" / "suite.toml")


CONFIGS = ["baseline", "eagle3", "mtp"]


@pytest.mark.parametrize("kwargs, message", [
    (dict(a_urls=["http://127.0.0.1:1"], b_args=["eagle3=--x"]), "cannot be combined"),
    (dict(a_urls=["http://127.0.0.1:1"]), "add --b-url"),
    (dict(b_args=["nosuch=--x"]), "--b-server-args 'nosuch=--x': no configuration 'nosuch'"),
    (dict(b_args=["--emulator-step-scale 1.03"]), "--b-server-args takes NAME="),
    (dict(b_args=['eagle3="--x']), "No closing quotation"),
    (dict(), "builds A and B are the same"),
    (dict(b_python="/nonexistent/python"), "--b-python: '/nonexistent/python' is not an executable file"),
])
def test_bad_build_options_are_one_line_naming_the_flag(kwargs, message):
    a, b = (BuildFlags(kwargs.get(f"{x}_python"), kwargs.get(f"{x}_args", ()), kwargs.get(f"{x}_urls", ())) for x in "ab")
    with pytest.raises(UsageError) as err:
        ab_builds(a, b, CONFIGS)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_urls_bare_and_named():
    assert parse_urls(["http://h:1/", "eagle3=http://h:2"], "--a-url", CONFIGS) == {None: "http://h:1",
                                                                                   "eagle3": "http://h:2"}
    with pytest.raises(UsageError, match="--a-url 'h:1' is not an http"):
        parse_urls(["h:1"], "--a-url", CONFIGS)


def test_selection_adds_references_and_attach_mode_needs_urls():
    suite = default_suite()
    a, b = Build("A"), Build("B", server_args={"eagle3": ["--x"]})
    sel, notes = plan.select(suite, ["eagle3"], [a, b])
    assert sel.configs == ["baseline", "eagle3"] and sel.references == {"eagle3": "baseline"}
    assert notes == ["baseline: measured as the reference of eagle3 (its speculation ratio within each build)"]
    a, b = Build("A", urls={"eagle3": "http://h:1"}), Build("B", urls={"eagle3": "http://h:2"})
    sel, notes = plan.select(suite, [], [a, b])
    assert sel.configs == ["eagle3"] and sel.references == {}
    assert "its reference 'baseline' has no --a-url/--b-url" in notes[0]
    with pytest.raises(UsageError, match="--a-url: no URL for configuration 'mtp'"):
        plan.select(suite, ["mtp"], [a, b])
    with pytest.raises(UsageError, match="--config nosuch: no configuration"):
        plan.select(suite, ["nosuch"], [a, b])


@pytest.mark.parametrize("argv, message", [
    (["ab", "--suite", "perf_tests/suite.toml"], "builds A and B are the same"),
    (["ab", "--max-rounds", "0", "--b-server-args", "eagle3=--x"], "--max-rounds '0'"),
    (["ab", "--concurrency", "1,x", "--b-server-args", "eagle3=--x"], "argument --concurrency: 1,x: use comma-separated positive integers"),
    (["ab", "--suite", "nosuch.toml", "--b-server-args", "eagle3=--x"], "nosuch.toml"),
    (["ab", "--config", "nosuch", "--b-server-args", "eagle3=--x"], "--config nosuch: no configuration"),
])
def test_usage_errors_exit_4_with_one_line(argv, message, capsys, monkeypatch):
    monkeypatch.chdir(REPO)
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse's own checks exit from the parser, with 4 (specguard.cli._Parser)
        code = exc.code
    assert code == 4
    err = capsys.readouterr().err.strip().splitlines()
    assert message in err[-1]


# -- end to end on the emulator -----------------------------------------------------------------
SMALL_SUITE = """
[sweep]
concurrency = [4]
requests_per_worker = 4
warmup = 1
repeats = 3

[workload]
kind = "random-ids"
input_len = 32
output_len = 64

# The default suite's launch spread (1.2 %) with a 5 % tolerance: "same" within one or two
# launches per build on a shared 2-core machine, and a 25 % slower step "different" at once.
[tolerances]
throughput = 0.05
accept_length = 0.05
step_time = 0.05
prior_between_sd = 0.012

[advanced]
read_timeout_s = 20
run_timeout_s = 60

[servers.baseline]
engine = "emulator"
model_path = "/models/specguard-fast"
max_running_requests = 64
args = ["--emulator-profile", "fast"]
startup_timeout_s = 60

[servers.eagle3]
engine = "emulator"
model_path = "/models/specguard-fast"
speculative_algorithm = "EAGLE3"
draft_model_path = "/models/specguard-fast-eagle3"
num_steps = 3
eagle_topk = 1
num_draft_tokens = 4
max_running_requests = 64
reference = "baseline"
args = ["--emulator-profile", "fast"]
startup_timeout_s = 60
"""


def run_cli(tmp_path: Path, *argv: str, timeout_s: float = 240) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "specguard.cli", *argv], cwd=tmp_path, capture_output=True, text=True,
                          timeout=timeout_s)


def ports_in_logs(log_dir: Path) -> list[int]:
    return [int(p.stem.rsplit("-", 1)[1]) for p in log_dir.rglob("server-*.log")]


def listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def decisions(doc: dict) -> dict[tuple[str, str], str]:
    return {(c["config"], c["gate"]): (f"{c['decision']} ({c['direction']})" if c["direction"] else c["decision"])
            for c in doc["cells"]}


@pytest.mark.e2e
def test_ab_launch_mode_finds_eagle3_slower_and_baseline_the_same(tmp_path):
    (tmp_path / "suite.toml").write_text(SMALL_SUITE)
    proc = run_cli(tmp_path, "ab", "--suite", "suite.toml", "--b-server-args", "eagle3=--emulator-step-scale 1.25",
                   "--results-json", "r.json", "--report-dir", "rep", "--log-dir", "logs")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    doc = AB.load(tmp_path / "r.json")
    assert doc["schema"] == "specguard-ab" and doc["mode"] == "launch"
    got = decisions(doc)
    assert got[("eagle3", "throughput")] == "different (worse)"
    assert got[("eagle3", "step_time")] == "different (worse)"
    assert got[("eagle3", "speculation")] == "different (worse)"
    assert got[("eagle3", "accept_length")] == "same"
    assert got[("baseline", "throughput")] == "same"
    order = [(x["round"], x["config"], x["build"]) for x in doc["launches"]]
    assert [b for r, c, b in order if c == "baseline"] == [b for r in sorted({r for r, c, _ in order if c == "baseline"})
                                                           for b in abba_order(r)]
    assert "different (worse)" in proc.stdout and "eagle3: --emulator-step-scale 1.25" in proc.stdout
    assert "| eagle3 | c4 | tok/s |" in (tmp_path / "rep" / "summary.md").read_text()
    ports = ports_in_logs(tmp_path / "logs")
    assert len(ports) == len(doc["launches"]) and not any(listening(p) for p in ports)


@pytest.mark.e2e
def test_ab_attach_mode_interleaves_runs_on_two_running_servers(tmp_path, emulator):
    (tmp_path / "suite.toml").write_text(SMALL_SUITE)
    eagle = ("--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", "/models/specguard-fast-eagle3",
             "--speculative-num-steps", "3", "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4",
             "--max-running-requests", "64")
    url_a = emulator(*eagle)
    url_b = emulator(*eagle, "--emulator-step-scale", "1.25")
    proc = run_cli(tmp_path, "ab", "--suite", "suite.toml", "--a-url", f"eagle3={url_a}", "--b-url", f"eagle3={url_b}",
                   "--results-json", "r.json", "--max-rounds", "2")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    doc = json.loads((tmp_path / "r.json").read_text())
    assert doc["mode"] == "attach" and doc["configs"] == ["eagle3"]
    got = decisions(doc)
    assert got[("eagle3", "throughput")] == "different (worse)" and ("eagle3", "speculation") not in got
    assert "its reference 'baseline' has no --a-url/--b-url" in proc.stderr
    port_a, port_b = (int(u.rsplit(":", 1)[1]) for u in (url_a, url_b))
    assert listening(port_a) and listening(port_b)  # attached servers are the user's: they keep running


def points_of(config: str, locations: dict[int, tuple[bool, float]]) -> list[LaunchPoint]:
    return [LaunchPoint(config, b, slot, math.log(v)) for slot, (b, v) in locations.items()]


def test_the_pooled_test_is_a_t_on_a_model_of_every_launch_of_the_run_that_takes_out_its_drift():
    # x: A B B A, y: B A A B, interleaved; the machine 1 % faster each launch, y's B 3 % slower
    order = [("x", False), ("x", True), ("y", True), ("y", False), ("x", True), ("x", False), ("y", False), ("y", True)]
    noise = [0.001, -0.002, 0.0, 0.001, 0.002, -0.001, -0.001, 0.0]
    points = [LaunchPoint(c, b, slot, 0.01 * slot + noise[slot] + (math.log(0.97) if c == "y" and b else 0.0))
              for slot, (c, b) in enumerate(order)]
    est = trend_estimate(points, Contrast("y"), 0.05, alpha_look=0.001, pass_confidence=0.95)
    assert est is not None and est.dof == 8 - 5  # two intercepts, two build effects, one trend
    assert est.ratio == pytest.approx(0.97, abs=0.003) and est.p_value < 0.001 and est.high < 1
    assert est.between_source.history == Origin(HistoryOf.LAUNCHES, 4, ("x",)) and est.between_source.launches == (2, 2)
    # the same launches read as two samples: the drift is spread, and nothing is decided
    la = [p.location for p in points if p.config == "y" and not p.build_b]
    lb = [p.location for p in points if p.config == "y" and p.build_b]
    t = (np.mean(lb) - np.mean(la)) / math.sqrt((np.var(la, ddof=1) + np.var(lb, ddof=1)) / 2)  # 2 dof
    assert abs(t) < 1.1  # p > 0.19
    assert trend_estimate(points_of("y", {0: (False, 100.0), 1: (True, 99.0)}), Contrast("y"), 0.05, alpha_look=0.01,
                          pass_confidence=0.95) is None  # no residual degree of freedom
    assert trend_estimate([p for p in points if not (p.config == "y" and p.build_b)], Contrast("y"), 0.05, alpha_look=0.01,
                          pass_confidence=0.95) is None  # y has no build B launch


def test_a_drifting_machine_neither_hides_a_drop_at_every_level_nor_makes_one():
    sel = Selection(["x", "y", "z"], [1, 4])
    drop = run(sel, FakeLauncher({("B", "y"): 0.96}, launch_sd=0.003, drift=0.01, levels=(1, 4), seed=3))
    assert [(g.config, g.gate) for g in drop.group_regressions()] == [("y", THROUGHPUT), ("y", STEP_TIME)]
    same = run(sel, FakeLauncher({}, launch_sd=0.003, drift=0.01, levels=(1, 4), seed=3))
    assert not same.group_regressions() and not same.regressions()


def test_a_speculation_ratio_is_the_contrast_of_two_build_effects_and_its_p_values_are_calibrated():
    # two speculative configurations share one reference's launches (each round: ref, one, two in
    # both builds, ABBA); their ratios' B/A is (one's effect - ref's effect) of the tok/s model, and
    # under no change the p of that contrast is uniform: the shared launches are in its covariance
    rng = np.random.default_rng(7)
    below = []
    for _ in range(3000):
        points, slot = [], 0
        for round_no in (1, 2, 3, 4):
            for build in abba_order(round_no):
                for config in ("ref", "one", "two"):
                    points.append(LaunchPoint(config, build == "B", slot, rng.normal(0, 0.01)))
                    slot += 1
        est = trend_estimate(points, Contrast("one", "ref"), 0.05, alpha_look=0.01, pass_confidence=0.95)
        assert est is not None and est.dof == 24 - 7  # three intercepts, three build effects, a trend
        below.append(est.p_value < 0.01)
    assert 0.005 <= np.mean(below) <= 0.015  # 30 expected in 3000; sd 5.4
    # the ratio itself: one's B 3 % slower, ref's B 1 % slower, nothing else moves
    exact = [LaunchPoint(c, b, i, math.log({("one", True): 0.97, ("ref", True): 0.99}.get((c, b), 1.0)) + 1e-4 * (-1) ** i)
             for i, (c, b) in enumerate([(c, b) for b in (False, True, True, False) for c in ("ref", "one", "two")])]
    est = trend_estimate(exact, Contrast("one", "ref", levels_pooled=False), 0.05, alpha_look=0.01, pass_confidence=0.95)
    assert est is not None and est.ratio == pytest.approx(0.97 / 0.99, abs=1e-3) and not est.between_source.levels_pooled
    assert est.between_source.history == Origin(HistoryOf.LAUNCHES, 4, ("two",)) and est.between_source.launches == (2, 2)
    assert trend_estimate(exact, Contrast("one", "absent"), 0.05, alpha_look=0.01, pass_confidence=0.95) is None


def test_a_speculation_cell_and_group_look_at_the_contrast_in_the_tok_s_model():
    sel = Selection(["ref", "one"], [1, 4], frozenset({"one"}), {"one": "ref"})
    cmp = run(sel, FakeLauncher({("B", "one"): 0.9}, launch_sd=0.003, levels=(1, 4), seed=2))
    ratio = next(c for c in cmp.cells if c.config == "one" and c.gate == SPECULATION and c.level == 4)
    group = next(g for g in cmp.groups if g.config == "one" and g.gate == SPECULATION)
    assert ratio.looks and group.looks and group.decision == DIFFERENT and group.direction == "worse"
    look = ratio.looks[-1]
    at_4 = [p for p in cmp.launch_points(THROUGHPUT, 4) if cmp.launches[p.slot].round_no <= look.round_no]
    expected = trend_estimate(at_4, Contrast("one", "ref", levels_pooled=False), 0.05,
                              alpha_look=BUDGET.alpha_look(ratio), pass_confidence=0.95)
    assert expected is not None and look.estimate.ratio == pytest.approx(expected.ratio) and look.estimate.ratio < 0.92


