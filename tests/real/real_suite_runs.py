"""What the real-engine jobs (tests/real/test_real_engine.py: vLLM; tests/real/test_real_sglang.py: SGLang)
share: the engine venv's interpreter and tiny models from the environment, and one `pytest
perf_tests` session run as a user runs it, in a subprocess, with its verdicts read back."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def engine_python(var: str, setup_script: str, run_script: str) -> str:
    """The engine venv's python named by ``var``: unset skips (the job sets it), set but broken fails."""
    python = os.environ.get(var)
    if not python:
        pytest.skip(f"{var} is not set: run {run_script}, or {setup_script} and export {var}=<the python it prints>")
    python = os.path.expanduser(python)
    if not os.access(python, os.X_OK):
        pytest.fail(f"{var}={python} is not an executable; rerun {setup_script}")
    return python


def tiny_models(var: str, default: str, names: tuple[str, ...], python: str) -> Path:
    """The tiny models' folder (``var`` or ``default``); a missing model fails with the command that builds it."""
    models = Path(os.path.expanduser(os.environ.get(var, default)))
    missing = [m for m in names if not (models / m / "config.json").is_file()]
    if missing:
        pytest.fail(f"tiny models {missing} missing in {models}; run {python} tools/build_tiny_models.py --out {models}")
    return models


def run_suite(suite: Path, work: Path, baselines: Path, tag: str, env: dict[str, str], *args: str, timeout_s: float,
              cpus: set[int] | None = None, on_timeout: Callable[[], None] | None = None,
              ) -> tuple[int, str, dict[str, str], dict]:
    """One `pytest perf_tests --suite SUITE` session: exit code, output, {test id: 'passed' or
    '<failure|error|skipped>: message'}, the results JSON. Its summary is kept in
    work/<tag>-summary.txt. ``cpus``: the CPUs the session (and the servers it launches) may use.
    Past ``timeout_s`` it gets Ctrl-C first (the session stops the servers it launched, whose
    process groups a kill would orphan), then SIGKILL, then ``on_timeout`` (e.g. a sweep of
    tagged processes)."""
    junit, results = work / f"{tag}-junit.xml", work / f"{tag}-results.json"
    for f in (junit, results):
        f.unlink(missing_ok=True)
    cmd = [sys.executable, "-m", "pytest", str(REPO / "perf_tests"), "-p", "no:cacheprovider", "-q",
           "--suite", str(suite), "--baseline-dir", str(baselines), "--junitxml", str(junit),
           "--results-json", str(results), "--server-log-dir", str(work / f"logs-{tag}"), "--benchmark-disable", *args]
    started = time.monotonic()
    pin = (lambda: os.sched_setaffinity(0, cpus)) if cpus else None
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                            preexec_fn=pin)
    try:
        out, _ = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGINT)
        try:
            out, _ = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, _ = proc.communicate()
        if on_timeout is not None:
            on_timeout()
        out = (out or "") + f"\n(run_suite: timed out after {timeout_s:.0f}s and was interrupted)"
    summary = out[out.find("specguard summary"):] if "specguard summary" in out else out[-4000:]
    (work / f"{tag}-summary.txt").write_text(
        f"$ {' '.join(cmd[2:])}\n({time.monotonic() - started:.0f} s, exit {proc.returncode})\n" + summary)
    outcomes: dict[str, str] = {}
    if junit.exists():
        for case in ET.parse(junit).getroot().iter("testcase"):
            bad = next((c for c in case if c.tag in ("failure", "error", "skipped")), None)
            outcomes[case.get("name")] = "passed" if bad is None else f"{bad.tag}: {bad.get('message', '')}"
    doc = json.loads(results.read_text()) if results.exists() else {}
    return proc.returncode, out, outcomes, doc
