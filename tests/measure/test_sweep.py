"""One cell against the emulator over HTTP: a server busy with traffic specguard did not send
ends the cell as not measured, in bounded time, with the running and waiting counts."""

from __future__ import annotations

import threading
import time

import httpx
import pytest

from specguard.config import ServerConfig, SweepConfig
from specguard.engines import get_engine
from specguard.measure.sweep import CellLoad, RunControl, foreign_traffic, measure_cell
from specguard.notes import Note, NoteKind
from specguard.report.note_text import note_line
from specguard.server import launch, stop
from specguard.workload import WorkloadSpec, build_workload


@pytest.fixture(scope="module")
def emulator(tmp_path_factory):
    cfg = ServerConfig(name="busy", engine="emulator", model_path="/models/specguard-fast", max_running_requests=8,
                       startup_timeout_s=30, args=["--emulator-profile", "fast", "--context-length", "65536"])
    handle = launch(cfg, get_engine("emulator"), log_dir=tmp_path_factory.mktemp("logs"))
    yield handle
    stop(handle)


def foreign_request(base_url: str, stop_event: threading.Event, started: threading.Event) -> None:
    """Someone else's long streamed request, read slowly until told to stop (bounded)."""
    body = {"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": 60000, "ignore_eos": True, "temperature": 0},
            "stream": True}
    with httpx.Client(base_url=base_url, timeout=30) as client, client.stream("POST", "/generate", json=body) as r:
        deadline = time.monotonic() + 60
        for _ in r.iter_bytes():
            started.set()
            if stop_event.is_set() or time.monotonic() > deadline:
                break


@pytest.mark.e2e
def test_cell_on_a_server_busy_with_foreign_traffic_is_not_measured_in_bounded_time(emulator):
    stop_event, started = threading.Event(), threading.Event()
    thread = threading.Thread(target=foreign_request, args=(emulator.base_url, stop_event, started), daemon=True)
    thread.start()
    try:
        assert started.wait(20), "the foreign request did not start streaming"
        with emulator.control_client() as client:
            busy = foreign_traffic(emulator.engine, client)
        assert busy == Note.of(NoteKind.SERVER_BUSY, running=1, waiting=0)
        assert "1 running and 0 waiting requests that specguard did not send" in note_line(busy)
        workload = build_workload(WorkloadSpec(kind="random-ids", input_len=8, output_len=8), num_prompts=2)
        sweep = SweepConfig(concurrency=[1], warmup=0, repeats=2, requests_per_worker=1, run_timeout_s=30)
        began = time.monotonic()
        cell = measure_cell(emulator, workload, sweep, CellLoad(1), RunControl(flush_timeout_s=1.5))
        assert time.monotonic() - began < 10
    finally:
        stop_event.set()
        thread.join(30)
    assert cell.server_busy and not cell.runs
    assert "server stayed busy with traffic specguard did not send for 1.5s" in cell.error
    assert "1 running and 0 waiting requests" in cell.error
    assert any(n.kind == NoteKind.SERVER_BUSY and "did not send" in note_line(n) for n in cell.notes)


@pytest.mark.e2e
def test_cell_on_an_idle_server_is_measured_after_the_flush(emulator):
    with emulator.control_client() as client:  # the previous test's request is gone within a few seconds
        deadline = time.monotonic() + 20
        while foreign_traffic(emulator.engine, client) and time.monotonic() < deadline:
            time.sleep(0.2)
    workload = build_workload(WorkloadSpec(kind="random-ids", input_len=8, output_len=8), num_prompts=2)
    sweep = SweepConfig(concurrency=[2], warmup=0, repeats=2, requests_per_worker=1, run_timeout_s=30)
    cell = measure_cell(emulator, workload, sweep, CellLoad(2), RunControl(flush_timeout_s=5))
    assert cell.error is None and not cell.server_busy and len(cell.runs) == 2
    assert not any(n.kind == NoteKind.SERVER_BUSY for n in cell.notes)


@pytest.fixture(scope="module")
def eagle3(tmp_path_factory):
    cfg = ServerConfig(name="eagle3", engine="emulator", model_path="/models/specguard-fast",
                       speculative_algorithm="EAGLE3", draft_model_path="/models/specguard-fast-eagle3", num_steps=3,
                       eagle_topk=1, num_draft_tokens=4, max_running_requests=8, startup_timeout_s=30,
                       args=["--emulator-profile", "fast", "--incremental-streaming-output"])
    handle = launch(cfg, get_engine("emulator"), log_dir=tmp_path_factory.mktemp("logs"))
    yield handle
    stop(handle)


@pytest.mark.e2e
@pytest.mark.parametrize("api", ["native", "openai", "chat"])
def test_accept_length_and_acceptance_by_position_on_every_route(eagle3, api):
    # native: spec fields on the final event of an --incremental-streaming-output stream;
    # OpenAI routes: the sglext.spec_tokens_details chunk the sweep asks for (return_spec_tokens_details)
    workload = build_workload(WorkloadSpec(kind="random-ids", input_len=16, output_len=48), num_prompts=4)
    sweep = SweepConfig(concurrency=[2], warmup=0, repeats=2, requests_per_worker=2, run_timeout_s=60, api=api)
    cell = measure_cell(eagle3, workload, sweep, CellLoad(2), RunControl(flush_timeout_s=10))
    assert cell.error is None, cell.error
    for run in cell.runs:
        assert run.accept_length is not None and 1.0 < run.accept_length <= 4.0
        assert run.total_verify_ct > 0 and sum(run.correct_drafts_histogram) == run.total_verify_ct
        assert len(run.acceptance_by_position) <= 3 and all(0 <= p <= 1 for p in run.acceptance_by_position)
        assert run.acceptance_by_position == sorted(run.acceptance_by_position, reverse=True)
        assert run.spec_accept_rate is not None and 0 < run.spec_accept_rate <= 1
        assert run.spec_num_steps is None  # not adaptive


@pytest.mark.e2e
def test_adaptive_server_reports_the_steps_in_use_per_run(tmp_path):
    cfg = ServerConfig(name="adaptive", engine="emulator", model_path="/models/specguard-fast",
                       speculative_algorithm="EAGLE3", draft_model_path="/models/specguard-fast-eagle3",
                       max_running_requests=8, startup_timeout_s=30,
                       args=["--emulator-profile", "fast", "--speculative-adaptive"])
    handle = launch(cfg, get_engine("emulator"), log_dir=tmp_path)
    try:
        assert handle.effective.speculative_adaptive is True
        checks = handle.engine.check_args(cfg, handle.effective, 4)
        assert any(c.note.kind == NoteKind.ADAPTIVE_ON and not c.blocking for c in checks)
        workload = build_workload(WorkloadSpec(kind="random-ids", input_len=16, output_len=64), num_prompts=8)
        sweep = SweepConfig(concurrency=[4], warmup=0, repeats=2, requests_per_worker=4, run_timeout_s=60)
        cell = measure_cell(handle, workload, sweep, CellLoad(4), RunControl(flush_timeout_s=10))
    finally:
        stop(handle)
    assert cell.error is None, cell.error
    # DEFAULT_ADAPTIVE_CONFIG: batch 4 routes to key "1" (candidates 1, 3, 5, 7)
    assert all(r.spec_num_steps in (1, 3, 5, 7) for r in cell.runs), [r.spec_num_steps for r in cell.runs]
