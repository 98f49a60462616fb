"""Test ids the plugin makes from a suite (issue 16): per-category accept-length tests next to the
overall one, request-rate levels named `r8`, and suites without these keys unchanged. Collection
only: nothing is launched."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from emulator_suite import emulator_suite_toml

from specguard.config import load_suite
from specguard.plugin.scheduling import _config_of_id
from specguard.session.hints import exact_k

REPO = Path(__file__).resolve().parents[2]


def collect(tmp_path: Path, suite_text: str, *args: str) -> tuple[int, list[str]]:
    suite = tmp_path / "suite.toml"
    suite.write_text(suite_text)
    proc = subprocess.run([sys.executable, "-m", "pytest", str(REPO / "perf_tests"), "-p", "no:cacheprovider",
                           "--collect-only", "-q", "--suite", str(suite), *args],
                          cwd=REPO, capture_output=True, text=True, timeout=120)
    ids = [line.split("::", 1)[1] for line in proc.stdout.splitlines() if "::" in line]
    return proc.returncode, ids if proc.returncode == 0 else [proc.stdout + proc.stderr]


@pytest.mark.e2e
def test_a_categories_workload_adds_one_accept_length_test_per_category(tmp_path):
    text = emulator_suite_toml(concurrency=(1, 4)).replace('kind = "random-ids"', 'kind = "categories"')
    code, ids = collect(tmp_path, text)
    assert code == 0, ids
    cats = ("chat", "code", "math", "summarisation")
    assert [i for i in ids if i.startswith("test_accept_length")] == [
        f"test_accept_length[eagle3-c{c}{suffix}]" for c in (1, 4) for suffix in ("", *(f"-{k}" for k in cats))]
    assert len([i for i in ids if i.startswith("test_throughput")]) == 4  # throughput and speculation unchanged
    assert len([i for i in ids if i.startswith("test_step_time")]) == 4
    code, ids = collect(tmp_path, text, "-k", "code")
    assert ids == ["test_accept_length[eagle3-c1-code]", "test_accept_length[eagle3-c4-code]"], ids


@pytest.mark.e2e
def test_request_rate_levels_are_named_r(tmp_path):
    text = emulator_suite_toml(concurrency=(1,)).replace("concurrency = [1]", "request_rate = [2, 8]")
    code, ids = collect(tmp_path, text)
    assert code == 0, ids
    assert "test_throughput[baseline-r2]" in ids and "test_speculation_beats_reference[eagle3-r8]" in ids
    assert not [i for i in ids if "-c" in i], ids
    code, out = collect(tmp_path, text, "--concurrency", "4")
    assert code == 4 and "--concurrency 4 (command line)" in out[0] and "request_rate" in out[0], out


@pytest.mark.e2e
def test_suites_without_the_new_keys_keep_their_ids(tmp_path):
    code, ids = collect(tmp_path, (REPO / "perf_tests" / "suite.toml").read_text())
    assert code == 0, ids
    expected = [f"{t}[{n}-c{c}]" for t, names in (("test_throughput", ("baseline", "eagle3", "mtp")),
                                                   ("test_step_time", ("baseline", "eagle3", "mtp")),
                                                   ("test_accept_length", ("eagle3", "mtp")),
                                                   ("test_speculation_beats_reference", ("eagle3", "mtp")))
                for n in names for c in (1, 4, 16, 64)]
    assert sorted(ids) == sorted(expected)


def test_xdist_groups_and_record_hints_understand_the_new_ids(tmp_path):
    (tmp_path / "s.toml").write_text(emulator_suite_toml())
    suite = load_suite(tmp_path / "s.toml")
    assert _config_of_id("perf_tests/t.py::test_accept_length[eagle3-c4-code]", suite) == "eagle3"
    assert _config_of_id("perf_tests/t.py::test_throughput[baseline-r8]", suite) == "baseline"
    assert _config_of_id("perf_tests/t.py::test_other[x]", suite) is None
    assert exact_k([("eagle3", 1)], [("eagle3", 1), ("eagle3", 16)], "r") == "eagle3 and r1 and not r16"


@pytest.mark.e2e
def test_request_rate_flag_overrides_the_suites_levels_as_concurrency_does(tmp_path):
    text = emulator_suite_toml(concurrency=(1,)).replace("concurrency = [1]", "request_rate = [2, 8]")
    code, ids = collect(tmp_path, text, "--request-rate", "4,16")
    assert code == 0, ids
    assert [i for i in ids if i.startswith("test_throughput")] == [
        "test_throughput[baseline-r4]", "test_throughput[baseline-r16]", "test_throughput[eagle3-r4]",
        "test_throughput[eagle3-r16]"]
    # a closed-loop suite swept open loop from the command line: the levels become rates
    code, ids = collect(tmp_path, emulator_suite_toml(concurrency=(1, 4)), "--request-rate", "8")
    assert code == 0 and "test_throughput[eagle3-r8]" in ids and not [i for i in ids if "-c" in i], ids


@pytest.mark.e2e
def test_bad_request_rate_flags_are_usage_errors_naming_the_flag(tmp_path):
    text = emulator_suite_toml(concurrency=(1,))
    code, out = collect(tmp_path, text, "--request-rate", "2,x")
    assert code == 4 and "--request-rate 2,x (command line): use comma-separated positive integers" in out[0], out
    code, out = collect(tmp_path, text, "--request-rate", "0")
    assert code == 4 and "--request-rate 0 (command line)" in out[0] and "positive" in out[0], out
    code, out = collect(tmp_path, text, "--request-rate", "2", "--concurrency", "4")
    assert code == 4 and "a run sweeps either concurrency or request-rate levels" in out[0], out


@pytest.mark.e2e
def test_a_run_without_a_suite_file_is_a_usage_error_only_when_gate_tests_are_collected(tmp_path):
    gate_tests = tmp_path / "gates"
    gate_tests.mkdir()
    (gate_tests / "test_gates.py").write_text((REPO / "perf_tests" / "test_speculation.py").read_text())
    own = tmp_path / "own"
    own.mkdir()
    (own / "test_own.py").write_text("def test_plain():\n    assert True\n")
    run = lambda *a: subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", *a],  # noqa: E731
                                    cwd=tmp_path, capture_output=True, text=True, timeout=120)
    plain = run(str(own))
    assert plain.returncode == 0 and "1 passed" in plain.stdout, plain.stdout + plain.stderr  # the plugin stays out
    missing = run(str(gate_tests))
    out = missing.stdout + missing.stderr
    assert missing.returncode != 0 and "specguard: no suite file: put suite.toml beside the gate tests" in out, out


@pytest.mark.e2e
def test_the_algorithm_marker_selects_by_algorithm_and_k_selects_by_name_only(tmp_path):
    text = emulator_suite_toml(concurrency=(1,)) + """
[servers.weak]
engine = "emulator"
model_path = "/models/specguard-fast"
speculative_algorithm = "EAGLE3"
num_steps = 1
eagle_topk = 1
num_draft_tokens = 2
reference = "baseline"
"""
    code, ids = collect(tmp_path, text, "-k", "eagle3")
    assert code == 0 and ids and all("[eagle3-" in i for i in ids), ids  # not weak, though it runs EAGLE3 too
    code, ids = collect(tmp_path, text, "-m", "algorithm(name='eagle3')")
    assert code == 0 and {i.split("[")[1].split("-")[0] for i in ids} == {"eagle3", "weak"}, ids
    code, ids = collect(tmp_path, text, "-m", "algorithm(name='none')")
    assert code == 0 and ids and all("[baseline-" in i for i in ids), ids
