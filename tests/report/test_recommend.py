"""specguard recommend on synthetic sweeps with known crossovers (no servers)."""

from __future__ import annotations

import json
import math

import pytest
from synthetic_results import MTP, as_rate_sweep, make_doc, seed_a_doc

from specguard import cli
from specguard.decide.crossover import first_crossing
from specguard.labels import ExitCode
from specguard.report.recommend import RecommendError, recommend, render_text, to_json
from specguard.report.recommendation_doc import RECOMMENDATION
from specguard.report.results import validate
from specguard.store.documents import DocumentError


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
    noisy = next(c for c in doc["cells"] if c["config"] == "mtp" and int(c["level"][1:]) == 4)
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
    rec = RECOMMENDATION.load(out_json)  # the file as its model says
    assert rec["schema"] == "specguard-recommendation" and rec["disable_speculation_at"] == 37
    assert rec["sglang"]["launch_flags"] == ["--speculative-num-steps", "1", "--speculative-eagle-topk", "1",
                                             "--speculative-adaptive", "--speculative-adaptive-config", str(adaptive)]
    assert json.loads(adaptive.read_text()) == rec["sglang"]["speculative_adaptive_config"]
    assert "disable_speculation_at: 37" in capsys.readouterr().out
    assert cli.main(["recommend", str(tmp_path / "missing.json")]) == ExitCode.USAGE


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


def test_emitted_tables_pass_sglangs_start_up_checks():
    from specguard.sglang_rules.adaptive import check_adaptive_config

    for sg in emitted_configs():
        flags = sg["launch_flags"]
        steps = int(flags[flags.index("--speculative-num-steps") + 1])
        assert steps in check_adaptive_config(sg["speculative_adaptive_config"], steps)


def test_switch_keys_account_for_cuda_graph_padding():
    # the keys themselves: tests/sglang_rules/test_adaptive_table.py (switch_key)
    graphs = [1, 2, 4, 8, 16, 24, 32, 48, 64]
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


# -- one behaviour per test, exact values (issue 17: each kills a class of mutants) ---------------
# Curves are built by hand (RatioEstimate values given, not computed), so these tests pin the
# recommendation logic itself, independent of the gate statistics in decide/stats.py.
from specguard.decide.crossover import CrossoverEstimate  # noqa: E402
from specguard.decide.prior import SpreadSource  # noqa: E402
from specguard.decide.stats import RatioEstimate  # noqa: E402
from specguard.report import crossovers  # noqa: E402
from specguard.report import recommend as rm  # noqa: E402
from specguard.report.crossovers import LevelRatio  # noqa: E402
from specguard.report.recommend import Band, Recommendation  # noqa: E402


def xo(estimate: float | None, low: float | None = None, high: float | None = None, last_ahead: int | None = None,
       first_behind: int | None = None, *, confident: bool = False, below_range: bool = False,
       above_range: bool | None = None) -> CrossoverEstimate:
    """A hand-made crossover; above_range defaults to "no estimate"."""
    return CrossoverEstimate(estimate, low, high, below_range, estimate is None if above_range is None else above_range,
                             last_ahead, first_behind, confident)


def loglog(c0: float, c1: float, v0: float, v1: float) -> float:
    """Where the straight line through (log c0, log v0), (log c1, log v1) meets log v = 0."""
    return c0 * (c1 / c0) ** (math.log(v0) / math.log(v0 / v1))


def est(ratio: float, low: float, high: float) -> RatioEstimate:
    return RatioEstimate(ratio=ratio, low=low, high=high, threshold=1.0, p_value=0.5, dof=4.0, confidence=0.95,
                         between_sd=0.01, between_source=SpreadSource())


def curve(*points: tuple[int, float, float, float]) -> list[LevelRatio]:
    return [LevelRatio(c, est(r, lo, hi)) for c, r, lo, hi in points]


def settings(algo="EAGLE3", steps=3, topk=1, tokens=4, cap=None, engine="sglang", graphs=None, dp=None, eff=None):
    return {"engine": engine, "speculative_algorithm": algo, "cuda_graph_bs": graphs, "attn_dp_size": dp,
            "effective_algorithm": eff if eff is not None else algo, "num_steps": steps, "eagle_topk": topk,
            "num_draft_tokens": tokens, "max_running_requests": cap, "draft_model_path": None}


NONE = xo(None)


def make_rec(bands, sets, *, disable_at=None, crossover=NONE, ratios=None, lighter=None, switch=None, notes=None):
    return Recommendation(source={"file": "r.json"}, reference="base", speculative="spec", lighter=lighter,
                          confidence=0.95, ratios=ratios or {"spec": curve((1, 2.0, 1.5, 2.5), (4, 1.5, 1.2, 1.8))},
                          crossover_config=lighter or "spec", crossover=crossover, lighter_switch=switch,
                          disable_speculation_at=disable_at, bands=bands, settings=sets, sglang={}, notes=notes or [])


def test_interpolation_is_exact_on_log_log_axes():
    # log v falls from log 2 to log 0.25 (3 units of log 2) over log 1 .. log 8: zero a third of the way: c = 2
    assert first_crossing([1, 8], [2.0, 0.25]) == pytest.approx(2.0, rel=1e-12)
    assert first_crossing([2, 4, 32], [9.0, 2.0, 0.25]) == pytest.approx(8.0, rel=1e-12)
    assert first_crossing([2, 4, 32], [3.0, 2.0, 0.25]) == pytest.approx(8.0, rel=1e-12)
    assert first_crossing([2, 4, 32], [0.5, 2.0, 0.25]) == 2.0  # already below at the first level
    assert first_crossing([], []) is None and first_crossing([3], [1.0]) is None


def test_crossing_confidently_between_two_levels():
    c = curve((1, 2.0, 1.5, 2.5), (4, 1.2, 1.1, 1.3), (16, 0.6, 0.5, 0.7), (64, 0.4, 0.3, 0.5))
    x = crossovers.crossing(c)
    e = loglog(4, 16, 1.2, 0.6)
    assert x.estimate == pytest.approx(e, rel=1e-12)
    assert x.low == pytest.approx(loglog(4, 16, 1.1, 0.5), rel=1e-12) and x.low < e
    assert x.high == pytest.approx(loglog(4, 16, 1.3, 0.7), rel=1e-12) and x.high > e
    assert (x.last_ahead, x.first_behind, x.confident, x.below_range, x.above_range) == (4, 16, True, False, False)


def test_crossing_not_confident_when_the_last_level_ahead_is_tied():
    # c4's interval straddles 1: the lower bound's interval starts after c1, the last confident level
    c = curve((1, 2.0, 1.5, 2.5), (4, 1.2, 0.9, 1.5), (16, 0.6, 0.5, 0.7))
    x = crossovers.crossing(c)
    assert x.low == pytest.approx(loglog(1, 4, 1.5, 0.9), rel=1e-12)
    assert x.high == pytest.approx(loglog(4, 16, 1.5, 0.7), rel=1e-12)
    assert (x.last_ahead, x.first_behind, x.confident) == (4, 16, False)
    tied_behind = crossovers.crossing(curve((1, 2.0, 1.5, 2.5), (4, 0.9, 0.8, 1.05)))
    assert tied_behind.confident is False and tied_behind.high is None and tied_behind.first_behind == 4
    exactly_one = crossovers.crossing(curve((1, 2.0, 1.0, 2.5), (4, 0.5, 0.4, 0.6)))
    assert exactly_one.confident is False and exactly_one.low is None  # a low of exactly 1 is not ahead
    high_one = crossovers.crossing(curve((1, 2.0, 1.5, 2.5), (4, 0.5, 0.4, 1.0)))
    assert high_one.confident is False and high_one.high is None  # a high of exactly 1 is not behind


def test_crossing_lower_bound_is_capped_at_the_estimate():
    # the lower bounds fall slowly (1.01 -> 0.98): their own crossing (~6.3) lies beyond the estimate (~4.4)
    c = curve((1, 2.0, 1.5, 2.5), (4, 1.05, 1.01, 1.1), (16, 0.5, 0.98, 0.6))
    x = crossovers.crossing(c)
    e = loglog(4, 16, 1.05, 0.5)
    assert loglog(4, 16, 1.01, 0.98) > e and x.low == x.estimate == pytest.approx(e, rel=1e-12)


def test_crossing_already_behind_at_the_first_level():
    # decide.crossover's estimator: behind from the first level is no crossover estimate (None;
    # recommend's own estimator gave the first level, 2.0), the interval's upper end is that level,
    # and the policy still switches speculation off there (_switch_point, test below)
    x = crossovers.crossing(curve((2, 0.8, 0.7, 0.9), (8, 0.6, 0.5, 0.7)))
    assert x == xo(None, None, 2.0, None, 2, below_range=True, above_range=False)
    assert rm._switch_point(x) == 2


def test_crossing_behind_from_the_second_level_takes_the_interpolated_high():
    x = crossovers.crossing(curve((2, 1.1, 0.9, 1.3), (8, 0.8, 0.7, 0.9), (32, 0.5, 0.4, 0.6)))
    assert x.high == pytest.approx(loglog(2, 8, 1.3, 0.9), rel=1e-12) and x.low is None
    assert x.estimate == pytest.approx(loglog(2, 8, 1.1, 0.8), rel=1e-12)
    assert (x.last_ahead, x.first_behind, x.confident, x.below_range) == (2, 8, False, False)


def test_crossing_above_the_range_keeps_the_lower_bounds_crossing():
    x = crossovers.crossing(curve((1, 2.0, 1.5, 2.5), (4, 1.5, 1.2, 1.8), (16, 1.1, 0.9, 1.3)))
    assert x.estimate is None and x.high is None and x.above_range and not x.below_range
    assert x.low == pytest.approx(loglog(4, 16, 1.2, 0.9), rel=1e-12)
    assert (x.last_ahead, x.first_behind, x.confident) == (None, None, False)
    all_confident = crossovers.crossing(curve((1, 2.0, 1.5, 2.5), (4, 1.5, 1.2, 1.8)))
    assert all_confident.low is None  # nothing measured after the last confident level
    assert crossovers.crossing([]) == xo(None)


def test_switch_point_rounds_up_to_a_whole_concurrency_of_at_least_one():
    def at(e):
        return rm._switch_point(xo(e))

    assert at(None) is None
    assert (at(36.2), at(37.0), at(37.0 + 1e-12), at(0.3), at(1.0)) == (37, 37, 37, 1, 1)


def test_bands_from_the_switch_points():
    B = Band
    assert rm._bands("p", None, None, None) == [B(1, None, "p")]
    assert rm._bands("p", None, None, 37) == [B(1, 37, "p"), B(37, None, None)]
    assert rm._bands("p", "l", 8, 37) == [B(1, 8, "p"), B(8, 37, "l"), B(37, None, None)]
    assert rm._bands("p", "l", 8, None) == [B(1, 8, "p"), B(8, None, "l")]
    assert rm._bands("p", "l", None, 37) == [B(1, 37, "p"), B(37, None, None)]
    assert rm._bands("p", None, None, 1) == [B(1, None, None)]  # behind from the start
    assert rm._bands("p", "l", 1, 37) == [B(1, 37, "l"), B(37, None, None)]


def test_later_treats_no_crossing_as_infinitely_late():
    def x(e):
        return xo(e)

    assert rm._later(x(None), x(40.0)) and not rm._later(x(40.0), x(None)) and not rm._later(x(None), x(None))
    assert rm._later(x(41.0), x(40.0)) and not rm._later(x(40.0), x(40.0)) and not rm._later(x(39.0), x(40.0))


def test_a_crossing_behind_from_its_first_level_switches_there_and_is_the_earliest():
    # decide.crossover gives it no estimate; the policy reads its first level instead (_falls_behind_at)
    behind = xo(None, None, 2.0, None, 2, below_range=True, above_range=False)
    later = xo(5.0, first_behind=8)
    assert rm._switch_point(behind) == 2 and rm._later(later, behind) and not rm._later(behind, later)
    assert rm._later(xo(None), behind) and not rm._later(behind, behind)


def test_render_text_names_a_lighter_setting_ahead_from_the_first_level():
    spec = curve((2, 1.1, 1.05, 1.2), (8, 0.9, 0.8, 0.95))
    light = curve((2, 1.2, 1.1, 1.3), (8, 0.95, 0.9, 0.99))
    sw = xo(None, None, 2.0, None, 2, below_range=True, above_range=False)
    rec = make_rec([Band(1, 2, "spec"), Band(2, 4, "light"), Band(4, None, None)],
                   {"spec": settings(), "light": settings(steps=1, tokens=2)}, ratios={"spec": spec, "light": light},
                   crossover=xo(4.0, None, None, 2, 8), lighter="light", switch=sw, disable_at=4)
    rec.sglang = {"applies": False, "reason": "r"}
    lines = render_text(rec).split("\n")
    assert "light is ahead of spec from the lowest measured level c2" in lines
    assert not any(line.startswith("light overtakes") for line in lines)


def test_sglang_table_flags_and_notes_exact():
    sets = {"spec": settings(steps=3, cap=48, graphs=[1, 8, 16, 32, 64]), "light": settings(steps=1, tokens=2, cap=48)}
    rec = make_rec([Band(1, 12, "spec"), Band(12, 20, "light"), Band(20, None, None)], sets, disable_at=20)
    configs = [{"name": "other", "max_running_requests": 7}, {"name": "base", "max_running_requests": 256}]
    sg = rm.sglang_adaptive(rec, 64, configs)
    assert sg["applies"] is True and sg["reason"] is None
    assert sg["speculative_adaptive_config"] == {"1": {"candidate_steps": [3]}, "9": {"candidate_steps": [1]},
                                                 "17": {"candidate_steps": [0]}}
    assert sg["launch_flags"] == ["--speculative-num-steps", "3", "--speculative-eagle-topk", "1",
                                  "--speculative-adaptive", "--speculative-adaptive-config", "speculative_adaptive.json"]
    g = "[1, 8, 16, 32, 64]"
    assert sg["notes"] == [
        "keys are running batch sizes of one server (per DP rank); in a closed loop below the server's running-request "
        "cap they equal client concurrency",
        f"the switch at 12 is keyed 9: batches are padded to the decode CUDA-graph sizes {g} before the "
        "lookup, so 9 is the nearest batch size a key takes effect at",
        f"the switch at 20 is keyed 17: batches are padded to the decode CUDA-graph sizes {g} before the "
        "lookup, so 17 is the nearest batch size a key takes effect at",
        "spec ran with max_running_requests=48 (SGLang's default under speculation when not set); speculation "
        "switched off adaptively keeps that cap, so launch with --max-running-requests 256 to serve higher "
        "concurrency at the reference's speed"]


def test_sglang_notes_without_graphs_and_beyond_the_cap():
    rec = make_rec([Band(1, 60, "spec"), Band(60, None, None)], {"spec": settings(steps=2, cap=48)}, disable_at=60)
    sg = rm.sglang_adaptive(rec, 64, [{"name": "base"}])  # the reference has no cap of its own
    assert sg["speculative_adaptive_config"] == {"1": {"candidate_steps": [2]}, "60": {"candidate_steps": [0]}}
    assert sg["notes"][1:] == [
        "decode CUDA-graph sizes unknown: SGLang pads a batch to the next captured size before the lookup, so a switch "
        "can happen up to one graph bucket before its key (exact with CUDA graphs disabled)",
        "spec ran with max_running_requests=48 (SGLang's default under speculation when not set); speculation "
        "switched off adaptively keeps that cap, so launch with --max-running-requests 64 to serve higher "
        "concurrency at the reference's speed",
        "the switch-off point 60 is above the cap 48: no batch reaches it, so the table cannot express it; raise "
        "--max-running-requests and measure again"]
    no_ref = rm.sglang_adaptive(rec, 64, [])
    assert "--max-running-requests 64 to serve" in no_ref["notes"][2]


def test_sglang_no_cap_notes_when_the_cap_covers_the_sweep():
    at_cap = make_rec([Band(1, 48, "spec"), Band(48, None, None)], {"spec": settings(cap=48, graphs=[1, 48])},
                      disable_at=48)
    assert len(rm.sglang_adaptive(at_cap, 48, [])["notes"]) == 2  # the roles note and the keyed-49 note only
    no_cap = make_rec([Band(1, None, "spec")], {"spec": settings(cap=None, graphs=[1, 4])})
    sg = rm.sglang_adaptive(no_cap, 64, [])
    assert sg["speculative_adaptive_config"] == {"1": {"candidate_steps": [3]}} and len(sg["notes"]) == 1
    zero_steps = make_rec([Band(1, None, "spec")], {"spec": settings(steps=0, graphs=[1])})
    assert rm.sglang_adaptive(zero_steps, 8, [])["launch_flags"][:2] == ["--speculative-num-steps", "0"]


@pytest.mark.parametrize("sets,reason", [
    (settings(engine="vllm"), "vLLM has no adaptive speculation mode: apply the policy's concurrency bands (e.g. route "
                              "by concurrency between a speculative and a plain server)"),
    (settings(algo="NGRAM"), "spec runs NGRAM; SGLang's adaptive mode supports EAGLE/EAGLE3 (and NEXTN, run as EAGLE) only"),
    (settings(algo=None, eff="standalone"), "spec runs STANDALONE; SGLang's adaptive mode supports EAGLE/EAGLE3 (and "
                                            "NEXTN, run as EAGLE) only"),
    (settings(algo=None, eff=""), "spec runs ; SGLang's adaptive mode supports EAGLE/EAGLE3 (and NEXTN, run as EAGLE) only"),
    (settings(topk=2), "spec runs topk 2; SGLang's adaptive mode needs topk 1"),
    (settings(dp=2), "spec runs attention DP (2 ranks); SGLang 0.5.23 turns adaptive speculation off under attention DP"),
    (settings(steps=-1), "spec's num_steps is not known (-1); SGLang's candidate_steps must be non-negative ints"),
    (settings(steps=True), "spec's num_steps is not known (True); SGLang's candidate_steps must be non-negative ints"),
    (settings(steps=2.0), "spec's num_steps is not known (2.0); SGLang's candidate_steps must be non-negative ints"),
])
def test_sglang_not_applicable_reasons_exact(sets, reason):
    rec = make_rec([Band(1, None, "spec")], {"spec": sets})
    assert rm.sglang_adaptive(rec, 16, []) == {"applies": False, "reason": reason, "notes": []}


def test_sglang_applies_to_nextn_eagle_and_topk_none_and_one_dp_rank():
    for sets in (settings(algo="NEXTN", eff="EAGLE"), settings(algo="eagle"), settings(algo=None, eff="EAGLE3"),
                 settings(topk=None), settings(dp=1), settings(dp="2")):
        assert rm.sglang_adaptive(make_rec([Band(1, None, "spec")], {"spec": sets}), 16, [])["applies"] is True
    never = make_rec([Band(1, None, None)], {"spec": settings()})
    assert rm.sglang_adaptive(never, 16, []) == {"applies": False, "reason": "speculation does not pay at any measured "
                                                 "concurrency: launch without speculation", "notes": []}


def _scenario():
    spec = curve((1, 2.0, 1.5, 2.5), (4, 1.2, 1.1, 1.3), (16, 0.6, 0.5, 0.7))
    x = crossovers.crossing(spec)
    sets = {"spec": settings(algo="NEXTN", steps=1, tokens=2, cap=48, eff="EAGLE")}
    rec = make_rec([Band(1, 6, "spec"), Band(6, None, None)], sets, disable_at=6, crossover=x, ratios={"spec": spec},
                   notes=["n1"])
    rec.sglang = rm.sglang_adaptive(rec, 16, [{"name": "base", "max_running_requests": 512}])
    return rec, x


def test_to_json_every_field():
    rec, x = _scenario()
    out = to_json(rec)
    assert out == {
        "schema": "specguard-recommendation", "schema_version": 1, "source": {"file": "r.json"},
        "level_kind": "concurrency", "reference": "base", "speculative": "spec", "lighter": None, "confidence": 0.95,
        "disable_speculation_at": 6,
        "crossover": {"config": "spec", "estimate": round(x.estimate, 2), "interval": [round(x.low, 2), round(x.high, 2)],
                      "between": [4, 16], "confident": True, "below_range": False, "above_range": False},
        "lighter_switch": None,
        "policy": [{"from": 1, "to": 6, "speculation": "spec", "speculative_algorithm": "NEXTN", "num_steps": 1,
                    "eagle_topk": 1, "num_draft_tokens": 2},
                   {"from": 6, "to": None, "speculation": None}],
        "ratios": {"spec": [{"concurrency": 1, "ratio": 2.0, "low": 1.5, "high": 2.5},
                            {"concurrency": 4, "ratio": 1.2, "low": 1.1, "high": 1.3},
                            {"concurrency": 16, "ratio": 0.6, "low": 0.5, "high": 0.7}]},
        "sglang": rec.sglang, "notes": ["n1"]}
    assert out["crossover"]["estimate"] == 5.76 and out["crossover"]["interval"] == [4.73, 7.2]  # 4 x 1.2^2


def test_the_recommendation_is_checked_before_it_is_written(tmp_path):
    rec, _ = _scenario()
    doc = to_json(rec)
    doc["source"] = {"file": "r.json", "session_id": "s", "created": "2026-12-03T00:00:00Z", "suite": "suite.toml"}
    RECOMMENDATION.save(doc, tmp_path / "ok.json")
    assert RECOMMENDATION.load(tmp_path / "ok.json") == doc
    doc["policy"][0]["num_steps"] = "1"  # a string where SGLang's flag value is an int
    with pytest.raises(DocumentError, match=r"policy\[0\]\.num_steps is \"1\"; expected int"):
        RECOMMENDATION.save(doc, tmp_path / "bad.json")
    assert not (tmp_path / "bad.json").exists()  # nothing written


def test_to_json_open_crossing_and_lighter_switch():
    sw = xo(7.123, 5.4321, 9.876, None, 8, below_range=True)
    rec = make_rec([Band(1, 7, "spec"), Band(7, 30, "light"), Band(30, None, None)],
                   {"spec": settings(), "light": settings(steps=1, tokens=2)}, lighter="light", switch=sw, disable_at=30)
    out = to_json(rec)
    assert out["crossover"] == {"config": "light", "estimate": None, "interval": [None, None], "between": [None, None],
                                "confident": False, "below_range": False, "above_range": True}
    assert out["lighter_switch"] == {"use_lighter_from": 7, "estimate": 7.12, "interval": [5.43, 9.88],
                                     "between": [None, 8], "confident": False, "below_range": True, "above_range": False}
    assert out["lighter"] == "light" and out["policy"][1]["num_steps"] == 1


def test_render_text_exact():
    rec, x = _scenario()
    flags = "--speculative-num-steps 1 --speculative-eagle-topk 1 --speculative-adaptive --speculative-adaptive-config"
    assert render_text(rec).split("\n") == [
        "spec (NEXTN, steps 1, topk 1, 2 draft tokens, cap 48) vs base: tok/s ratio per concurrency (95% CI)",
        "  c1      2.000 [1.500, 2.500]  ahead",
        "  c4      1.200 [1.100, 1.300]  ahead",
        "  c16     0.600 [0.500, 0.700]  behind",
        f"crossover (spec vs base): c~{x.estimate:.1f} (95% CI {x.low:.0f}-{x.high:.0f}), between measured c4 and c16",
        "policy:",
        "  concurrency 1-5        spec (NEXTN, steps 1, topk 1, 2 draft tokens, cap 48)",
        "  concurrency >= 6       no speculation",
        "disable_speculation_at: 6",
        f"SGLang: {flags} speculative_adaptive.json where speculative_adaptive.json is",
        '  {"1": {"candidate_steps": [1]}, "6": {"candidate_steps": [0]}}',
        *(f"  note: {n}" for n in rec.sglang["notes"]),
        "note: n1"]
    assert "c~5.8 (95% CI 5-7)" in render_text(rec)


def test_render_text_ties_open_intervals_lighter_and_no_table():
    spec = curve((2, 1.1, 0.95, 1.2), (8, 0.9, 0.8, 1.0))
    light = curve((2, 1.05, 0.99, 1.1), (8, 0.95, 0.9, 1.01))
    x = xo(4.0, None, None, None, 2)
    sw = xo(3.0, None, None, None, 8)
    rec = make_rec([Band(1, 3, "spec"), Band(3, 4, "light"), Band(4, None, None)],
                   {"spec": settings(engine="vllm"), "light": settings(steps=1, tokens=2, engine="vllm")},
                   ratios={"spec": spec, "light": light}, crossover=x, lighter="light", switch=sw, disable_at=4)
    rec.sglang = rm.sglang_adaptive(rec, 8, [])
    lines = render_text(rec).split("\n")
    assert lines[:6] == [
        "spec (EAGLE3, steps 3, topk 1, 4 draft tokens) vs base: tok/s ratio per concurrency (95% CI)",
        "  c2      1.100 [0.950, 1.200]  tied",
        "  c8      0.900 [0.800, 1.000]  tied",
        "light (EAGLE3, steps 1, topk 1, 2 draft tokens) vs base:",
        "  c2      1.050 [0.990, 1.100]  tied",
        "  c8      0.950 [0.900, 1.010]  tied"]
    assert lines[6:] == [
        "crossover (light vs base): c~4.0 (95% CI below c2-beyond c8), at or below the lowest measured level c2, "
        "not confidently resolved",
        "light overtakes spec at c~3.0 (95% CI below c2-beyond c8)",
        "policy:",
        "  concurrency 1-2        spec (EAGLE3, steps 3, topk 1, 4 draft tokens)",
        "  concurrency 3-3        light (EAGLE3, steps 1, topk 1, 2 draft tokens)",
        "  concurrency >= 4       no speculation",
        "disable_speculation_at: 4",
        "SGLang adaptive config: not applicable: vLLM has no adaptive speculation mode: apply the policy's concurrency "
        "bands (e.g. route by concurrency between a speculative and a plain server)"]


def test_render_text_without_a_crossing():
    rec = make_rec([Band(1, None, "spec")], {"spec": settings()})
    rec.sglang = {"applies": False, "reason": "r"}
    lines = render_text(rec).split("\n")
    assert lines[3:] == ["crossover: none in the measured range (spec ahead throughout)", "policy:",
                         "  concurrency >= 1       spec (EAGLE3, steps 3, topk 1, 4 draft tokens)",
                         "disable_speculation_at: None", "SGLang adaptive config: not applicable: r"]
    rec.lighter_switch = NONE  # a switch with no crossing of its own is not printed
    assert "overtakes" not in render_text(rec)


def test_ratio_curve_needs_two_runs_on_both_sides_at_a_shared_level():
    a = {1: [10.0, 10.2], 4: [20.0, 20.4], 16: [30.0], 64: [5.0, 5.0]}
    b = {1: [5.0, 5.1], 4: [10.0], 16: [15.0, 15.3], 32: [1.0, 1.0]}
    out = crossovers.ratio_curve(a, b, launch_sd=0.01, confidence=0.9)
    assert [r.concurrency for r in out] == [1]
    assert out[0].estimate.ratio == pytest.approx(2.0, rel=1e-3) and out[0].estimate.confidence == 0.9
    b[4] = [10.0, 10.2]
    assert [r.concurrency for r in crossovers.ratio_curve(a, b, launch_sd=0.01, confidence=0.9)] == [1, 4]


def test_settings_read_effective_args_first_and_sort_graphs():
    doc = seed_a_doc()
    doc["servers"]["mtp"]["effective_args"].update(decode_cuda_graph_bs=[8, 1, 4], attn_dp_size=1,
                                                   draft_model_path="/d")
    s = rm._settings(doc, "mtp")
    assert s == {"engine": "emulator", "speculative_algorithm": "NEXTN", "cuda_graph_bs": [1, 4, 8], "attn_dp_size": 1,
                 "effective_algorithm": "EAGLE", "num_steps": 1, "eagle_topk": 1, "num_draft_tokens": 2,
                 "max_running_requests": 48, "draft_model_path": "/d"}
    doc["servers"]["mtp"]["effective_args"]["decode_cuda_graph_bs"] = None
    doc["servers"]["mtp"]["effective_args"]["cuda_graph_bs_decode"] = [16, 2]  # the other spelling
    assert rm._settings(doc, "mtp")["cuda_graph_bs"] == [2, 16]
    doc["servers"]["mtp"]["effective_args"]["cuda_graph_bs_decode"] = []
    assert rm._settings(doc, "mtp")["cuda_graph_bs"] is None


def _three(tokens_a=4, tokens_b=2, **extra_b):
    heavy = {"speculative_algorithm": "EAGLE3", "effective_algorithm": "EAGLE3", "num_steps": 3, "eagle_topk": 1,
             "num_draft_tokens": tokens_a, "max_running_requests": 128}
    light = {**heavy, "num_steps": 1, "num_draft_tokens": tokens_b, **extra_b}
    return make_doc({"baseline": {1: 100, 4: 350, 16: 1000, 32: 1600, 64: 2400},
                     "a": {1: 180, 4: 500, 16: 1100, 32: 1400, 64: 1700},
                     "b": {1: 150, 4: 460, 16: 1150, 32: 1700, 64: 2100}}, {"a": heavy, "b": light})


def test_primary_is_the_most_draft_tokens_then_the_first_listed():
    assert rm._pick_primary(_three(4, 2), None) == "a" and rm._pick_primary(_three(2, 4), None) == "b"
    assert rm._pick_primary(_three(4, 4), None) == "a"
    assert rm._pick_primary(_three(4, 2), "b") == "b"
    assert rm._candidates(_three()) == ["a", "b"]


def test_lighter_options_need_the_same_reference_algorithm_and_draft_model():
    assert rm._lighter_options(_three(4, 2), "a") == ["b"]
    assert rm._lighter_options(_three(4, 2), "b") == []
    assert rm._lighter_options(_three(4, 4), "a") == []  # not fewer draft tokens
    assert rm._lighter_options(_three(4, 2, effective_algorithm="EAGLE"), "a") == []
    doc = _three(4, 2)
    doc["servers"]["b"]["effective_args"]["draft_model_path"] = "/other"
    assert rm._lighter_options(doc, "a") == []
    doc = _three(4, 2)
    doc["configs"][2]["reference"] = "a"
    assert rm._lighter_options(doc, "a") == []
    doc = _three(4, None)  # unknown draft tokens count as 0: lighter
    assert rm._lighter_options(doc, "a") == ["b"]


def test_recommend_errors_exact():
    doc = _three()
    with pytest.raises(RecommendError) as err:
        recommend(doc, config="zzz")
    assert str(err.value) == "no configuration 'zzz' in the results; it has baseline, a, b"
    with pytest.raises(RecommendError) as err:
        recommend(doc, config="baseline")
    assert str(err.value) == ("'baseline' is not a speculative configuration measured together with its reference "
                              "(error-free cells on both sides are needed)")
    with pytest.raises(RecommendError) as err:
        recommend(make_doc({"baseline": {1: 100}}))
    assert str(err.value) == ("the results have no speculative configuration measured together with its reference; "
                              "run the sweep with both selected (e.g. pytest perf_tests -k \"mtp or baseline\")")
    with pytest.raises(RecommendError) as err:
        recommend(make_doc({"baseline": {1: 100, 4: 300}, "mtp": {1: 150}}, {"mtp": dict(MTP)}))
    assert str(err.value) == "mtp and baseline share fewer than 2 measured concurrency levels; a crossover needs a sweep"


def test_recommend_names_the_other_candidates_and_the_source():
    doc = _three(4, 2, effective_algorithm="EAGLE")  # b is not a lighter option of a: only listed
    rec = recommend(doc, source="res.json", confidence=0.9)
    assert rec.source == {"file": "res.json", "session_id": "synthetic", "created": "2026-11-29T00:00:00+00:00",
                          "suite": "synthetic.toml"}
    assert rec.confidence == 0.9 and rec.speculative == "a" and rec.reference == "baseline" and rec.lighter is None
    assert list(rec.ratios) == ["a"] and list(rec.settings) == ["a"]
    assert "other speculative configurations in the results: b (specguard recommend --config NAME)" in rec.notes
    assert rec.ratios["a"][0].estimate.confidence == 0.9


def test_recommend_notes_exact_for_the_edge_cases():
    ahead = recommend(make_doc({"baseline": {1: 100, 4: 300}, "mtp": {1: 150, 4: 400}}, {"mtp": dict(MTP)}))
    assert ahead.notes == ["mtp is ahead of baseline up to the highest measured concurrency (4); measure higher "
                           "concurrency to find where it stops paying"]
    behind = recommend(make_doc({"baseline": {4: 100, 16: 300}, "mtp": {4: 60, 16: 200}}, {"mtp": dict(MTP)}))
    assert behind.notes == [
        "mtp is already behind baseline at the lowest measured concurrency (4): speculation does not pay on this sweep",
        "the measured levels around the crossover are not confidently resolved at 95%; more repeats or levels between "
        "them narrow it"]
    assert recommend(seed_a_doc()).notes == []  # confident crossing inside the range


def test_recommend_middle_band_records_the_lighter_switch():
    rec = recommend(_three(4, 2))
    assert rec.lighter == "b" and rec.crossover_config == "b" and rec.lighter_switch is not None
    assert list(rec.ratios) == ["a", "b"] and set(rec.settings) == {"a", "b"}
    assert rec.disable_speculation_at == rm._switch_point(crossovers.crossing(rec.ratios["b"]))
    assert rec.bands[1].start == rm._switch_point(rec.lighter_switch)
    assert rec.notes == []


def test_recommend_drops_a_lighter_switch_at_or_after_its_own_switch_off():
    # b overtakes a late (c~40) but falls behind the baseline earlier (c~20): no middle band
    heavy = {"speculative_algorithm": "EAGLE3", "effective_algorithm": "EAGLE3", "num_steps": 3, "eagle_topk": 1,
             "num_draft_tokens": 4, "max_running_requests": 128}
    doc = make_doc({"baseline": {1: 100, 4: 350, 16: 1000, 32: 1600, 64: 2400},
                    "a": {1: 180, 4: 500, 16: 1100, 32: 1500, 64: 1900},
                    "b": {1: 150, 4: 460, 16: 1050, 32: 1450, 64: 2000}},
                   {"a": heavy, "b": {**heavy, "num_steps": 1, "num_draft_tokens": 2}})
    rec = recommend(doc)
    assert rec.lighter is None and rec.lighter_switch is None and rec.crossover_config == "a"
    assert rec.notes[0] == ("b (fewer draft tokens) does not take over from a before speculation stops paying "
                            "against baseline; no middle band")


def test_candidates_need_cells_on_both_sides():
    doc = _three()
    doc["cells"] = [c for c in doc["cells"] if c["config"] != "b"]  # b configured but never measured
    assert rm._candidates(doc) == ["a"]
    doc["configs"][1]["reference"] = "missing"  # a's reference has no cells
    assert rm._candidates(doc) == []
    for cell in doc["cells"]:
        cell["error"] = "boom" if cell["config"] == "a" else None
    doc["configs"][1]["reference"] = "baseline"
    assert rm._candidates(doc) == []  # only failed cells


def test_the_lighter_option_that_stays_ahead_longest_is_chosen():
    heavy = {"speculative_algorithm": "EAGLE3", "effective_algorithm": "EAGLE3", "num_steps": 3, "eagle_topk": 1,
             "num_draft_tokens": 4, "max_running_requests": 128}
    doc = make_doc({"baseline": {1: 100, 4: 350, 16: 1000, 32: 1600, 64: 2400},
                    "a": {1: 180, 4: 500, 16: 1100, 32: 1400, 64: 1700},
                    "b": {1: 150, 4: 460, 16: 1150, 32: 1700, 64: 2100},   # ahead up to c32
                    "c": {1: 140, 4: 420, 16: 950, 32: 1300, 64: 1500}},   # behind the baseline from c16
                   {"a": heavy, "b": {**heavy, "num_steps": 1, "num_draft_tokens": 2},
                    "c": {**heavy, "num_steps": 2, "num_draft_tokens": 3}})
    rec = recommend(doc)
    assert rm._lighter_options(doc, "a") == ["b", "c"]
    assert rec.lighter == "b" and [b.config for b in rec.bands] == ["a", "b", None]
    assert list(rec.ratios) == ["a", "b", "c"]



def test_a_lighter_option_that_never_falls_behind_is_preferred():
    heavy = {"speculative_algorithm": "EAGLE3", "effective_algorithm": "EAGLE3", "num_steps": 3, "eagle_topk": 1,
             "num_draft_tokens": 4, "max_running_requests": 128}
    doc = make_doc({"baseline": {1: 100, 4: 350, 16: 1000, 32: 1600},
                    "a": {1: 180, 4: 500, 16: 1100, 32: 1400},
                    "b": {1: 140, 4: 420, 16: 950, 32: 1300},     # behind from c16
                    "c": {1: 150, 4: 460, 16: 1150, 32: 1700}},   # ahead of the baseline throughout
                   {"a": heavy, "b": {**heavy, "num_steps": 2, "num_draft_tokens": 3},
                    "c": {**heavy, "num_steps": 1, "num_draft_tokens": 2}})
    rec = recommend(doc)
    assert rm._lighter_options(doc, "a") == ["b", "c"]  # the better one listed second
    assert rec.lighter == "c" and rec.crossover_config == "c" and rec.disable_speculation_at is None


def test_interval_text_names_the_first_and_last_measured_levels():
    c3 = curve((2, 1.0, 0.9, 1.1), (8, 1.0, 0.9, 1.1), (32, 1.0, 0.9, 1.1))
    assert rm._interval(xo(5.0), c3) == "below c2-beyond c32"
    assert rm._interval(xo(5.0, 3.4, 12.6), c3) == "3-13"


def test_draft_token_counts_unknown_count_as_zero():
    assert rm._lighter_options(_three(1, None), "a") == ["b"]  # 0 < 1
    assert rm._lighter_options(_three(None, 0), "a") == []  # 0 < 0 is false
    assert rm._pick_primary(_three(None, 1), None) == "b"  # 1 draft token beats an unknown count


def test_a_curve_starting_exactly_at_one_is_not_below_the_range():
    x = crossovers.crossing(curve((1, 1.0, 0.9, 1.1), (4, 0.5, 0.4, 0.6)))
    assert x.below_range is False and x.first_behind == 4 and x.last_ahead == 1
    assert x.estimate == pytest.approx(1.0)


def test_crossing_high_when_the_upper_bounds_rise_after_the_first_level():
    # behind from the first level: the interval's top is that level, whatever the later bounds do
    # (no estimate: decide.crossover's below-range edge, where recommend's own gave the first level)
    x = crossovers.crossing(curve((2, 0.4, 0.3, 0.5), (8, 0.8, 0.7, 0.9)))
    assert x.high == 2.0 and x.estimate is None and x.below_range


def test_ratio_curve_tests_against_one():
    out = crossovers.ratio_curve({1: [10.0, 10.2]}, {1: [5.0, 5.1]}, launch_sd=0.01, confidence=0.9)
    assert out[0].estimate.threshold == 1.0


def test_recommend_source_file_defaults_to_empty():
    assert recommend(seed_a_doc()).source["file"] == ""


def test_recommend_notes_name_the_highest_level_and_every_other_candidate():
    ahead = recommend(make_doc({"baseline": {1: 100, 4: 300, 16: 800}, "mtp": {1: 150, 4: 400, 16: 1000}},
                               {"mtp": dict(MTP)}))
    assert ahead.notes[0].startswith("mtp is ahead of baseline up to the highest measured concurrency (16);")
    other = {"speculative_algorithm": "NGRAM", "effective_algorithm": "NGRAM", "num_steps": 1, "eagle_topk": 10,
             "num_draft_tokens": 2}
    doc = make_doc({"baseline": {1: 100, 4: 300, 16: 800}, "mtp": {1: 150, 4: 400, 16: 700},
                    "x": {1: 120, 4: 310, 16: 700}, "y": {1: 110, 4: 320, 16: 700}},
                   {"mtp": {**MTP, "num_draft_tokens": 4}, "x": other, "y": other})
    assert recommend(doc).notes[-1] == "other speculative configurations in the results: x, y (specguard recommend --config NAME)"


def test_render_text_a_lower_bound_of_exactly_one_is_tied():
    rec = make_rec([Band(1, None, "spec")], {"spec": settings()},
                   ratios={"spec": curve((1, 1.5, 1.0, 2.0), (4, 1.2, 1.1, 1.3))})
    rec.sglang = {"applies": False, "reason": "r"}
    assert render_text(rec).split("\n")[1:3] == ["  c1      1.500 [1.000, 2.000]  tied", "  c4      1.200 [1.100, 1.300]  ahead"]


def test_to_json_a_switch_without_a_band_of_its_own():
    sw = xo(7.0, None, None, None, 8)
    rec = make_rec([Band(1, None, "spec")], {"spec": settings()}, lighter="light", switch=sw)
    assert to_json(rec)["lighter_switch"]["use_lighter_from"] is None


# -- open-loop sweeps: `[sweep] request_rate` levels are req/s kept in the cells' `concurrency` field -------------
def rate_doc(doc: dict | None = None) -> dict:
    """A concurrency results document relabelled as a request-rate sweep (levels rN)."""
    return as_rate_sweep(doc if doc is not None else seed_a_doc())


def test_rate_sweep_text_names_request_rates_never_concurrency():
    conc, rate = recommend(seed_a_doc()), recommend(rate_doc())
    assert (rate.level_kind, conc.level_kind) == ("request_rate", "concurrency")
    assert rate.crossover == conc.crossover and rate.bands == conc.bands  # same estimator, other words
    text = render_text(rate)
    e = rate.crossover.estimate
    assert f"crossover (mtp vs baseline): r~{e:.1f} req/s (95% CI " in text
    body = text.split("\nSGLang adaptive config: not applicable: ")[0]  # the reason names the concurrency sweep to run
    assert "between measured r32 and r64" in text and "c~" not in text and "concurrency" not in body
    assert "tok/s ratio per open-loop request rate (95% CI)" in text.split("\n")[0]
    assert "\n  r1     " in text and "\n  r128   " in text and "\n  c" not in text
    assert "  request rate 1-36 req/s    mtp (" in text and "  request rate >= 37 req/s   no speculation" in text
    assert "disable_speculation_at: 37 req/s" in text
    assert "\n  c1     " in render_text(conc) and "  concurrency >= 37      no speculation" in render_text(conc)


RATE_REASON = ("the sweep's levels are open-loop request rates (req/s), not the running batch sizes SGLang's adaptive "
               "config is keyed by: run a concurrency sweep ([sweep] concurrency = [...]) to get one")


def test_rate_sweep_gets_no_adaptive_config_and_says_to_sweep_concurrency():
    # SGLang 0.5.23 speculative/adaptive_spec_params.py AdaptiveSpeculativeParams._route: keys are running batch sizes
    assert recommend(seed_a_doc()).sglang["applies"]
    sg = recommend(rate_doc()).sglang
    assert sg == {"applies": False, "reason": RATE_REASON, "notes": []}
    assert render_text(recommend(rate_doc())).split("\n")[-1] == f"SGLang adaptive config: not applicable: {RATE_REASON}"


def test_rate_sweep_not_applicable_reasons_keep_their_precedence():
    rec = make_rec([Band(1, None, None)], {"spec": settings()})
    rec.level_kind = "request_rate"
    assert rm.sglang_adaptive(rec, 16, [])["reason"] == ("speculation does not pay at any measured request rate: "
                                                         "launch without speculation")
    vllm = make_rec([Band(1, None, "spec")], {"spec": settings(engine="vllm")})
    vllm.level_kind = "request_rate"
    assert rm.sglang_adaptive(vllm, 16, [])["reason"] == (
        "vLLM has no adaptive speculation mode: apply the policy's request-rate bands (e.g. route by request rate "
        "between a speculative and a plain server)")
    ngram = make_rec([Band(1, None, "spec")], {"spec": settings(algo="NGRAM")})
    ngram.level_kind = "request_rate"
    assert rm.sglang_adaptive(ngram, 16, [])["reason"] == RATE_REASON


def test_rate_sweep_notes_and_errors_name_request_rates():
    ahead = recommend(rate_doc(make_doc({"baseline": {2: 100, 8: 300}, "mtp": {2: 150, 8: 400}}, {"mtp": dict(MTP)})))
    assert ahead.notes == ["mtp is ahead of baseline up to the highest measured request rate (8 req/s); measure higher "
                           "request rates to find where it stops paying"]
    text = render_text(ahead)
    assert "  request rate >= 1 req/s    mtp (" in text and "disable_speculation_at: None" in text
    behind = recommend(rate_doc(make_doc({"baseline": {4: 100, 16: 300}, "mtp": {4: 60, 16: 200}}, {"mtp": dict(MTP)})))
    assert behind.notes[0] == ("mtp is already behind baseline at the lowest measured request rate (4 req/s): "
                               "speculation does not pay on this sweep")
    # behind from the first level the crossover line names that level (it printed an estimate "r~4.0"
    # before recommend used decide.crossover, whose below-range crossover has no estimate)
    assert "crossover: none in the measured range (mtp behind baseline from the lowest measured level r4)" \
        in render_text(behind).splitlines()
    with pytest.raises(RecommendError, match="share fewer than 2 measured request rate levels"):
        recommend(rate_doc(make_doc({"baseline": {2: 100}, "mtp": {2: 150}}, {"mtp": dict(MTP)})))


def test_rate_sweep_json_says_what_the_levels_are_and_keeps_the_field_names(tmp_path):
    out = to_json(recommend(rate_doc()))
    assert out["level_kind"] == "request_rate" and to_json(recommend(seed_a_doc()))["level_kind"] == "concurrency"
    assert out["ratios"]["mtp"][0]["concurrency"] == 1 and out["disable_speculation_at"] == 37
    results = tmp_path / "results.json"
    results.write_text(json.dumps(rate_doc()))
    adaptive, policy = tmp_path / "adaptive.json", tmp_path / "policy.json"
    assert cli.main(["recommend", str(results), "--json", str(policy), "--adaptive-config", str(adaptive)]) == 0
    assert not adaptive.exists()  # no table to write
    assert json.loads(policy.read_text())["level_kind"] == "request_rate"


def test_rate_sweep_middle_band_text():
    doc = rate_doc(_three(4, 2))
    rec = recommend(doc)
    assert rec.lighter == "b" and not rec.sglang["applies"]
    text = render_text(rec)
    assert f"b overtakes a at r~{rec.lighter_switch.estimate:.1f} req/s (95% CI " in text
    assert f"  request rate {rec.bands[1].start}-{rec.bands[2].start - 1} req/s" in text


def test_rate_interval_text_names_rate_levels():
    c3 = curve((2, 1.0, 0.9, 1.1), (8, 1.0, 0.9, 1.1), (32, 1.0, 0.9, 1.1))
    x = xo(5.0)
    assert rm._interval(x, c3, "request_rate") == "below r2-beyond r32"
    assert crossovers.level_kind({"sweep": {"request_rate": [], "concurrency": [1]}}) == "concurrency"
    assert crossovers.level_kind({}) == "concurrency" and crossovers.level_kind({"sweep": {"request_rate": [2]}}) == "request_rate"


def test_a_switch_key_keeps_every_measured_level_on_its_side_of_the_switch():
    # Speculation off from 32, measured at 16 (ahead) and 32 (behind). The batch size nearest 32 a key
    # can start at is 33 (32 itself pads to the graph size 32, below a key 33), which would leave the
    # measured level 32 speculating; the builder keys 25, the nearest start with 16 below and 32 above.
    from specguard.sglang_rules.adaptive import slot_key

    graphs = [1, 2, 4, 8, 16, 24, 32, 40, 48, 64]
    levels = curve((1, 2.0, 1.5, 2.5), (4, 1.5, 1.2, 1.8), (16, 1.1, 1.05, 1.15), (32, 0.9, 0.85, 0.95))
    rec = make_rec([Band(1, 32, "spec"), Band(32, None, None)], {"spec": settings(steps=2, graphs=graphs)},
                   disable_at=32, ratios={"spec": levels})
    sg = rm.sglang_adaptive(rec, 32, [])
    table = sg["speculative_adaptive_config"]
    assert table == {"1": {"candidate_steps": [2]}, "25": {"candidate_steps": [0]}}
    keys = sorted(int(k) for k in table)
    assert {c: table[str(slot_key(keys, graphs, c))]["candidate_steps"] for c in (1, 4, 16, 32)} == {
        1: [2], 4: [2], 16: [2], 32: [0]}
    assert ("the switch at 32 is keyed 25: batches are padded to the decode CUDA-graph sizes "
            f"{graphs} before the lookup, so 25 is the nearest batch size a key takes effect at with 16 below it "
            "and 32 at or above it") in sg["notes"]
