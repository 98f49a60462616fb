"""Per-category accept length in the suite (issue 16): a draft-model regression that hits only
code prompts fails test_accept_length[eagle3-c8-code] by name, while the run-wide accept length,
which averages it away, does not fail.

pytest runs perf_tests in a subprocess against emulator servers on 127.0.0.1 (no HTTP mocked).
The emulator recognises the shipped category prompts by their text, and
`--emulator-category-accept code=0.85` multiplies the code category's acceptance per draft
position (docs/workloads.md: code falls ~18%, the whole run ~4.6%).
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from emulator_suite import emulator_suite_toml
from test_e2e_suite import failed, run_suite

from specguard.report.results import family_holm

pytestmark = pytest.mark.e2e
CATEGORIES = ("chat", "code", "math", "summarisation")

# accept_length tolerance 9%: above the whole run's drop (~4.6% on average; 3.7-6.0% in four runs),
# far below the code category's ~18%,
# so the test shows what the issue asks: the overall figure alone would not have failed.
SUITE = emulator_suite_toml(
    sweep='concurrency = [8]\nrequests_per_worker = 8\nwarmup = 1\nrepeats = 3\n',
    workload='kind = "categories"\noutput_len = 64\n', tolerances="accept_length = 0.09\n", must_win_up_to=None)


def test_a_drop_on_code_prompts_only_fails_the_code_categorys_accept_length_test(tmp_path: Path) -> None:
    suite = tmp_path / "suite.toml"
    suite.write_text(SUITE)
    select = ("-k", "eagle3 and accept_length")  # no speculation test: the reference is not launched
    code, out, res = run_suite(tmp_path, suite, *select, "--update-baselines")
    assert code == 0, out
    ids = {f"test_accept_length[eagle3-c8-{c}]" for c in CATEGORIES} | {"test_accept_length[eagle3-c8]"}
    assert ids <= set(res), sorted(res)
    stored = json.loads((tmp_path / "baselines" / "eagle3.json").read_text())
    runs = [r for e in stored["entries"].values() for s in e["cells"]["c8"]["sessions"] for r in s["runs"]]
    assert len(runs) == 3 and all(set(r["categories"]) == set(CATEGORIES) for r in runs)

    results = tmp_path / "results.json"
    code, out, res = run_suite(tmp_path, suite, *select, "--require-baselines", "--results-json", str(results),
                               "--report-dir", str(tmp_path / "report"),
                               "--server-args", "eagle3=--emulator-category-accept code=0.85")
    assert code == 1, out
    assert failed(res) == {"test_accept_length[eagle3-c8-code]"}, out
    assert all(res[f"test_accept_length[eagle3-c8-{c}]"] == "passed" for c in CATEGORIES if c != "code"), res
    assert res["test_accept_length[eagle3-c8]"] == "passed", out

    doc = json.loads(results.read_text())
    by_gate = {d["gate"]: d for d in doc["decisions"]}
    overall, code_cat = by_gate["accept_length"], by_gate["accept_length[code]"]
    ratios = {g: (round(d["estimate"]["ratio"], 3), d["verdict"]) for g, d in sorted(by_gate.items())}
    print(f"accept-length ratios vs baseline: {ratios}")
    assert code_cat["verdict"] == "fail" and code_cat["estimate"]["ratio"] < 0.9, ratios
    assert 0.9 < overall["estimate"]["ratio"] < 1.0 and overall["verdict"] != "fail", ratios  # averaged away
    assert "accept_length[code] eagle3 c8:" in out and "-> FAIL" in out
    # the family counts the category tests: 1 overall + 4 categories, one Holm family
    assert next(t for t in doc["tests"] if t["gate"] == "family_holm")["outcome"] == "passed"
    assert "(Holm, alpha 0.01, 5 gate tests)" in family_holm(doc)["message"], family_holm(doc)
    alphas = {d["alpha"] for d in doc["decisions"]}
    assert len(alphas) == 1 and alphas.pop() == pytest.approx(0.01 / 5), doc["decisions"]
    cell = next(c for c in doc["cells"] if c["config"] == "eagle3")
    assert set(cell["summary"]["categories"]) == set(CATEGORIES)
    # one name in every output: table, markdown, HTML, JUnit
    assert "FAIL: accept[code]" in out
    line = next(ln for ln in out.splitlines() if ln.startswith("eagle3 c8 accept length: overall "))
    assert "code " in line and "FAIL" in line.split("by category:")[1] and "FAIL" not in line.split("by category:")[0], line
    assert "accept[code]" in (tmp_path / "report" / "summary.md").read_text()
    assert "accept[code]" in (tmp_path / "report" / "report.html").read_text()
    junit = max(tmp_path.glob("junit-*.xml"), key=lambda p: p.stat().st_mtime)
    case = next(c for c in ET.parse(junit).getroot().iter("testcase") if c.get("name") == "test_accept_length[eagle3-c8-code]")
    props = {p.get("name"): p.get("value") for p in case.iter("property")}
    assert props["gate"] == "accept_length[code]" and props["category"] == "code", props
