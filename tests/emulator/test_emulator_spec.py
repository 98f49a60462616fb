"""SGLang 0.5.23's launch-time rewrites of speculative settings, as specguard/emulator/spec.py models them.

Fast unit tests on a hand-made profile (no simulation): each checks one rule of
srt/arg_groups/speculative_hook.py (handle_speculative_decoding, _handle_eagle_family, _handle_ngram,
_handle_dflash, _auto_choose_speculative_params) or the acceptance arithmetic, with exact values.
The sweep-level checks live in tests/emulator/test_emulator_model.py.
"""

from __future__ import annotations

import json

import pytest

from specguard.emulator.profile import DraftProfile, EmulatorProfile, PiecewiseLinear
from specguard.emulator.spec import (
    ServingSettings,
    SpecConfig,
    SpecRequest,
    expected_accept_length,
    positional_probs,
    resolve_settings,
    uniform_accept_prob,
)
from specguard.sglang_rules.adaptive import AdaptiveConfigError
from specguard.sglang_rules.speculative import CAP_RESET_WARNING, DEFAULT_CAP, NGRAM_DEFAULT_BFS_BREADTH, auto_params

MS = PiecewiseLinear.from_pairs([[1, 1.0], [64, 2.0]], "draft_ms")
AUTO = ("Auto choose speculative_num_steps, speculative_eagle_topk, speculative_num_draft_tokens = "
        "({}, {}, {}) for {}")
ADJUSTED = "speculative_num_draft_tokens is adjusted to speculative_num_steps + 1 when speculative_eagle_topk == 1"
NGRAM_DEFAULT = ("speculative_num_draft_tokens is set to 12 by default for ngram speculative decoding. You can "
                 "override this by explicitly setting --speculative-num-draft-tokens.")
NGRAM_CHUNKED = "The mixed chunked prefill are disabled because of using ngram speculative decoding."


def profile(drafts=("EAGLE", "EAGLE3", "NGRAM", "DFLASH", "DSPARK", "UNO", "STANDALONE", "FROZEN_KV_MTP"),
            architecture="Qwen3ForCausalLM", cap=512, **extra) -> EmulatorProfile:
    table = {name: DraftProfile(MS, (0.9, 0.8, 0.7)) for name in drafts}
    table.update(extra)
    return EmulatorProfile(name="t", description="", model_path="/m", context_length=4096, max_running_requests=cap,
                           forward_ms=PiecewiseLinear.from_pairs([[1, 3.0]], "f"), attention_ms_per_ktok=0.0,
                           prefill_ms_per_ktok=0.0, drafts=table, architectures=(architecture,))


def params(s: ServingSettings) -> tuple[int, int, int]:
    return s.spec.num_steps, s.spec.topk, s.spec.num_draft_tokens


# -- arithmetic ----------------------------------------------------------------------------------
def test_positional_probs_cut_or_repeat_the_last_value():
    assert positional_probs((0.9, 0.8, 0.7), 2) == (0.9, 0.8)
    assert positional_probs((0.9, 0.8), 4) == (0.9, 0.8, 0.8, 0.8)
    assert positional_probs([0.5], 1) == (0.5,)
    assert positional_probs((0.9,), 0) == () and positional_probs((0.9,), -1) == ()


def test_expected_accept_length_is_one_plus_the_survival_sum():
    assert expected_accept_length((0.5, 0.5), 2) == 1.75
    assert expected_accept_length((0.5,), 3) == 1.875
    assert expected_accept_length((0.9, 0.5), 0) == 1.0
    assert expected_accept_length((1.0,), 4) == 5.0


def test_uniform_accept_prob_bounds_and_bisection():
    assert uniform_accept_prob(1.0, 3) == 0.0 and uniform_accept_prob(0.5, 3) == 0.0
    assert uniform_accept_prob(2.0, 0) == 0.0 and uniform_accept_prob(2.0, -1) == 0.0
    assert uniform_accept_prob(4.0, 3) == 1.0 and uniform_accept_prob(9.0, 3) == 1.0
    assert uniform_accept_prob(1.5, 1) == pytest.approx(0.5, abs=1e-15)
    assert uniform_accept_prob(1.75, 2) == pytest.approx(0.5, abs=1e-15)  # 1 + p + p^2
    assert uniform_accept_prob(3.0, 2) == 1.0  # exactly the longest reachable length
    p = uniform_accept_prob(3.5, 3)
    assert 1 + p + p * p + p ** 3 == pytest.approx(3.5, abs=1e-12)


def test_auto_params_by_algorithm_then_architecture():
    assert auto_params("STANDALONE", "LlamaForCausalLM") == (3, 1, 4)
    for arch in ("LlamaForCausalLM", "Grok1ForCausalLM", "Grok1VForCausalLM"):
        assert auto_params("EAGLE", arch) == (5, 4, 8)
    assert auto_params("EAGLE3", "Qwen3ForCausalLM") == (3, 1, 4)


def test_spec_config_positions_and_passes():
    chain = SpecConfig("NEXTN", 3, 1, 4, (0.5, 0.5, 0.5), MS)
    assert chain.reported_algorithm == "EAGLE" and chain.positions(2) == 2 and chain.draft_passes(2) == 2
    assert chain.expected_accept_length == 1.875
    window = SpecConfig("NGRAM", 1, 10, 6, (0.5,) * 5, MS, chain=False)
    assert window.reported_algorithm == "NGRAM" and window.positions(1) == 5 and window.draft_passes(3) == 1
    assert window.expected_accept_length == pytest.approx(1 + 0.5 + 0.25 + 0.125 + 0.0625 + 0.03125)


def test_serving_settings_ranks_and_rank_cap():
    s = ServingSettings(None, 96, None, dp_size=3, attn_dp_size=1, per_rank_max_running_requests=32)
    assert s.ranks == 3 and s.rank_cap == 32
    assert ServingSettings(None, 96, None, attn_dp_size=2).ranks == 2
    assert ServingSettings(None, 96, None).rank_cap == 96  # no per-rank figure: the whole cap


# -- resolve_settings: no speculation ------------------------------------------------------------
def test_no_speculation_keeps_the_profile_cap_and_the_given_one():
    s = resolve_settings(profile(cap=300))
    assert s.spec is None and s.max_running_requests == 300 and s.reported_max_running_requests is None
    assert s.warnings == () and s.adaptive is None and s.adaptive_requested is False
    assert s.per_rank_max_running_requests == 300
    given = resolve_settings(profile(), SpecRequest(), 64)
    assert given.spec is None and given.max_running_requests == 64 and given.reported_max_running_requests == 64


def test_adaptive_without_an_algorithm_warns_and_stays_plain():
    s = resolve_settings(profile(), SpecRequest(adaptive=True))
    assert s.spec is None and s.adaptive is None and s.adaptive_requested is True
    assert s.warnings == ("speculative_adaptive disabled: speculative_algorithm=None (only EAGLE/EAGLE3 are "
                          "supported). Falling back to static speculative params.",)


def test_dp_settings_are_checked_first():
    with pytest.raises(ValueError) as err:
        resolve_settings(profile(), None, dp_size=0)
    assert str(err.value) == "--dp-size must be positive (got 0)."
    with pytest.raises(ValueError) as err:
        resolve_settings(profile(), None, attn_dp_size=0)
    assert str(err.value) == "--attn-dp-size must be positive (got 0)."
    with pytest.raises(ValueError) as err:
        resolve_settings(profile(), None, dp_size=2, attn_dp_size=3)
    assert str(err.value) == ("--dp-size 2 with --attn-dp-size 3: data-parallel replicas combined with attention "
                              "data parallelism are not supported.")


def test_cap_split_over_attention_dp_ranks_and_whole_per_replica():
    s = resolve_settings(profile(), None, 10, attn_dp_size=4)
    assert (s.per_rank_max_running_requests, s.max_running_requests, s.ranks) == (2, 8, 4)
    s = resolve_settings(profile(), None, 3, attn_dp_size=4)
    assert (s.per_rank_max_running_requests, s.max_running_requests) == (1, 4)  # at least 1 per rank
    s = resolve_settings(profile(cap=100), None, None, dp_size=3)
    assert (s.per_rank_max_running_requests, s.max_running_requests, s.ranks, s.dp_size) == (100, 300, 3, 3)
    s = resolve_settings(profile(cap=100), None, None, attn_dp_size=2)
    assert (s.per_rank_max_running_requests, s.max_running_requests, s.attn_dp_size) == (100, 200, 2)


# -- resolve_settings: EAGLE family ---------------------------------------------------------------
def test_unknown_algorithm_is_refused_by_name():
    with pytest.raises(ValueError) as err:
        resolve_settings(profile(), SpecRequest("medusa"))
    assert str(err.value) == "Unknown speculative algorithm name: medusa"


def test_algorithm_names_are_case_insensitive_and_nextn_runs_as_eagle():
    s = resolve_settings(profile(), SpecRequest("nextn", 2, 1, 3))
    assert s.spec.algorithm == "NEXTN" and s.spec.reported_algorithm == "EAGLE" and params(s) == (2, 1, 3)
    assert s.spec.chain is True and s.spec.accept_prob == (0.9, 0.8)


def test_speculation_defaults_the_cap_to_48_with_sglangs_warning():
    s = resolve_settings(profile(), SpecRequest("EAGLE3", 2, 1, 3))
    assert DEFAULT_CAP == 48
    assert s.max_running_requests == 48 and s.reported_max_running_requests == 48 and s.warnings == (CAP_RESET_WARNING,)
    assert CAP_RESET_WARNING == ("Max running requests is reset to 48 for speculative decoding. You can override this "
                                 "by explicitly setting --max-running-requests.")
    kept = resolve_settings(profile(), SpecRequest("EAGLE3", 2, 1, 3), 200)
    assert kept.max_running_requests == 200 and kept.warnings == ()
    uno = resolve_settings(profile(), SpecRequest("UNO", 2, 2, 5))  # _handle_uno sets no cap
    assert uno.max_running_requests == 512 and uno.reported_max_running_requests is None and uno.warnings == ()


def test_auto_params_when_steps_are_not_given():
    s = resolve_settings(profile(architecture="LlamaForCausalLM"), SpecRequest("EAGLE3"), 64)
    assert params(s) == (5, 4, 8) and s.warnings == (AUTO.format(5, 4, 8, "LlamaForCausalLM"),)
    s = resolve_settings(profile(), SpecRequest("EAGLE3"), 64)
    assert params(s) == (3, 1, 4) and s.warnings == (AUTO.format(3, 1, 4, "Qwen3ForCausalLM"),)
    s = resolve_settings(profile(architecture="LlamaForCausalLM"), SpecRequest("STANDALONE"), 64)
    assert params(s) == (3, 1, 4)


def test_a_profile_may_override_the_auto_params():
    custom = profile(EAGLE3=DraftProfile(MS, (0.9,), default_params=(2, 1, 3)))
    s = resolve_settings(custom, SpecRequest("EAGLE3"), 64)
    assert params(s) == (2, 1, 3) and s.warnings == (AUTO.format(2, 1, 3, "Qwen3ForCausalLM"),)
    assert s.spec.accept_prob == (0.9, 0.9)


def test_topk_one_rewrites_draft_tokens_to_steps_plus_one():
    s = resolve_settings(profile(), SpecRequest("EAGLE3", 2, 1, 8), 64)
    assert params(s) == (2, 1, 3) and s.warnings == (ADJUSTED,)
    s = resolve_settings(profile(), SpecRequest("EAGLE3", 2, 1), 64)
    assert params(s) == (2, 1, 3) and s.warnings == (ADJUSTED,)
    s = resolve_settings(profile(), SpecRequest("EAGLE3", 2, 1, 3), 64)
    assert s.warnings == ()
    s = resolve_settings(profile(), SpecRequest("EAGLE3", 3, 4, 6), 64)  # topk > 1: kept as given
    assert params(s) == (3, 4, 6) and s.warnings == ()
    assert s.spec.accept_prob == (0.9, 0.8, 0.7)  # a tree verify accepts at most num_steps drafts (the depth)


def test_eagle_start_up_errors_exact():
    cases = [
        (SpecRequest("EAGLE3", topk=1), "--speculative-eagle-topk and --speculative-num-draft-tokens need "
                                        "--speculative-num-steps (SGLang 0.5.23 fails an assert in _handle_eagle_family)"),
        (SpecRequest("EAGLE3", num_draft_tokens=4), "--speculative-eagle-topk and --speculative-num-draft-tokens need "
                                                    "--speculative-num-steps (SGLang 0.5.23 fails an assert in "
                                                    "_handle_eagle_family)"),
        (SpecRequest("EAGLE3", 3), "--speculative-num-steps without --speculative-eagle-topk: SGLang 0.5.23 crashes at "
                                   "start-up (TypeError comparing speculative_eagle_topk None > 1 in "
                                   "_handle_eagle_family); pass --speculative-eagle-topk"),
        (SpecRequest("EAGLE3", 3, 4), "--speculative-num-draft-tokens is required when --speculative-eagle-topk > 1"),
        (SpecRequest("EAGLE3", 0, 1, 1), "speculative num_steps, topk and num_draft_tokens must be >= 1"),
        (SpecRequest("EAGLE3", 2, 0, 3), "speculative num_steps, topk and num_draft_tokens must be >= 1"),
        (SpecRequest("EAGLE3", 2, 2, 0), "speculative num_steps, topk and num_draft_tokens must be >= 1"),
    ]
    for req, message in cases:
        with pytest.raises(ValueError) as err:
            resolve_settings(profile(), req, 64)
        assert str(err.value) == message, req
    with pytest.raises(ValueError) as err:
        resolve_settings(profile(), SpecRequest("STANDALONE", 3, 1, 4), 64, attn_dp_size=2)
    assert str(err.value) == "Currently standalone speculative decoding does not support dp attention."
    assert resolve_settings(profile(), SpecRequest("EAGLE3", 1, 2, 1), 64).spec.num_draft_tokens == 1


def test_eagle_under_attention_dp_is_allowed():
    s = resolve_settings(profile(), SpecRequest("EAGLE3", 2, 1, 3), 64, attn_dp_size=2)
    assert params(s) == (2, 1, 3) and s.per_rank_max_running_requests == 32


def test_draft_sections_are_looked_up_with_fallbacks():
    only_eagle = profile(drafts=("EAGLE",), EAGLE=DraftProfile(MS, (0.6,)))
    assert resolve_settings(only_eagle, SpecRequest("NEXTN", 1, 1, 2), 8).spec.accept_prob == (0.6,)
    assert resolve_settings(only_eagle, SpecRequest("EAGLE3", 1, 1, 2), 8).spec.accept_prob == (0.6,)
    only_nextn = profile(drafts=(), NEXTN=DraftProfile(MS, (0.7,)))
    assert resolve_settings(only_nextn, SpecRequest("EAGLE", 1, 1, 2), 8).spec.accept_prob == (0.7,)
    both = profile(drafts=(), NEXTN=DraftProfile(MS, (0.7,)), EAGLE=DraftProfile(MS, (0.6,)))
    assert resolve_settings(both, SpecRequest("NEXTN", 1, 1, 2), 8).spec.accept_prob == (0.7,)
    assert resolve_settings(both, SpecRequest("EAGLE", 1, 1, 2), 8).spec.accept_prob == (0.6,)
    own = profile(drafts=(), EAGLE3=DraftProfile(MS, (0.5,)), EAGLE=DraftProfile(MS, (0.6,)))
    assert resolve_settings(own, SpecRequest("EAGLE3", 1, 1, 2), 8).spec.accept_prob == (0.5,)


def test_a_missing_draft_section_names_the_profile_and_its_sections():
    with pytest.raises(ValueError) as err:
        resolve_settings(profile(drafts=("EAGLE3", "NGRAM")), SpecRequest("STANDALONE", 3, 1, 4), 8)
    assert str(err.value) == ("profile 't' has no [draft.STANDALONE] section (it has: EAGLE3, NGRAM); SGLang accepts "
                              "STANDALONE but the emulator needs the drafter's cost and acceptance to model it")
    with pytest.raises(ValueError) as err:
        resolve_settings(profile(drafts=()), SpecRequest("DFLASH", draft_model_path="/d"), 8)
    assert str(err.value) == ("profile 't' has no [draft.DFLASH] section (it has: none); SGLang accepts DFLASH but the "
                              "emulator needs the drafter's cost and acceptance to model it")
    with pytest.raises(ValueError) as err:
        resolve_settings(profile(drafts=("EAGLE3",)), SpecRequest("NEXTN", 1, 1, 2), 8)
    assert "no [draft.NEXTN] section" in str(err.value)


# -- NGRAM, DFLASH, explicit-only algorithms ------------------------------------------------------
def test_ngram_topk_is_the_bfs_breadth_and_steps_follow_the_draft_tokens():
    assert NGRAM_DEFAULT_BFS_BREADTH == 10
    s = resolve_settings(profile(), SpecRequest("NGRAM"))
    assert params(s) == (1, 10, 12) and s.spec.chain is False
    assert s.warnings == (CAP_RESET_WARNING, NGRAM_DEFAULT, NGRAM_CHUNKED)
    assert s.spec.accept_prob == (0.9, 0.8, 0.7, 0.7, 0.7, 0.7, 0.7, 0.7, 0.7, 0.7, 0.7)  # 11 positions
    s = resolve_settings(profile(), SpecRequest("NGRAM", topk=3, num_draft_tokens=7, ngram_max_bfs_breadth=3), 8)
    assert params(s) == (2, 3, 7) and s.warnings == (NGRAM_CHUNKED,)
    s = resolve_settings(profile(), SpecRequest("NGRAM", num_draft_tokens=4), 8)
    assert params(s) == (0, 10, 4)  # 4 // 10: a zero-step window is allowed (not a chain)
    s = resolve_settings(profile(), SpecRequest("NGRAM", 5, 1, 6), 8)
    assert params(s) == (5, 10, 6) and s.spec.positions(5) == 5


def test_ngram_errors_exact():
    with pytest.raises(ValueError) as err:
        resolve_settings(profile(), SpecRequest("NGRAM", ngram_max_bfs_breadth=0), 8)
    assert str(err.value) == "--speculative-ngram-max-bfs-breadth must be >= 1, got 0"
    with pytest.raises(ValueError) as err:
        resolve_settings(profile(), SpecRequest("NGRAM"), 8, attn_dp_size=2)
    assert str(err.value) == "Currently ngram speculative decoding does not support dp attention."
    with pytest.raises(ValueError) as err:
        resolve_settings(profile(), SpecRequest("NGRAM", 2, ngram_max_bfs_breadth=0), 8)
    assert str(err.value) == "speculative num_steps, topk and num_draft_tokens must be >= 1"


def test_ngram_one_draft_token_has_no_positions():
    s = resolve_settings(profile(), SpecRequest("NGRAM", num_draft_tokens=1), 8)
    assert params(s) == (0, 10, 1) and s.spec.accept_prob == () and s.spec.expected_accept_length == 1.0


def test_dflash_forces_one_step_topk_one_and_a_16_token_block():
    s = resolve_settings(profile(), SpecRequest("DFLASH", draft_model_path="/d"), 8)
    assert params(s) == (1, 1, 16) and s.spec.chain is False and len(s.spec.accept_prob) == 15
    assert s.warnings == ("speculative_num_draft_tokens is not set; defaulting to 16 for DFLASH.",)
    s = resolve_settings(profile(), SpecRequest("DFLASH", 3, 2, 6, draft_model_path="/d"), 8)
    assert params(s) == (1, 1, 6) and s.warnings == (
        "DFLASH only supports speculative_num_steps == 1; overriding speculative_num_steps=3 to 1.",
        "DFLASH only supports speculative_eagle_topk == 1; overriding speculative_eagle_topk=2 to 1.")
    s = resolve_settings(profile(), SpecRequest("DFLASH", 1, 1, 6, draft_model_path="/d"), 8)
    assert s.warnings == ()
    with pytest.raises(ValueError) as err:
        resolve_settings(profile(), SpecRequest("DFLASH"), 8)
    assert str(err.value) == "DFLASH speculative decoding requires setting --speculative-draft-model-path."


def test_explicit_only_algorithms_need_every_parameter():
    s = resolve_settings(profile(), SpecRequest("DSPARK", 2, 2, 5), 8)
    assert params(s) == (2, 2, 5) and s.spec.chain is True and s.warnings == ()
    for req in (SpecRequest("FROZEN_KV_MTP", None, 1, 2), SpecRequest("FROZEN_KV_MTP", 1, None, 2),
                SpecRequest("FROZEN_KV_MTP", 1, 1, None)):
        with pytest.raises(ValueError) as err:
            resolve_settings(profile(), req, 8)
        assert str(err.value) == ("the emulator models FROZEN_KV_MTP only with --speculative-num-steps, "
                                  "--speculative-eagle-topk and --speculative-num-draft-tokens given")


# -- forced accept length, categories, adaptive ---------------------------------------------------
def test_forced_accept_length_is_uniform_and_clamped_with_a_warning():
    s = resolve_settings(profile(), SpecRequest("EAGLE3", 2, 1, 3), 8, accept_length=1.75)
    assert s.spec.accept_prob == pytest.approx((0.5, 0.5), abs=1e-12) and s.warnings == ()
    assert s.spec.accept_prob_by_category == ()
    high = resolve_settings(profile(), SpecRequest("EAGLE3", 2, 1, 3), 8, accept_length=5.0)
    assert high.spec.accept_prob == (1.0, 1.0)
    assert high.warnings == ("accept length 5.0 clamped to 3.0 (2 draft positions)",)
    low = resolve_settings(profile(), SpecRequest("EAGLE3", 2, 1, 3), 8, accept_length=0.5)
    assert low.spec.accept_prob == (0.0, 0.0) and low.warnings == ("accept length 0.5 clamped to 1.0 (2 draft positions)",)
    exact = resolve_settings(profile(), SpecRequest("EAGLE3", 2, 1, 3), 8, accept_length=3.0)
    assert exact.spec.accept_prob == (1.0, 1.0) and exact.warnings == ()
    ngram = resolve_settings(profile(), SpecRequest("NGRAM", num_draft_tokens=4, ngram_max_bfs_breadth=1), 8,
                             accept_length=9.0)
    assert ngram.warnings[-1] == "accept length 9.0 clamped to 4.0 (3 draft positions)"
    assert ngram.spec.accept_prob == (1.0, 1.0, 1.0)


def test_per_category_acceptance_is_sorted_and_padded_to_the_positions():
    cats = profile(EAGLE3=DraftProfile(MS, (0.9,), accept_prob_by_category={"math": (0.8, 0.7), "code": (0.95,)}))
    s = resolve_settings(cats, SpecRequest("EAGLE3", 3, 1, 4), 8)
    assert s.spec.accept_prob == (0.9, 0.9, 0.9)
    assert s.spec.accept_prob_by_category == (("code", (0.95, 0.95, 0.95)), ("math", (0.8, 0.7, 0.7)))
    assert s.spec.draft_ms is MS
    forced = resolve_settings(cats, SpecRequest("EAGLE3", 3, 1, 4), 8, accept_length=2.0)
    assert forced.spec.accept_prob_by_category == ()


def test_adaptive_with_the_default_config_starts_at_the_middle_candidate():
    # DEFAULT_ADAPTIVE_CONFIG's candidates: 0, 1, 3, 5, 7 -> starts at 3 steps, topk 1, 4 draft tokens
    s = resolve_settings(profile(), SpecRequest("EAGLE3", adaptive=True), 8)
    assert params(s) == (3, 1, 4) and s.adaptive is not None and s.adaptive_requested is True
    assert s.adaptive.candidates == [0, 1, 3, 5, 7] and s.adaptive.initial_steps == 3
    assert s.adaptive.config_path is None and sorted(s.adaptive.entries) == [1, 8, 32, 64]
    assert s.spec.accept_prob == (0.9, 0.8, 0.7, 0.7, 0.7, 0.7, 0.7)  # up to the largest candidate
    assert s.warnings == ()  # no auto-params and no topk rewrite: adaptive set them


def test_adaptive_config_file_and_given_steps(tmp_path):
    path = tmp_path / "a.json"
    path.write_text(json.dumps({"1": {"candidate_steps": [0, 2]}, "16": {"candidate_steps": [1]}}))
    s = resolve_settings(profile(), SpecRequest("NEXTN", 2, adaptive=True, adaptive_config=str(path)), 8)
    assert params(s) == (2, 1, 3) and s.adaptive.config_path == str(path) and s.adaptive.candidates == [0, 1, 2]
    s = resolve_settings(profile(), SpecRequest("EAGLE3", 0, 1, adaptive=True, adaptive_config=str(path)), 8)
    assert params(s) == (0, 1, 1)  # zero steps is a valid adaptive start (a plain decode)
    with pytest.raises(AdaptiveConfigError):
        resolve_settings(profile(), SpecRequest("EAGLE3", 3, 1, adaptive=True, adaptive_config=str(path)), 8)


def test_adaptive_unsupported_falls_back_to_static_params_with_a_warning():
    s = resolve_settings(profile(), SpecRequest("EAGLE3", 3, 4, 8, adaptive=True), 8)
    assert params(s) == (3, 4, 8) and s.adaptive is None and s.adaptive_requested is True
    assert s.warnings == ("speculative_adaptive disabled: speculative_eagle_topk=4 (only topk=1 is supported). "
                          "Falling back to static speculative params.",)
    s = resolve_settings(profile(), SpecRequest("NGRAM", adaptive=True), 8)
    assert s.adaptive is None and s.warnings[0] == (
        "speculative_adaptive disabled: speculative_algorithm=NGRAM (only EAGLE/EAGLE3 are supported). "
        "Falling back to static speculative params.")
    s = resolve_settings(profile(), SpecRequest("EAGLE3", 2, 1, 3, adaptive=True), 8, attn_dp_size=2)
    assert s.adaptive is None and s.warnings[0].startswith("speculative_adaptive disabled: attention DP")


# -- the steps of resolve_settings, one SGLang handler each --------------------------------------
from specguard.emulator.spec import (  # noqa: E402
    _acceptance,
    _check_parallelism,
    _check_params,
    _explicit_params,
    _handle_dflash,
    _handle_eagle_family,
    _handle_ngram,
    _init_adaptive,
)


def test_handle_ngram_takes_topk_from_the_bfs_breadth_and_steps_from_the_window():
    warnings: list[str] = []
    assert _handle_ngram((None, 4, None), 10, 1, warnings) == (1, 10, 12)  # the given topk 4 is ignored
    assert warnings == [NGRAM_DEFAULT, NGRAM_CHUNKED]
    warnings.clear()
    assert _handle_ngram((5, None, 8), 3, 1, warnings) == (5, 3, 8) and warnings == [NGRAM_CHUNKED]
    with pytest.raises(ValueError, match="must be >= 1, got 0"):
        _handle_ngram((None, None, 8), 0, 1, [])
    with pytest.raises(ValueError, match="ngram speculative decoding does not support dp attention"):
        _handle_ngram((None, None, None), 10, 2, [])


def test_handle_dflash_forces_one_step_and_topk_one_and_defaults_the_block():
    warnings: list[str] = []
    assert _handle_dflash((3, 2, None), "draft", warnings) == (1, 1, 16)
    assert [w.split(";")[0] for w in warnings] == [
        "DFLASH only supports speculative_num_steps == 1", "DFLASH only supports speculative_eagle_topk == 1",
        "speculative_num_draft_tokens is not set"]
    warnings.clear()
    assert _handle_dflash((1, 1, 8), "draft", warnings) == (1, 1, 8) and warnings == []
    with pytest.raises(ValueError, match="requires setting --speculative-draft-model-path"):
        _handle_dflash((1, 1, 8), None, [])


def test_handle_eagle_family_returns_the_drafter_and_rewrites_topk_one():
    p = profile()
    warnings: list[str] = []
    draft, resolved = _handle_eagle_family(p, "NEXTN", (2, 1, 7), 1, warnings)
    assert draft is p.drafts["EAGLE"]  # NEXTN falls back to EAGLE's section
    assert resolved == (2, 1, 3) and warnings == [ADJUSTED]
    warnings.clear()
    assert _handle_eagle_family(p, "EAGLE3", (None, None, None), 1, warnings)[1] == (3, 1, 4)
    assert warnings == [AUTO.format(3, 1, 4, "Qwen3ForCausalLM")]
    with pytest.raises(ValueError, match="standalone speculative decoding does not support dp attention"):
        _handle_eagle_family(p, "STANDALONE", (3, 1, 4), 2, [])


def test_explicit_params_and_the_emulators_floor():
    assert _explicit_params("UNO", (2, 1, 3)) == (2, 1, 3)
    with pytest.raises(ValueError, match="models DSPARK only with"):
        _explicit_params("DSPARK", (2, None, 3))
    _check_params((0, 1, 1), min_steps=0)
    for bad, floor in (((0, 1, 1), 1), ((1, 0, 2), 0), ((1, 1, 0), 0)):
        with pytest.raises(ValueError, match="must be >= 1"):
            _check_params(bad, floor)


def test_init_adaptive_fixes_the_params_or_falls_back_with_a_warning():
    warnings: list[str] = []
    adaptive, given = _init_adaptive(SpecRequest("EAGLE3", adaptive=True), "EAGLE3", (None, None, 9), False, warnings)
    assert adaptive is not None and given == (3, 1, 4) and warnings == []  # middle of 0, 1, 3, 5, 7; draft = steps + 1
    adaptive, given = _init_adaptive(SpecRequest("EAGLE3", adaptive=True), "EAGLE3", (3, 4, 8), False, warnings)
    assert adaptive is None and given == (3, 4, 8) and warnings[0].startswith("speculative_adaptive disabled: ")
    assert _init_adaptive(SpecRequest("EAGLE3"), "EAGLE3", (3, 4, 8), True, []) == (None, (3, 4, 8))


def test_acceptance_is_the_profiles_or_a_forced_uniform_mean():
    draft = DraftProfile(MS, (0.9, 0.8), accept_prob_by_category={"math": (0.5,), "code": (0.7, 0.6)})
    warnings: list[str] = []
    probs, by_category = _acceptance(draft, 2, 3, None, warnings)
    assert probs == (0.9, 0.8, 0.8) and by_category == (("code", (0.7, 0.6, 0.6)), ("math", (0.5, 0.5, 0.5)))
    probs, by_category = _acceptance(draft, 2, 3, 1.75, warnings)
    assert probs == (pytest.approx(0.5, abs=1e-15),) * 3 and by_category == () and warnings == []
    probs, _ = _acceptance(draft, 2, 2, 9.0, warnings)
    assert probs == (1.0, 1.0) and warnings == ["accept length 9.0 clamped to 3.0 (2 draft positions)"]


def test_parallelism_sizes_sglang_refuses():
    _check_parallelism(2, 1)
    _check_parallelism(1, 4)
    for dp, attn, what in ((0, 1, "--dp-size must be positive"), (1, 0, "--attn-dp-size must be positive"),
                           (2, 2, "replicas combined with attention data parallelism")):
        with pytest.raises(ValueError, match=what):
            _check_parallelism(dp, attn)


# -- launch_server: flags to the request and the parallel layout ---------------------------------
from specguard.emulator import launch_server  # noqa: E402


def test_deprecated_dp_attention_becomes_attention_dp_and_splits_chunked_prefill(caplog):
    parse = launch_server.build_arg_parser().parse_args
    assert launch_server.resolve_parallelism(parse([])) == (1, 1, 8192)
    assert launch_server.resolve_parallelism(parse(["--dp-size", "3"])) == (3, 1, 8192)  # replicas
    args = parse(["--dp-size", "2", "--enable-dp-attention", "--tp-size", "4", "--chunked-prefill-size", "1000"])
    with caplog.at_level("WARNING", logger="specguard.emulator"):
        assert launch_server.resolve_parallelism(args) == (1, 2, 500)
    assert "chunked prefill size is adjusted from 1000 to 500." in caplog.text
    with pytest.raises(ValueError, match="--tp-size 3 is not a multiple of the attention-DP size 2"):
        launch_server.resolve_parallelism(parse(["--attn-dp-size", "2", "--tp-size", "3"]))


def test_forced_accept_length_flag_wins_over_sglangs_environment_variable(monkeypatch):
    monkeypatch.delenv(launch_server.ACCEPT_LENGTH_ENV, raising=False)
    assert launch_server.forced_accept_length(None) is None
    monkeypatch.setenv(launch_server.ACCEPT_LENGTH_ENV, "2.5")
    assert launch_server.forced_accept_length(None) == 2.5 and launch_server.forced_accept_length(3.0) == 3.0
    monkeypatch.setenv(launch_server.ACCEPT_LENGTH_ENV, "")
    assert launch_server.forced_accept_length(None) is None


def test_server_args_groups_are_disjoint_and_keep_sglangs_order(monkeypatch):
    monkeypatch.delenv(launch_server.ACCEPT_LENGTH_ENV, raising=False)
    argv = ["--random-seed", "1", "--speculative-algorithm", "EAGLE3", "--speculative-num-steps", "2",
            "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "3"]
    args = launch_server.build_arg_parser().parse_args(argv)
    assert launch_server.spec_request(args) == SpecRequest("EAGLE3", 2, 1, 3)
    settings = launch_server.build_settings(args, argv)
    serving, prof = settings.scheduler_config.settings, settings.scheduler_config.profile
    groups = [launch_server._model_server_args(args, prof, serving, 8192),
              launch_server._runtime_server_args(args, prof.model_path, 1, 1, 1),
              launch_server._speculative_server_args(args, serving)]
    keys = [k for g in groups for k in g]
    assert len(keys) == len(set(keys))  # a key in two groups would be overwritten silently
    assert list(settings.server_args) == [*keys, "launch_command"]
    assert list(settings.server_args)[:2] == ["model_path", "tokenizer_path"]
    assert settings.server_args["speculative_num_draft_tokens"] == 3
