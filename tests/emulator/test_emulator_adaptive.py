"""The emulator's adaptive speculation against cases read from SGLang 0.5.23's source.

Source: python/sglang/srt/speculative/adaptive_spec_params.py (``_load_adaptive_config``,
``AdaptiveStepSlot``, ``AdaptiveSpeculativeParams``) and srt/arg_groups/speculative_hook.py
(``_maybe_disable_adaptive``, ``_init_adaptive_speculative_params``).
"""

from __future__ import annotations

import json

import pytest

from specguard.emulator.adaptive import AdaptivePolicy, AdaptiveSettings, StepSlot
from specguard.emulator.model import ClosedLoop, SimLaunch, simulate_closed_loop
from specguard.emulator.profile import load_profile
from specguard.emulator.spec import SpecRequest, resolve_settings
from specguard.sglang_rules.adaptive import (
    DEFAULT_ADAPTIVE_CONFIG,
    AdaptiveConfigError,
    check_adaptive_config,
    parse_adaptive_config,
    slot_key,
    unsupported_reason,
)


# -- parsing (_load_adaptive_config, resolve_candidate_steps_from_config) -------------------------
def test_default_config_candidates_and_middle_step():
    # DEFAULT_ADAPTIVE_CONFIG: union [0, 1, 3, 5, 7]; _init_adaptive_speculative_params picks the middle (3).
    assert check_adaptive_config(None) == [0, 1, 3, 5, 7]
    assert sorted(int(k) for k in DEFAULT_ADAPTIVE_CONFIG) == [1, 8, 32, 64]
    s = resolve_settings(load_profile("fast"), SpecRequest("EAGLE3", adaptive=True))
    assert s.adaptive is not None and (s.spec.num_steps, s.spec.topk, s.spec.num_draft_tokens) == (3, 1, 4)


@pytest.mark.parametrize("steps", [[], None, "1,3", [1, -1], [1.0], [1, "3"]])
def test_bad_candidate_steps_are_refused_with_sglangs_message(steps):
    # `candidate_steps must be a list of non-negative ints`
    cfg = {"4": {"candidate_steps": steps}} if steps is not None else {"4": {}}
    with pytest.raises(AdaptiveConfigError, match=r"BS 4: candidate_steps must be a list of non-negative ints, got"):
        parse_adaptive_config(cfg)


def test_config_needs_an_integer_string_key_and_other_keys_are_defaults():
    with pytest.raises(AdaptiveConfigError, match=r"at least one integer-string BS key.*Got keys: \['ema_alpha', '-1'\]"):
        parse_adaptive_config({"ema_alpha": 0.5, "-1": {"candidate_steps": [1]}})
    cfg, entries = parse_adaptive_config({"ema_alpha": 0.5, "2": {"candidate_steps": [3, 1, 1]}})
    assert list(entries) == [2]
    slot = StepSlot(1, {**cfg, **entries[2]})  # top-level knobs apply to every slot ({**cfg, **entry})
    assert slot.ema_alpha == 0.5 and slot.candidates == [1, 3]  # sorted(set(...))
    # Python's bool is an int: SGLang accepts [True]; so do we.
    assert check_adaptive_config({"1": {"candidate_steps": [True, 0]}}) == [0, 1]


def test_config_is_a_file_path_and_steps_must_be_a_candidate(tmp_path):
    path = tmp_path / "adaptive.json"
    path.write_text(json.dumps({"1": {"candidate_steps": [2, 4]}, "16": {"candidate_steps": [0, 1]}}))
    assert check_adaptive_config(path) == [0, 1, 2, 4]
    assert check_adaptive_config(str(path), num_steps=4) == [0, 1, 2, 4]
    with pytest.raises(AdaptiveConfigError, match=r"--speculative-num-steps=3 is not in the adaptive config "
                                                  r"candidate_steps \[0, 1, 2, 4\]. Pass one of those values."):
        check_adaptive_config(path, num_steps=3)
    with pytest.raises(AdaptiveConfigError, match="not valid JSON"):
        (tmp_path / "bad.json").write_text("{1: ")
        check_adaptive_config(tmp_path / "bad.json")
    with pytest.raises(AdaptiveConfigError, match="No such file"):
        check_adaptive_config(tmp_path / "missing.json")  # a JSON string is not a path either


def test_start_up_overrides_draft_tokens_and_topk():
    # _init_adaptive_speculative_params: topk unset -> 1; draft tokens = steps + 1 whatever was given.
    s = resolve_settings(load_profile("fast"), SpecRequest("NEXTN", 5, None, 9, adaptive=True))
    assert (s.spec.num_steps, s.spec.topk, s.spec.num_draft_tokens) == (5, 1, 6)
    assert not any("adjusted" in w for w in s.warnings)
    with pytest.raises(ValueError, match="is not in the adaptive config candidate_steps"):
        resolve_settings(load_profile("fast"), SpecRequest("EAGLE3", 2, 1, 3, adaptive=True))


# -- adaptive_unsupported_reason / _maybe_disable_adaptive --------------------------------------
@pytest.mark.parametrize("request_,kw,reason", [
    (SpecRequest("NGRAM", adaptive=True), {}, "speculative_algorithm=NGRAM (only EAGLE/EAGLE3 are supported)"),
    (SpecRequest("STANDALONE", 3, 1, 4, adaptive=True), {},
     "speculative_algorithm=STANDALONE (only EAGLE/EAGLE3 are supported)"),
    (SpecRequest("EAGLE3", 3, 2, 6, adaptive=True), {}, "speculative_eagle_topk=2 (only topk=1 is supported)"),
    (SpecRequest("EAGLE3", 3, 1, 4, adaptive=True), {"attn_dp_size": 2},
     "attention DP is not supported (adaptive tier decisions are not synchronized across DP ranks)"),
])
def test_unsupported_combinations_turn_adaptive_off_with_a_warning(request_, kw, reason):
    profile = load_profile("fast")
    s = resolve_settings(profile, request_, 64, **kw)
    assert s.adaptive is None and s.adaptive_requested
    assert f"speculative_adaptive disabled: {reason}. Falling back to static speculative params." in s.warnings


def test_nextn_counts_as_eagle_for_adaptive():
    assert unsupported_reason("EAGLE", None, False) is None  # NEXTN is alias-resolved first
    assert resolve_settings(load_profile("fast"), SpecRequest("NEXTN", adaptive=True)).adaptive is not None


# -- AdaptiveStepSlot ------------------------------------------------------------------------------
def test_slot_starts_at_server_steps_or_middle_candidate_with_neutral_ema():
    slot = StepSlot(3, {"candidate_steps": [1, 3, 5, 7]})
    assert slot.steps == 3 and slot.ema == 2.0
    slot = StepSlot(3, {"candidate_steps": [0, 1]})  # 3 not a candidate: middle of [0, 1] is 1
    assert slot.steps == 1 and slot.ema == 0.0
    slot = StepSlot(3, {"candidate_steps": [0]})
    assert slot.steps == 0 and slot.ema == -1.0


def test_slot_updates_only_after_warmup_and_every_interval():
    slot = StepSlot(3, {"candidate_steps": [1, 3, 5, 7]})  # warmup 10, interval 5, alpha 0.2
    changes = [slot.update([4, 4]) for _ in range(15)]
    assert changes[:14] == [False] * 14 and changes[14] is True  # batch 15 = warmup + 1 interval
    assert slot.steps == 5  # ema rose towards 4 > 3 - 0.5 (moves up while above c - 0.5 + up)
    assert slot.update([]) is False  # an empty verify is ignored


def test_slot_walks_down_several_candidates_and_zero_disables_drafting():
    slot = StepSlot(7, {"candidate_steps": [0, 1, 3, 5, 7], "warmup_batches": 0, "update_interval": 1,
                        "ema_alpha": 1.0, "down_hysteresis": 0.0})
    assert slot.update([0, 0]) and slot.steps == 0  # ema 0 <= 0.5: down to the floor in one update
    ema = slot.ema
    slot.update([5])  # at 0 steps the EMA is not fed; the next update probes one candidate up
    assert slot.ema == ema and slot.steps == 1


def test_zero_step_slot_probes_up_from_a_neutral_ema():
    slot = StepSlot(0, {"candidate_steps": [0, 3], "warmup_batches": 0, "update_interval": 1})
    assert slot.ema == -1.0
    assert slot.update([0]) and slot.steps == 3 and slot.ema == 2.0  # ema < 0 -> target - 1


def test_down_hysteresis_and_ceiling():
    # default down_hysteresis -0.25: to drop from 3 to 1 the EMA must reach 1 - 0.5 - 0.25 = 0.25
    slot = StepSlot(3, {"candidate_steps": [1, 3], "warmup_batches": 0, "update_interval": 1, "ema_alpha": 1.0})
    slot.update([0])  # ema 0.0 <= 0.25
    assert slot.steps == 1
    slot = StepSlot(3, {"candidate_steps": [1, 3], "warmup_batches": 0, "update_interval": 1, "ema_alpha": 0.5})
    slot.update([1])  # ema 0.5*2 + 0.5*1 = 1.5: stays (not <= 0.25, not > 2.5)
    assert slot.steps == 3
    # ceiling_coeff: a target not above the old steps is capped at max(1, ceil(ema * coeff))
    slot = StepSlot(7, {"candidate_steps": [1, 3, 5, 7], "warmup_batches": 0, "update_interval": 1,
                        "ema_alpha": 1.0, "ceiling_coeff": 1.0, "down_hysteresis": -10.0})
    slot.update([2])  # no down move (hysteresis), no up move; ceiling ceil(2.0) = 2 -> 1
    assert slot.steps == 1


# -- routing (AdaptiveSpeculativeParams._route) -----------------------------------------------------
def policy(graphs):
    cfg, entries = parse_adaptive_config(DEFAULT_ADAPTIVE_CONFIG)
    return AdaptivePolicy(AdaptiveSettings(None, cfg, entries, [0, 1, 3, 5, 7], 3), graphs)


def test_routing_pads_to_the_cuda_graph_size_then_takes_the_largest_key_not_above():
    p = policy([1, 2, 4, 8, 16, 24, 32, 48])
    # 7 pads to 8 -> key 8 (one bucket before its key); 5 pads to 8 too; 4 stays 4 -> key 1
    assert [slot_key(p.keys, p.graph_bs, b) for b in (1, 4, 5, 7, 8, 25, 33, 48, 60)] == [1, 1, 8, 8, 8, 32, 32, 32, 32]
    nographs = policy(None)
    assert [slot_key(nographs.keys, None, b) for b in (7, 8, 63, 64, 100)] == [1, 8, 32, 64, 64]
    assert slot_key(p.keys, [16], 0) == 8 and slot_key(p.keys, [2], 0) == 1  # below every key: smallest
    assert p.route(7) is p.slots[8] and nographs.route(7) is nographs.slots[1]  # the emulator routes by that rule


def test_high_concurrency_turns_drafting_off_in_the_simulator():
    # Key 64 of the default config has candidates [0]: at 64 running requests no drafts are made,
    # every verify accepts 0 drafts, and the accept length is 1.
    profile = load_profile("fast")
    sim = simulate_closed_loop(profile, SpecRequest("EAGLE3", adaptive=True), ClosedLoop(64, 64, 16, 40), SimLaunch(max_running_requests=64))
    assert sim.accept_length == pytest.approx(40 / 39, rel=0.02)  # the prefill token over 39 verifies
    low = simulate_closed_loop(profile, SpecRequest("EAGLE3", adaptive=True), ClosedLoop(1, 2, 16, 200))
    assert low.accept_length > 2.5
