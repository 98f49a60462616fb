"""The gate study: simulated launches, sessions decided by the suite's own gates, noise spreads."""

import json
import math
from dataclasses import replace

import numpy as np
import pytest

from research import study
from research.study.session_decisions import remeasures
from research.study.verdict import cut_repeats
from specguard.config import load_suite
from specguard.emulator.model import ClosedLoop, SimLaunch, simulate_closed_loop
from specguard.emulator.profile import load_profile
from specguard.emulator.spec import SpecRequest
from specguard.labels import Verdict

TINY = """
[sweep]
concurrency = [1, 4]
requests_per_worker = 2
repeats = 3
[workload]
input_len = 32
output_len = 24
[servers.baseline]
engine = "emulator"
model_path = "/models/specguard-fast"
max_running_requests = 128
args = ["--emulator-profile", "fast"]
[servers.eagle3]
engine = "emulator"
model_path = "/models/specguard-fast"
speculative_algorithm = "EAGLE3"
num_steps = 3
eagle_topk = 1
num_draft_tokens = 4
max_running_requests = 128
reference = "baseline"
speculation_must_win_up_to = 4
args = ["--emulator-profile", "fast"]
"""


@pytest.fixture
def tiny(tmp_path):
    path = tmp_path / "tiny.toml"
    path.write_text(TINY)
    return load_suite(path)


def test_gate_tests_count_like_the_plugin():
    suite = load_suite("perf_tests/suite.toml")
    assert study.gate_tests(suite) == 40  # 12 throughput + 12 step time + 8 accept + 8 speculation


def test_noise_free_launch_is_the_simulator(tiny):
    launch = study.simulate_launch(tiny, "eagle3", seed=5, repeats=1, noise=None)
    direct = simulate_closed_loop(load_profile("fast"), SpecRequest("EAGLE3", 3, 1, 4), ClosedLoop(1, 2, 32, 24, same_prompt=False), SimLaunch(max_running_requests=128, seed=5))
    assert launch[1][0][0] == pytest.approx(direct.output_throughput)  # the launch's first run
    assert launch[1][1][0] == pytest.approx(direct.accept_length)


def test_injected_changes_move_what_they_say(tiny):
    base = study.simulate_launch(tiny, "eagle3", 1, 1, None)
    slow = study.simulate_launch(tiny, "eagle3", 1, 1, None, study.Change("x", "eagle3", step_scale=1 / 0.95))
    worse = study.simulate_launch(tiny, "eagle3", 1, 4, None, study.Change("y", "eagle3", accept_factor=0.9))
    assert slow[4][0][0] / base[4][0][0] == pytest.approx(0.95, rel=1e-6)
    assert np.mean(worse[4][1]) / 3.03 == pytest.approx(0.9, abs=0.04)


def test_scenarios_put_speculation_at_095_where_it_must_win(tiny):
    changes = {c.name: c for c in study.scenarios(tiny, "eagle3")}
    assert {"A/A", "tok/s -5%", "accept -10%", "speculation 0.95x at c4"} <= set(changes)
    spec = study.simulate_launch(tiny, "eagle3", 0, 1, None, changes["speculation 0.95x at c4"])[4][0][0]
    ref = study.simulate_launch(tiny, "baseline", 0, 1, None)[4][0][0]
    assert spec / ref == pytest.approx(0.95, rel=1e-6)


def test_a_session_fails_on_a_large_drop_and_passes_unchanged(tiny):
    noise = study.Noise(within={}, between={}, stall_rate=0.0)
    trial = study.simulate_trial(tiny, 0, 3, 5, 3, noise, [study.Change("big", "eagle3", step_scale=1.5)])
    settings = study.GateSettings(3, tiny.tolerances, "on-suspicion")
    same = study.decide_session(tiny, settings, trial.current, trial.history)
    dropped = study.decide_session(tiny, settings, {**trial.current, "eagle3": trial.changed["big"]}, trial.history)
    assert not same.failed and same.enforced == 12  # throughput, step time x4, accept length x2, speculation x2
    assert dropped.failed and {"throughput", "speculation"} <= {str(g.gate) for g in dropped.failing}
    assert same.crossovers == {"eagle3": None}  # speculation wins at both levels of the tiny sweep


def _stalled(launch, c, runs, factor=0.7):
    """``launch`` with the given runs (0-based) of level c slowed by ``factor``, tok/s and step rate alike."""
    tok, acc, rate = launch[c]
    slow = [factor if i in runs else 1.0 for i in range(len(tok))]
    return {**launch, c: ([t * f for t, f in zip(tok, slow)], acc, [r * f for r, f in zip(rate, slow)])}


def test_attach_mode_measures_a_disagreeing_cell_again_on_the_same_server_as_the_session_does(tiny):
    # session/campaign.py _again_if_runs_disagree: where a configuration is not relaunched, a cell
    # whose runs disagree is measured once more on the same server, and its gates set the
    # disagreeing measurement aside; a cell whose second measurement disagrees too is not measured.
    noise = study.Noise(within={}, between={}, stall_rate=0.0)
    trial = study.simulate_trial(tiny, 0, 3, 5, 6, noise, [])  # 6 runs: 3 measured, 3 for the re-measurement
    attach = study.GateSettings(3, tiny.tolerances, "attach")
    assert remeasures(attach) and not remeasures(study.GateSettings(3, tiny.tolerances, "on-suspicion"))
    two_stalled = {**trial.current, "eagle3": _stalled(trial.current["eagle3"], 4, {0, 1})}
    cleared = study.decide_session(tiny, attach, two_stalled, trial.history)
    assert not cleared.failed, [(str(g.gate), g.verdict) for g in cleared.failing]
    still = {**trial.current, "eagle3": _stalled(trial.current["eagle3"], 4, {0, 1, 3, 4})}  # the second measurement too
    stuck = study.decide_session(tiny, attach, still, trial.history)
    assert stuck.failed and {g.verdict for g in stuck.failing} == {Verdict.ERROR}
    assert {(g.config, g.level.value) for g in stuck.failing} == {("eagle3", 4)}
    # without runs to measure again (a trial of 3 runs), the first measurement stands: not measured
    short = {n: cut_repeats(launch, 3) for n, launch in two_stalled.items()}
    assert study.decide_session(tiny, attach, short, trial.history).failed


def test_a_run_that_accepted_more_is_no_stall_in_the_study_as_in_the_session(tiny):
    # CellGates.stall_basis: a speculative cell's stalls are judged on tok/s / accept length. Runs 2
    # and 3 accepting 25 % less (tok/s down with them, step rates unchanged) are neither measured
    # again nor set aside, and a cell without runs to measure again is still decided.
    noise = study.Noise(within={}, between={}, stall_rate=0.0)
    trial = study.simulate_trial(tiny, 0, 3, 5, 3, noise, [])
    tok, acc, rate = trial.current["eagle3"][4]
    lower = [1.0, 0.75, 0.75]
    accepted_less = {**trial.current["eagle3"], 4: ([t * f for t, f in zip(tok, lower)],
                                                    [a * f for a, f in zip(acc, lower)], rate)}
    attach = study.GateSettings(3, tiny.tolerances, "attach")
    verdict = study.decide_session(tiny, attach, {**trial.current, "eagle3": accepted_less}, trial.history)
    assert ("eagle3", 4) not in {(g.config, g.level.value) for g in verdict.failing if g.verdict == Verdict.ERROR}


def test_spreads_recover_known_within_and_between_sd_and_set_stalls_apart():
    rng = np.random.default_rng(0)
    sessions = [{(n, c): rng.normal(rng.normal(0, 0.02), 0.01, 5) for n in ("a", "b", "c") for c in (1, 4)}
                for _ in range(60)]
    sessions[3][("a", 4)][2] += math.log(0.5)  # another job took the cores during one run
    got = study.spreads(sessions)
    for c in (1, 4):
        assert got[c].within == pytest.approx(0.01, rel=0.1)
        assert got[c].between == pytest.approx(0.02, rel=0.15)
    assert got[1].stall_factors == () and len(got[4].stall_factors) == 1
    assert got[4].stall_factors[0] == pytest.approx(0.5, rel=0.05) and got[4].runs == 60 * 3 * 5


def test_measure_noise_attributes_nothing_extra_to_model_made_sessions(tiny):
    quiet = study.Noise(within={}, between={}, stall_rate=0.0)
    docs = []
    for i in range(30):
        cells = [{"config": n, "level": f"c{c}", "runs": [{"output_throughput": t} for t in tok], "warmup_runs": []}
                 for j, n in enumerate(tiny.servers)
                 for c, (tok, *_) in study.simulate_launch(tiny, n, 1000 + 10 * i + j, 3, quiet).items()]
        docs.append({"cells": cells})
    noise, report = study.measure_noise(docs, tiny, sim_sessions=30)
    assert report["real_sessions"] == 30 and set(noise.within) == {1, 4}
    for row in report["by_concurrency"].values():  # any extra is sampling error, small next to the model's own
        assert row["extra_within_sd"] < 0.5 * row["model_within_sd"]
        assert row["extra_between_sd"] < 0.5 * max(row["model_between_sd"], row["model_within_sd"])


def test_wilson_interval_is_honest_near_zero():
    lo, hi = study.wilson(0, 200)
    assert lo == 0 and 0.015 < hi < 0.02
    assert study.level_distance([1, 4, 16, 64], 16, 64) == 1 and study.level_distance([1, 4, 16, 64], None, 16) == 2


def test_cli_writes_the_headline_keys(tiny, tmp_path, capsys):
    out = tmp_path / "study.json"
    rc = study.main(["--suite", str(tiny.path), "--sessions", "2", "--history", "1", "--json", str(out),
                     "--noise", "emulator,gpu", "--extra-between-pct", "0.5", "--ab-runs", "4"])
    printed = capsys.readouterr().out
    assert rc == 0 and "| repeats |" in printed
    doc = json.loads(out.read_text())
    for key in ("sessions", "false_fail_rate", "power_tok_s_5pct", "power_accept_10pct", "crossover_within_one_level",
                "power_ab_tok_s_3pct", "ab_launches_per_build"):
        assert key in doc
    assert 0 <= doc["power_ab_tok_s_3pct"] <= 1 and doc["ab_runs"] == 4
    assert f"power_ab_tok_s_3pct={doc['power_ab_tok_s_3pct']:.4g}" in printed.splitlines()[-1]
    assert doc["sessions"] == 2 and doc["gate_tests"] == 2 * (2 * 2 + 2) and doc["headline_noise"] == "emulator"
    emulator, gpu = doc["studies"]["emulator"]["noise"], doc["studies"]["gpu"]["noise"]
    assert emulator["between"]["1"] == gpu["between"]["4"] == pytest.approx(0.005) and not math.isnan(doc["false_fail_rate"])
    assert emulator["stall_rate"] > 0 and gpu["stall_rate"] == study.GPU_STALL_RATE and gpu["within"]["1"] == study.GPU_WITHIN


def test_rescaling_a_trial_to_another_launch_spread_equals_simulating_it(tiny):
    # The 0.5 % and 2 % rows of the study are the 1 % trials rescaled (rescale_trial): exact only
    # if drift and day are all that differ and the virtual-time loop has no other clock.
    changes = [study.Change("slow", "eagle3", step_scale=1.05)]
    gpu, quiet, drift2 = (study.preset(n, tiny.sweep.concurrency) for n in ("gpu", "gpu-quiet", "gpu-drift2"))
    assert study.rescalable(gpu, quiet) and study.rescalable(gpu, drift2)
    assert not study.rescalable(gpu, replace(quiet, stall_rate=0.0))
    base = study.simulate_trial(tiny, 3, 7, 2, 2, gpu, changes, 2)
    for target in (quiet, drift2):
        direct = study.simulate_trial(tiny, 3, 7, 2, 2, target, changes, 2)
        got = study.rescale_trial(tiny, base, 3, 7, gpu, target, changes)
        for a, b in ((got.history[1]["eagle3"], direct.history[1]["eagle3"]),
                     (got.current["baseline"], direct.current["baseline"]),
                     (got.changed["slow"], direct.changed["slow"]), (got.more["eagle3"][0], direct.more["eagle3"][0]),
                     (got.changed_more["slow"][0], direct.changed_more["slow"][0])):
            for c in tiny.sweep.concurrency:
                assert a[c][0] == pytest.approx(b[c][0], rel=1e-9) and a[c][1] == b[c][1]
                assert a[c][2] == pytest.approx(b[c][2], rel=1e-9)  # the step rate scales with the clock
        assert got.current["eagle3"][4][0] != pytest.approx(base.current["eagle3"][4][0], rel=1e-4)  # it did move


def test_emulator_noise_presets_are_the_committed_measurements():
    """EMULATOR_QUIET / EMULATOR_BUSY are the noise.json of the 8 real sessions each in
    docs/research/evidence/noise/ (tools/measure_noise.py), rounded to 4 decimals."""
    import json
    from pathlib import Path

    from research.study import EMULATOR_BUSY, EMULATOR_QUIET

    evidence = Path(__file__).resolve().parents[2] / "docs" / "research" / "evidence" / "noise"
    for label, noise in (("quiet", EMULATOR_QUIET), ("busy", EMULATOR_BUSY)):
        measured = json.loads((evidence / label / "noise.json").read_text())
        preset = measured["preset"]
        assert len(list((evidence / label).glob("session-*.json"))) == measured["report"]["real_sessions"] == 8
        for key in ("within", "between"):
            assert {int(c): v for c, v in preset[key].items()} == pytest.approx(getattr(noise, key), abs=5e-5), (label, key)
        assert noise.bias == pytest.approx(preset["bias"], abs=5e-5), label
        assert noise.stall_rate == pytest.approx(preset["stall_rate"], abs=5e-5), label
        assert noise.stall_factors == pytest.approx(tuple(preset["stall_factors"]), abs=5e-5), label


def test_extending_a_trial_by_a_launch_equals_simulating_it_with_that_many(tiny, tmp_path):
    # The 3-launch study extends the cached 2-launch trials (extend_trial): exact only if the
    # added launch uses the seeds, day offset and changes simulate_trial gives launch index 2.
    changes = [study.Change("A/A"), study.Change("slow", "eagle3", step_scale=1.05),
               study.Change("c4", "eagle3", level_factor=0.95, levels=(4,))]
    gpu = study.preset("gpu", tiny.sweep.concurrency)
    two = study.simulate_trial(tiny, 3, 7, 2, 2, gpu, changes, 2)
    direct = study.simulate_trial(tiny, 3, 7, 2, 2, gpu, changes, 3)
    got = study.extend_trial(tiny, two, 3, 7, gpu, changes, 3)
    assert all(len(ls) == 2 for ls in [*got.more.values(), *got.changed_more.values()])
    pairs = [(got.more[n][i], direct.more[n][i]) for n in tiny.servers for i in (0, 1)]
    pairs += [(got.changed_more[c][i], direct.changed_more[c][i]) for c in ("slow", "c4") for i in (0, 1)]
    for a, b in pairs:
        for c in tiny.sweep.concurrency:
            assert a[c][0] == pytest.approx(b[c][0], rel=1e-9) and a[c][1] == b[c][1]
            assert a[c][2] == pytest.approx(b[c][2], rel=1e-9)
    assert got.more["eagle3"][1][4][0] != pytest.approx(got.more["eagle3"][0][4][0], rel=1e-4)  # a new launch
    # the cache finds the 2-launch trial, extends it and keeps it under the 3-launch key
    plan = study.StudyPlan(tiny, [], changes, gpu, 7, tmp_path)
    study.cached_trial(plan, 3, 2, 2, 2)
    kept = study.cached_trial(plan, 3, 2, 2, 3)
    assert (tmp_path / f"trial-{study.trial_key(plan, 3, 2, 2, 3)}.pkl").exists()
    assert kept.changed_more["slow"][1][1][0] == pytest.approx(direct.changed_more["slow"][1][1][0], rel=1e-9)
    # and the launch design of the sweep is not part of the key (the decisions alone read it)
    other = replace(tiny, sweep=replace(tiny.sweep, max_launches=2, relaunch_p=0.1))
    assert study.trial_key(replace(plan, suite=other), 3, 2, 2, 3) == study.trial_key(plan, 3, 2, 2, 3)
    floor = replace(tiny, sweep=replace(tiny.sweep, min_requests_per_run=16))  # this one changes the runs
    assert study.trial_key(replace(plan, suite=floor), 3, 2, 2, 3) != study.trial_key(plan, 3, 2, 2, 3)
    # rescaling handles the added launch like the others
    quiet = study.preset("gpu-quiet", tiny.sweep.concurrency)
    scaled = study.rescale_trial(tiny, got, 3, 7, gpu, quiet, changes)
    want = study.simulate_trial(tiny, 3, 7, 2, 2, quiet, changes, 3)
    assert scaled.changed_more["c4"][1][4][0] == pytest.approx(want.changed_more["c4"][1][4][0], rel=1e-9)
    assert scaled.more["baseline"][1][1][0] == pytest.approx(want.more["baseline"][1][1][0], rel=1e-9)


def test_relaunches_follow_suspicion_up_to_max_launches_and_keep_the_pair_level(tiny):
    # decide_design runs the session's loop (session._sweep_configuration): one more launch per
    # stage while a cell stays suspicious, at most max_launches; a suspicious speculation cell
    # also relaunches the reference, only while it has no more launches than the speculative one.
    gpu = study.preset("gpu", tiny.sweep.concurrency)
    changes = [study.Change("slow", "eagle3", step_scale=3.0), study.Change("ref slow", "baseline", step_scale=1.5)]
    trial = study.simulate_trial(tiny, 0, 5, 5, 3, gpu, changes, 3)
    tol = replace(tiny.tolerances, history_sessions=5, family_alpha=0.01)

    def run(design, eagle3=None, baseline=None):
        current, more = dict(trial.current), dict(trial.more)
        for name, ch in (("eagle3", eagle3), ("baseline", baseline)):
            if ch:
                current[name], more[name] = trial.changed[ch], trial.changed_more[ch]
        return study.decide_session(tiny, study.GateSettings(3, tol, design), current, trial.history, more)

    same = run("on-suspicion")
    assert not same.failed and set(same.relaunched) == {n for n, k in same.launches.items() if k > 1}
    three, two = run("on-suspicion", "slow"), run("on-suspicion-max2", "slow")
    assert three.failed and two.failed
    assert three.launches == {"baseline": 3, "eagle3": 3} and two.launches == {"baseline": 2, "eagle3": 2}
    assert any(w.startswith("launch 3: ") for w in three.relaunched["eagle3"])
    assert all(w.startswith(("reference of", "launch 3: reference of")) for w in three.relaunched["baseline"])
    # the reference relaunched itself to 3 in its own turn: the speculative configuration catches up, no 4th
    both = run("on-suspicion", "slow", "ref slow")
    assert both.launches == {"baseline": 3, "eagle3": 3}
    assert not any("reference of" in w for w in both.relaunched["baseline"])
    assert study.GateSettings(3, tol, "on-suspicion-max2").gate_design().max_launches == 2
    assert study.max_launches([study.GateSettings(3, tol, d) for d in ("attach", "on-suspicion-max2")]) == 2
    assert study.max_launches([study.GateSettings(3, tol, "on-suspicion")]) == 3


def _synthetic(tiny):
    """Synthetic launches (values chosen, no model) for the relaunch-rule tests: launch(tok/s,
    accept lengths) at every level, and K = 5 stored sessions wobbling by 1 %, eagle3 2x the
    baseline; the tolerances those tests decide with."""
    def launch(tok, acc=()):
        return {c: ([tok * (1 + 0.002 * i) for i in range(3)], [a * (1 + 0.001 * i) for i in range(3) for a in acc][:3],
                    [tok / 10 * (1 + 0.002 * i) for i in range(3)])  # step rates move with tok/s
                for c in tiny.sweep.concurrency}

    wobble = (1.0, 1.01, 0.99, 1.005, 0.995)
    history = [{"baseline": launch(1000 * w), "eagle3": launch(2000 * w, (3.0 * w,))} for w in wobble]
    tol = replace(tiny.tolerances, history_sessions=5, family_alpha=0.01, prior_between_sd=0.01)
    return launch, history, tol


def test_the_reference_is_relaunched_only_to_keep_level_with_the_speculative_configuration(tiny):
    # The baseline's first launch is 8 % slow
    # (suspicious), its second 8 % fast, so its own turn stops at 2 launches. eagle3 runs at 0.8x
    # the baseline (suspicious at every stage): at its stage 2 the baseline (2 launches) is ahead
    # of eagle3 (1) and is not relaunched; at stage 3 they are level and both get a third.
    launch, history, tol = _synthetic(tiny)
    current = {"baseline": launch(920), "eagle3": launch(800, (3.0,))}
    more = {"baseline": [launch(1080), launch(1000)], "eagle3": [launch(800, (3.0,)), launch(800, (3.0,))]}
    v = study.decide_session(tiny, study.GateSettings(3, tol, "on-suspicion"), current, history, more)
    assert v.launches == {"baseline": 3, "eagle3": 3}
    why = v.relaunched["baseline"]
    own, for_eagle3 = [w for w in why if "reference of" not in w], [w for w in why if "reference of" in w]
    assert own and all(w.startswith(("throughput baseline", "step_time baseline")) for w in own)  # its own stage 2
    assert for_eagle3 and all(w.startswith("launch 3: reference of speculation eagle3") for w in for_eagle3)
    assert v.failed and "speculation" in v.gates_failed


def test_reference_follows_a_relaunch_where_the_pair_leans_to_a_loss(tiny):
    # eagle3 is 50 % below its history (its throughput cells relaunch it) and 0.5 % behind the
    # baseline (a must-win cell leaning to a loss, not suspicious): without the losing rule
    # (on-suspicion-noref) eagle3 is relaunched alone; the default brings the baseline along,
    # keeping the pair level (GateDesign.reference_losing_p, gates.relaunch_plan).
    launch, history, tol = _synthetic(tiny)
    current = {"baseline": launch(1000), "eagle3": launch(995, (3.0,))}
    more = {"baseline": [launch(1000), launch(1000)], "eagle3": [launch(995, (3.0,)), launch(995, (3.0,))]}
    noref = study.decide_session(tiny, study.GateSettings(3, tol, "on-suspicion-noref"), current, history, more)
    default = study.decide_session(tiny, study.GateSettings(3, tol, "on-suspicion"), current, history, more)
    assert noref.launches == {"baseline": 1, "eagle3": 3} and "baseline" not in noref.relaunched
    assert default.launches == {"baseline": 3, "eagle3": 3}
    why = default.relaunched["baseline"]
    assert len(why) == 2 and why[0].startswith("reference of speculation eagle3 c") and "leans to a loss" in why[0]
    assert why[1].startswith("launch 3: reference of speculation eagle3 c")
    # the same eagle3 ahead of its reference (0.5 % faster): nothing leans to a loss, the baseline stays
    ahead = {"baseline": launch(1000), "eagle3": launch(1005, (3.0,))}
    more_ahead = {"baseline": more["baseline"], "eagle3": [launch(1005, (3.0,)), launch(1005, (3.0,))]}
    v = study.decide_session(tiny, study.GateSettings(3, tol, "on-suspicion"), ahead, history, more_ahead)
    assert v.launches == {"baseline": 1, "eagle3": 3}, v.relaunched


# -- the study's steps, one behaviour each ------------------------------------------------------
def _outcome(failed=False, gates=(), inconclusive=0, launches=3, crossovers=None, crossover_c=None, relaunched=()):
    return {"failed": failed, "gates": list(gates), "inconclusive": inconclusive, "enforced": 8,
            "crossovers": crossovers or {"eagle3": 16}, "crossover_c": crossover_c or {"eagle3": 20.0},
            "launches": launches, "configs": 2, "runs": launches * 2 * 4, "relaunched": list(relaunched)}


def test_summarise_counts_fail_rates_cost_and_the_crossovers_scores(tiny):
    from research.study.run import _summarise

    rows = [_outcome(crossovers={"eagle3": 4}), _outcome(True, ["throughput"], 2, 4, {"eagle3": 4}, relaunched=["eagle3"]),
            _outcome(crossovers={"eagle3": 1}, crossover_c={"eagle3": 30.0}), _outcome(crossovers={"eagle3": None})]
    truth, truth_c = {"eagle3": 1}, {"eagle3": 20.0}
    aa = _summarise(tiny, study.Change("A/A"), rows, truth, truth_c)
    assert (aa["sessions"], aa["fail_rate"], aa["throughput_fail_rate"], aa["speculation_fail_rate"]) == (4, 0.25, 0.25, 0.0)
    assert aa["inconclusive_rate"] == 2 / 32 and aa["sessions_with_inconclusive"] == 0.25
    assert (aa["launches_per_config"], aa["runs_per_session"], aa["sessions_relaunching"]) == (13 / 8, 26.0, 0.25)
    # the tiny sweep's levels are 1 and 4: "None" (ahead throughout) is two levels from 1
    assert (aa["crossover_exact"], aa["crossover_within_one_level"]) == (0.25, 0.75)
    assert aa["crossover_within_1_25x"] == 0.75  # 30 is 1.5x the true 20
    changed = _summarise(tiny, study.Change("slow", "eagle3", step_scale=1.1), rows, truth, truth_c)
    assert "crossover_exact" not in changed and changed["scenario"] == "slow"


def test_the_table_row_names_each_designs_rule_and_prior_dof():
    from research.study.report import render_table

    def point(design, dof=16.0):
        scen = {"scenario": "A/A", "fail_rate": 0.0, "fail_ci95": (0.0, 0.019), "launches_per_config": 1.27,
                "runs_per_session": 61.0, "crossover_within_one_level": 1.0, "crossover_within_1_25x": None}
        drop = {"scenario": "tok/s -5%", "isolates": "throughput", "fail_rate": 0.95, "throughput_fail_rate": 0.9,
                "launches_per_config": 2.43}
        settings = {"design": design, "fail_rule": "significant", "repeats": 3, "history_sessions": 5,
                    "prior_between_sd": 0.01, "prior_between_dof": dof, "spread_rule": "pooled-t", "spread_pool": "cell"}
        return {"settings": settings, "scenarios": [scen, drop]}

    lines = render_table({"grid": [point("legacy"), point("on-suspicion-r1"), point("on-suspicion")]}).splitlines()
    assert lines[0].endswith("| P(tok/s -5%) |") and len(lines) == 5
    assert lines[2] == ("| legacy | significant | 3 | 5 | 0.01 | 0.0% (0.0%-1.9%) | 1.27 | 61 | 2.43 | 100% | - | "
                        "0.95 (0.90) |")
    assert "| 0.01 (8, pooled-t, cell) |" in lines[3] and "| 0.01 (16, pooled-t, cell) |" in lines[4]


def test_study_usage_errors_are_one_line_and_exit_4(tiny, capsys):
    for flags, wanted in ((["--design", "on-suspicion,legacy"], "unknown --design legacy; use attach, "),
                          (["--fail-rule", "maybe"], "unknown --fail-rule maybe; use significant, beyond-tolerance"),
                          (["--noise", "gpu,loud"], "unknown --noise loud; use emulator, "),
                          (["--config", "baseline"], "--config must name a speculative configuration of ")):
        assert study.main(["--suite", str(tiny.path), *flags]) == 4
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith(f"python -m research.study: {wanted}"), err


# -- engine and drafter apart (issue 23) ----------------------------------------------------------
def test_a_runs_step_rate_is_its_decode_time_over_its_decode_steps(tiny):
    # The baseline at C = 1 without noise: one request at a time, so the run's step time is one
    # request's decode time over its tokens after the first, the client's step_time_ms.
    from specguard.emulator.model import BatchScheduler, GenRequest, SchedulerConfig
    from specguard.emulator.spec import resolve_settings

    launch = study.simulate_launch(tiny, "baseline", 3, 1, None)
    sched = BatchScheduler(SchedulerConfig(load_profile("fast"), resolve_settings(load_profile("fast"), None, 128),
                                           seed=3, jitter_pct=0.0, drift_pct=0.0))
    req = GenRequest(32, 24, prompt_key=0)
    sched.submit(req, 0.0)
    now = 0.0
    while sched.has_work():
        step = sched.next_step(now)
        now += step.duration_ms
        sched.complete(step, now)
    assert launch[1][2][0] == pytest.approx(1e3 * (24 - 1) / (req.finish_ms - req.first_token_ms), rel=1e-9)


def test_the_one_half_changes_move_their_half_only(tiny):
    changes = {c.name: c for c in study.scenarios(tiny, "eagle3")}
    base = study.simulate_launch(tiny, "eagle3", 1, 3, None)
    engine = study.simulate_launch(tiny, "eagle3", 1, 3, None, changes["engine slowdown 5%"])
    drafter = study.simulate_launch(tiny, "eagle3", 1, 3, None, changes["acceptance -8%"])
    for c in tiny.sweep.concurrency:
        assert np.mean(engine[c][2]) / np.mean(base[c][2]) == pytest.approx(1 / 1.053, rel=1e-9)
        assert engine[c][1] == base[c][1]  # per-request acceptance: the same draws, the same accept lengths
        assert 0.8 < np.mean(drafter[c][1]) / np.mean(base[c][1]) < 0.95  # 8 requests a run: the target, roughly
    assert drafter[1][2] == pytest.approx(base[1][2], rel=1e-5)  # one request at a time: its steps cost the same
    # At C = 4 the 8-request run's tail moves the step time with acceptance (-6 %); on the default
    # suite's 16 x 64-token runs it is 0.3 % (docs/research/gate-study.md)


def test_acceptance_repeats_per_request_and_moves_per_run(tiny):
    gpu = study.preset("gpu", tiny.sweep.concurrency)
    sglang = study.simulate_launch(tiny, "eagle3", 5, 3, gpu, acceptance="per-request")
    vllm = study.simulate_launch(tiny, "eagle3", 5, 3, gpu, acceptance="per-run")
    assert len(set(sglang[1][1])) == 1  # a greedy request accepts the same on every run at C = 1
    assert np.std(np.log(vllm[1][1])) > 0.02  # start_run between runs: each run its own acceptance
    trial = study.simulate_trial(tiny, 0, 1, 2, 3, gpu, [], 1, acceptance="per-run")
    assert trial.history[0]["eagle3"][1][1] != trial.history[1]["eagle3"][1][1]
    plan = study.StudyPlan(tiny, [], [], gpu, 7, None)
    assert study.trial_key(plan, 0, 2, 3, 1) != study.trial_key(replace(plan, acceptance="per-run"), 0, 2, 3, 1)


def test_a_session_decides_step_time_and_names_the_half_that_moved(tiny):
    noise = study.Noise(within={}, between={}, stall_rate=0.0)
    changes = [study.Change("engine", "eagle3", step_scale=1.3), study.Change("drafter", "eagle3", accept_factor=0.75)]
    trial = study.simulate_trial(tiny, 0, 3, 5, 3, noise, changes)
    settings = study.GateSettings(3, tiny.tolerances, "on-suspicion")
    same = study.decide_session(tiny, settings, trial.current, trial.history)
    assert not same.failed and same.enforced == 12  # throughput and step time x4, accept length x2, speculation x2
    engine = study.decide_session(tiny, settings, {**trial.current, "eagle3": trial.changed["engine"]}, trial.history)
    assert {"step_time", "throughput"} <= {str(g.gate) for g in engine.failing}
    assert set(engine.attributions.values()) == {"engine"} and len(engine.attributions) == 2
    drafter = study.decide_session(tiny, settings, {**trial.current, "eagle3": trial.changed["drafter"]}, trial.history)
    assert "accept_length" in drafter.gates_failed and "step_time eagle3 c1" not in {
        f"{g.gate} {g.config} {g.level}" for g in drafter.failing}
    assert drafter.attributions["eagle3 c1"] == "drafter"
    assert drafter.attributions["eagle3 c4"] in ("drafter", "both")  # this sweep's c4 step time moves too (above)


def test_summaries_count_each_levels_catch_and_wrong_halves(tiny):
    from research.study.run import _attribution_correct, _summarise

    engine = next(c for c in study.scenarios(tiny, "eagle3") if c.name == "engine slowdown 5%")
    drafter = next(c for c in study.scenarios(tiny, "eagle3") if c.name == "acceptance -8%")

    def row(cells=(), halves=None):
        return {**_outcome(bool(cells), [c.split()[0] for c in cells]), "failed_cells": list(cells),
                "attributions": halves or {}}

    rows = [row(["step_time eagle3 c1", "throughput eagle3 c4"], {"eagle3 c1": "engine"}),
            row(["throughput eagle3 c1"], {"eagle3 c4": "drafter", "baseline c4": "drafter"}), row()]
    out = _summarise(tiny, engine, rows, {"eagle3": 1}, {"eagle3": 20.0})
    assert out["level_fail_rates"]["c1"] == {"throughput": 1 / 3, "step_time": 1 / 3, "either": 2 / 3}
    assert out["level_fail_rates"]["c4"] == {"throughput": 1 / 3, "step_time": 0.0, "either": 1 / 3}
    assert out["wrong_half_rate"] == 1 / 3  # the second session read the engine's slowdown as the drafter's
    both = [[[rows[i], row([], {"eagle3 c1": half})]] for i, half in enumerate(("drafter", "both", "engine"))]
    assert _attribution_correct([engine, drafter], both, 0) == 1 / 3  # only the first: "both" names the engine too


def test_the_summary_line_names_the_new_headline_keys():
    line = study.summary_line({"acceptance": "per-request", "sessions": 200, "power_step_5pct_c1": 0.975,
                               "attribution_correct": 0.96, "power_ab_tok_s_3pct": 0.821, "ab_launches_per_build": 5})
    assert line.startswith("acceptance=per-request sessions=200 ")
    assert "power_step_5pct_c1=0.975" in line and "attribution_correct=0.96" in line
    assert line.endswith("power_ab_tok_s_3pct=0.821 ab_launches_per_build=5")


def test_cell_rates_fail_a_large_drop_and_keep_unchanged_cells():
    from research.study.cell_rates import AUDIT_CASES, CellCase, cell_rates

    assert cell_rates(CellCase(drop=0.10, launches=3), 200)["fail_rate"] > 0.9
    unchanged = cell_rates(CellCase(), 400)
    assert unchanged["fail_rate"] == 0.0 and 0.05 < unchanged["inconclusive_rate"] < 0.4
    assert any(c.contradicted_prior == "raised" and c.prior_check_p == 0.05 for c in AUDIT_CASES)  # the rule before
