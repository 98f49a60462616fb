"""Every fault the emulator can inject ends in a clear non-pass verdict, in bounded time.

Servers are real emulator processes on 127.0.0.1, launched by specguard.server exactly as the
plugin launches them; cells are measured by specguard.measure.sweep, the code the gates use.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from specguard.config import ServerConfig, SweepConfig
from specguard.engines import get_engine
from specguard.measure.sweep import CellLoad, measure_cell
from specguard.report.note_text import note_line
from specguard.server import ServerStartError, launch, stop
from specguard.workload import WorkloadSpec, build_workload

pytestmark = pytest.mark.e2e
ENGINE = get_engine("emulator")
WORKLOAD = build_workload(WorkloadSpec(kind="random-ids", input_len=16, output_len=32))
SWEEP = SweepConfig(concurrency=[4], requests_per_worker=3, warmup=0, repeats=2, read_timeout_s=2.0, run_timeout_s=20.0)


def config(*fault_flags: str, spec: bool = False, timeout_s: float = 20.0) -> ServerConfig:
    extra = dict(speculative_algorithm="EAGLE3", draft_model_path="/models/d", num_steps=3, eagle_topk=1,
                 num_draft_tokens=4, reference="b") if spec else {}
    return ServerConfig(name="f", engine="emulator", model_path="/models/specguard-fast", max_running_requests=64,
                        args=["--emulator-profile", "fast", "--random-seed", "7", *fault_flags],
                        startup_timeout_s=timeout_s, **extra)


@pytest.fixture
def measure(tmp_path: Path):
    handles = []

    def run(*fault_flags: str, spec: bool = False):
        handle = launch(config(*fault_flags, spec=spec), ENGINE, log_dir=tmp_path)
        handles.append(handle)
        started = time.monotonic()
        cell = measure_cell(handle, WORKLOAD, SWEEP, CellLoad(4))
        return cell, time.monotonic() - started, handle

    yield run
    for h in handles:
        stop(h)


@pytest.mark.parametrize("flags,expected", [
    (("--emulator-fault-error-rate", "0.3"), "HTTP 500"),
    (("--emulator-fault-error-rate", "0.3", "--emulator-fault-error-status", "503"), "HTTP 503"),
    (("--emulator-fault-cut-rate", "0.3"), "connection error"),
    (("--emulator-fault-stall-rate", "0.3", "--emulator-fault-stall-s", "30"), "timeout: no data"),
    (("--emulator-fault-malformed-rate", "0.3"), "bad stream"),
    (("--emulator-fault-no-count-rate", "0.3"), "completion_tokens"),
])
def test_request_faults_make_the_cell_an_error_quickly(measure, flags, expected):
    cell, elapsed_s, _ = measure(*flags)
    assert cell.error is not None and "failed requests (allowed 0)" in cell.error
    assert expected in cell.error, cell.error
    assert cell.failed_requests > 0
    assert elapsed_s < 20  # read timeout 2 s bounds every stall


def test_wrong_final_count_is_flagged_against_server_counters(measure):
    cell, _, _ = measure("--emulator-fault-bad-count-rate", "0.5", "--enable-metrics")
    flagged = cell.error or " ".join(note_line(n) for n in cell.notes)
    assert "token count" in flagged, (cell.error, cell.notes)


def test_crash_mid_sweep_reports_exit_and_log_tail(measure):
    cell, elapsed_s, handle = measure("--emulator-fault-crash-after-requests", "5")
    assert cell.error is not None and "server exited" in cell.error and "crashing after 5 requests" in cell.error
    assert not handle.alive() and elapsed_s < 20


def test_old_server_info_still_works(measure):
    cell, _, handle = measure("--emulator-fault-old-server-info", spec=True)
    assert cell.error is None
    assert handle.effective.num_draft_tokens is None and handle.effective.speculative_algorithm == "EAGLE3"


@pytest.mark.parametrize("flags,timeout_s,expected", [
    (("--emulator-fault-never-ready",), 3.0, "was not ready (/health_generate != 200) after 3s"),
    (("--emulator-fault-exit-during-startup-s", "0.5", "--emulator-startup-s", "60"), 20.0, "exited during start-up"),
    (("--emulator-profile", "no-such-profile"), 20.0, "exited during start-up"),
])
def test_start_up_failures_are_bounded_and_explained(tmp_path, flags, timeout_s, expected):
    started = time.monotonic()
    with pytest.raises(ServerStartError) as err:
        launch(config(*flags, timeout_s=timeout_s), ENGINE, log_dir=tmp_path, api_key="k-123")
    message = str(err.value)
    assert expected in message and "command:" in message and "last lines:" in message
    assert "k-123" not in message and "--api-key ***" in message
    assert time.monotonic() - started < 25


def test_slow_start_is_waited_for(tmp_path):
    started = time.monotonic()
    handle = launch(config("--emulator-startup-s", "2"), ENGINE, log_dir=tmp_path)
    try:
        assert time.monotonic() - started >= 2
    finally:
        stop(handle)
    assert not handle.alive()


def test_port_in_use_picks_another_port(tmp_path):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        taken = s.getsockname()[1]
        handle = launch(config(), ENGINE, log_dir=tmp_path, port=taken)
        try:
            assert not handle.base_url.endswith(f":{taken}")
        finally:
            stop(handle)


def test_wrong_final_count_in_native_stream_fails_the_request(measure):
    cell, _, _ = measure("--emulator-fault-bad-count-rate", "0.5")
    assert cell.error is not None and "token count mismatch" in cell.error, cell.error
