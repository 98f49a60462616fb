"""The emulator's performance model: profiles, SGLang's adjustments, scheduler math, calibration."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from specguard.emulator.model import BatchScheduler, ClosedLoop, GenRequest, SchedulerConfig, SimLaunch, simulate_closed_loop
from specguard.emulator.profile import PiecewiseLinear, available_profiles, load_profile
from specguard.emulator.spec import SpecRequest, expected_accept_length, resolve_settings, uniform_accept_prob
from specguard.sglang_rules.speculative import auto_params

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
    assert auto_params("STANDALONE", "LlamaForCausalLM") == (3, 1, 4)
    assert auto_params("EAGLE", "Grok1ForCausalLM") == (5, 4, 8)
    assert auto_params("EAGLE3", "DeepseekV3ForCausalLM") == (3, 1, 4)


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
    sim = simulate_closed_loop(profile, SpecRequest("NGRAM"), ClosedLoop(2, 4, 32, 64))
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
    result = simulate_closed_loop(load_profile("fast"), None, ClosedLoop(2, 4, 16, 20))
    assert result.completion_tokens == 80 and result.accept_length is None
    assert result.decode_steps == 4 // 2 * 19  # one decode step per token after the first


def test_simulation_is_deterministic_for_a_seed():
    profile = load_profile("fast")
    noisy = SimLaunch(seed=5, jitter_pct=None, drift_pct=None)  # the profile's noise
    a = simulate_closed_loop(profile, SpecRequest("EAGLE3"), ClosedLoop(4, 12, 64, 128), noisy)
    b = simulate_closed_loop(profile, SpecRequest("EAGLE3"), ClosedLoop(4, 12, 64, 128), noisy)
    c = simulate_closed_loop(profile, SpecRequest("EAGLE3"), ClosedLoop(4, 12, 64, 128), SimLaunch(seed=6, jitter_pct=None, drift_pct=None))
    assert a == b
    assert c.duration_s != a.duration_s


def test_step_scale_slows_the_model_proportionally():
    profile = load_profile("fast")
    ref = simulate_closed_loop(profile, None, ClosedLoop(4, 8, 64, 128))
    slow = simulate_closed_loop(profile, None, ClosedLoop(4, 8, 64, 128), SimLaunch(step_scale=1.111))
    assert ref.output_throughput / slow.output_throughput == pytest.approx(1.111, rel=1e-6)


# -- calibration ---------------------------------------------------------------------------------
def seed_a_curves():
    profile = load_profile("seed-a")
    rows = {}
    for c in SEED_A:
        n = 2 * c
        base = simulate_closed_loop(profile, None, ClosedLoop(c, n, 1000, 1000))
        mtp = simulate_closed_loop(profile, MTP_1_STEP, ClosedLoop(c, n, 1000, 1000))
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
    base = {c: simulate_closed_loop(profile, None, ClosedLoop(c, 2 * c, 1000, 500)).output_throughput for c in (1, 5, 10, 30)}
    eagle = {
        c: simulate_closed_loop(profile, SpecRequest("EAGLE3"), ClosedLoop(c, 2 * c, 1000, 500)).output_throughput
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
        return simulate_closed_loop(profile, spec, ClosedLoop(c, 3 * c, 128, 256), SimLaunch(max_running_requests=256)).output_throughput

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
DOCS = Path(__file__).resolve().parents[2] / "docs" / "emulator.md"


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
        def tput(spec, c=c):
            return simulate_closed_loop(fast, spec, ClosedLoop(c, 3 * c, 128, 256), SimLaunch(max_running_requests=256)).output_throughput
        b, e, m = tput(None), tput(SpecRequest("EAGLE3", 3, 1, 4)), tput(SpecRequest("NEXTN", 2, 1, 3))
        want.append([str(c), f"{b:.0f}", f"{e:.0f} ({pct(e, b, 0)})", f"{m:.0f} ({pct(m, b, 0)})"])
    assert doc_table("fast") == want
    capped = simulate_closed_loop(fast, SpecRequest("EAGLE3", 3, 1, 4), ClosedLoop(64, 192, 128, 256)).output_throughput
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
        base = simulate_closed_loop(seed_b, None, ClosedLoop(c, 2 * c, 1000, 500)).output_throughput
        eagle = simulate_closed_loop(seed_b, SpecRequest("EAGLE3"), ClosedLoop(c, 2 * c, 1000, 500)).output_throughput
        sb, se = seed.get(c, ("-", "-"))
        want.append([str(c), f"{sb} / {base:.1f}", f"{se} / {eagle:.1f}"])
    assert doc_table("seed-b") == want


# -- scheduler unit tests on a hand-made profile: exact step costs and bookkeeping (issue 17) ----------
# Fast (no sweep): tools/mutation.py runs these against model.py's mutants. The profile's costs are
# linear so every figure can be written down: forward_ms(x) = 1 + x, draft_ms(b) = 0.5 b,
# attention 1 ms per 1000 context tokens, prefill 2 ms per 1000 uncached prompt tokens.
import json as _json  # noqa: E402
import math  # noqa: E402

from specguard.emulator.model import (  # noqa: E402
    E2E_BUCKETS_S,
    TTFT_BUCKETS_S,
    LatencyHistogram,
    PrefixCache,
    _mean_one_lognormal,
    category_survival,
    run_closed_loop,
)
from specguard.emulator.profile import DraftProfile, EmulatorProfile  # noqa: E402
from specguard.emulator.spec import SpecConfig  # noqa: E402


def linear_profile(accept=(1.0, 1.0, 1.0), by_category=None, forward=((1, 2.0), (9, 10.0)), prefill=2.0,
                   attention=1.0, cap=64) -> EmulatorProfile:
    draft = DraftProfile(PiecewiseLinear.from_pairs([[1, 0.5], [5, 2.5]], "d"), tuple(accept),
                         accept_prob_by_category=by_category or {})
    return EmulatorProfile(name="lin", description="", model_path="/m", context_length=4096, max_running_requests=cap,
                           forward_ms=PiecewiseLinear.from_pairs([list(p) for p in forward], "f"),
                           attention_ms_per_ktok=attention, prefill_ms_per_ktok=prefill,
                           drafts={"EAGLE3": draft, "NGRAM": draft})


def lin_scheduler(spec=None, cap=None, profile=None, **kw) -> BatchScheduler:
    p = profile or linear_profile()
    settings = resolve_settings(p, spec, cap, attn_dp_size=kw.pop("attn_dp_size", 1), dp_size=kw.pop("dp_size", 1))
    return BatchScheduler(SchedulerConfig(p, settings, kw.pop("seed", 0), jitter_pct=kw.pop("jitter", 0.0),
                                          drift_pct=kw.pop("drift", 0.0), **kw))


def drive(sched: BatchScheduler, now: float = 0.0) -> float:
    while sched.has_work():
        step = sched.next_step(now)
        now += step.duration_ms
        sched.complete(step, now)
    return now


def test_request_remaining_and_finished():
    r = GenRequest(prompt_tokens=5, max_new_tokens=4)
    r.completion_tokens = 3
    assert r.remaining == 1 and not r.finished
    r.finish_ms = 0.0
    assert r.finished


def test_histogram_counts_a_value_in_the_first_bound_at_or_above_it():
    h = LatencyHistogram((0.1, 0.2, 0.4))
    assert h.cumulative == [0, 0, 0]
    h.observe(0.2)
    h.observe(0.05)
    h.observe(1.0)
    assert h.cumulative == [1, 2, 2] and h.count == 3 and h.sum_s == pytest.approx(1.25)
    assert TTFT_BUCKETS_S[:3] == (0.1, 0.2, 0.4) and TTFT_BUCKETS_S[-1] == 400.0 and len(TTFT_BUCKETS_S) == 18
    assert E2E_BUCKETS_S == TTFT_BUCKETS_S + (600.0, 1200.0, 1800.0, 2400.0)


def test_prefix_cache_hits_all_but_the_last_token_and_forgets_the_oldest():
    cache = PrefixCache(max_entries=2)
    assert cache.cached_tokens(None, 100) == 0 and cache.cached_tokens(None, 100) == 0
    assert cache.cached_tokens("a", 100) == 0 and cache.cached_tokens("a", 100) == 99
    assert cache.cached_tokens("z", 0) == 0 and cache.cached_tokens("z", 0) == 0  # never negative
    assert cache.cached_tokens("a", 10) == 9  # a is now the newest
    cache.cached_tokens("b", 10)  # evicts z, the least recently used
    assert cache.cached_tokens("a", 10) == 9 and cache.cached_tokens("z", 10) == 0
    assert cache.cached_tokens("b", 10) == 0  # b went when z came back
    cache.clear()
    assert cache.cached_tokens("a", 10) == 0


def test_current_steps_and_draft_tokens():
    assert lin_scheduler().current_steps is None and lin_scheduler().current_draft_tokens is None
    static = lin_scheduler(SpecRequest("EAGLE3", 2, 1, 3), 8)
    assert (static.current_steps, static.current_draft_tokens) == (2, 3)
    adaptive = lin_scheduler(SpecRequest("EAGLE3", adaptive=True), 8)
    assert (adaptive.current_steps, adaptive.current_draft_tokens) == (3, 4)
    adaptive.adaptive.active_steps = 0
    assert (adaptive.current_steps, adaptive.current_draft_tokens) == (0, 1)


def test_submit_stamps_arrival_and_deals_ranks_only_when_there_are_several():
    one = lin_scheduler(cap=8)
    r = GenRequest(1, 1)
    one.submit(r, 12.5)
    assert r.arrival_ms == 12.5 and r.rank == 0 and one._next_rank == 0 and list(one.waiting) == [r]
    three = lin_scheduler(cap=9, dp_size=3)
    reqs = [GenRequest(1, 1) for _ in range(4)]
    for q in reqs:
        three.submit(q, 0.0)
    assert [q.rank for q in reqs] == [0, 1, 2, 0]


def test_abort_removes_a_request_wherever_it_is():
    s = lin_scheduler(cap=1)
    a, b = GenRequest(10, 5), GenRequest(10, 5)
    s.submit(a, 0.0)
    s.submit(b, 0.0)
    s.complete(s.next_step(0.0), 1.0)  # a runs, b waits (cap 1)
    s.abort(b)
    assert b.aborted and list(s.waiting) == [] and s.running == [a]
    s.abort(a)
    assert s.running == [] and s.running_per_rank == [0] and not s.has_work()
    s.abort(a)  # twice: nothing more
    assert s.running_per_rank == [0]
    done = GenRequest(1, 1)
    done.finish_ms = 3.0
    s.abort(done)
    assert not done.aborted


def test_an_aborted_request_in_a_planned_step_gets_nothing():
    s = lin_scheduler(cap=4)
    a, b = GenRequest(10, 2), GenRequest(10, 2)
    s.submit(a, 0.0)
    s.submit(b, 0.0)
    s.complete(s.next_step(0.0), 1.0)
    step = s.next_step(1.0)
    s.abort(a)
    finished = s.complete(step, 2.0)
    assert finished == [b] and a.completion_tokens == 1 and a.verify_ct == 0 and s.running_per_rank == [0]
    assert s.stats.counters[True].num_requests == 1


def test_admission_up_to_the_cap_then_decode():
    s = lin_scheduler(cap=2)
    assert s.next_step(0.0) is None and not s._can_admit()
    reqs = [GenRequest(1000, 3) for _ in range(3)]
    for r in reqs:
        s.submit(r, 0.0)
    step = s.next_step(5.0)
    assert step.kind == "prefill" and step.requests == reqs[:2] and list(s.waiting) == [reqs[2]]
    # forward_ms(2) = 3, prefill 2 ms/ktok x 2000 uncached tokens = 4
    assert step.duration_ms == 7.0 and step.grants == [1, 1] and reqs[0].admit_ms == 5.0
    s.complete(step, 12.0)
    assert not s._can_admit() and s.next_step(12.0).kind == "decode"


def test_admission_time_is_never_before_arrival():
    s = lin_scheduler(cap=2)
    r = GenRequest(10, 2)
    s.submit(r, 30.0)
    s.next_step(20.0)
    assert r.admit_ms == 30.0


def test_prefill_cost_counts_only_uncached_tokens_and_grants_at_most_the_budget():
    s = lin_scheduler(cap=8)
    first = GenRequest(1000, 1, prompt_key="p")
    s.submit(first, 0.0)
    step = s.next_step(0.0)
    assert step.duration_ms == 2.0 + 2.0 and first.cached_tokens == 0
    s.complete(step, 4.0)
    assert first.finished and first.first_token_ms == 4.0 and first.finish_ms == 4.0
    again, empty = GenRequest(1000, 1, prompt_key="p"), GenRequest(500, 0)
    s.submit(again, 4.0)
    s.submit(empty, 4.0)
    step = s.next_step(4.0)
    # forward_ms(2) = 3; uncached: 1 of the cached prompt + 500 = 501 -> 1.002 ms
    assert again.cached_tokens == 999 and step.duration_ms == pytest.approx(3.0 + 1.002, abs=1e-12)
    assert step.grants == [1, 0]


def test_plain_decode_cost_and_one_token_each():
    s = lin_scheduler(cap=8)
    reqs = [GenRequest(999, 10) for _ in range(3)]
    for r in reqs:
        s.submit(r, 0.0)
    s.complete(s.next_step(0.0), 1.0)
    step = s.next_step(1.0)
    # forward_ms(3) = 4; attention 1 ms/ktok x 3 x (999 + 1) = 3
    assert step.kind == "decode" and step.duration_ms == 7.0 and step.grants == [1, 1, 1]
    assert (step.steps, step.draft_tokens) == (0, 1)


def test_speculative_decode_cost_and_full_acceptance():
    s = lin_scheduler(SpecRequest("EAGLE3", 2, 1, 3), 8)
    reqs = [GenRequest(999, 10), GenRequest(999, 2)]
    for r in reqs:
        s.submit(r, 0.0)
    s.complete(s.next_step(0.0), 1.0)
    step = s.next_step(1.0)
    # forward_ms(2 x 3) = 7; 2 draft passes x draft_ms(2) = 2 x 1.0; attention 2 x 1000 / 1000 = 2
    assert step.duration_ms == 11.0 and (step.steps, step.draft_tokens) == (2, 3)
    assert step.grants == [3, 1]  # every draft accepted (p = 1), capped by what is left
    s.complete(step, 12.0)
    assert reqs[0].completion_tokens == 4 and reqs[0].verify_ct == 1 and reqs[0].accepted_drafts == 2
    assert reqs[0].correct_hist == [0, 0, 1] and reqs[1].correct_hist == [1] and reqs[1].finished


def test_no_acceptance_gives_one_token_per_verify():
    s = lin_scheduler(SpecRequest("EAGLE3", 3, 1, 4), 8, profile=linear_profile(accept=(0.0,)))
    r = GenRequest(10, 4)
    s.submit(r, 0.0)
    drive(s)
    assert r.completion_tokens == 4 and r.verify_ct == 3 and r.correct_hist == [3] and r.accepted_drafts == 0


def test_ngram_window_costs_one_draft_pass():
    s = lin_scheduler(SpecRequest("NGRAM", num_draft_tokens=3, ngram_max_bfs_breadth=3), 8)
    r = GenRequest(999, 10)
    s.submit(r, 0.0)
    s.complete(s.next_step(0.0), 1.0)
    step = s.next_step(1.0)
    # steps = 3 // 3 = 1: forward_ms(1 x 3) = 4, one pass of draft_ms(1) = 0.5, attention 1.0
    assert step.duration_ms == 5.5 and step.grants == [3]


def test_adaptive_zero_steps_is_a_plain_decode(tmp_path):
    path = tmp_path / "a.json"
    path.write_text(_json.dumps({"1": {"candidate_steps": [0]}, "4": {"candidate_steps": [2]}}))
    s = lin_scheduler(SpecRequest("EAGLE3", 0, 1, adaptive=True, adaptive_config=str(path)), 8)
    r = GenRequest(999, 5)
    s.submit(r, 0.0)
    s.complete(s.next_step(0.0), 1.0)
    step = s.next_step(1.0)
    # forward_ms(1 x 1) = 2, no draft pass, attention 1.0
    assert (step.steps, step.draft_tokens, step.grants, step.duration_ms) == (0, 1, [1], 3.0)
    s.complete(step, 4.0)
    assert r.correct_hist == [1]


def test_adaptive_routes_the_batch_to_its_slot(tmp_path):
    path = tmp_path / "a.json"
    path.write_text(_json.dumps({"1": {"candidate_steps": [0]}, "2": {"candidate_steps": [2]}}))
    s = lin_scheduler(SpecRequest("EAGLE3", 0, 1, adaptive=True, adaptive_config=str(path)), 8)
    for _ in range(2):
        s.submit(GenRequest(999, 9), 0.0)
    s.complete(s.next_step(0.0), 1.0)
    step = s.next_step(1.0)
    # forward_ms(2 x 3) = 7, 2 passes x draft_ms(2) = 2, attention 2
    assert (step.steps, step.draft_tokens, step.grants, step.duration_ms) == (2, 3, [3, 3], 11.0)
    assert (s.current_steps, s.current_draft_tokens) == (2, 3)


def test_replicas_cost_the_largest_replica_batch_and_split_attention():
    s = lin_scheduler(cap=4, dp_size=2)
    for _ in range(3):
        s.submit(GenRequest(999, 5), 0.0)
    s.complete(s.next_step(0.0), 1.0)
    assert s.running_per_rank == [2, 1]
    step = s.next_step(1.0)
    # forward_ms(2) = 3 (the larger replica), attention 3 x 1000 / 1000 / 2 replicas = 1.5
    assert step.duration_ms == 4.5


def test_attention_dp_ranks_cost_as_one_batch():
    s = lin_scheduler(cap=4, attn_dp_size=2)
    for _ in range(3):
        s.submit(GenRequest(999, 5), 0.0)
    s.complete(s.next_step(0.0), 1.0)
    step = s.next_step(1.0)
    assert step.duration_ms == 4.0 + 3.0  # forward_ms(3) + attention of all 3


def test_a_full_rank_does_not_block_another_rank():
    s = lin_scheduler(cap=2, attn_dp_size=2)  # one per rank
    reqs = [GenRequest(10, 5) for _ in range(4)]  # ranks 0, 1, 0, 1
    s.submit(reqs[0], 0.0)
    s.complete(s.next_step(0.0), 1.0)  # rank 0 full
    for r in reqs[1:]:
        s.submit(r, 1.0)
    assert s._can_admit()
    step = s.next_step(1.0)
    assert step.requests == [reqs[1]] and list(s.waiting) == [reqs[2], reqs[3]] and s.running_per_rank == [1, 1]
    assert not s._can_admit()


def test_a_full_single_rank_stops_at_the_first_waiting_request():
    s = lin_scheduler(cap=1)
    a, b, c = GenRequest(10, 5), GenRequest(10, 5), GenRequest(10, 5)
    for r in (a, b, c):
        s.submit(r, 0.0)
    s.next_step(0.0)
    assert list(s.waiting) == [b, c] and s.running == [a]
    step = s._prefill_step(1.0)  # planned anyway: admits nobody, keeps the order
    assert step.requests == [] and list(s.waiting) == [b, c]


def test_time_factor_and_jitter_scale_every_step():
    s = lin_scheduler(cap=8, step_scale=3.0, speed_factor=2.0)
    assert s._scaled(10.0) == 15.0 and s.drift == 1.0
    j = lin_scheduler(cap=8, seed=4, jitter=5.0)
    rng = np.random.default_rng([4, 2])
    assert j.drift == 1.0
    want = 10.0 * math.exp(rng.normal(-0.05 * 0.05 / 2.0, 0.05))
    assert j._scaled(10.0) == pytest.approx(want, rel=1e-12)
    d = lin_scheduler(cap=8, seed=4, drift=10.0)
    rng = np.random.default_rng([4, 2])
    assert d.drift == pytest.approx(math.exp(rng.normal(-0.01 / 2.0, 0.1)), rel=1e-12)
    assert d._scaled(10.0) == pytest.approx(10.0 * d.drift, rel=1e-12)


def test_noise_defaults_come_from_the_profile():
    p = linear_profile()
    p = EmulatorProfile(**{**p.__dict__, "jitter_pct": 2.0, "drift_pct": 3.0})
    s = BatchScheduler(SchedulerConfig(p, resolve_settings(p, None, 8), seed=1))
    rng = np.random.default_rng([1, 2])
    assert s.drift == pytest.approx(math.exp(rng.normal(-0.03 * 0.03 / 2, 0.03)), rel=1e-12)
    assert s._jitter_sd == 0.02


def test_mean_one_lognormal():
    assert _mean_one_lognormal(np.random.default_rng(0), 0.0) == 1.0
    assert _mean_one_lognormal(np.random.default_rng(0), -1.0) == 1.0
    rng = np.random.default_rng(7)
    want = math.exp(np.random.default_rng(7).normal(-0.125, 0.5))
    assert _mean_one_lognormal(rng, 0.5) == pytest.approx(want, rel=1e-12)


def test_category_survival_multiplies_and_caps_each_position():
    spec = SpecConfig("EAGLE3", 3, 1, 4, (0.5, 0.5, 0.5), PiecewiseLinear.from_pairs([[1, 1.0]], "d"),
                      accept_prob_by_category=(("code", (0.8, 0.5, 0.5)),))
    out = category_survival(spec, {"chat": 3.0, "code": 0.5})
    assert list(out) == ["chat", "code"]
    assert out["chat"].tolist() == [1.0, 1.0, 1.0]  # 0.5 x 3 capped at 1
    assert out["code"].tolist() == pytest.approx([0.4, 0.1, 0.025])
    assert category_survival(spec, {})["code"].tolist() == pytest.approx([0.8, 0.4, 0.2])
    plain = SpecConfig("EAGLE3", 3, 1, 4, (0.5,), PiecewiseLinear.from_pairs([[1, 1.0]], "d"))
    assert category_survival(plain, {}) == {}


def test_each_request_draws_with_its_categorys_acceptance():
    p = linear_profile(accept=(1.0, 1.0), by_category={"hard": (0.0, 0.0)})
    s = lin_scheduler(SpecRequest("EAGLE3", 2, 1, 3), 8, profile=p)
    easy, hard = GenRequest(10, 9), GenRequest(10, 9, category="hard")
    s.submit(easy, 0.0)
    s.submit(hard, 0.0)
    s.complete(s.next_step(0.0), 1.0)
    assert s.next_step(1.0).grants == [3, 1]
    s2 = lin_scheduler(SpecRequest("EAGLE3", 2, 1, 3), 8, profile=linear_profile(accept=(1.0, 1.0)),
                       category_accept_factor={"slow": 0.0})
    a, b = GenRequest(10, 9, category="slow"), GenRequest(10, 9)
    s2.submit(a, 0.0)
    s2.submit(b, 0.0)
    s2.complete(s2.next_step(0.0), 1.0)
    assert s2.next_step(1.0).grants == [1, 3]


def test_finished_requests_fill_the_counters_of_their_stream_kind():
    s = lin_scheduler(SpecRequest("EAGLE3", 2, 1, 3), 8)
    a = GenRequest(100, 4, streaming=True)
    b = GenRequest(50, 1, streaming=False)
    probe = GenRequest(7, 1, counted=False)
    for r in (a, b, probe):
        s.submit(r, 0.0)
    drive(s)
    st, ns = s.stats.counters[True], s.stats.counters[False]
    assert (st.num_requests, st.prompt_tokens, st.generation_tokens, st.verify_calls, st.spec_requests) == (1, 100, 4, 1, 1)
    assert (ns.num_requests, ns.prompt_tokens, ns.generation_tokens, ns.verify_calls, ns.spec_requests) == (1, 50, 1, 0, 0)
    assert st.ttft.count == 1 and st.ttft.sum_s == pytest.approx(a.first_token_ms / 1000.0)
    assert st.e2e.sum_s == pytest.approx(a.finish_ms / 1000.0) and ns.e2e.count == 1
    assert s.stats.prefill_steps == 1 and s.stats.decode_steps == 1


def test_cached_tokens_are_counted_and_plain_servers_count_no_verifies():
    s = lin_scheduler(cap=8)
    for _ in range(2):
        s.submit(GenRequest(100, 3, prompt_key="k"), 0.0)
        drive(s)
    c = s.stats.counters[True]
    assert (c.num_requests, c.prompt_tokens, c.cached_tokens, c.generation_tokens, c.verify_calls) == (2, 200, 99, 6, 0)


def test_gauges_fold_every_log_interval():
    s = lin_scheduler(SpecRequest("EAGLE3", 2, 1, 3), 8, decode_log_interval=2)
    r = GenRequest(999, 100)
    s.submit(r, 0.0)
    s.complete(s.next_step(0.0), 1.0)
    step = s.next_step(1.0)
    assert s.stats._interval_start_ms == 1.0
    s.complete(step, 11.0)
    assert s.stats.decode_steps == 1 and s.stats.gen_throughput == 0.0 and s.stats.avg_spec_accept_length is None
    step = s.next_step(11.0)
    s.complete(step, 21.0)  # second decode step: fold
    st = s.stats
    assert st.decode_steps == 2 and st.gen_throughput == pytest.approx(6 / 0.020)
    assert st.spec_accept_length == 3.0 and st.spec_accept_rate == 1.0 and st.avg_spec_accept_length == 3.0
    assert (st.spec_num_steps, st.spec_num_draft_tokens) == (2, 3)
    assert st._interval_start_ms == 21.0 and st._interval_tokens == st._interval_verifies == st._interval_correct == 0
    assert s.decode_log_line() == ("Decode batch, #running-req: 1, accept len: 3.00, accept rate: 1.00, "
                                   "gen throughput (token/s): 300.00, #queue-req: 0")


def test_accept_rate_counts_correct_drafts_over_proposed():
    p = linear_profile(accept=(1.0, 0.0))
    s = lin_scheduler(SpecRequest("EAGLE3", 2, 1, 3), 8, profile=p, decode_log_interval=1)
    s.submit(GenRequest(10, 100), 0.0)
    s.complete(s.next_step(0.0), 1.0)
    s.complete(s.next_step(1.0), 3.0)
    assert s.stats.spec_accept_length == 2.0 and s.stats.spec_accept_rate == 0.5
    s.complete(s.next_step(3.0), 3.0)  # a step of no duration: no throughput figure
    assert s.stats.gen_throughput == 0.0
    assert s.stats.avg_spec_accept_length == 2.0 and s.stats._reset_verifies == 2


def test_plain_server_log_line_and_no_spec_gauges():
    s = lin_scheduler(cap=8, decode_log_interval=1)
    s.submit(GenRequest(10, 5), 0.0)
    s.submit(GenRequest(10, 5), 0.0)
    s.complete(s.next_step(0.0), 1.0)
    s.complete(s.next_step(1.0), 5.0)
    assert s.stats.spec_accept_length == 0.0 and s.stats.avg_spec_accept_length is None
    assert s.decode_log_line() == "Decode batch, #running-req: 2, gen throughput (token/s): 500.00, #queue-req: 0"


def test_flush_resets_the_accept_statistics_and_the_cache():
    s = lin_scheduler(SpecRequest("EAGLE3", 2, 1, 3), 8, decode_log_interval=1)
    s.submit(GenRequest(10, 100, prompt_key="k"), 0.0)
    s.complete(s.next_step(0.0), 1.0)
    s.complete(s.next_step(1.0), 2.0)
    s.stats._interval_tokens = 5
    s.reset_accept_stats()
    st = s.stats
    assert st.avg_spec_accept_length is None and st.decode_steps == 0 and st._reset_tokens == st._reset_verifies == 0
    assert st._interval_tokens == st._interval_verifies == st._interval_correct == 0
    assert s.prefix_cache.cached_tokens("k", 10) == 0


def test_closed_loop_on_a_constant_cost_model_exact():
    # every step costs 3 ms: a 3-token request = prefill + 2 decodes = 9 ms; one client, 2 requests
    p = linear_profile(forward=((1, 3.0),), prefill=0.0, attention=0.0)
    sched = BatchScheduler(SchedulerConfig(p, resolve_settings(p, None, 8), jitter_pct=0.0, drift_pct=0.0))
    r = run_closed_loop(sched, 1, 2, 10, 3)
    assert (r.concurrency, r.num_requests, r.max_running_requests, r.completion_tokens) == (1, 2, 8, 6)
    assert r.duration_s == pytest.approx(0.018) and r.output_throughput == pytest.approx(6 / 0.018)
    assert r.accept_length is None and r.mean_ttft_ms == 3.0 and r.mean_itl_ms == 3.0 and r.mean_e2e_ms == 9.0
    assert (r.decode_steps, r.prefill_steps) == (4, 2)


def test_closed_loop_concurrency_above_the_requests_and_one_token_outputs():
    p = linear_profile(forward=((1, 3.0),), prefill=0.0, attention=0.0)
    sched = BatchScheduler(SchedulerConfig(p, resolve_settings(p, None, 8), jitter_pct=0.0, drift_pct=0.0))
    r = run_closed_loop(sched, 5, 2, 10, 1)  # both at once; one token each: no ITL sample
    assert r.completion_tokens == 2 and r.duration_s == 0.003 and r.mean_itl_ms == 0.0 and r.prefill_steps == 1


def test_closed_loop_speculative_accept_length_and_distinct_prompts():
    p = linear_profile(forward=((1, 3.0),), prefill=1000.0, attention=0.0)
    sched = BatchScheduler(SchedulerConfig(p, resolve_settings(p, SpecRequest("EAGLE3", 2, 1, 3), 8),
                                           jitter_pct=0.0, drift_pct=0.0))
    r = run_closed_loop(sched, 1, 2, 10, 7, same_prompt=False)
    # 7 tokens: 1 from the prefill, then verifies of 3, 3: 2 verifies per request
    assert r.completion_tokens == 14 and r.accept_length == 14 / 4
    # distinct prompts: both prefills cost 10 uncached tokens x 1 ms + forward 3 ms; a verify costs
    # forward_ms(3) + 2 x draft_ms(1) = 4 ms
    assert r.mean_ttft_ms == 13.0 and r.duration_s == pytest.approx(2 * (13.0 + 2 * 4.0) / 1000.0)
    same = BatchScheduler(SchedulerConfig(p, resolve_settings(p, SpecRequest("EAGLE3", 2, 1, 3), 8),
                                          jitter_pct=0.0, drift_pct=0.0))
    cached = run_closed_loop(same, 1, 2, 10, 7)
    assert cached.duration_s == pytest.approx((13.0 + 8.0 + 4.0 + 8.0) / 1000.0)  # the second prompt is cached


def test_closed_loop_refuses_an_empty_run():
    for c, n in ((0, 1), (1, 0)):
        with pytest.raises(ValueError) as err:
            run_closed_loop(lin_scheduler(cap=8), c, n, 10, 3)
        assert str(err.value) == "concurrency and num_requests must be >= 1"


def test_simulate_closed_loop_passes_every_setting_through():
    p = linear_profile(forward=((1, 3.0),), prefill=0.0, attention=0.0)
    r = simulate_closed_loop(p, None, ClosedLoop(1, 2, 10, 3), SimLaunch(max_running_requests=5, step_scale=2.0, speed_factor=4.0))
    assert r.max_running_requests == 5 and r.duration_s == pytest.approx(0.009)
    r = simulate_closed_loop(p, SpecRequest("EAGLE3", 2, 1, 3), ClosedLoop(1, 1, 10, 4), SimLaunch(accept_length=1.0))
    assert r.accept_length == 4 / 3 and r.max_running_requests == 48
    r = simulate_closed_loop(p, None, ClosedLoop(4, 4, 10, 2), SimLaunch(max_running_requests=1, dp_size=2))
    assert r.max_running_requests == 2
    r = simulate_closed_loop(p, None, ClosedLoop(4, 4, 10, 2), SimLaunch(max_running_requests=4, attn_dp_size=2))
    assert r.max_running_requests == 4


def test_simulate_closed_loop_uses_cuda_graph_padding_for_adaptive_routing(tmp_path):
    path = tmp_path / "a.json"
    path.write_text(_json.dumps({"1": {"candidate_steps": [0]}, "2": {"candidate_steps": [2]}}))
    p = linear_profile(forward=((1, 3.0),), prefill=0.0, attention=0.0)
    spec = SpecRequest("EAGLE3", 0, 1, adaptive=True, adaptive_config=str(path))
    plain = simulate_closed_loop(p, spec, ClosedLoop(1, 1, 10, 5))
    assert plain.accept_length == 5 / 4  # batch 1 -> slot 1 -> 0 steps: 4 one-token verifies after the prefill
    padded = simulate_closed_loop(p, spec, ClosedLoop(1, 1, 10, 5), SimLaunch(cuda_graph_bs=[2, 4]))
    assert padded.accept_length == 5 / 2  # pads to 2 -> slot 2 -> 2 steps, all accepted: 4 tokens in 2 verifies


def test_closed_loop_throughput_of_sub_millisecond_and_zero_cost_runs():
    fast = linear_profile(forward=((1, 0.5),), prefill=0.0, attention=0.0)
    r = run_closed_loop(BatchScheduler(SchedulerConfig(fast, resolve_settings(fast, None, 8), jitter_pct=0.0,
                                                       drift_pct=0.0)), 1, 1, 10, 1)
    assert r.duration_s == 0.0005 and r.output_throughput == 2000.0
    free = linear_profile(forward=((1, 0.0),), prefill=0.0, attention=0.0)
    r = run_closed_loop(BatchScheduler(SchedulerConfig(free, resolve_settings(free, None, 8), jitter_pct=0.0,
                                                       drift_pct=0.0)), 1, 1, 10, 1)
    assert r.duration_s == 0.0 and r.output_throughput == 0.0


def noisy_linear_profile(**kw) -> EmulatorProfile:
    p = linear_profile(forward=((1, 3.0),), prefill=1000.0, attention=0.0, **kw)
    return EmulatorProfile(**{**p.__dict__, "jitter_pct": 5.0, "drift_pct": 5.0})


def test_simulate_closed_loop_defaults_noise_off_one_speed_seed_zero_same_prompt():
    p = noisy_linear_profile()
    r = simulate_closed_loop(p, None, ClosedLoop(1, 2, 10, 3))
    # noise off, speed 1: prefill 3 + 10 ms of 10 uncached tokens, 2 decodes of 3 ms; the second prompt is cached
    assert r.duration_s == pytest.approx((13.0 + 6.0 + 4.0 + 6.0) / 1000.0, rel=1e-12)
    distinct = simulate_closed_loop(p, None, ClosedLoop(1, 2, 10, 3, same_prompt=False))
    assert distinct.duration_s == pytest.approx(2 * 19.0 / 1000.0, rel=1e-12)
    noisy = simulate_closed_loop(p, None, ClosedLoop(1, 2, 10, 3), SimLaunch(jitter_pct=None, drift_pct=None))
    assert noisy == simulate_closed_loop(p, None, ClosedLoop(1, 2, 10, 3), SimLaunch(seed=0, jitter_pct=None, drift_pct=None))
    assert noisy.duration_s != r.duration_s
    only_drift = simulate_closed_loop(p, None, ClosedLoop(1, 2, 10, 3), SimLaunch(jitter_pct=0.0, drift_pct=None))
    only_jitter = simulate_closed_loop(p, None, ClosedLoop(1, 2, 10, 3), SimLaunch(jitter_pct=None, drift_pct=0.0))
    assert len({only_drift.duration_s, only_jitter.duration_s, r.duration_s}) == 3
    assert simulate_closed_loop(p, None, ClosedLoop(4, 4, 10, 2), SimLaunch(max_running_requests=3, attn_dp_size=2)).max_running_requests == 2


def test_closed_loop_two_token_outputs_have_an_itl_and_one_token_spec_runs_no_accept_length():
    p = linear_profile(forward=((1, 3.0),), prefill=0.0, attention=0.0)
    r = simulate_closed_loop(p, None, ClosedLoop(1, 1, 10, 2))
    assert r.mean_itl_ms == 3.0
    assert simulate_closed_loop(p, SpecRequest("EAGLE3", 2, 1, 3), ClosedLoop(1, 1, 10, 1)).accept_length is None


def test_acceptance_draws_come_from_the_seeded_stream_one_uniform_per_request():
    p = linear_profile(accept=(0.5, 0.5))
    s = lin_scheduler(SpecRequest("EAGLE3", 2, 1, 3), 8, profile=p, seed=11, jitter=3.0)
    for _ in range(5):
        s.submit(GenRequest(10, 1000), 0.0)
    s.complete(s.next_step(0.0), 1.0)
    rng = np.random.default_rng([11, 1])
    want = (rng.random(5)[:, None] < np.array([0.5, 0.25])).sum(axis=1) + 1
    assert s.next_step(1.0).grants == want.tolist()
    assert s.settings is s.config.settings


def test_one_step_speculation_draws_its_one_position():
    s = lin_scheduler(SpecRequest("EAGLE3", 1, 1, 2), 8)
    s.submit(GenRequest(10, 10), 0.0)
    s.complete(s.next_step(0.0), 1.0)
    assert s.next_step(1.0).grants == [2]


def test_counters_and_accepted_drafts_add_up_over_requests_and_steps():
    s = lin_scheduler(SpecRequest("EAGLE3", 2, 1, 3), 8)
    reqs = [GenRequest(100, 7, prompt_key="k") for _ in range(3)]
    for r in reqs:
        s.submit(r, 5.0)
        drive(s, 10.0)
    c = s.stats.counters[True]
    # each: prefill 1 token, then verifies of 3 and 3: 2 verifies, 4 accepted drafts
    assert reqs[0].accepted_drafts == 4 and reqs[0].verify_ct == 2
    assert (c.num_requests, c.cached_tokens, c.verify_calls, c.spec_requests) == (3, 198, 6, 3)
    # arrival 5 ms, the run starts at 10 ms: TTFT and E2E count from the arrival
    assert c.ttft.sum_s == pytest.approx(sum(r.first_token_ms - 5.0 for r in reqs) / 1000.0)
    assert c.e2e.sum_s == pytest.approx(sum(r.finish_ms - 5.0 for r in reqs) / 1000.0)


def test_gen_throughput_of_a_sub_millisecond_interval():
    p = linear_profile(forward=((1, 0.25),), prefill=0.0, attention=0.0)
    s = lin_scheduler(cap=8, profile=p, decode_log_interval=1)
    s.submit(GenRequest(10, 5), 0.0)
    s.complete(s.next_step(0.0), 0.25)
    s.complete(s.next_step(0.25), 0.75)
    assert s.stats.gen_throughput == pytest.approx(1 / 0.0005)


def test_accept_rate_of_one_proposed_draft_and_of_none(tmp_path):
    s = lin_scheduler(SpecRequest("EAGLE3", 1, 1, 2), 8, decode_log_interval=1)
    s.submit(GenRequest(10, 10), 0.0)
    s.complete(s.next_step(0.0), 1.0)
    s.complete(s.next_step(1.0), 2.0)
    assert s.stats.spec_accept_rate == 1.0  # 1 correct of 1 proposed
    path = tmp_path / "a.json"
    path.write_text(_json.dumps({"1": {"candidate_steps": [0]}}))
    z = lin_scheduler(SpecRequest("EAGLE3", 0, 1, adaptive=True, adaptive_config=str(path)), 8, decode_log_interval=1)
    z.submit(GenRequest(10, 10), 0.0)
    z.complete(z.next_step(0.0), 1.0)
    z.complete(z.next_step(1.0), 2.0)
    assert z.stats.spec_accept_rate == 0.0 and z.stats.spec_accept_length == 1.0  # nothing proposed at 0 steps


def test_adaptive_steps_follow_the_verified_acceptance(tmp_path):
    # every draft accepted at 1 step: after the 10 warm-up batches and one 5-batch interval the slot moves up to 3
    path = tmp_path / "a.json"
    path.write_text(_json.dumps({"1": {"candidate_steps": [1, 3]}}))
    s = lin_scheduler(SpecRequest("EAGLE3", 1, 1, adaptive=True, adaptive_config=str(path)), 8)
    s.submit(GenRequest(10, 1000), 0.0)
    now = 0.0
    for _ in range(16):
        step = s.next_step(now)
        now += step.duration_ms
        s.complete(step, now)
    assert s.current_steps == 3
    dp = lin_scheduler(SpecRequest("EAGLE3", 1, 1, adaptive=True, adaptive_config=str(path)), 8, dp_size=2)
    dp.submit(GenRequest(10, 5), 0.0)
    drive(dp)  # replicas route the verify by the largest replica batch
    assert dp.stats.decode_steps == 2 and dp.stats.counters[True].generation_tokens == 5  # 1 + 2 + 2


def test_a_full_rank_ahead_in_the_queue_does_not_hold_back_another_rank():
    s = lin_scheduler(cap=2, attn_dp_size=2)  # one running request per rank
    r0, r1, r2, r3 = (GenRequest(10, 50) for _ in range(4))
    s.submit(r0, 0.0)
    s.submit(r1, 0.0)
    s.complete(s.next_step(0.0), 1.0)
    s.submit(r2, 1.0)  # rank 0 (full)
    s.submit(r3, 1.0)  # rank 1
    s.abort(r1)  # frees rank 1
    step = s.next_step(1.0)
    assert step.kind == "prefill" and step.requests == [r3] and list(s.waiting) == [r2]


def test_prefix_cache_default_holds_4096_prompts():
    cache = PrefixCache()
    for k in range(4096):
        cache.cached_tokens(k, 10)
    assert cache.cached_tokens(0, 10) == 9  # still there (and now the newest)
    cache.cached_tokens("new", 10)  # the 4097th evicts the oldest, 1
    assert cache.cached_tokens(1, 10) == 0


def test_prefill_steps_are_counted_one_by_one():
    s = lin_scheduler(cap=1)
    for _ in range(2):
        s.submit(GenRequest(10, 1), 0.0)
    drive(s)
    assert s.stats.prefill_steps == 2 and s.stats.decode_steps == 0


def _two_slot_scheduler(tmp_path, **kw) -> BatchScheduler:
    path = tmp_path / "a.json"
    path.write_text(_json.dumps({"1": {"candidate_steps": [1]}, "2": {"candidate_steps": [1]}}))
    return lin_scheduler(SpecRequest("EAGLE3", 1, 1, adaptive=True, adaptive_config=str(path)), 4, **kw)


def test_a_verify_is_folded_into_the_slot_of_the_batch_that_ran_it(tmp_path):
    s = _two_slot_scheduler(tmp_path)
    short, long_ = GenRequest(10, 2), GenRequest(10, 100)  # short finishes in the first decode step
    s.submit(short, 0.0)
    s.submit(long_, 0.0)
    s.complete(s.next_step(0.0), 1.0)
    s.complete(s.next_step(1.0), 2.0)
    assert short.finished and (s.adaptive.slots[2].batches, s.adaptive.slots[1].batches) == (1, 0)


def test_replicas_fold_a_verify_into_the_slot_of_the_largest_replica_batch(tmp_path):
    s = _two_slot_scheduler(tmp_path, dp_size=2)
    for _ in range(2):
        s.submit(GenRequest(10, 100), 0.0)  # one per replica
    s.complete(s.next_step(0.0), 1.0)
    s.complete(s.next_step(1.0), 2.0)
    assert s.running_per_rank == [1, 1] and (s.adaptive.slots[1].batches, s.adaptive.slots[2].batches) == (1, 0)


# -- complete(): one bookkeeping loop per step kind; the closed loop's driver and its summary -----
from specguard.emulator.model import Step, _closed_loop_result, _ClosedLoopRun, _drive_closed_loop  # noqa: E402
from specguard.emulator.profile import _category_probabilities, _default_params, _probabilities  # noqa: E402


def test_each_step_kind_books_its_own_tokens():
    s = lin_scheduler(SpecRequest("EAGLE3", 2, 1, 3), 8)
    a, b, gone = GenRequest(10, 4), GenRequest(10, 1), GenRequest(10, 4)
    for r in (a, b, gone):
        s.submit(r, 0.0)
    gone.aborted = True
    prefill = Step("prefill", [a, b, gone], [1, 1, 1], 1.0)
    s.running = [a, b, gone]
    s.running_per_rank = [3]
    assert s.complete(prefill, 1.0) == [b]  # b wanted one token: the prefill's
    assert (a.first_token_ms, a.verify_ct, gone.completion_tokens) == (1.0, 0, 0) and s.stats.prefill_steps == 1
    assert s.running_per_rank == [2] and s.running == [a, gone]
    verify = Step("decode", [a, gone], [3, 2], 1.0, 2, 3)
    assert s.complete(verify, 2.0) == [a]
    assert (a.completion_tokens, a.verify_ct, a.accepted_drafts, a.correct_hist) == (4, 1, 2, [0, 0, 1])
    assert a.first_token_ms == 1.0 and gone.correct_hist == [] and s.stats.decode_steps == 1
    assert s.stats._interval_correct == 2  # only the live request's accepted drafts
    plain = lin_scheduler(cap=8)
    c = GenRequest(10, 2)
    plain.submit(c, 0.0)
    plain.complete(plain.next_step(0.0), 1.0)
    assert plain.complete(plain.next_step(1.0), 2.0) == [c]
    assert (c.verify_ct, c.accepted_drafts, c.correct_hist) == (1, 0, [])


def test_closed_loop_driver_refills_each_finished_client_and_the_summary_measures_it():
    p = linear_profile(forward=((1, 3.0),), prefill=0.0, attention=0.0)
    sched = BatchScheduler(SchedulerConfig(p, resolve_settings(p, None, 8), jitter_pct=0.0, drift_pct=0.0))
    run = _drive_closed_loop(sched, 2, 3, 10, 2, same_prompt=False)
    # two clients: both requests finish at 6 ms (prefill + decode); the third runs from 6 to 12 ms
    assert [r.finish_ms for r in run.done] == [6.0, 6.0, 12.0] and [r.arrival_ms for r in run.done] == [0.0, 0.0, 6.0]
    assert (run.end_ms, run.decode_steps, run.prefill_steps) == (12.0, 2, 2)
    assert [r.prompt_key for r in run.done] == [0, 1, 2]
    r = _closed_loop_result(sched, 2, 3, run)
    assert (r.completion_tokens, r.duration_s, r.mean_ttft_ms, r.mean_itl_ms, r.mean_e2e_ms) == (6, 0.012, 3.0, 3.0, 6.0)
    empty = _closed_loop_result(sched, 1, 1, _ClosedLoopRun(run.done[:1], 0.0, 0, 0))
    assert empty.output_throughput == 0.0 and empty.accept_length is None


def test_profile_probability_and_default_param_checks():
    assert _probabilities((0.0, 1.0), "x") == (0.0, 1.0)
    for bad in ((), (1.01,), (0.5, -0.1)):
        with pytest.raises(ValueError, match="^x: need one or more probabilities in"):
            _probabilities(bad, "x")
    assert _category_probabilities({"code": [1, 0.5]}, "d") == {"code": (1.0, 0.5)}
    with pytest.raises(ValueError, match=r"^d.accept_prob_by_category.math: need one or more"):
        _category_probabilities({"math": 0.5}, "d")
    with pytest.raises(ValueError, match="a table of category"):
        _category_probabilities([0.5], "d")
    assert _default_params(["3", 1.0, 4], "d") == (3, 1, 4)
    for bad in ([3, 1], [3, 0, 4], [3, 1, 4, 5]):
        with pytest.raises(ValueError, match=r"^d.default_params: need \[num_steps"):
            _default_params(bad, "d")
