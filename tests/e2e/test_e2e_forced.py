"""The engine measured alone, end to end: a configuration with `simulate_accept_length` launches
the emulator with SGLANG_SIMULATE_ACC_LEN (as SGLang 0.5.23 reads it, srt/environ.py), every verify
step keeps the forced length, and its accept-length test checks that the server applied it, with
no baseline recorded."""

from __future__ import annotations

import json

import pytest
from e2e.test_e2e_suite import run_suite
from emulator_suite import write_emulator_suite

pytestmark = pytest.mark.e2e


@pytest.mark.parametrize("output_len", [64, 50])  # 63 = 21 steps of 3; 49 leaves each request a last step of 1
def test_forced_acceptance_holds_on_the_emulator_without_a_baseline(tmp_path, output_len):
    suite = write_emulator_suite(tmp_path / "suite.toml", concurrency=(1,), output_len=output_len)
    suite.write_text(suite.read_text().replace("num_draft_tokens = 4\n", "num_draft_tokens = 4\nsimulate_accept_length = 3\n"))
    results = tmp_path / "results.json"
    code, out, res = run_suite(tmp_path, suite, "-k", "eagle3 and accept_length", "--results-json", str(results))
    assert code == 0 and res == {"test_accept_length[eagle3-c1]": "passed"}, out
    doc = json.loads(results.read_text())
    (decision,) = [d for d in doc["decisions"] if d["gate"] == "accept_length"]
    assert decision["verdict"] == "pass" and decision["problem"]["why"] == "forced-accept", decision
    assert decision["problem"]["count"] == 0 and decision["reference"] == 3.0
    (cell,) = [c for c in doc["cells"] if c["config"] == "eagle3"]
    for run in cell["runs"]:  # completion tokens over verify steps: the prefill token of each request on top
        steps = run["total_verify_ct"]
        assert steps == run["completed"] * -(-(output_len - 1) // 3), run
        assert run["accept_length"] == pytest.approx(run["total_output_tokens"] / steps)
