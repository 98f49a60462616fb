"""SGLang 0.5.23's forced acceptance (SGLANG_SIMULATE_ACC_LEN, _METHOD, _TOKEN_MODE) in the emulator,
against the reading of srt/environ.py and srt/speculative/spec_utils.py in simulated_acceptance.py."""

from __future__ import annotations

import dataclasses
import logging

import numpy as np
import pytest

from specguard.emulator import launch_server
from specguard.emulator.model import BatchScheduler, GenRequest, SchedulerConfig
from specguard.emulator.profile import DraftProfile, load_profile
from specguard.emulator.simulated_acceptance import (
    LENGTH_ENV,
    METHOD_ENV,
    TOKEN_MODE_ENV,
    AccMethod,
    SimulatedAcceptance,
    TokenMode,
    from_environ,
    length_from_environ,
)
from specguard.emulator.spec import SpecRequest, resolve_settings
from specguard.emulator.tokens import FIXED_TOKEN, OUTPUT_CYCLE, OutputText

EAGLE3 = SpecRequest("EAGLE3", 3, 1, 4)


def scheduler(simulated: SimulatedAcceptance, spec: SpecRequest = EAGLE3, attn_dp_size: int = 1, seed: int = 5,
              **kw) -> BatchScheduler:
    profile = load_profile("fast")
    eagle3 = profile.drafts["EAGLE3"]
    profile = dataclasses.replace(profile, drafts={**profile.drafts, "DFLASH": DraftProfile(eagle3.draft_ms, (0.5,))})
    settings = resolve_settings(profile, spec, 64, attn_dp_size=attn_dp_size)
    return BatchScheduler(SchedulerConfig(profile, settings, seed, jitter_pct=0.0, drift_pct=0.0, simulated=simulated,
                                          **kw))


def run_to_the_end(sched: BatchScheduler, requests: list[GenRequest]) -> list[list[int]]:
    """Every decode step's grants, all requests submitted at 0."""
    for req in requests:
        sched.submit(req, 0.0)
    now, decodes = 0.0, []
    while sched.has_work():
        step = sched.next_step(now)
        assert step is not None
        now += step.duration_ms
        sched.complete(step, now)
        if step.kind == "decode":
            decodes.append(step.grants)
    return decodes


# -- the environment, as srt/environ.py reads it ---------------------------------------------------
def test_the_length_is_off_unless_above_zero_and_a_bad_float_warns_and_is_off(caplog):
    assert length_from_environ({}) is None
    assert length_from_environ({LENGTH_ENV: "-1"}) is None  # environ.py's default: off
    assert length_from_environ({LENGTH_ENV: "0"}) is None  # spec_utils: on only when > 0
    assert length_from_environ({LENGTH_ENV: "3"}) == 3.0 and length_from_environ({LENGTH_ENV: "2.5"}) == 2.5
    with caplog.at_level(logging.WARNING, logger="specguard.emulator"):
        assert length_from_environ({LENGTH_ENV: "three"}) is None
    assert 'Invalid value for SGLANG_SIMULATE_ACC_LEN: "three" is not a valid float value, using default "-1.0"' in caplog.text


def test_method_and_token_mode_default_to_match_expected_and_fixed():
    assert from_environ({}, 3.0, "EAGLE3", 1) == SimulatedAcceptance(3.0, AccMethod.MATCH_EXPECTED, TokenMode.FIXED)
    env = {METHOD_ENV: "multinomial", TOKEN_MODE_ENV: "real-draft-token"}
    assert from_environ(env, 2.0, "NEXTN", 1) == SimulatedAcceptance(2.0, AccMethod.MULTINOMIAL,
                                                                       TokenMode.REAL_DRAFT_TOKEN)
    assert from_environ({TOKEN_MODE_ENV: "real-draft-token"}, 2.0, "DFLASH", 1).token_mode is TokenMode.REAL_DRAFT_TOKEN


@pytest.mark.parametrize("env, algorithm, topk, message", [
    ({METHOD_ENV: "uniform"}, "EAGLE3", 1, "raises 'Invalid simulate_acc_method: uniform' at its first verify step"),
    ({TOKEN_MODE_ENV: "random"}, "EAGLE3", 1,
     "Invalid SGLANG_SIMULATE_ACC_TOKEN_MODE 'random'; expected 'fixed' or 'real-draft-token'."),
    ({TOKEN_MODE_ENV: "real-draft-token"}, "EAGLE", 4,
     "SGLANG_SIMULATE_ACC_LEN with real draft tokens currently requires speculative_eagle_topk=1."),
    ({TOKEN_MODE_ENV: "real-draft-token"}, "NGRAM", 10, "requires speculative_eagle_topk=1"),  # tree_topk -1
    ({}, "DSPARK", 2, "SGLANG_SIMULATE_ACC_LEN with DSPARK is not modelled by the emulator"),
])
def test_what_sglang_refuses_is_a_launch_error_with_its_message(env, algorithm, topk, message):
    with pytest.raises(ValueError) as err:
        from_environ(env, 3.0, algorithm, topk)
    assert message in str(err.value)


# -- spec_utils.py sample_simulated_acc_len ----------------------------------------------------------
def test_match_expected_draws_an_integer_length_exactly_and_clamps():
    rng = np.random.default_rng(0)
    assert {SimulatedAcceptance(3.0).draw(rng, 4) for _ in range(500)} == {3}
    assert {SimulatedAcceptance(4.0).draw(rng, 4) for _ in range(50)} == {4}  # lower == max_len: no draw
    assert {SimulatedAcceptance(9.0).draw(rng, 4) for _ in range(50)} == {4}
    assert {SimulatedAcceptance(0.3).draw(rng, 4) for _ in range(50)} == {1}
    assert SimulatedAcceptance(9.0).expected_length(4) == 4.0 and SimulatedAcceptance(2.5).expected_length(4) == 2.5


def test_match_expected_draws_the_floor_or_the_ceiling_weighted_by_the_fraction():
    rng = np.random.default_rng(1)
    draws = np.array([SimulatedAcceptance(2.3).draw(rng, 4) for _ in range(20_000)])
    assert set(draws.tolist()) == {2, 3}
    assert draws.mean() == pytest.approx(2.3, abs=4 * np.sqrt(0.3 * 0.7 / len(draws)))


def test_multinomial_rounds_a_clamped_normal():
    rng = np.random.default_rng(2)
    sim = SimulatedAcceptance(2.5, AccMethod.MULTINOMIAL)
    draws = np.array([sim.draw(rng, 4) for _ in range(20_000)])
    assert set(draws.tolist()) == {1, 2, 3, 4}
    # P(k): the normal N(2.5, 1) over [k - 1/2, k + 1/2), the tails to 1 and 4; symmetric about 2.5
    assert sim.expected_length(4) == pytest.approx(2.5, abs=1e-12)
    assert draws.mean() == pytest.approx(2.5, abs=4 * draws.std() / np.sqrt(len(draws)))
    assert (draws == 1).mean() == pytest.approx(0.1587, abs=0.01)  # P(N(2.5, 1) < 1.5) = Phi(-1)
    low = SimulatedAcceptance(1.0, AccMethod.MULTINOMIAL)
    assert low.expected_length(4) > 1.0  # clamping the left tail at 1 lifts the mean
    assert low.expected_length(1) == 1.0


# -- the scheduler: every request of a verify call accepts the drawn length ---------------------------
def test_a_forced_length_of_three_gives_three_tokens_per_verify_up_to_the_prefill_token():
    sched = scheduler(SimulatedAcceptance(3.0), decode_log_interval=5)
    reqs = [GenRequest(16, 1 + 3 * 20, accept_key=i, category="code") for i in range(8)]  # keys and categories ignored
    decodes = run_to_the_end(sched, reqs)
    assert decodes and all(g == [3] * len(g) for g in decodes)
    for req in reqs:
        assert (req.completion_tokens, req.verify_ct) == (61, 20)  # 1 prefill token + 3 x 20
        assert req.correct_hist == [0, 0, 20] and req.accepted_drafts == 40
    stats = sched.stats
    assert stats.spec_accept_length == 3.0 and stats.avg_spec_accept_length == 3.0
    assert stats.spec_accept_rate == pytest.approx(2 / 3)  # 2 correct of 3 proposed drafts per verify


def test_the_last_verify_stops_at_max_new_tokens():
    reqs = [GenRequest(16, 1 + 3 * 5 + 1)]  # one token short of a sixth full verify
    decodes = run_to_the_end(scheduler(SimulatedAcceptance(3.0)), reqs)
    assert decodes == [[3]] * 5 + [[1]] and reqs[0].completion_tokens == 17


def test_a_fractional_length_is_drawn_once_per_batch():
    reqs = [GenRequest(16, 400) for _ in range(12)]
    decodes = run_to_the_end(scheduler(SimulatedAcceptance(2.5)), reqs)[:100]  # before any request nears its end
    assert all(len(set(g)) == 1 for g in decodes)  # the same length for every request of a verify call
    lengths = [g[0] for g in decodes]
    assert set(lengths) == {2, 3} and 0.35 < lengths.count(3) / len(lengths) < 0.65  # 100 draws of p = 0.5


def test_each_attention_dp_rank_draws_its_own_length():
    reqs = [GenRequest(16, 300) for _ in range(8)]
    decodes = run_to_the_end(scheduler(SimulatedAcceptance(2.5), attn_dp_size=2), reqs)
    by_rank = [[g[i] for i in range(len(g)) if reqs[i].rank == rank] for g in decodes[:40] for rank in (0, 1)]
    assert all(len(set(r)) == 1 for r in by_rank)  # requests alternate ranks (round robin)
    assert any(g[0] != g[1] for g in decodes[:40])  # the two ranks' verify calls differ at times


@pytest.mark.parametrize("spec, max_len", [
    (SpecRequest("NGRAM", num_draft_tokens=6, ngram_max_bfs_breadth=2), 6),  # ngram_info max_tree_depth: draft tokens
    (SpecRequest("DFLASH", num_draft_tokens=8, draft_model_path="d"), 8),  # the block size
    (SpecRequest("NEXTN", 2, 1, 3), 3),  # eagle_info: spec_steps + 1
])
def test_max_len_is_the_verify_trees_depth(spec, max_len):
    reqs = [GenRequest(16, 200)]
    decodes = run_to_the_end(scheduler(SimulatedAcceptance(50.0), spec), reqs)
    assert {g[0] for g in decodes[:-1]} == {max_len}


# -- "fixed" token mode: SGLang writes token id 100 at every verify step ------------------------------
def test_fixed_output_is_the_first_token_then_id_100():
    out = OutputText(FIXED_TOKEN)
    assert out.ids(0, 4) == f"{OUTPUT_CYCLE[0][0]},100,100,100" and out.ids(2, 4) == "100,100"
    assert out.text(0, 3) == OUTPUT_CYCLE[0][1] + " <100> <100>"
    assert OutputText().ids(0, 2) == f"{OUTPUT_CYCLE[0][0]},{OUTPUT_CYCLE[1][0]}"  # the normal cycle unchanged


# -- the launch --------------------------------------------------------------------------------------
SPEC_ARGV = ["--speculative-algorithm", "EAGLE3", "--speculative-num-steps", "3", "--speculative-eagle-topk", "1"]


def settings_for(argv: list[str]):
    args = launch_server.build_arg_parser().parse_args(argv)
    return launch_server.build_settings(args, argv)


def test_the_launch_forces_acceptance_from_sglangs_variables(monkeypatch):
    monkeypatch.setenv(LENGTH_ENV, "3")
    monkeypatch.setenv(METHOD_ENV, "multinomial")
    settings = settings_for(SPEC_ARGV)
    assert settings.scheduler_config.simulated == SimulatedAcceptance(3.0, AccMethod.MULTINOMIAL, TokenMode.FIXED)
    info = settings.emulator_info
    assert info["simulated_acceptance"] == {"length": 3.0, "method": "multinomial", "token_mode": "fixed"}
    assert info["expected_accept_length"] == pytest.approx(SimulatedAcceptance(3.0, AccMethod.MULTINOMIAL).expected_length(4))
    # --emulator-accept-length wins: the profile-style draws around that mean, nothing forced
    assert settings_for([*SPEC_ARGV, "--emulator-accept-length", "2"]).scheduler_config.simulated is None
    assert settings_for([]).scheduler_config.simulated is None  # no speculation, no verify step
    monkeypatch.setenv(LENGTH_ENV, "-1")
    assert settings_for(SPEC_ARGV).scheduler_config.simulated is None
    assert "simulated_acceptance" not in settings_for(SPEC_ARGV).emulator_info


def test_a_method_sglang_rejects_is_exit_code_2_with_one_line(monkeypatch, capsys):
    monkeypatch.setenv(LENGTH_ENV, "3")
    monkeypatch.setenv(METHOD_ENV, "uniform")
    assert launch_server.main(["--port", "0", *SPEC_ARGV]) == 2
    err = capsys.readouterr().err
    assert "SGLANG_SIMULATE_ACC_METHOD='uniform'" in err and "Traceback" not in err
