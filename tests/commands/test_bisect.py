"""`specguard bisect`: the search on scripted verdicts (every position of the first bad build,
the number of A/B decisions, a midpoint that cannot be decided), build files, and end to end:
eight emulator builds, the last four with a slower step, named at build 5."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest
from test_ab import SMALL_SUITE, listening, ports_in_logs, run_cli

from specguard.ab.bisect import BAD, GOOD, UNDECIDED_BUILD, bisect, decisions_needed
from specguard.ab.builds import Build, UsageError, parse_build, read_builds
from specguard.ab.cli import bisect_config
from specguard.ab.report import BISECT
from specguard.config import load_suite

REPO = Path(__file__).resolve().parents[2]
CONFIGS = ["baseline", "eagle3", "mtp"]


def scripted(first_bad: int, undecided: set[int] = frozenset()):
    """decide(good, candidate) for builds whose first bad one is ``first_bad``; records the calls."""
    calls: list[tuple[int, int]] = []

    def decide(good: int, candidate: int) -> tuple[str, None]:
        calls.append((good, candidate))
        assert good < first_bad, "A must always be a good build"
        if candidate in undecided:
            return UNDECIDED_BUILD, None
        return (BAD if candidate >= first_bad else GOOD), None

    return decide, calls


@pytest.mark.parametrize("n_builds", range(3, 10))
def test_every_first_bad_position_is_found_in_ceil_log2_decisions(n_builds):
    for first_bad in range(1, n_builds):
        decide, calls = scripted(first_bad)
        result = bisect(n_builds, decide)
        assert result.first_bad == first_bad
        assert len(calls) <= decisions_needed(n_builds) <= math.ceil(math.log2(n_builds))
    assert decisions_needed(8) == 3 and decisions_needed(4) == 2 and decisions_needed(3) == 1


def test_eight_builds_take_three_decisions_and_a_is_the_moving_good_end():
    decide, calls = scripted(first_bad=4)  # build 5 (1-based)
    result = bisect(8, decide)
    assert result.first_bad == 4 and calls == [(0, 3), (3, 5), (3, 4)]


def test_an_undecided_midpoint_stops_the_bisect_and_says_which():
    decide, calls = scripted(first_bad=4, undecided={5})
    result = bisect(8, decide)
    assert result.first_bad is None and calls == [(0, 3), (3, 5)]
    assert result.stopped is not None and (result.stopped.candidate, result.stopped.verdict) == (5, UNDECIDED_BUILD)
    assert (result.good, result.bad) == (3, 7)


def test_build_lines_and_files(tmp_path):
    build = parse_build('args=eagle3="--emulator-step-scale 1.06" args=mtp=--x  # slower', "line 1", "build 1", CONFIGS)
    assert build.server_args == {"eagle3": ["--emulator-step-scale", "1.06"], "mtp": ["--x"]}
    assert parse_build(f"python={sys.executable}", "line 1", "b", CONFIGS).python == sys.executable
    path = tmp_path / "builds.txt"
    path.write_text("# good\nargs=eagle3=\"--emulator-step-scale 1.0\"\n\nargs=eagle3=\"--emulator-step-scale 1.06\"\n")
    builds = read_builds(str(path), ['args=eagle3="--emulator-step-scale 1.07"'], CONFIGS)
    assert [b.name for b in builds] == ["build 1", "build 2", "build 3"]
    assert builds[2].server_args == {"eagle3": ["--emulator-step-scale", "1.07"]}


@pytest.mark.parametrize("line, message", [
    ("python=/nonexistent/python", "/nonexistent/python' is not an executable file"),
    ("args=nosuch=--x", "no configuration 'nosuch'"),
    ("step=1.06", "'step=1.06' is neither python=PATH nor args="),
    ('args=eagle3="--x', "No closing quotation"),
])
def test_bad_build_lines_name_the_line(tmp_path, line, message):
    path = tmp_path / "builds.txt"
    path.write_text(f"args=eagle3=--a\n{line}\nargs=eagle3=--b\n")
    with pytest.raises(UsageError) as err:
        read_builds(str(path), [], CONFIGS)
    assert str(err.value).startswith(f"{path}:2:") and message in str(err.value)


def test_fewer_than_three_builds_is_a_usage_error():
    with pytest.raises(UsageError, match="bisect needs at least 3 builds"):
        read_builds(None, ["args=eagle3=--a", "args=eagle3=--b"], CONFIGS)


def test_the_deciding_configuration():
    suite = load_suite(REPO / "perf_tests" / "suite.toml")
    builds = [Build("b1", server_args={"mtp": ["--x"]}), Build("b2", server_args={"eagle3": ["--y"]})]
    assert bisect_config(suite, None, builds)[0] == "eagle3"  # suite order
    assert bisect_config(suite, "mtp", builds) == ("mtp", "--config")
    assert bisect_config(suite, None, [Build("b", python=sys.executable)])[0] == "baseline"
    with pytest.raises(UsageError, match="--config nosuch"):
        bisect_config(suite, "nosuch", builds)


@pytest.mark.e2e
def test_bisect_names_the_first_slower_build_of_eight(tmp_path):
    (tmp_path / "suite.toml").write_text(SMALL_SUITE)
    scales = ["1.0"] * 4 + ["1.15"] * 4
    (tmp_path / "builds.txt").write_text("".join(f'args=eagle3="--emulator-step-scale {s}"\n' for s in scales))
    proc = run_cli(tmp_path, "bisect", "--suite", "suite.toml", "--builds", "builds.txt", "--results-json", "r.json",
                   "--report-dir", "rep", "--log-dir", "logs")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = BISECT.load(tmp_path / "r.json")  # checked against its model, every step's A/B document in it
    assert doc["schema"] == "specguard-bisect" and doc["config"] == "eagle3"
    assert doc["first_bad"] == 5 and doc["decisions"] == 3
    assert [(s["good"], s["candidate"], s["verdict"]) for s in doc["steps"]] == [(1, 4, "good"), (4, 6, "bad"),
                                                                                (4, 5, "bad")]
    assert "assuming build 1 is good and build 8 is bad" in proc.stdout
    assert "first bad build: build 5 (eagle3: --emulator-step-scale 1.15)" in proc.stdout
    assert (tmp_path / "rep" / "summary.md").exists()
    ports = ports_in_logs(tmp_path / "logs")
    assert ports and not any(listening(p) for p in ports)
