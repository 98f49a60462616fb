"""A user's repository as specguard 65e213e wrote it keeps working (issue 29 item 7).

tests/fixtures/repo-65e213e/ holds what `specguard init` wrote at 65e213e, the baselines its
refreshes recorded (cells c1 and c4) and the results files of 30 gate sessions (schema 2), eagle3
made 8 % slower per step from file 20 on (its README has how it was made and what 65e213e did on
it). Today's specguard must gate against those baselines, compare two of those files and read the
whole history, with the old test name still importable and named once as deprecated.
"""

from __future__ import annotations

import gzip
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from specguard.labels import Verdict

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "repo-65e213e"
pytestmark = pytest.mark.e2e


@pytest.fixture
def user_repo(tmp_path: Path) -> Path:
    """The repository copied as it is, and its 30 results files unpacked into results/."""
    repo = tmp_path / "repo"
    shutil.copytree(FIXTURE / "repo", repo)
    (repo / "results").mkdir()
    for packed in sorted((FIXTURE / "results-files").glob("results-*.json.gz")):
        (repo / "results" / packed.name[: -len(".gz")]).write_bytes(gzip.decompress(packed.read_bytes()))
    return repo


def _run(repo: Path, *args: str, timeout_s: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *args], cwd=repo, capture_output=True, text=True, timeout=timeout_s)


def test_the_gate_decides_every_cell_against_the_baselines_65e213e_recorded(user_repo):
    out = user_repo / "now.json"
    proc = _run(user_repo, "-m", "pytest", "perf_tests", "--require-baselines", "-p", "no:cacheprovider",
                "--concurrency", "1,4", "--results-json", str(out))
    text = proc.stdout + proc.stderr
    # 0 (no regression) or 1 (a regression measured on a loaded machine): either way every test was
    # decided against the stored sessions; 3 would mean the old baselines no longer match.
    assert proc.returncode in (0, 1), text
    doc = json.loads(out.read_text())
    history = [d for d in doc["decisions"] if d["gate"] in ("throughput", "step_time", "accept_length")]
    assert len(history) == 10 and all(d["verdict"] not in (Verdict.SKIP, Verdict.ERROR) for d in history), text
    assert all(d["versus"]["sessions"] == 3 for d in history)  # the three sessions 65e213e recorded
    assert "recorded with another environment" not in text and "Traceback" not in text
    deprecated = [n for n in doc["run_notes"] if n["kind"] == "test_renamed"]
    assert deprecated == [{"kind": "test_renamed", "files": "perf_tests/test_speculation.py",
                           "old": "test_speculation_beats_baseline", "new": "test_speculation_beats_reference"}]
    assert ("perf_tests/test_speculation.py: test_speculation_beats_baseline is now named "
            "test_speculation_beats_reference (the same test); import test_speculation_beats_reference "
            "from specguard.plugin.gate_tests, the old name will go in a later release") in text
    ids = {t["nodeid"].split("::")[-1] for t in doc["tests"]}
    assert {"test_speculation_beats_baseline[eagle3-c1]", "test_throughput[baseline-c4]"} <= ids  # its ids stay
    assert not list((user_repo / "baselines").rglob("*.json.tmp*"))  # a gate run writes nothing there


def test_compare_reads_two_schema_2_files_and_finds_the_slower_engine(user_repo):
    proc = _run(user_repo, "-m", "specguard.cli", "compare", "results/results-01.json", "results/results-30.json")
    assert proc.returncode == 1, proc.stdout + proc.stderr  # as at 65e213e: eagle3's tok/s fell ~9 %
    rows = {tuple(line.split()[:3]): line.split()[-1] for line in proc.stdout.splitlines() if line.startswith("eagle3")}
    assert rows[("eagle3", "1", "throughput")] == rows[("eagle3", "4", "throughput")] == "FAIL"
    assert rows[("eagle3", "1", "accept_length")] == "pass"
    assert "compare: 2 of 6 cell comparisons regressed" in proc.stdout


def test_history_reads_thirty_schema_2_files_and_places_the_step_at_file_20(user_repo):
    proc = _run(user_repo, "-m", "specguard.cli", "history", "results", "--json", "history.json")
    assert proc.returncode in (0, 1), proc.stdout + proc.stderr
    doc = json.loads((user_repo / "history.json").read_text())
    assert len(doc["files"]) == 30
    eagle3 = {(p["level"], p["metric"]): p for p in doc["change_points"] if p["config"] == "eagle3"}
    for level in ("c1", "c4"):
        for metric in ("tok_s", "step_time_ms"):
            point = eagle3[(level, metric)]
            assert abs(point["position"] - 20) <= 1 and point["worse"], point
            assert point["commit_range"].endswith("a13557f14b")  # the commit of file 20
