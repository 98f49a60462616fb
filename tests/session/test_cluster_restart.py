"""Restarts through the cluster's own tools (issue 26): an attached server whose configuration has
a `restart_command` is relaunched on suspicion as a launched one is. The "cluster" here is a shell
script that stops the emulator behind a URL (its process group) and starts a new one on the same
port, as `kubectl rollout restart` replaces a pod behind a Service."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from emulator_suite import RELAUNCH, emulator_suite_toml

from specguard.config import load_suite
from specguard.notes import Note, NoteKind
from specguard.report.note_text import note_line
from specguard.report.verdict_text import message
from specguard.server import free_port
from specguard.session import GateSession, PlannedTest, RunOptions
from specguard.session.results import build_results

pytestmark = pytest.mark.e2e

RESTART = """#!/bin/sh
# stop the server behind the URL (its process group), start another on the same port
pid_file={pid_file}
if [ -s "$pid_file" ]; then
  kill -TERM -"$(cat "$pid_file")" 2>/dev/null || true
  while kill -0 "$(cat "$pid_file")" 2>/dev/null; do sleep 0.1; done
fi
setsid {python} -m specguard.emulator.launch_server --port {port} --model-path /models/specguard-fast \\
  --emulator-profile fast {flags} >>{log} 2>&1 &
echo $! > "$pid_file"
echo restart >> {count}
"""


class Cluster:
    """One emulator per name behind a fixed URL, restarted only by its script."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.scripts: dict[str, Path] = {}
        self.urls: dict[str, str] = {}

    def add(self, name: str, flags: str) -> str:
        port = free_port()
        script = self.root / f"restart-{name}.sh"
        script.write_text(RESTART.format(pid_file=self.root / f"{name}.pid", python=sys.executable, port=port,
                                         flags=flags, log=self.root / f"{name}.log", count=self.root / f"{name}.count"))
        script.chmod(0o755)
        subprocess.run([str(script)], check=True, timeout=30)  # the first start, by hand
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if httpx.get(url + "/health_generate", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.2)
        self.scripts[name], self.urls[name] = script, url
        return url

    def restarts(self, name: str) -> int:
        return len((self.root / f"{name}.count").read_text().split()) - 1

    def stop_all(self) -> None:
        """Every server the scripts started (their process groups): SIGTERM, then SIGKILL after 10 s."""
        pids = [int((self.root / f"{name}.pid").read_text()) for name in self.scripts]
        for sig in (signal.SIGTERM, signal.SIGKILL):
            for pid in pids:
                try:
                    os.killpg(pid, sig)
                except ProcessLookupError:
                    pass
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and any(_alive(pid) for pid in pids):
                time.sleep(0.1)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.fixture
def cluster(tmp_path):
    c = Cluster(tmp_path)
    yield c
    c.stop_all()


def test_an_attached_configuration_with_a_restart_command_is_relaunched_on_suspicion(tmp_path, cluster):
    # eagle3 three times slower per step: it loses to its reference at c1 (a suspicious cell) on
    # every launch, so both are restarted through their scripts until advanced.max_launches (3)
    spec = cluster.add("eagle3", "--speculative-algorithm EAGLE3 --speculative-num-steps 3 --speculative-eagle-topk 1 "
                                 "--speculative-num-draft-tokens 4 --emulator-step-scale 3.0")
    base = cluster.add("baseline", "")
    text = emulator_suite_toml(concurrency=(1,), advanced=RELAUNCH, sweep="concurrency = [1]\nrequests_per_worker = 2\n"
                               "warmup = 0\nrepeats = 2\n")
    for name in ("baseline", "eagle3"):
        text = text.replace(f"[servers.{name}]\n", f"[servers.{name}]\nrestart_command = \"{cluster.scripts[name]}\"\n")
    (tmp_path / "suite.toml").write_text(text)
    sg = GateSession(load_suite(tmp_path / "suite.toml"),
                     RunOptions(baseline_dir=tmp_path / "b", log_dir=tmp_path / "logs",
                                server_urls={"eagle3": spec, "baseline": base}))
    sg.plan([PlannedTest("eagle3", 1, "speculation")])
    assert not sg.measure("eagle3", 1).error
    sg.stop_all()
    assert (cluster.restarts("eagle3"), cluster.restarts("baseline")) == (2, 2)
    assert len({lid for lid, _ in sg.cells.launch_cells[("eagle3", 1)]}) == 3  # three launches, each its own id
    r = sg.speculation_result("eagle3", 1)
    assert (r.stage, r.launches, r.verdict) == (3, 3, "fail"), message(r)
    assert sg.campaign.design_notes() == []  # nothing says "relaunch not possible"


def test_without_a_restart_command_attach_mode_says_what_cannot_be_relaunched(tmp_path, cluster):
    url = cluster.add("baseline", "")
    (tmp_path / "suite.toml").write_text(emulator_suite_toml(concurrency=(1,), advanced=RELAUNCH))
    sg = GateSession(load_suite(tmp_path / "suite.toml"),
                     RunOptions(baseline_dir=tmp_path / "b", log_dir=tmp_path / "logs", server_urls={"baseline": url}))
    assert sg.campaign.design_notes() == []  # nothing measured yet: no configuration to speak of
    sg.measure("baseline", 1)
    sg.stop_all()
    (note,) = sg.campaign.design_notes()
    assert note == Note.of(NoteKind.NO_RELAUNCH, configs="baseline")  # eagle3, not measured, is not named
    assert note_line(note) == ("attach mode: baseline cannot be relaunched (no restart_command): stage-1 verdicts "
                               "at the whole cell alpha stand")
    # wired into the results document's run notes, which the summary prints under the table
    assert build_results(sg)["run_notes"] == [{"kind": "no_relaunch", "configs": "baseline"}]


def test_a_restart_command_that_fails_is_one_line(tmp_path, cluster):
    url = cluster.add("baseline", "")
    text = emulator_suite_toml(concurrency=(1,), advanced=RELAUNCH).replace(
        "[servers.baseline]\n", "[servers.baseline]\nrestart_command = \"echo no such deployment >&2; exit 7\"\n")
    (tmp_path / "suite.toml").write_text(text)
    sg = GateSession(load_suite(tmp_path / "suite.toml"),
                     RunOptions(baseline_dir=tmp_path / "b", log_dir=tmp_path / "logs", server_urls={"baseline": url}))
    sg.pool.get("baseline")
    from specguard.session import ConfigUnavailable
    with pytest.raises(ConfigUnavailable) as err:
        sg.pool.relaunch("baseline")
    assert err.value.line == "baseline: restart_command exited 7: no such deployment"
