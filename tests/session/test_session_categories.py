"""Per-category accept-length gates in the session (issue 16): which categories a level sends,
the family counting them, each category gated on its own stored per-run figures, and the
baseline samples that carry them. Unit tests: the session's state is built by hand."""

from __future__ import annotations

from pathlib import Path

import pytest
from emulator_suite import emulator_suite_toml
from session_support import fake_server

from specguard.config import load_suite
from specguard.labels import GateLabel, Verdict, gate_label, is_history_gate
from specguard.measure.metrics import CategorySummary, RunMetrics
from specguard.measure.sweep import CellMeasurement
from specguard.report.verdict_text import message
from specguard.session import GateSession, PlannedTest, RunOptions
from specguard.session.cells import metric_values
from specguard.store.baseline_file import RunSample, StoredSession
from specguard.store.baselines import BaselineStore

SKIP = Verdict.SKIP

CATS = ("chat", "code", "math", "summarisation")


def category_session(tmp_path: Path, kind: str = "categories") -> GateSession:
    text = emulator_suite_toml().replace('kind = "random-ids"', f'kind = "{kind}"')
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "suite.toml").write_text(text)
    opts = RunOptions(baseline_dir=tmp_path / "baselines", log_dir=tmp_path / "logs")
    return GateSession(load_suite(tmp_path / "suite.toml"), opts)


def run_with(accepts: dict[str, float], overall: float = 3.0) -> RunMetrics:
    cats = {c: CategorySummary(requests=4, completed=4, output_tokens=256, output_throughput=100.0,
                               throughput_share=0.25, accept_length=a, total_verify_ct=int(256 / a))
            for c, a in accepts.items()}
    return RunMetrics(concurrency=4, num_requests=16, completed=16, failed=0, duration_s=1.0, total_input_tokens=512,
                      total_output_tokens=1024, output_throughput=1024.0, request_throughput=16.0,
                      accept_length=overall, total_verify_ct=341, categories=cats)


def test_gate_labels_name_the_category():
    assert gate_label("accept_length", "code") == "accept_length[code]" and gate_label("throughput") == "throughput"
    assert GateLabel.parse("accept_length[code]") == GateLabel("accept_length", "code")
    assert GateLabel.parse("speculation") == GateLabel("speculation", "")
    assert is_history_gate("accept_length[code]") and not is_history_gate("speculation")


def test_a_level_has_category_tests_only_when_its_runs_send_two_or_more_categories(tmp_path):
    sg = category_session(tmp_path)
    assert sg.categories_at(1) == list(CATS)  # 4 requests per run, round robin over the four sets
    # the 30 shipped text prompts carry categories, but suites recorded before these tests keep their ids
    assert category_session(tmp_path / "t", "text").workload.prompt(0).category
    assert category_session(tmp_path / "t", "text").categories_at(4) == []
    assert category_session(tmp_path / "r", "random-ids").categories_at(4) == []


def test_the_family_counts_the_category_tests_and_only_accept_length_has_them(tmp_path):
    sg = category_session(tmp_path)
    tests = [PlannedTest("eagle3", 4, "accept_length")] + [PlannedTest("eagle3", 4, "accept_length", c) for c in CATS]
    plan = sg.plan(tests + [PlannedTest("eagle3", 4, "throughput")])
    # weighted shares (gates.family_alphas): 5 accept-length tests at 0.25 and 1 throughput test at 1
    assert plan.family_size == 6 and plan.alpha_cell == pytest.approx(0.01 / 2.25)
    assert plan.alpha_for("accept_length", "eagle3", 4, "code") == pytest.approx(0.01 * 0.25 / 2.25)
    assert plan.selected_cells == [("eagle3", 4)]  # one cell measured, six tests decided from it
    with pytest.raises(ValueError, match="only accept_length has per-category tests"):
        sg.plan([PlannedTest("eagle3", 4, "throughput", "code")])


def test_each_category_is_gated_on_its_own_stored_figures(tmp_path):
    sg = category_session(tmp_path)
    sg.plan([PlannedTest("eagle3", 4, "accept_length")] + [PlannedTest("eagle3", 4, "accept_length", c) for c in CATS])
    fake_server(sg, "eagle3")
    base = {"chat": 2.80, "code": 3.28, "math": 3.10, "summarisation": 2.92}
    jitter = (0.995, 1.0, 1.005)
    stored = [RunSample.from_metrics(run_with({c: a * j for c, a in base.items()}, 3.01 * j), i, "L0")
              for i, j in enumerate(jitter)]
    assert set(stored[0].categories) == set(CATS) and stored[0].categories["code"]["accept_length"] == pytest.approx(3.28 * 0.995)
    store = BaselineStore(tmp_path / "baselines")
    for k in range(3):
        store.record_sessions("eagle3", sg.histories.fingerprint("eagle3"),
                              {4: StoredSession(f"s{k}", "2026-11-29T00:00:00+00:00", {}, stored)}, keep=5)
    now = {**base, "code": base["code"] * 0.82}  # a drop on code prompts only
    sg.cells.cells[("eagle3", 4)] = CellMeasurement("eagle3", 4, runs=[run_with({c: a * j for c, a in now.items()}, 2.873 * j)
                                                                 for j in jitter])
    assert metric_values(sg.cells[("eagle3", 4)], "accept_lengths[code]") == pytest.approx([3.28 * 0.82 * j for j in jitter])
    code = sg.accept_length_result("eagle3", 4, "code")
    assert (str(code.gate), code.verdict) == ("accept_length[code]", "fail"), message(code)
    assert message(code).startswith("accept_length[code] eagle3 c4: ")
    for c in ("chat", "math", "summarisation"):
        assert sg.accept_length_result("eagle3", 4, c).verdict == "pass"
    overall = sg.accept_length_result("eagle3", 4)
    assert str(overall.gate) == "accept_length" and overall.estimate.ratio == pytest.approx(2.873 / 3.01, rel=1e-3)
    # a category the stored runs lack is a skip saying so, never a pass
    sg.cells[("eagle3", 4)].runs[0].categories["poetry"] = sg.cells[("eagle3", 4)].runs[0].categories["code"]
    r = sg.accept_length_result("eagle3", 4, "poetry")
    assert r.verdict == SKIP and "no accept lengths for prompt category 'poetry'" in message(r), message(r)
