"""specguard recommend on synthetic sweeps with known crossovers (no servers)."""

from __future__ import annotations

import json
import math

import pytest
from synthetic_results import MTP, make_doc, seed_a_doc

from specguard import cli
from specguard.report.recommend import RecommendError, first_crossing, recommend, render_text, to_json
from specguard.report.results import validate


def test_first_crossing_interpolates_on_log_concurrency():
    # ratio 2 at c1, 0.5 at c4: log ratio crosses 0 halfway in log c -> c2
    assert first_crossing([1, 4], [2.0, 0.5]) == pytest.approx(2.0)
    assert first_crossing([1, 4, 16], [1.5, 1.2, 1.1]) is None
    assert first_crossing([4, 16], [0.9, 0.8]) == 4.0


def test_seed_a_switches_off_between_32_and_64():
    rec = recommend(validate(seed_a_doc()))
    expected = 32 * 2 ** (math.log(1502 / 1359) / (math.log(1502 / 1359) - math.log(1571 / 2327)))
    assert rec.crossover.estimate == pytest.approx(expected, rel=1e-3)  # ~36.8
    assert (rec.crossover.last_ahead, rec.crossover.first_behind) == (32, 64) and rec.crossover.confident
    assert 32 < rec.disable_speculation_at <= 64 and rec.disable_speculation_at == math.ceil(expected)
    assert rec.crossover.low <= rec.crossover.estimate <= rec.crossover.high
    assert [(b.start, b.end, b.config) for b in rec.bands] == [(1, 37, "mtp"), (37, None, None)]
    table = rec.sglang["speculative_adaptive_config"]
    assert rec.sglang["applies"] and table == {"1": {"candidate_steps": [1]}, "37": {"candidate_steps": [0]}}
    assert any("max_running_requests=48" in n for n in rec.sglang["notes"])
    doc = to_json(rec)
    assert doc["disable_speculation_at"] == 37 and doc["crossover"]["between"] == [32, 64]
    json.dumps(doc)  # serialisable as is
    text = render_text(rec)
    assert "between measured c32 and c64" in text and "concurrency >= 37" in text and "no speculation" in text


def test_a_noisy_level_far_from_the_crossover_does_not_stretch_its_interval():
    doc = seed_a_doc()
    noisy = next(c for c in doc["cells"] if c["config"] == "mtp" and c["concurrency"] == 4)
    for run, tok_s in zip(noisy["runs"], (300.0, 400.0, 520.0)):
        run["output_throughput"] = tok_s
    rec = recommend(doc)
    assert rec.ratios["mtp"][1].estimate.low < 1  # c4 is not confidently ahead any more
    assert 16 < rec.crossover.low < rec.crossover.estimate < rec.crossover.high < 64


def test_uncertainty_widens_with_noisier_runs():
    tight = recommend(seed_a_doc(spread=0.005)).crossover
    loose = recommend(seed_a_doc(spread=0.08)).crossover
    assert (tight.high - tight.low) < (loose.high - loose.low)


def test_middle_band_with_fewer_draft_tokens():
    heavy = {"speculative_algorithm": "EAGLE3", "effective_algorithm": "EAGLE3", "num_steps": 3, "eagle_topk": 1,
             "num_draft_tokens": 4, "max_running_requests": 128}
    light = {**heavy, "num_steps": 1, "num_draft_tokens": 2}
    doc = make_doc({"baseline": {1: 100, 4: 350, 16: 1000, 32: 1600, 64: 2400},
                    "eagle3": {1: 180, 4: 500, 16: 1100, 32: 1400, 64: 1700},
                    "eagle3-light": {1: 150, 4: 460, 16: 1150, 32: 1700, 64: 2100}},
                   {"eagle3": heavy, "eagle3-light": light})
    rec = recommend(doc)
    assert rec.speculative == "eagle3" and rec.lighter == "eagle3-light"
    (b1, b2, b3) = rec.bands
    assert b1.config == "eagle3" and b2.config == "eagle3-light" and b3.config is None
    assert 4 < b2.start <= 16 and 32 < b3.start <= 64 and b3.start == rec.disable_speculation_at
    assert rec.sglang["speculative_adaptive_config"] == {
        "1": {"candidate_steps": [3]}, str(b2.start): {"candidate_steps": [1]}, str(b3.start): {"candidate_steps": [0]}}
    assert to_json(rec)["lighter_switch"]["use_lighter_from"] == b2.start


def test_a_lighter_configuration_that_never_takes_over_gives_no_middle_band():
    heavy = {"speculative_algorithm": "EAGLE3", "effective_algorithm": "EAGLE3", "num_steps": 3, "eagle_topk": 1,
             "num_draft_tokens": 4, "max_running_requests": 128}
    doc = make_doc({"baseline": {1: 100, 4: 350, 16: 1000, 32: 1600},
                    "eagle3": {1: 180, 4: 500, 16: 1100, 32: 1400},
                    "eagle3-light": {1: 120, 4: 360, 16: 900, 32: 1300}},
                   {"eagle3": heavy, "eagle3-light": {**heavy, "num_steps": 1, "num_draft_tokens": 2}})
    rec = recommend(doc)
    assert rec.lighter is None and [b.config for b in rec.bands] == ["eagle3", None]
    text = render_text(rec)
    assert "no middle band" in text and "eagle3-light (EAGLE3, steps 1" in text


def test_always_ahead_and_always_behind():
    ahead = recommend(make_doc({"baseline": {1: 100, 4: 300}, "mtp": {1: 150, 4: 400}}, {"mtp": dict(MTP)}))
    assert ahead.disable_speculation_at is None and ahead.crossover.above_range
    assert [b.config for b in ahead.bands] == ["mtp"] and "measure higher concurrency" in render_text(ahead)
    behind = recommend(make_doc({"baseline": {4: 100, 16: 300}, "mtp": {4: 60, 16: 200}}, {"mtp": dict(MTP)}))
    assert behind.disable_speculation_at == 4 and behind.crossover.below_range
    assert "does not pay" in render_text(behind)


def test_adaptive_config_not_applicable_with_topk_above_1():
    tree = {**MTP, "speculative_algorithm": "EAGLE3", "effective_algorithm": "EAGLE3", "eagle_topk": 4,
            "num_draft_tokens": 8}
    rec = recommend(make_doc({"baseline": {1: 100, 4: 300}, "eagle3": {1: 150, 4: 250}}, {"eagle3": tree}))
    assert not rec.sglang["applies"] and "topk 1" in rec.sglang["reason"]


def test_errors_say_what_to_measure():
    with pytest.raises(RecommendError, match="no speculative configuration measured together"):
        recommend(make_doc({"baseline": {1: 100, 4: 300}}))
    with pytest.raises(RecommendError, match="no configuration 'eagle3'"):
        recommend(seed_a_doc(), config="eagle3")
    with pytest.raises(RecommendError, match="fewer than 2"):
        recommend(make_doc({"baseline": {1: 100}, "mtp": {1: 150}}, {"mtp": dict(MTP)}))


def test_cli_writes_json_and_adaptive_config(tmp_path, capsys):
    results = tmp_path / "results.json"
    results.write_text(json.dumps(seed_a_doc()))
    out_json, adaptive = tmp_path / "rec.json", tmp_path / "adaptive.json"
    code = cli.main(["recommend", str(results), "--json", str(out_json), "--adaptive-config", str(adaptive)])
    assert code == 0
    rec = json.loads(out_json.read_text())
    assert rec["schema"] == "specguard-recommendation" and rec["disable_speculation_at"] == 37
    assert rec["sglang"]["launch_flags"] == ["--speculative-num-steps", "1", "--speculative-eagle-topk", "1",
                                             "--speculative-adaptive", "--speculative-adaptive-config", str(adaptive)]
    assert json.loads(adaptive.read_text()) == rec["sglang"]["speculative_adaptive_config"]
    assert "disable_speculation_at: 37" in capsys.readouterr().out
    assert cli.main(["recommend", str(tmp_path / "missing.json")]) == cli.EXIT_USAGE


# -- what SGLang 0.5.23 accepts (speculative/adaptive_spec_params.py, arg_groups/speculative_hook.py) ------------
def emitted_configs() -> list:
    heavy = {"speculative_algorithm": "EAGLE3", "effective_algorithm": "EAGLE3", "num_steps": 3, "eagle_topk": 1,
             "num_draft_tokens": 4, "max_running_requests": 128}
    middle = make_doc({"baseline": {1: 100, 4: 350, 16: 1000, 32: 1600, 64: 2400},
                       "eagle3": {1: 180, 4: 500, 16: 1100, 32: 1400, 64: 1700},
                       "eagle3-light": {1: 150, 4: 460, 16: 1150, 32: 1700, 64: 2100}},
                      {"eagle3": heavy, "eagle3-light": {**heavy, "num_steps": 1, "num_draft_tokens": 2}})
    graphs = seed_a_doc()
    graphs["servers"]["mtp"]["effective_args"]["decode_cuda_graph_bs"] = [1, 2, 4, 8, 16, 24, 32, 48, 64]
    ahead = make_doc({"baseline": {1: 100, 4: 300}, "mtp": {1: 150, 4: 400}}, {"mtp": dict(MTP)})
    return [recommend(d).sglang for d in (seed_a_doc(), middle, graphs, ahead)]


def test_emitted_tables_hold_non_negative_int_steps_and_flags_name_a_candidate():
    for sg in emitted_configs():
        assert sg["applies"]
        union = set()
        for key, entry in sg["speculative_adaptive_config"].items():
            assert key.isdigit()
            steps = entry["candidate_steps"]
            assert steps and all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in steps)
            union.update(steps)
        flags = sg["launch_flags"]
        assert int(flags[flags.index("--speculative-num-steps") + 1]) in union
        assert flags[-2:] == ["--speculative-adaptive-config", "speculative_adaptive.json"]


def test_emitted_tables_load_through_the_emulators_copy_of_sglangs_rules():
    adaptive = pytest.importorskip("specguard.emulator.adaptive")
    for sg in emitted_configs():
        flags = sg["launch_flags"]
        steps = int(flags[flags.index("--speculative-num-steps") + 1])
        assert steps in adaptive.check_adaptive_config(sg["speculative_adaptive_config"], steps)


def test_switch_keys_account_for_cuda_graph_padding():
    from specguard.report.recommend import graph_switch_start

    graphs = [1, 2, 4, 8, 16, 24, 32, 48, 64]
    # a batch of 33..48 pads to 48: a key 37 would already apply from 33; 33 is the nearest exact start
    assert graph_switch_start(37, graphs) == 33
    assert graph_switch_start(45, graphs) == 49  # nearer 49 (pads to 64 from 49) than 33
    assert graph_switch_start(33, graphs) == 33 and graph_switch_start(1, graphs) == 1
    assert graph_switch_start(100, graphs) == 100  # above the largest graph: no padding
    assert graph_switch_start(37, None) == 37
    doc = seed_a_doc()
    doc["servers"]["mtp"]["effective_args"]["decode_cuda_graph_bs"] = graphs
    rec = recommend(doc)
    assert rec.sglang["speculative_adaptive_config"] == {"1": {"candidate_steps": [1]}, "33": {"candidate_steps": [0]}}
    assert any("keyed 33" in n for n in rec.sglang["notes"])
    assert rec.disable_speculation_at == 37  # the measured policy itself is unchanged


def test_vllm_results_get_bands_never_a_table_with_null_steps():
    doc = make_doc({"baseline": {1: 100, 4: 300, 16: 900}, "ngram": {1: 150, 4: 330, 16: 700}},
                   {"ngram": {"speculative_algorithm": None, "effective_algorithm": "NGRAM", "num_steps": None,
                              "eagle_topk": None, "num_draft_tokens": 4}})
    for cfg in doc["configs"]:
        cfg["engine"] = "vllm"
    rec = recommend(doc)
    out = to_json(rec)
    assert not out["sglang"]["applies"] and "vLLM has no adaptive speculation mode" in out["sglang"]["reason"]
    assert "speculative_adaptive_config" not in out["sglang"] and "null" not in json.dumps(out["sglang"])
    assert [(b["from"], b["speculation"]) for b in out["policy"]][0] == (1, "ngram")
    assert out["policy"][-1]["speculation"] is None


def test_sglang_steps_unknown_is_not_applicable():
    rec = recommend(make_doc({"baseline": {1: 100, 4: 300}, "mtp": {1: 150, 4: 250}}, {"mtp": {**MTP, "num_steps": None}}))
    assert not rec.sglang["applies"] and "non-negative ints" in rec.sglang["reason"]


def test_speculation_that_never_pays_gets_no_table():
    rec = recommend(make_doc({"baseline": {1: 100, 16: 300}, "mtp": {1: 60, 16: 200}}, {"mtp": dict(MTP)}))
    assert [b.config for b in rec.bands] == [None]
    assert not rec.sglang["applies"] and "launch without speculation" in rec.sglang["reason"]


def test_attention_dp_results_get_no_adaptive_table():
    doc = seed_a_doc()
    doc["servers"]["mtp"]["effective_args"]["attn_dp_size"] = 2  # adaptive_unsupported_reason: attention DP
    sg = recommend(doc).sglang
    assert not sg["applies"] and "attention DP (2 ranks)" in sg["reason"]
