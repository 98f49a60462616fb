"""specguard tune: grid, prediction, racing, SGLang adaptive-config emission, CLI (its virtual-time
run from the research checkout: tests/research/test_tune_sim.py)."""

from __future__ import annotations

import json
import math
import sys

import numpy as np
import pytest
from tune_support import SIM_SUITE

from specguard.cli import main
from specguard.config import ServerConfig, parse_suite
from specguard.emulator.adaptive import AdaptivePolicy, AdaptiveSettings
from specguard.emulator.spec import expected_accept_length
from specguard.sglang_rules.adaptive import AdaptiveConfigError, candidate_union, load_adaptive_config, slot_key
from specguard.sglang_rules.cuda_graph import decode_graph_batch_sizes
from specguard.tune import output
from specguard.tune.grid import (
    FIXED,
    REFERENCE,
    Setting,
    TuneError,
    acceptance_from_histogram,
    build_grid,
    predict_tok_s,
    predicted_accept_length,
)
from specguard.tune.race import CellRuns, Ledger, RacePlan, choices, choose, full_grid, race
from specguard.tune.schema import TUNE

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

REF = Setting(REFERENCE)


def spec_cfg(**kw) -> ServerConfig:
    base = dict(name="mtp", engine="emulator", model_path="/m", speculative_algorithm="NEXTN", num_steps=1,
                eagle_topk=1, num_draft_tokens=2, reference="base")
    base.update(kw)
    return ServerConfig(**base)


# -- grid --------------------------------------------------------------------------------------
def test_grid_has_chains_and_a_tree_for_eagle_but_not_for_ngram_or_vllm():
    grid = build_grid(spec_cfg(), steps=[1, 3, 2], tree_topk=[4])
    assert [s.name for s in grid] == ["steps1", "steps2", "steps3", "steps3-topk4-draft8"]
    assert all(s.num_draft_tokens == s.num_steps + 1 for s in grid if s.chain)
    assert not grid[-1].chain and not grid[-1].adaptive_expressible
    ngram = build_grid(spec_cfg(speculative_algorithm="NGRAM", num_steps=None, eagle_topk=None, num_draft_tokens=None),
                       steps=[3, 7])
    assert [s.num_draft_tokens for s in ngram] == [4, 8] and not any(s.chain for s in ngram)
    vllm = build_grid(spec_cfg(engine="vllm", speculative_algorithm=None, num_steps=None, eagle_topk=None,
                               num_draft_tokens=None, speculative_config={"method": "eagle3", "model": "d"}), steps=[1, 2])
    assert [s.num_steps for s in vllm] == [1, 2]


def test_grid_refuses_a_non_speculative_configuration():
    with pytest.raises(TuneError, match="not speculative"):
        build_grid(ServerConfig(name="base", engine="emulator", model_path="/m"))


def test_lighter_means_fewer_tokens_verified():
    assert REF.weight < Setting(FIXED, 1, 1, 2).weight < Setting(FIXED, 2, 1, 3).weight < Setting(FIXED, 3, 4, 8).weight


# -- prediction --------------------------------------------------------------------------------
def test_histogram_of_the_longest_chain_predicts_every_shorter_accept_length():
    probs = (0.9, 0.7, 0.5, 0.4)
    # exact histogram of a 4-step chain: P(exactly k accepted)
    survive = np.cumprod(probs)
    exact = [1 - survive[0]] + [survive[k] - survive[k + 1] for k in range(3)] + [survive[3]]
    hist = [round(p * 1_000_000) for p in exact]
    at_least = acceptance_from_histogram(hist)
    for steps in range(1, 5):
        assert predicted_accept_length(at_least, steps) == pytest.approx(expected_accept_length(probs, steps), abs=1e-4)
    assert predicted_accept_length(at_least, 5) is None  # the histogram says nothing about position 5


def test_cost_interpolation_is_a_chord_and_refuses_to_extrapolate():
    # time per verify step u = a / tok_s: 1.0 at 1 step, 3.0 at 5 steps -> 2.0 at 3 steps
    measured = {1: (2.0, 2.0), 5: (4.0 / 3.0, 4.0)}
    assert predict_tok_s(measured, 3, 3.0) == pytest.approx(1.5)
    assert predict_tok_s(measured, 7, 4.5) is None


# -- racing ------------------------------------------------------------------------------------
class FakeRunner:
    """tok/s = truth x lognormal noise; truth favours steps 2 at low concurrency, none at high."""

    def __init__(self, seed: int = 0, noise: float = 0.01) -> None:
        self.rng = np.random.default_rng(seed)
        self.noise = noise
        self.calls: list[tuple[str, tuple[int, ...], int]] = []
        self.probs = (0.85, 0.7, 0.55, 0.45, 0.4, 0.35, 0.3)

    def truth(self, s: Setting, c: int) -> float:
        if s.kind == REFERENCE:
            return 100.0 * c
        a = expected_accept_length(self.probs, s.num_steps) if s.chain else 2.0
        step = 1.0 + 0.15 * s.num_draft_tokens + 0.05 * s.num_steps * c  # drafting costs more per stream at high c
        return 100.0 * c * a / step

    def measure(self, s, levels, warmup, repeats):
        self.calls.append((s.name, tuple(levels), repeats))
        out = {}
        for c in levels:
            vals = [self.truth(s, c) * math.exp(self.rng.normal(0, self.noise)) for _ in range(repeats)]
            hist = []
            if s.chain and s.kind == FIXED:
                survive = np.cumprod(self.probs[: s.num_steps])
                exact = [1 - survive[0]] + [survive[k] - survive[k + 1] for k in range(s.num_steps - 1)] + [survive[-1]]
                hist = [int(p * 10000) for p in exact]
            acc = [expected_accept_length(self.probs, s.num_steps)] * repeats if s.kind == FIXED and s.chain else []
            out[c] = CellRuns(vals, hist, acc)
        return out


def test_racing_makes_the_full_grids_choices_with_at_most_half_its_runs():
    grid = build_grid(spec_cfg(), steps=[1, 2, 3, 4, 5, 6, 7], tree_topk=[4])
    levels = [1, 4, 16, 64]
    plan = RacePlan(warmup=1, repeats=3, first_repeats=1, launch_sd=0.01, tie_tolerance=0.03)
    runner = FakeRunner(1)
    r, f = race(runner, REF, grid, levels, plan), full_grid(FakeRunner(1), REF, grid, levels, plan)
    assert {c: s.name for c, s in choices(r, plan).items()} == {c: s.name for c, s in choices(f, plan).items()}
    assert r.ledger.runs <= f.ledger.runs / 2
    # skipped cells are recorded: by prediction (with the predicted tok/s) at low concurrency, and at
    # 16 and 64, where the cheapest chain already loses to the reference, every longer one (None)
    skipped = {s.name: per for s, per in r.skipped.items()}
    assert any(p is not None for per in skipped.values() for p in per.values())
    assert all(skipped[s.name][64] is None for s in grid if s.num_steps > 1 or not s.chain)
    assert not any(name not in ("reference", "steps1") and 64 in at for name, at, _ in runner.calls)


def test_a_confidently_worse_setting_is_dropped_and_never_relaunched():
    grid = [Setting(FIXED, 1, 1, 2), Setting(FIXED, 5, 1, 6)]
    runner = FakeRunner(0, noise=0.002)
    plan = RacePlan(warmup=0, repeats=3, first_repeats=1, launch_sd=0.005, tie_tolerance=0.02, predict=False)
    r = race(runner, REF, grid, [64], plan)
    assert [s.name for s in r.alive[64]] == ["reference"]  # steps 1 and 5 are far slower at 64
    assert all(name == "reference" or repeats == 1 for name, _, repeats in runner.calls)


def test_racing_runs_its_steps_in_order_probes_then_predicted_then_close_calls():
    """The cheapest chain and the reference first, the other probes, the predicted-close settings,
    then close calls with the rest of the repeats; a setting is never launched twice in a round."""
    grid = build_grid(spec_cfg(), steps=[1, 2, 3, 4, 5], tree_topk=[4])
    plan = RacePlan(warmup=1, repeats=3, first_repeats=1, launch_sd=0.01, tie_tolerance=0.03)
    r = race(FakeRunner(3), REF, grid, [1, 4, 16, 64], plan)
    steps = [e.split(":")[0] for e in r.ledger.events]
    assert r.ledger.events[:2] == ["probe: reference C=[1, 4, 16, 64] x1", "probe: steps1 C=[1, 4, 16, 64] x1"]
    order = {"probe": 0, "predicted close": 1, "close call": 2}
    assert [order[x] for x in steps] == sorted(order[x] for x in steps) and steps[-1] == "close call"
    assert all(e.endswith("x1") for e in r.ledger.events if not e.startswith("close call"))


def test_verify_judges_each_level_against_the_best_fixed_no_speculation_and_the_default():
    from types import SimpleNamespace

    from specguard.tune.grid import ADAPTIVE
    from specguard.tune.verify import Contenders, _verify_level

    tuned, default = Setting(ADAPTIVE, 2, 1, 3, adaptive_config="tuned"), Setting(ADAPTIVE, adaptive_config="default")
    best = Setting(FIXED, 2, 1, 3)
    ledger = Ledger()
    for s, v in ((tuned, 120.0), (default, 100.0), (best, 121.0), (REF, 130.0)):
        ledger.add(s, {8: CellRuns([v * 0.999, v, v * 1.001])}, 0, 3)
    tol = SimpleNamespace(throughput=0.03, fail_rule="significant", speculation_min_gain=0.0)
    contenders = Contenders(tuned, {8: best, 16: best})
    row = _verify_level(ledger, 8, contenders, tol, RacePlan(launch_sd=0.005), 0.99)
    v = row["verdicts"]
    assert (row["best_fixed_setting"], row["no_speculation_tok_s"]) == ("steps2", 130.0)
    assert v["vs_default_adaptive"]["winner"] == "tuned" and v["vs_best_fixed"]["winner"] == "tie (within noise)"
    assert v["vs_no_speculation"]["verdict"] == "fail"  # speculation must win: 120 vs 130
    assert _verify_level(ledger, 16, contenders, tol, RacePlan(), 0.99)["verdicts"]["vs_best_fixed"] == \
        {"verdict": "error", "detail": "not measured"}


def test_ties_within_the_tolerance_go_to_the_lighter_setting():
    ledger = Ledger()
    light, heavy = Setting(FIXED, 1, 1, 2), Setting(FIXED, 3, 1, 4)
    ledger.add(light, {8: CellRuns([97.0, 98.0, 97.5])}, 0, 3)
    ledger.add(heavy, {8: CellRuns([100.0, 100.5, 99.5])}, 0, 3)
    assert choose(ledger, [light, heavy], 8, RacePlan(tie_tolerance=0.05)) == light
    assert choose(ledger, [light, heavy], 8, RacePlan(tie_tolerance=0.01)) == heavy


# -- the adaptive config -------------------------------------------------------------------------
def _graphs(cap: int) -> list[int]:
    return decode_graph_batch_sizes(cap, speculative=True)


@pytest.mark.parametrize("graphs", [None, "spec"])
def test_emitted_config_routes_every_measured_level_to_its_chosen_steps_in_sglangs_rules(tmp_path, graphs):
    # Parsing and routing are sglang_rules' (srt/speculative/adaptive_spec_params.py: _load_adaptive_config,
    # AdaptiveSpeculativeParams._route), run here by the emulator's runtime.
    graph_sizes = _graphs(128) if graphs else None
    s1, s2 = Setting(FIXED, 1, 1, 2), Setting(FIXED, 2, 1, 3)
    choice = {1: s1, 4: s2, 16: s2, 33: s1, 64: REF, 128: REF}
    built = output.adaptive_config(choice, graph_sizes)
    table, steps = built.table, built.num_steps
    path = tmp_path / output.ADAPTIVE_FILE
    path.write_text(json.dumps(table))
    cfg, entries = load_adaptive_config(path)  # the file, as SGLang reads it
    settings = AdaptiveSettings(str(path), cfg, entries, candidate_union(entries), steps)
    policy = AdaptivePolicy(settings, graph_sizes)
    for c, s in choice.items():
        assert policy.route(c).steps == output.steps_of(s), (c, table)
    # every key is the batch size its slot starts at: the batch just below it routes to the slot before
    keys = sorted(int(k) for k in table)
    assert all(slot_key(keys, graph_sizes, k - 1) < k == slot_key(keys, graph_sizes, k) for k in keys[1:]), table


def test_a_table_sglang_would_refuse_is_never_written():
    # the builder checks with SGLang's start-up rules (tests/sglang_rules/test_adaptive_table.py)
    with pytest.raises(AdaptiveConfigError, match="candidate_steps must be a list of non-negative ints"):
        output.adaptive_config({1: Setting(FIXED, -1, 1, 0)}, None)


def test_a_tree_cannot_be_a_slot():
    with pytest.raises(TuneError, match="topk 1"):
        output.adaptive_config({1: Setting(FIXED, 3, 4, 8, chain=False)}, None)


def test_suite_snippet_is_a_valid_suite_configuration_with_its_must_win_level(tmp_path):
    cfg = spec_cfg(args=["--emulator-profile", "seed-a"])
    table = {"1": {"candidate_steps": [2]}, "48": {"candidate_steps": [0]}}
    text = output.suite_snippet(cfg, table, "/x/tuned_speculative_adaptive.json", 128, 16)
    raw = tomllib.loads("[servers.base]\nengine = \"emulator\"\nmodel_path = \"/m\"\n" + text)
    suite = parse_suite(raw, tmp_path / "s.toml")
    tuned = suite.servers["mtp-tuned"]
    assert tuned.speculation_must_win_up_to == 16 and tuned.num_steps == 2 and tuned.max_running_requests == 128
    assert tuned.args[-3:] == ["--speculative-adaptive", "--speculative-adaptive-config", "/x/tuned_speculative_adaptive.json"]


# -- CLI ---------------------------------------------------------------------------------------


def test_cli_tune_usage_errors_are_one_line(tmp_path, capsys):
    suite = tmp_path / "suite.toml"
    suite.write_text(SIM_SUITE)
    assert main(["tune", "--suite", str(suite), "--out", str(tmp_path / "o"), "--config", "baseline"]) == 4
    err = capsys.readouterr().err
    assert "not speculative" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert main(["tune", "--suite", str(tmp_path / "missing.toml"), "--out", str(tmp_path / "o")]) == 4


@pytest.mark.e2e
def test_cli_tune_launches_the_emulator_and_measures_real_streams(tmp_path, capsys):
    suite = tmp_path / "suite.toml"
    suite.write_text(SIM_SUITE.replace("seed-a", "fast").replace("[1, 16, 64]", "[1, 8]")
                     .replace("output_len = 40", "output_len = 16"))
    out = tmp_path / "out"
    code = main(["tune", "--suite", str(suite), "--out", str(out), "--steps", "1,2,3", "--tree-topk", "1"])
    assert code == 0, capsys.readouterr()
    doc = TUNE.load(out / "tune.json")  # the file as its model says
    assert doc["mode"] == "launched" and doc["cost"]["search_launches"] >= 3
    # the streams' spec_correct_drafts_histogram reached the prediction: acceptance for 3 positions
    assert len(doc["acceptance_by_position"]) == 3 and doc["acceptance_by_position"][0] > 0.5
    assert doc["adaptive_config"]["graph_sizes"]  # the keys were placed on the server's CUDA-graph sizes
    load_adaptive_config(out / output.ADAPTIVE_FILE)


def test_vllm_gets_the_token_count_per_band():
    s1, s3 = Setting(FIXED, 1, 1, 2), Setting(FIXED, 3, 1, 4)
    bands = output.vllm_bands({1: s3, 4: s3, 16: s1, 64: REF})
    assert bands == [{"from_concurrency": 1, "to_concurrency": 4, "num_speculative_tokens": 3},
                     {"from_concurrency": 16, "to_concurrency": 16, "num_speculative_tokens": 1},
                     {"from_concurrency": 64, "to_concurrency": 64, "num_speculative_tokens": 0}]


def test_a_band_is_keyed_at_the_slot_start_nearest_the_geometric_middle_of_its_levels():
    graphs = _graphs(256)  # ..., 32, 34, ..., 40, 44, 48, ..., 152, 160, ...

    def key(below: int, first: int, g: list[int] | None) -> int:
        table = output.adaptive_config({below: Setting(FIXED, 1, 1, 2), first: REF}, g).table
        return max(int(k) for k in table)

    assert key(32, 64, graphs) == 45  # middle 46 (sqrt 2048 = 45.3): 45..48 pad to 48, so a key 45 starts exactly there
    assert key(32, 64, None) == 46
    assert key(8, 9, graphs) == 9  # 9 is a graph size: a key 9 starts at 9
    assert key(100, 250, graphs) == 161  # middle 159: slots can start at 153 or 161 (153..160 pad to 160)
