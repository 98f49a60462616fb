"""`specguard init`: a starter suite, the gate tests and a CI workflow, from the emulator or from a
running server's /server_info (an emulator started by hand on 127.0.0.1, as a user starts SGLang)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from specguard import starter
from specguard.config import load_suite
from specguard.engines import EffectiveArgs


def init(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "specguard.cli", "init", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=120)


@pytest.mark.e2e
def test_init_writes_a_suite_the_gate_tests_and_a_workflow_and_refuses_to_overwrite(tmp_path):
    proc = init(tmp_path)
    assert proc.returncode == 0, proc.stderr
    suite = load_suite(tmp_path / "perf_tests" / "suite.toml")
    assert set(suite.servers) == {"baseline", "eagle3"} and suite.servers["eagle3"].reference == "baseline"
    assert "from specguard.plugin.gate_tests import" in (tmp_path / "perf_tests" / "test_speculation.py").read_text()
    workflow = (tmp_path / ".github" / "workflows" / "specguard.yml").read_text()
    assert "pytest perf_tests --require-baselines" in workflow and "{tests_dir}" not in workflow
    assert "next: pytest perf_tests" in proc.stdout
    again = init(tmp_path)
    assert again.returncode == 4 and again.stderr.count("\n") == 1, again.stderr
    assert "perf_tests/suite.toml exists; keep it, or pass --force" in again.stderr
    (tmp_path / "perf_tests" / "suite.toml").write_text("edited")
    assert init(tmp_path, "--force").returncode == 0
    assert (tmp_path / "perf_tests" / "suite.toml").read_text() != "edited"


@pytest.mark.e2e
def test_init_into_another_directory_points_the_workflow_at_it(tmp_path):
    assert init(tmp_path, "gates/perf").returncode == 0
    assert (tmp_path / "gates" / "perf" / "suite.toml").exists()
    assert "pytest gates/perf --require-baselines" in (tmp_path / ".github" / "workflows" / "specguard.yml").read_text()


@pytest.mark.parametrize("algorithm,name", [("EAGLE3", "eagle3"), ("NEXTN", "mtp"), (None, "baseline")])
def test_a_servers_settings_become_a_suite_that_loads(tmp_path, algorithm, name):
    eff = EffectiveArgs(engine_version="0.5.23", model_path="/m/target", speculative_algorithm=algorithm,
                        draft_model_path="/m/draft" if algorithm else None, num_steps=3 if algorithm else None,
                        eagle_topk=1 if algorithm else None, num_draft_tokens=4 if algorithm else None,
                        max_running_requests=24, tp_size=1)
    text = starter.suite_from_server("http://127.0.0.1:30000", eff)
    (tmp_path / "suite.toml").write_text(text)
    suite = load_suite(tmp_path / "suite.toml")
    assert name in suite.servers and suite.sweep.concurrency == [1, 4, 16]  # levels up to the server's cap
    if algorithm:
        spec = suite.servers[name]
        launched = (spec.speculative_algorithm, spec.num_steps, spec.num_draft_tokens, spec.reference)
        assert launched == (algorithm, 3, 4, "baseline")
        assert f"--server-url {name}=http://127.0.0.1:30000 --server-url baseline=URL" in text


@pytest.mark.e2e
def test_init_from_a_running_server_and_from_one_that_is_not_there(tmp_path, emulator):
    url = emulator("--speculative-algorithm", "EAGLE3", "--speculative-num-steps", "2",
                   "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "3")
    proc = init(tmp_path, "--server-url", url)
    assert proc.returncode == 0, proc.stderr
    suite = load_suite(tmp_path / "perf_tests" / "suite.toml")
    assert (suite.servers["eagle3"].num_steps, suite.servers["eagle3"].num_draft_tokens) == (2, 3)
    gone = init(tmp_path, "x", "--server-url", "http://127.0.0.1:9")
    assert gone.returncode == 3 and gone.stderr.count("\n") == 1 and "could not read /server_info" in gone.stderr
    typo = init(tmp_path, "y", "--server-url", "127.0.0.1:30000")
    assert typo.returncode == 4 and typo.stderr.count("\n") == 1, typo.stderr
