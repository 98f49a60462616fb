"""The live progress line: its estimate of the time left (a fake clock), and where it shows."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from test_plugin_exit_codes import REPO, one_level_suite

from specguard.measure.progress import ForeignTraffic, RunStarted, SoakStarted, SoakWindow
from specguard.report.progress import SweepProgress, format_duration, predict, progress_text


def test_predict_interpolates_and_extrapolates_on_log_log_axes():
    per_run = {1: 1.0, 16: 4.0}  # time ~ sqrt(C)
    assert predict(per_run, 16) == 4.0
    assert predict(per_run, 4) == pytest.approx(2.0)
    assert predict(per_run, 64) == pytest.approx(8.0)
    assert predict({8: 3.0}, 128) == 3.0
    assert predict({}, 4) is None


def test_remaining_time_follows_the_measured_cells():
    now = [0.0]
    p = SweepProgress([("base", 1), ("base", 4), ("spec", 1), ("spec", 4)], runs_per_cell=4, clock=lambda: now[0])
    p.begin_cell("base", 1)
    p.run_started()
    assert p.remaining_s() is None and "left" not in p.line("base c1 warmup")  # nothing measured yet
    now[0] = 4.0
    p.end_cell(wall_s=4.0, runs=4)  # 1 s per run at C=1
    p.begin_cell("base", 4)
    p.run_started()
    assert p.remaining_s() == pytest.approx(3 * 4 * 1.0)  # C=4 predicted like C=1 until measured
    now[0] = 12.0
    p.end_cell(wall_s=8.0, runs=4)  # 2 s per run at C=4
    p.begin_cell("spec", 1)
    for t in (12.0, 13.0, 14.0):
        now[0] = t
        p.run_started()
    now[0] = 14.5  # half-way through the third run
    assert p.remaining_s() == pytest.approx(2 * 1.0 - 0.5 + 4 * 2.0)
    line = p.line("spec c1 run 2/3 (3/4)")
    assert line.startswith("[specguard 14s] spec c1 run 2/3 (3/4) | cell 3/4, ~10s left")


def test_run_phase_counts_measured_runs_after_the_warmup():
    lines = [progress_text(RunStarted("eagle3", "r8", i, warmup=2, repeats=3)) for i in range(5)]
    assert lines == ["eagle3 r8 warmup (1/5)", "eagle3 r8 warmup (2/5)", "eagle3 r8 run 1/3 (3/5)",
                     "eagle3 r8 run 2/3 (4/5)", "eagle3 r8 run 3/3 (5/5)"]


def test_every_progress_event_is_worded_with_its_level_as_ids_name_it():
    assert progress_text(ForeignTraffic("mtp", "c16", running=3, waiting=1)) == \
        "mtp c16: the server already has 3 running and 1 waiting requests that specguard did not send"
    assert progress_text(SoakStarted("eagle3", "logs/soak-eagle3.jsonl")) == \
        "soak eagle3: each window to logs/soak-eagle3.jsonl as it closes"
    assert progress_text(SoakWindow("eagle3", "c4", 2, 5, tok_s=812.4, wall_s=19.6)) == \
        "soak eagle3 c4: window 2/5 (20 s, 812 tok/s)"
    assert progress_text(SoakWindow("eagle3", "", 3, 5, tok_s=None)) == "soak eagle3 (passive): window 3/5: no traffic"
    assert progress_text(SoakWindow("eagle3", "", 4, 5, tok_s=950.0, accept_length=3.214)) == \
        "soak eagle3 (passive): window 4/5: accept length 3.21, 950 tok/s served"


def test_durations_read_well():
    assert format_duration(9.4) == "9s" and format_duration(125) == "2m05s"


def _pytest_on_a_terminal(tmp_path: Path, ci: bool) -> str:
    """Run a one-cell sweep with stdout on a pseudo-terminal, as a person at a shell would."""
    suite = tmp_path / "suite.toml"
    suite.write_text(one_level_suite())
    cmd = [sys.executable, "-m", "pytest", str(REPO / "perf_tests"), "-p", "no:cacheprovider", "--suite", str(suite),
           "-k", "baseline and throughput", "--benchmark-disable", "--baseline-dir", str(tmp_path / "b"),
           "--server-log-dir", str(tmp_path / "logs")]
    env = {k: v for k, v in os.environ.items() if k != "CI"} | {"TERM": "xterm", **({"CI": "true"} if ci else {})}
    master, slave = os.openpty()
    proc = subprocess.Popen(cmd, cwd=REPO, stdin=subprocess.DEVNULL, stdout=slave, stderr=slave, env=env)
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    os.close(master)
    assert proc.wait(timeout=120) == 0
    return b"".join(chunks).decode(errors="replace")


@pytest.mark.e2e
def test_progress_line_shows_through_output_capture_on_a_terminal_only_outside_ci(tmp_path):
    out = _pytest_on_a_terminal(tmp_path, ci=False)
    assert "[specguard" in out and "baseline c1 run 2/3 (3/4) | cell 1/1" in out
    assert "[specguard" not in _pytest_on_a_terminal(tmp_path, ci=True)
