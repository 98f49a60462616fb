"""The suite on a ShareGPT-format file made here (issue 16; nothing is downloaded): the workload
reads bench_serving's layout, its per-entry categories give per-category accept-length tests,
and baselines record and gate as with any workload.

pytest runs perf_tests in a subprocess against an emulator server on 127.0.0.1 (no HTTP mocked).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from emulator_suite import emulator_suite_toml
from test_e2e_suite import failed, run_suite

from specguard import datasets

pytestmark = pytest.mark.e2e


def write_sharegpt(path: Path) -> Path:
    """8 code and 8 chat conversations (shipped prompt texts, so the emulator's per-category
    acceptance applies), plus one single-turn entry that bench_serving's reader skips."""
    entries = []
    for category in ("code", "chat"):
        for text in datasets.category_prompts(category)[:8]:
            entries.append({"id": f"{category}-{len(entries)}", "category": category,
                            "conversations": [{"from": "human", "value": text}, {"from": "gpt", "value": "..."}]})
    entries.append({"id": "lonely", "conversations": [{"from": "human", "value": "no answer"}]})
    path.write_text(json.dumps(entries))
    return path


def suite_toml(sharegpt: Path) -> str:
    return emulator_suite_toml(
        sweep="concurrency = [4]\nrequests_per_worker = 4\nwarmup = 1\nrepeats = 2\n",
        workload=f'kind = "sharegpt"\npath = "{sharegpt}"\noutput_len = 32\n', tolerances="accept_length = 0.08\n",
        must_win_up_to=None)


def test_the_suite_runs_on_a_sharegpt_file_with_per_category_tests(tmp_path: Path) -> None:
    data = write_sharegpt(tmp_path / "sharegpt.json")
    suite = tmp_path / "suite.toml"
    suite.write_text(suite_toml(data))
    select = ("-k", "eagle3 and not beats_baseline")  # eagle3's own tests: one server launched
    code, out, res = run_suite(tmp_path, suite, *select, "--update-baselines")
    assert code == 0, out
    expected = {"test_throughput[eagle3-c4]", "test_accept_length[eagle3-c4]",
                "test_accept_length[eagle3-c4-chat]", "test_accept_length[eagle3-c4-code]"}
    assert expected <= set(res), sorted(res)

    results = tmp_path / "results.json"
    code, out, res = run_suite(tmp_path, suite, *select, "--require-baselines", "--results-json", str(results))
    assert code == 0 and not failed(res), out
    assert expected <= {k for k, v in res.items() if v == "passed"}, res
    doc = json.loads(results.read_text())
    (cell,) = [c for c in doc["cells"] if c["config"] == "eagle3"]
    assert all(set(r["categories"]) == {"code", "chat"} for r in cell["runs"])
    code_al, chat_al = (cell["summary"]["categories"][c]["accept_length"] for c in ("code", "chat"))
    print(f"sharegpt file: accept length code {code_al:.3f}, chat {chat_al:.3f}")
    assert code_al > chat_al  # the fast profile accepts code drafts more often than chat (docs/workloads.md)
    assert doc["workload"]["kind"] == "sharegpt" and doc["workload"]["path"] == str(data)
