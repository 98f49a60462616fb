"""A newcomer's walk, as the README tells it, in an empty git repository: specguard installed from
this checkout (not editable) into a fresh venv, `specguard init`, the first run against the
emulator, recording baselines, an unchanged rerun, a regression and a typo, each with its exit code.
Nothing of this checkout is on the path: the repository holds only what init wrote."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e
REPO = Path(__file__).resolve().parents[2]


def test_install_init_run_record_rerun_and_fail(tmp_path: Path) -> None:
    venv, repo = tmp_path / "venv", tmp_path / "their-repo"
    repo.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")} | {"CI": "1"}

    def sh(*cmd: str, timeout: int = 600) -> subprocess.CompletedProcess[str]:
        return subprocess.run(cmd, cwd=repo, env=env, capture_output=True, text=True, timeout=timeout)

    assert sh("git", "init", "-q").returncode == 0
    assert sh(sys.executable, "-m", "venv", str(venv)).returncode == 0
    # a copy of the checkout: building a wheel writes build/ beside the sources
    source = tmp_path / "specguard-src"
    shutil.copytree(REPO, source, ignore=shutil.ignore_patterns(".git", ".venv", "build", "*.egg-info", "__pycache__",
                                                                ".specguard", "baselines", "docs"))
    install = sh(str(venv / "bin" / "pip"), "install", "-q", str(source), timeout=900)
    assert install.returncode == 0, install.stderr[-2000:]
    where = sh(str(venv / "bin" / "python"), "-c", "import specguard; print(specguard.__file__)")
    assert str(venv) in where.stdout, where.stdout  # the installed copy, not this checkout

    made = sh(str(venv / "bin" / "specguard"), "init")
    assert made.returncode == 0, made.stderr
    assert sorted(str(p.relative_to(repo)) for p in repo.rglob("*") if p.is_file() and ".git" not in p.parts) == [
        ".github/workflows/specguard.yml", "perf_tests/suite.toml", "perf_tests/test_speculation.py"]

    def pytest_(*args: str) -> tuple[int, str]:
        proc = sh(str(venv / "bin" / "python"), "-m", "pytest", "perf_tests", "-q", "-p", "no:cacheprovider", *args)
        return proc.returncode, proc.stdout + proc.stderr

    code, out = pytest_()
    assert code == 0 and "no baselines yet: record them for this run with: pytest perf_tests --update-baselines" in out, out
    code, out = pytest_("--update-baselines")
    assert code == 0 and "wrote 3 cell(s)" in out, out
    assert sorted(p.name for p in (repo / "baselines" / "suite").glob("*.json")) == ["baseline.json", "eagle3.json"]
    code, out = pytest_("--require-baselines")
    assert code == 0 and "specguard: ok" in out, out
    code, out = pytest_("--require-baselines", "-k", "eagle3 and throughput", "--server-args", "eagle3=--emulator-step-scale 1.5")
    assert code == 1 and "FAIL" in out, out
    code, out = pytest_("--concurrency", "1,x")
    assert code == 4 and "--concurrency 1,x (command line): use comma-separated positive integers" in out, out
