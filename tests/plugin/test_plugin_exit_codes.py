"""Exit codes CI can act on, JUnit properties and pytest-xdist results, on a tiny emulator suite.

pytest runs in a subprocess as a user runs it; the emulator serves on 127.0.0.1 (docs/ci.md).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from emulator_suite import emulator_suite_toml

from specguard.report.results import decision_text

pytestmark = pytest.mark.e2e
REPO = Path(__file__).resolve().parents[2]


def one_level_suite(baseline_args: str = "") -> str:
    """baseline + eagle3 at C=1 only: the smallest session that still has every gate."""
    return emulator_suite_toml(concurrency=(1,), output_len=48, cap=16, baseline_args=baseline_args, must_win_up_to=None)


EXIT_REGRESSION, EXIT_NOT_MEASURED = 1, 3

def run(tmp_path: Path, *args: str, extra: str = "") -> tuple[int, str, dict]:
    """pytest perf_tests on the tiny suite; returns exit code, output and the results document."""
    suite = tmp_path / f"suite{len(extra)}.toml"
    suite.write_text(one_level_suite(extra))
    results = tmp_path / "results.json"
    results.unlink(missing_ok=True)
    cmd = [sys.executable, "-m", "pytest", str(REPO / "perf_tests"), "-p", "no:cacheprovider", "-q",
           "--suite", str(suite), "--baseline-dir", str(tmp_path / "baselines"), "--benchmark-disable",
           "--server-log-dir", str(tmp_path / "logs"), "--results-json", str(results), *args]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "CI": "1"})
    out = proc.stdout + proc.stderr
    return proc.returncode, out, json.loads(results.read_text()) if results.exists() else {}


def test_regression_is_1_and_not_measured_is_3(tmp_path):
    junit = tmp_path / "junit.xml"
    code, out, doc = run(tmp_path, "-k", "eagle3 and throughput", "--update-baselines", "--junitxml", str(junit))
    assert code == 0, out
    props = {p.get("name"): p.get("value") for p in ET.parse(junit).getroot().iter("property")}
    assert float(props["tok_s"]) > 0 and float(props["accept_length"]) > 2 and props["config"] == "eagle3"
    assert {"ttft_p50_ms", "ttft_p99_ms", "itl_p50_ms", "itl_p99_ms", "gate", "verdict"} <= set(props)

    # No stored baseline for `baseline` under --require-baselines: could not gate -> 3.
    code, out, doc = run(tmp_path, "-k", "baseline and throughput", "--require-baselines")
    assert code == EXIT_NOT_MEASURED, out
    assert doc["outcome"]["status"] == "not-measured" and doc["outcome"]["failed_tests"][0]["kind"] == "not-measured"
    assert "specguard: not-measured (1 test(s) not measured; 1 failed), exit 3" in out

    # eagle3 twice as slow (a regression) while baseline still has no baseline: the regression wins -> 1.
    code, out, doc = run(tmp_path, "-k", "throughput", "--require-baselines",
                         "--server-args", "eagle3=--emulator-step-scale 2.0")
    assert code == EXIT_REGRESSION, out
    kinds = {f["nodeid"].split("::")[-1]: f["kind"] for f in doc["outcome"]["failed_tests"]}
    assert kinds == {"test_throughput[baseline-c1]": "not-measured", "test_throughput[eagle3-c1]": "regression"}


def test_server_that_cannot_start_is_3(tmp_path):
    code, out, doc = run(tmp_path, "-k", "baseline and throughput", extra=', "--emulator-profile", "no-such-profile"')
    assert code == EXIT_NOT_MEASURED, out
    assert doc["servers"]["baseline"]["failure"] and doc["outcome"]["exit_status"] == 3
    reason = doc["servers"]["baseline"]["failure_reason"]  # why, as data: the first line of `failure` worded from it
    assert reason["kind"] == "start_failed" and doc["servers"]["baseline"]["failure"].startswith(reason["error"] + "\n")
    assert f"not measured: {reason['error']}" in out  # the test's failure says it


def test_xdist_launches_each_configuration_once(tmp_path):
    """-n 2 without --dist: specguard's scheduler keeps each speculative
    configuration with its reference, so every server is launched once and every cell measured
    once (never twice on two emulators at once); the summary says how the run was placed."""
    code, out, doc = run(tmp_path, "-n", "2", "--report-dir", str(tmp_path / "report"))
    assert code == 0, out
    assert sorted((c["config"], int(c["level"][1:])) for c in doc["cells"]) == [("baseline", 1), ("eagle3", 1)]
    logs = sorted(p.name.split("-")[1] for p in (tmp_path / "logs").glob("server-*.log"))
    assert logs == ["baseline", "eagle3"], logs  # one launch per configuration
    assert "xdist: --dist load: specguard places each configuration with its reference on one worker" in out
    assert "specguard summary" in out and (tmp_path / "report" / "summary.md").exists()
    # The speculation gate compared with the reference measured in this session, on the same worker.
    spec = next(d for d in doc["decisions"] if d["gate"] == "speculation")
    assert "baseline (this session" in decision_text(spec)


def test_a_refresh_that_cannot_write_is_3_with_one_line_naming_the_path(tmp_path):
    # --baseline-dir names a file: nothing can be written (the same path as permission denied and
    # a full disk: store/refresh.write_failure, whose lines tests/store/test_refresh.py checks)
    target = tmp_path / "baselines-target"
    target.write_text("not a directory")
    code, out, doc = run(tmp_path, "-k", "baseline and throughput", "--update-baselines", "--baseline-dir", str(target))
    assert code == EXIT_NOT_MEASURED, out
    lines = [ln for ln in out.splitlines() if "cannot write baselines under" in ln]
    assert len(lines) == 1 and str(target) in lines[0] and "--baseline-dir" in lines[0], out
    assert doc["outcome"]["status"] == "not-measured" and doc["outcome"]["exit_status"] == 3
