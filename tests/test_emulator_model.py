"""The emulator's performance model: profiles, SGLang's adjustments, scheduler math, calibration."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from specguard.emulator.model import BatchScheduler, GenRequest, SchedulerConfig, simulate_closed_loop
from specguard.emulator.profile import PiecewiseLinear, available_profiles, load_profile
from specguard.emulator.spec import (
    SpecRequest,
    auto_spec_params,
    expected_accept_length,
    resolve_settings,
    uniform_accept_prob,
)

# seed-figures.md table A: concurrency -> (no-MTP tok/s, MTP tok/s)
SEED_A = {1: (108, 121.5), 4: (286, 400.5), 16: (873, 1209), 32: (1359, 1502), 64: (2327, 1571), 128: (2800, 1635)}
MTP_1_STEP = SpecRequest("NEXTN", num_steps=1, topk=1, num_draft_tokens=2)


def make_scheduler(profile_name="fast", spec=None, cap=None, seed=0, jitter=0.0, drift=0.0, attn_dp_size=1, **kw):
    profile = load_profile(profile_name)
    settings = resolve_settings(profile, spec, cap, attn_dp_size=attn_dp_size)
    return BatchScheduler(SchedulerConfig(profile, settings, seed, jitter_pct=jitter, drift_pct=drift, **kw))


# -- profiles ------------------------------------------------------------------------------------
def test_piecewise_linear_interpolates_and_extrapolates():
    table = PiecewiseLinear.from_pairs([[1, 3.0], [5, 7.0], [9, 9.0]], "t")
    assert table(1) == 3.0
    assert table(3) == pytest.approx(5.0)
    assert table(7) == pytest.approx(8.0)
    assert table(13) == pytest.approx(11.0)  # slope of the last segment
    assert table(0) == pytest.approx(2.0)  # slope of the first segment
    assert table(-10) == 0.0  # never negative


def test_shipped_profiles_load():
    assert {"fast", "seed-a", "seed-b"} <= set(available_profiles())
    for name in available_profiles():
        profile = load_profile(name)
        assert profile.forward_ms(1) > 0 and profile.drafts


def test_profile_errors_are_explicit(tmp_path):
    with pytest.raises(ValueError, match="unknown emulator profile"):
        load_profile("no-such-profile")
    bad = tmp_path / "bad.toml"
    bad.write_text('model_path = "m"\nforward_ms = [[1, 3.0]]\nforwrd_ms = 1\n')
    with pytest.raises(ValueError, match="unknown keys"):
        load_profile(bad)
    custom = tmp_path / "custom.toml"
    custom.write_text('model_path = "m"\nforward_ms = [[1, 3.0], [8, 4.0]]\n')
    assert load_profile(custom).name == "custom"


# -- SGLang's silent adjustments -----------------------------------------------------------------
def test_topk_one_forces_draft_tokens_to_steps_plus_one():
    # speculative_hook.py _handle_eagle_family: topk == 1 and draft != steps + 1 -> steps + 1, with a
    # warning, also when draft tokens were not given.
    s = resolve_settings(load_profile("fast"), SpecRequest("EAGLE3", 1, 1, 16))
    assert (s.spec.num_steps, s.spec.topk, s.spec.num_draft_tokens) == (1, 1, 2)
    assert any("adjusted to speculative_num_steps + 1" in w for w in s.warnings)
    s = resolve_settings(load_profile("fast"), SpecRequest("EAGLE3", 2, 1))
    assert s.spec.num_draft_tokens == 3 and any("adjusted" in w for w in s.warnings)


def test_speculation_caps_running_requests_at_48_unless_explicit():
    # _handle_eagle_family / _handle_ngram / _handle_dflash: max_running_requests None -> 48.
    profile = load_profile("fast")
    s = resolve_settings(profile, SpecRequest("EAGLE3"))
    assert s.max_running_requests == 48 and s.reported_max_running_requests == 48
    assert resolve_settings(profile, SpecRequest("EAGLE3"), 256).max_running_requests == 256
    assert resolve_settings(profile, SpecRequest("NGRAM")).max_running_requests == 48
    baseline = resolve_settings(profile, None)
    assert baseline.max_running_requests == profile.max_running_requests
    assert baseline.reported_max_running_requests is None


def test_default_spec_params_follow_the_architecture():
    # speculative_hook.py _auto_choose_speculative_params: STANDALONE (3, 1, 4) first; LlamaForCausalLM
    # and Grok1 (5, 4, 8); everything else (3, 1, 4). model_arch = hf_config.architectures[0].
    fast = load_profile("fast")  # LlamaForCausalLM
    s = resolve_settings(fast, SpecRequest("NEXTN"))
    assert (s.spec.num_steps, s.spec.topk, s.spec.num_draft_tokens) == (5, 4, 8)
    assert s.spec.reported_algorithm == "EAGLE"
    seed_a = load_profile("seed-a")  # Qwen3_5MoeForConditionalGeneration
    s = resolve_settings(seed_a, SpecRequest("NEXTN"))
    assert (s.spec.num_steps, s.spec.topk, s.spec.num_draft_tokens) == (3, 1, 4)
    assert auto_spec_params("STANDALONE", "LlamaForCausalLM") == (3, 1, 4)
    assert auto_spec_params("EAGLE", "Grok1ForCausalLM") == (5, 4, 8)
    assert auto_spec_params("EAGLE3", "DeepseekV3ForCausalLM") == (3, 1, 4)


def test_missing_steps_and_missing_topk_are_start_up_errors():
    profile = load_profile("fast")
    # _handle_eagle_family: `assert topk is None and draft_tokens is None` when steps are unset.
    with pytest.raises(ValueError, match="need --speculative-num-steps"):
        resolve_settings(profile, SpecRequest("EAGLE3", topk=1))
    # steps without topk: `speculative_eagle_topk > 1` compares None with an int (TypeError).
    with pytest.raises(ValueError, match="pass --speculative-eagle-topk"):
        resolve_settings(profile, SpecRequest("EAGLE3", num_steps=3))
    with pytest.raises(ValueError, match="no \\[draft.NGRAM\\]"):
        resolve_settings(load_profile("seed-a"), SpecRequest("NGRAM", 3))
    # spec_info.py SpeculativeAlgorithm.from_string
    with pytest.raises(ValueError, match="Unknown speculative algorithm name: MEDUSA"):
        resolve_settings(profile, SpecRequest("MEDUSA"))


def test_ngram_resolution_follows_handle_ngram():
    # speculative_hook.py _handle_ngram: topk always = --speculative-ngram-max-bfs-breadth (10), draft tokens
    # default 12 (with a warning), steps = draft // topk when unset, no topk == 1 rewrite.
    profile = load_profile("fast")
    s = resolve_settings(profile, SpecRequest("NGRAM"))
    assert (s.spec.num_steps, s.spec.topk, s.spec.num_draft_tokens) == (1, 10, 12)
    assert any("set to 12 by default" in w for w in s.warnings)
    s = resolve_settings(profile, SpecRequest("NGRAM", topk=1, num_draft_tokens=8))  # topk ignored
    assert (s.spec.num_steps, s.spec.topk, s.spec.num_draft_tokens) == (0, 10, 8)
    s = resolve_settings(profile, SpecRequest("NGRAM", num_draft_tokens=8, ngram_max_bfs_breadth=4))
    assert (s.spec.num_steps, s.spec.topk, s.spec.num_draft_tokens) == (2, 4, 8)
    s = resolve_settings(profile, SpecRequest("NGRAM", 5, 1, 6))  # explicit steps kept, no rewrite
    assert (s.spec.num_steps, s.spec.topk, s.spec.num_draft_tokens) == (5, 10, 6)
    with pytest.raises(ValueError, match="does not support dp attention"):
        resolve_settings(profile, SpecRequest("NGRAM"), 64, attn_dp_size=2)
    # a verify can accept up to num_draft_tokens - 1 drafts, from one lookup per step
    sim = simulate_closed_loop(profile, SpecRequest("NGRAM"), 2, 4, 32, 64)
    assert sim.accept_length > 1.5 and sim.max_running_requests == 48


def test_attention_dp_splits_the_cap_per_rank():
    # kv_cache_configurator.py resolve_max_num_reqs: max(1, max_running_requests // attn_dp_size);
    # replicas (dp_size) each keep the whole value; parallel_hook.py refuses both at once.
    profile = load_profile("fast")
    s = resolve_settings(profile, SpecRequest("EAGLE3", 3, 1, 4), attn_dp_size=2)
    assert s.per_rank_max_running_requests == 24 and s.max_running_requests == 48 and s.ranks == 2
    s = resolve_settings(profile, None, 7, attn_dp_size=4)
    assert s.per_rank_max_running_requests == 1 and s.reported_max_running_requests == 7
    s = resolve_settings(profile, None, 100, dp_size=2)
    assert s.per_rank_max_running_requests == 100 and s.max_running_requests == 200
    with pytest.raises(ValueError, match="not supported"):
        resolve_settings(profile, None, dp_size=2, attn_dp_size=2)
    with pytest.raises(ValueError, match="standalone speculative decoding does not support dp attention"):
        resolve_settings(load_profile("fast"), SpecRequest("STANDALONE", 3, 1, 4), attn_dp_size=2)


def test_dp_ranks_admit_round_robin_up_to_their_own_cap():
    sched = make_scheduler(cap=4, attn_dp_size=2)  # 2 per rank
    reqs = [GenRequest(prompt_tokens=10, max_new_tokens=5) for _ in range(6)]
    for r in reqs:
        sched.submit(r, 0.0)
    assert [r.rank for r in reqs] == [0, 1, 0, 1, 0, 1]
    step = sched.next_step(0.0)
    assert step.requests == reqs[:4] and sched.running_per_rank == [2, 2]


def test_accept_length_helpers_round_trip():
    assert expected_accept_length([1.0], 1) == 2.0
    assert expected_accept_length([0.5, 0.5], 2) == pytest.approx(1.75)
    assert expected_accept_length([0.8], 3) == pytest.approx(1 + 0.8 + 0.64 + 0.512)  # last value repeats
    for steps, target in [(1, 1.6), (3, 2.5), (5, 4.2)]:
        p = uniform_accept_prob(target, steps)
        assert expected_accept_length([p], steps) == pytest.approx(target, abs=1e-9)
    assert uniform_accept_prob(9.0, 3) == 1.0 and uniform_accept_prob(0.5, 3) == 0.0
    s = resolve_settings(load_profile("fast"), SpecRequest("EAGLE3"), accept_length=2.2)
    assert s.spec.expected_accept_length == pytest.approx(2.2)


# -- scheduler -----------------------------------------------------------------------------------
def test_cap_admits_fcfs_and_queues_the_rest():
    sched = make_scheduler(cap=4)
    reqs = [GenRequest(prompt_tokens=10, max_new_tokens=3) for _ in range(6)]
    for r in reqs:
        sched.submit(r, 0.0)
    step = sched.next_step(0.0)
    assert step.kind == "prefill" and step.requests == reqs[:4] and step.grants == [1] * 4
    assert list(sched.waiting) == reqs[4:]
    sched.complete(step, step.duration_ms)
    step = sched.next_step(10.0)
    assert step.kind == "decode" and len(step.requests) == 4  # full: no admission
    finished = []
    now = 10.0
    while sched.has_work():
        now += step.duration_ms
        finished += sched.complete(step, now)
        step = sched.next_step(now) if sched.has_work() else None
    assert [r.completion_tokens for r in reqs] == [3] * 6
    assert finished[:4] == reqs[:4] and set(finished[4:]) == set(reqs[4:])
    assert reqs[4].admit_ms >= reqs[0].finish_ms  # queued until a slot freed


def test_decode_step_cost_follows_the_formula():
    profile = load_profile("fast")
    sched = make_scheduler(spec=SpecRequest("EAGLE3", 3, 1, 4), cap=64)
    for _ in range(8):
        sched.submit(GenRequest(prompt_tokens=100, max_new_tokens=50), 0.0)
    sched.complete(sched.next_step(0.0), 1.0)  # prefill: 1 token each
    step = sched.next_step(1.0)
    draft = profile.drafts["EAGLE3"].draft_ms
    expected = profile.forward_ms(8 * 4) + 3 * draft(8) + profile.attention_ms_per_ktok * 8 * 101 / 1000
    assert step.kind == "decode" and step.duration_ms == pytest.approx(expected)
    base = make_scheduler(cap=64, step_scale=2.0, speed_factor=4.0)
    base.submit(GenRequest(prompt_tokens=1000, max_new_tokens=5), 0.0)
    base.complete(base.next_step(0.0), 1.0)
    expected = (profile.forward_ms(1) + profile.attention_ms_per_ktok * 1001 / 1000) * 2.0 / 4.0
    assert base.next_step(1.0).duration_ms == pytest.approx(expected)


def test_acceptance_draws_match_expected_accept_length():
    spec = SpecRequest("EAGLE3", 3, 1, 4)
    sched = make_scheduler(spec=spec, cap=256, seed=3)
    for _ in range(200):
        sched.submit(GenRequest(prompt_tokens=10, max_new_tokens=100_000), 0.0)
    now = 0.0
    grants = []
    for _ in range(60):
        step = sched.next_step(now)
        now += step.duration_ms
        sched.complete(step, now)
        if step.kind == "decode":
            grants += step.grants
    expected = sched.spec.expected_accept_length
    assert expected == pytest.approx(3.03, abs=0.01)
    assert np.mean(grants) == pytest.approx(expected, rel=0.02)
    assert set(grants) == {1, 2, 3, 4}
    # P(exactly 0 accepted) = 1 - p1
    assert np.mean(np.array(grants) == 1) == pytest.approx(1 - 0.88, abs=0.015)


def test_no_speculation_gives_exactly_one_token_and_grants_never_overshoot():
    sched = make_scheduler(spec=SpecRequest("EAGLE3", 3, 1, 4), cap=8, seed=1)
    reqs = [GenRequest(prompt_tokens=5, max_new_tokens=n) for n in (1, 2, 7, 10)]
    for r in reqs:
        sched.submit(r, 0.0)
    now = 0.0
    while sched.has_work():
        step = sched.next_step(now)
        now += step.duration_ms
        sched.complete(step, now)
    assert [r.completion_tokens for r in reqs] == [1, 2, 7, 10]
    result = simulate_closed_loop(load_profile("fast"), None, 2, 4, 16, 20)
    assert result.completion_tokens == 80 and result.accept_length is None
    assert result.decode_steps == 4 // 2 * 19  # one decode step per token after the first


def test_simulation_is_deterministic_for_a_seed():
    profile = load_profile("fast")
    kw = dict(seed=5, jitter_pct=None, drift_pct=None)  # the profile's noise
    a = simulate_closed_loop(profile, SpecRequest("EAGLE3"), 4, 12, 64, 128, **kw)
    b = simulate_closed_loop(profile, SpecRequest("EAGLE3"), 4, 12, 64, 128, **kw)
    c = simulate_closed_loop(profile, SpecRequest("EAGLE3"), 4, 12, 64, 128, seed=6, jitter_pct=None, drift_pct=None)
    assert a == b
    assert c.duration_s != a.duration_s


def test_step_scale_slows_the_model_proportionally():
    profile = load_profile("fast")
    ref = simulate_closed_loop(profile, None, 4, 8, 64, 128)
    slow = simulate_closed_loop(profile, None, 4, 8, 64, 128, step_scale=1.111)
    assert ref.output_throughput / slow.output_throughput == pytest.approx(1.111, rel=1e-6)


# -- calibration ---------------------------------------------------------------------------------
def seed_a_curves():
    profile = load_profile("seed-a")
    rows = {}
    for c in SEED_A:
        n = 2 * c
        base = simulate_closed_loop(profile, None, c, n, 1000, 1000)
        mtp = simulate_closed_loop(profile, MTP_1_STEP, c, n, 1000, 1000)
        rows[c] = (base, mtp)
    return rows


def test_seed_a_reproduces_table_a_within_15_percent():
    rows = seed_a_curves()
    for c, (want_base, want_mtp) in SEED_A.items():
        base, mtp = rows[c]
        assert base.output_throughput == pytest.approx(want_base, rel=0.15), c
        assert mtp.output_throughput == pytest.approx(want_mtp, rel=0.15), c
        assert mtp.accept_length == pytest.approx(2.0, abs=0.01)
        assert mtp.max_running_requests == 48 and base.max_running_requests >= 128
    faster = [c for c, (base, mtp) in rows.items() if mtp.output_throughput > base.output_throughput]
    assert faster == [1, 4, 16, 32]  # crossover between 32 and 64
    assert rows[128][1].output_throughput == pytest.approx(rows[64][1].output_throughput, rel=0.05)  # flat above 48


def test_seed_b_shape():
    profile = load_profile("seed-b")
    base = {c: simulate_closed_loop(profile, None, c, 2 * c, 1000, 500).output_throughput for c in (1, 5, 10, 30)}
    eagle = {
        c: simulate_closed_loop(profile, SpecRequest("EAGLE3"), c, 2 * c, 1000, 500).output_throughput
        for c in (1, 2, 5, 10, 30)
    }
    assert base[1] == pytest.approx(92.6, rel=0.05)
    assert eagle[1] == pytest.approx(96.1, rel=0.05)
    assert 1.0 < eagle[1] / base[1] < 1.1  # a few percent ahead single stream
    assert eagle[1] < eagle[2] < eagle[5]
    assert eagle[30] == pytest.approx(eagle[5], rel=0.15)  # plateau after ~5
    assert base[10] > 2 * eagle[10]


def test_fast_profile_shape():
    profile = load_profile("fast")

    def tput(spec, c):
        return simulate_closed_loop(profile, spec, c, 3 * c, 128, 256, max_running_requests=256).output_throughput

    eagle3 = SpecRequest("EAGLE3", 3, 1, 4)
    mtp = SpecRequest("NEXTN", 2, 1, 3)
    for c in (1, 4):
        assert tput(eagle3, c) >= 1.25 * tput(None, c)
        assert tput(mtp, c) >= 1.25 * tput(None, c)
    for spec in (eagle3, mtp):
        assert tput(spec, 64) < tput(None, 64)
        assert tput(spec, 16) > tput(None, 16)
    assert profile.forward_ms(1) >= 3.0 and profile.forward_ms(64) <= 15.0
    assert resolve_settings(profile, eagle3).spec.expected_accept_length == pytest.approx(3.0, abs=0.1)
    assert 2.3 <= resolve_settings(profile, mtp).spec.expected_accept_length <= 2.6


# -- published figures -----------------------------------------------------------------------------
DOCS = Path(__file__).resolve().parent.parent / "docs" / "emulator.md"


def doc_table(name: str) -> list[list[str]]:
    """The data rows after ``<!-- simulated: NAME -->`` in docs/emulator.md, as lists of cells."""
    lines = DOCS.read_text().splitlines()
    start = lines.index(f"<!-- simulated: {name} -->") + 3  # marker, header, separator
    rows = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip("|").split("|")])
    return rows


def pct(value: float, ref: float, digits: int) -> str:
    return f"{(value / ref - 1) * 100:+.{digits}f} %"


def test_docs_emulator_tables_match_the_simulator():
    """Every simulated figure in docs/emulator.md is what the committed profiles give (issue 17)."""
    fast = load_profile("fast")
    want = []
    for c in (1, 4, 16, 32, 64):
        def tput(spec):
            return simulate_closed_loop(fast, spec, c, 3 * c, 128, 256, max_running_requests=256).output_throughput
        b, e, m = tput(None), tput(SpecRequest("EAGLE3", 3, 1, 4)), tput(SpecRequest("NEXTN", 2, 1, 3))
        want.append([str(c), f"{b:.0f}", f"{e:.0f} ({pct(e, b, 0)})", f"{m:.0f} ({pct(m, b, 0)})"])
    assert doc_table("fast") == want
    capped = simulate_closed_loop(fast, SpecRequest("EAGLE3", 3, 1, 4), 64, 192, 128, 256).output_throughput
    assert f"EAGLE3 at C=64 gives {capped:.0f} tok/s" in DOCS.read_text()

    rows = seed_a_curves()
    want = [
        [str(c), f"{b:g} / {rows[c][0].output_throughput:.1f} ({pct(rows[c][0].output_throughput, b, 1)})",
         f"{m:g} / {rows[c][1].output_throughput:.1f} ({pct(rows[c][1].output_throughput, m, 1)})"]
        for c, (b, m) in SEED_A.items()
    ]
    assert doc_table("seed-a") == want

    seed_b = load_profile("seed-b")
    seed = {1: ("92.6", "96.1")}  # seed-figures.md B, CUDA 13 stack, single stream
    want = []
    for c in (1, 5, 10, 30):
        base = simulate_closed_loop(seed_b, None, c, 2 * c, 1000, 500).output_throughput
        eagle = simulate_closed_loop(seed_b, SpecRequest("EAGLE3"), c, 2 * c, 1000, 500).output_throughput
        sb, se = seed.get(c, ("-", "-"))
        want.append([str(c), f"{sb} / {base:.1f}", f"{se} / {eagle:.1f}"])
    assert doc_table("seed-b") == want
