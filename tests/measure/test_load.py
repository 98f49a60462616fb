"""The closed loop and its worker processes: how many processes, exact merges, bounded runs."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time
from array import array

import pytest

from specguard.config import ServerConfig
from specguard.engines import get_engine
from specguard.measure.client import RequestRecord
from specguard.measure.generator import LoadGenerator, run_once
from specguard.measure.load import WORKERS_ENV, LoadSettings, RunResult, client_processes
from specguard.measure.workers import merge, shares
from specguard.server import launch, stop
from specguard.workload import WorkloadSpec, build_workload


def test_client_processes_as_asked_else_by_concurrency_and_cores(monkeypatch):
    monkeypatch.delenv(WORKERS_ENV, raising=False)
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: set(range(8)), raising=False)
    assert client_processes(LoadSettings(concurrency=64, num_requests=64)) == 1
    assert client_processes(LoadSettings(concurrency=1500, num_requests=1500)) == 3
    assert client_processes(LoadSettings(concurrency=64, num_requests=64, workers=3)) == 3
    assert client_processes(LoadSettings(concurrency=2, num_requests=2, workers=3)) == 2  # never idle processes
    monkeypatch.setenv(WORKERS_ENV, "2")
    assert client_processes(LoadSettings(concurrency=64, num_requests=64)) == 2
    monkeypatch.delenv(WORKERS_ENV)
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: {0, 1}, raising=False)
    assert client_processes(LoadSettings(concurrency=5000, num_requests=5000)) == 1  # one core left for the server


@pytest.mark.e2e
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="CLOCK_MONOTONIC is system-wide on Linux")
def test_perf_counter_is_one_clock_across_processes():
    assert "CLOCK_MONOTONIC" in time.get_clock_info("perf_counter").implementation
    before = time.perf_counter()
    child = float(subprocess.run([sys.executable, "-c", "import time; print(repr(time.perf_counter()))"],
                                 capture_output=True, text=True, check=True).stdout)
    assert before < child < time.perf_counter()


def test_shares_and_merge():
    assert shares(10, 3) == [4, 3, 3] and sum(shares(250, 4)) == 250

    def part(indices, start, end, cpu, timed_out=False):
        recs = [RequestRecord(index=i, send_s=start, end_s=end, event_s=array("d", [start]), event_tokens=array("I", [1]))
                for i in indices]
        return RunResult(concurrency=len(indices), requests=recs, start_s=start, end_s=end, timed_out=timed_out,
                         client_cpu_s=cpu, turnaround_s=array("d", [cpu]))

    merged = merge([part([2, 3], 1.0, 5.0, 0.25), part([1, 0], 0.5, 4.0, 0.5, timed_out=True)], concurrency=4)
    assert [r.index for r in merged.requests] == [0, 1, 2, 3]
    assert (merged.start_s, merged.end_s, merged.client_cpu_s, merged.processes) == (0.5, 5.0, 0.75, 2)
    assert merged.timed_out and merged.concurrency == 4 and sorted(merged.turnaround_s) == [0.25, 0.5]


@pytest.fixture(scope="module")
def deterministic_emulator(tmp_path_factory):
    cfg = ServerConfig(name="det", engine="emulator", model_path="/models/specguard-fast", max_running_requests=64,
                       startup_timeout_s=30, args=["--emulator-profile", "fast", "--random-seed", "3",
                                                   "--emulator-jitter-pct", "0", "--emulator-drift-pct", "0"])
    handle = launch(cfg, get_engine("emulator"), log_dir=tmp_path_factory.mktemp("logs"))
    yield handle.base_url
    stop(handle)


@pytest.mark.e2e
@pytest.mark.parametrize("api", ["native", "openai"])
def test_worker_processes_merge_exactly(deterministic_emulator, api):
    workload = build_workload(WorkloadSpec(kind="random-ids", input_len=16, output_len=16), num_prompts=8)
    runs = {}
    for workers in (1, 2):
        settings = LoadSettings(concurrency=4, num_requests=8, api=api, workers=workers, run_timeout_s=60)
        with LoadGenerator(deterministic_emulator, settings) as gen:
            assert gen.processes == workers
            gen.run(workload)
            runs[workers] = gen.run(workload)
    one, two = runs[1], runs[2]
    assert two.processes == 2 and not two.timed_out
    assert [r.index for r in two.requests] == list(range(8)) == [r.index for r in one.requests]
    for a, b in zip(one.requests, two.requests):
        assert a.ok and b.ok, (a.error, b.error)
        assert (a.prompt_tokens, a.completion_tokens, a.http_status) == (b.prompt_tokens, b.completion_tokens, b.http_status)
        assert a.event_tokens == b.event_tokens and len(a.event_s) == len(b.event_s) == 16
        assert b.event_s.typecode == "d" and b.event_tokens.typecode == "I"  # still arrays after the trip
        assert two.start_s <= b.send_s <= b.event_s[0] <= b.event_s[-1] <= b.end_s <= two.end_s
    assert sum(r.completion_tokens for r in two.requests) == 8 * 16
    # the two processes started together, on one clock: their first sends are close in time
    firsts = [min(r.send_s for r in two.requests[:4]), min(r.send_s for r in two.requests[4:])]
    assert abs(firsts[0] - firsts[1]) < 0.5
    assert two.client_cpu_s > 0
    assert len(one.turnaround_s) == len(two.turnaround_s) == 8 - 4  # one per request after each worker's first
    assert all(0 <= t < 1.0 for t in two.turnaround_s)


def test_run_deadline_cancels_and_counts_unfinished_requests():
    listener = socket.create_server(("127.0.0.1", 0))
    accepted = []
    thread = threading.Thread(target=lambda: [accepted.append(listener.accept()) for _ in range(2)], daemon=True)
    thread.start()
    try:
        workload = build_workload(WorkloadSpec(kind="random-ids", input_len=4, output_len=4), num_prompts=2)
        settings = LoadSettings(concurrency=2, num_requests=4, read_timeout_s=30, run_timeout_s=0.3)
        started = time.perf_counter()
        run = run_once(f"http://127.0.0.1:{listener.getsockname()[1]}", workload, settings)
        assert time.perf_counter() - started < 5
    finally:
        listener.close()
        for conn, _ in accepted:
            conn.close()
    assert run.timed_out and len(run.requests) == 4
    assert all(r.error and r.error.startswith("cancelled: run deadline") for r in run.requests)


@pytest.mark.e2e
def test_records_stay_arrays_not_objects_per_event(deterministic_emulator):
    workload = build_workload(WorkloadSpec(kind="random-ids", input_len=8, output_len=64), num_prompts=4)
    run = run_once(deterministic_emulator, workload, LoadSettings(concurrency=4, num_requests=4))
    for r in run.requests:
        assert r.ok, r.error
        assert isinstance(r.event_s, array) and isinstance(r.event_tokens, array)
        assert r.event_s.itemsize + r.event_tokens.itemsize == 12  # bytes per event, nothing else per event
        assert len(r.event_s) == 64



# -- open loop (request_rate) -----------------------------------------------------------------
from specguard.measure.load import arrival_offsets_s, load_model  # noqa: E402


def test_arrival_schedule_is_seeded_with_the_asked_mean_and_burstiness():
    s = LoadSettings(concurrency=8, num_requests=4000, request_rate=8.0, arrival_seed=1)
    a = arrival_offsets_s(s)
    assert a[0] == 0.0 and (a == arrival_offsets_s(s)).all()  # same seed, same schedule
    assert not (a == arrival_offsets_s(LoadSettings(concurrency=8, num_requests=4000, request_rate=8.0, arrival_seed=2))).all()
    gaps = (a[1:] - a[:-1])
    assert abs(gaps.mean() - 1 / 8) < 0.01  # mean gap 1/rate
    assert abs(gaps.std() / gaps.mean() - 1.0) < 0.08  # exponential: CV 1
    bursty = arrival_offsets_s(LoadSettings(concurrency=8, num_requests=4000, request_rate=8.0, burstiness=0.25))
    bgaps = bursty[1:] - bursty[:-1]
    assert abs(bgaps.mean() - 1 / 8) < 0.02 and bgaps.std() / bgaps.mean() > 1.6  # gamma shape k: CV 1/sqrt(k) = 2


def test_load_model_names_the_load_and_bad_rates_are_refused():
    assert load_model(LoadSettings(concurrency=16, num_requests=64)) == "closed-loop c=16"
    assert load_model(LoadSettings(concurrency=64, num_requests=10, request_rate=8)) == "poisson 8 req/s, cap 64"
    assert "burstiness 0.5" in load_model(LoadSettings(concurrency=4, num_requests=4, request_rate=2, burstiness=0.5))
    for bad in (dict(request_rate=0.0), dict(request_rate=float("inf")), dict(request_rate=1.0, burstiness=0.0)):
        with pytest.raises(ValueError):
            LoadSettings(concurrency=4, num_requests=4, **bad)
    LoadSettings(concurrency=64, num_requests=8, request_rate=1.0)  # open loop: fewer requests than the cap is fine


@pytest.mark.e2e
@pytest.mark.parametrize("workers", [1, 2])
def test_open_loop_sends_on_schedule_in_one_or_two_processes(deterministic_emulator, workers):
    workload = build_workload(WorkloadSpec(kind="random-ids", input_len=8, output_len=8), num_prompts=8)
    settings = LoadSettings(concurrency=8, num_requests=24, request_rate=40.0, arrival_seed=5, workers=workers,
                            run_timeout_s=30)
    due = arrival_offsets_s(settings)
    with LoadGenerator(deterministic_emulator, settings) as gen:
        run = gen.run(workload)
    assert run.load_model == "poisson 40 req/s, cap 8" and run.processes == workers and not run.timed_out
    assert [r.index for r in run.requests] == list(range(24)) and all(r.ok for r in run.requests)
    sent = [r.send_s - run.start_s for r in run.requests]
    # each request goes out at its arrival time (not when an earlier one finished), within the loop's lag
    assert all(-0.001 <= s - d < 0.05 for s, d in zip(sent, due)), [round(s - d, 4) for s, d in zip(sent, due)]
    assert sent[-1] > 0.2  # 24 arrivals at 40/s span ~0.6 s: a closed loop would send the first 8 at once


def test_open_loop_run_deadline_is_bounded():
    listener = socket.create_server(("127.0.0.1", 0))
    try:
        workload = build_workload(WorkloadSpec(kind="random-ids", input_len=4, output_len=4), num_prompts=2)
        settings = LoadSettings(concurrency=2, num_requests=50, request_rate=5.0, read_timeout_s=30, run_timeout_s=0.3)
        started = time.perf_counter()
        run = run_once(f"http://127.0.0.1:{listener.getsockname()[1]}", workload, settings)
        assert time.perf_counter() - started < 5
    finally:
        listener.close()
    assert run.timed_out and len(run.requests) == 50
    assert all(r.error and r.error.startswith("cancelled: run deadline") for r in run.requests)
