"""The emulator's acceptance, as deterministic as SGLang's (issue 23): at temperature 0 a request's
acceptance is a function of its content and output position, so identical runs accept
identically (up to a small batch-dependent term); `--emulator-acceptance per-run` gives vLLM's
behaviour, whose per-run acceptance varies; sampling requests draw afresh in either mode."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from specguard.emulator.model import (
    PER_REQUEST,
    PER_RUN,
    BatchScheduler,
    SchedulerConfig,
    acceptance_key,
    keyed_uniforms,
    run_acceptance_sd,
    run_closed_loop,
)
from specguard.emulator.profile import load_profile
from specguard.emulator.server import greedy_key
from specguard.emulator.spec import SpecRequest, resolve_settings


def accept_lengths(mode: str, concurrency: int, runs: int = 4, seed: int = 7) -> list[float]:
    profile = load_profile("fast")
    settings = resolve_settings(profile, SpecRequest("EAGLE3", 3, 1, 4), 128, None)
    sched = BatchScheduler(SchedulerConfig(profile, settings, seed=seed, acceptance=mode))
    out = []
    for _ in range(runs):
        sched.start_run()  # what /flush_cache does between runs
        r = run_closed_loop(sched, concurrency, 4 * concurrency, 128, 64, same_prompt=False)
        assert r.accept_length is not None
        out.append(r.accept_length)
    return out


@pytest.mark.parametrize("concurrency", [1, 4, 16])
def test_greedy_requests_accept_identically_run_after_run_below_the_batch_term(concurrency):
    runs = accept_lengths(PER_REQUEST, concurrency)
    assert len(set(runs)) == 1, runs
    # ... and on another launch (another seed) too: the draws follow the requests, not the launch
    assert accept_lengths(PER_REQUEST, concurrency, seed=99) == runs


def test_large_batches_move_a_little_and_vllm_like_acceptance_moves_per_run():
    assert run_acceptance_sd(PER_REQUEST, 16) == 0.0 < run_acceptance_sd(PER_REQUEST, 32) <= 0.02
    big = accept_lengths(PER_REQUEST, 32, runs=6)
    assert 0.0 < np.std(big) / np.mean(big) < 0.03, big
    small = accept_lengths(PER_RUN, 1, runs=6)
    assert np.std(small) / np.mean(small) > 0.03, small  # vLLM at C=1: 9.85 % between runs
    assert run_acceptance_sd(PER_RUN, 1) == run_acceptance_sd(PER_RUN, 4) > 10 * run_acceptance_sd(PER_RUN, 16)


def test_keyed_draws_are_uniform_and_follow_key_and_position():
    keys = np.arange(200_000, dtype=np.uint64) * np.uint64(2654435761)
    u = keyed_uniforms(keys, np.zeros_like(keys))
    assert 0.0 <= u.min() and u.max() < 1.0 and abs(u.mean() - 0.5) < 0.005 and abs(u.std() - 12 ** -0.5) < 0.005
    one = np.array([acceptance_key("prompt", (1, 2, 3))] * 3, dtype=np.uint64)
    first, again = keyed_uniforms(one, np.arange(3, dtype=np.uint64)), keyed_uniforms(one, np.arange(3, dtype=np.uint64))
    assert list(first) == list(again) and len(set(first)) == 3


@pytest.mark.e2e
def test_the_content_key_is_the_same_in_another_process():
    code = "from specguard.emulator.model import acceptance_key; print(acceptance_key('prompt', 'a text prompt'))"
    other = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert int(other) == acceptance_key("prompt", "a text prompt")  # Python's own hash of a str is not


@pytest.mark.parametrize("temperature,greedy", [(0, True), (0.0, True), ("0", True), (None, False), (0.7, False),
                                                ("hot", False)])
def test_only_temperature_zero_is_greedy(temperature, greedy):
    assert (greedy_key(temperature, (1, 2)) is not None) == greedy


@pytest.mark.e2e
@pytest.mark.parametrize("mode,identical", [(PER_REQUEST, True), (PER_RUN, False)])
def test_identical_runs_over_http_accept_identically_only_per_request(emulator, mode, identical):
    import httpx

    url = emulator("--speculative-algorithm", "EAGLE3", "--speculative-num-steps", "3", "--speculative-eagle-topk", "1",
                   "--speculative-num-draft-tokens", "4", "--emulator-acceptance", mode)
    # 128 tokens and 8 runs: per-run's verify count then spreads over ~20 values (40 runs measured
    # 32-63), so 8 equal counts by chance is ~1e-7; 4 runs of 48 tokens came out equal in CI (~0.4 %).
    body = {"input_ids": list(range(1, 65)), "sampling_params": {"max_new_tokens": 128, "temperature": 0,
                                                                  "ignore_eos": True}}
    verify = []
    for _ in range(8):
        httpx.post(url + "/flush_cache", timeout=30).raise_for_status()
        info = httpx.post(url + "/generate", json=body, timeout=60).json()["meta_info"]
        verify.append(info["spec_verify_ct"])
    assert (len(set(verify)) == 1) == identical, verify
