"""The results document's parts and the report's named steps, one concept per test (no servers)."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest
from gate_support import result
from synthetic_results import seed_a_doc

from specguard.decide.prior import SpreadSource
from specguard.decide.result import Against, Attribution, Drift, Factors, GateResult, Half, Problem, Versus, Why
from specguard.decide.stats import RatioEstimate
from specguard.notes import Note, NoteKind
from specguard.report import plots, resolution, results, schema, terminal
from specguard.report.merge import merged_servers
from specguard.report.results import decision_dict, decision_result, spread_source_doc
from specguard.report.summary import category_medians, cell_summary, combined_load_model


def _keys(typed_dict: type) -> set[str]:
    return set(typed_dict.__required_keys__) | set(typed_dict.__optional_keys__)


def _estimate(**kw: object) -> RatioEstimate:
    fields = dict(ratio=0.98, low=0.95, high=1.01, threshold=0.97, p_value=0.2, dof=4.0, confidence=0.998,
                  between_sd=0.01, between_source=SpreadSource())
    return RatioEstimate(**{**fields, **kw})


# -- decisions as stored ----------------------------------------------------------------------------
def test_the_typed_decision_names_every_field_the_gate_result_stores():
    """decision_dict stores GateResult and RatioEstimate with asdict: a field added to either must be
    added to DecisionDoc / EstimateDoc too, or the renderers read keys mypy does not know."""
    r = result("throughput", "eagle3", 16, "inconclusive", _estimate(test_at=1.0), current=100.0, reference=102.0,
               alpha=0.001)
    d = decision_dict(r)
    assert set(d) == {f.name for f in dataclasses.fields(GateResult)}
    assert set(d) <= _keys(schema.DecisionDoc)
    assert set(d["estimate"]) == {f.name for f in dataclasses.fields(RatioEstimate)} == _keys(schema.EstimateDoc)
    # derived by the session, and an older file's wording (report/upgrade.py): not the gate's
    assert _keys(schema.DecisionDoc) - set(d) == {"detectable_drop", "legacy_message"}


def test_a_stored_decision_reads_back_as_the_gate_produced_it():
    r = result("accept_length[code]", "eagle3", 4, "fail", _estimate(pass_low=0.96), current=2.1, reference=2.4,
               alpha=0.002, versus=Versus(Against.BASELINE, sessions=3), tolerance=0.03, rule="significant",
               attribution=Attribution(Half.DRAFTER, _estimate(), None), factors=Factors(2.0, 5.0, 8.0),
               problem=Problem(Why.ACCEPT_DRIFT), drift=Drift(-0.09, 6, 0.001, 0.01), notes=(Note.of(NoteKind.OUTLIER_RUN, run=2, tok_s=812.5),))
    stored = json.loads(json.dumps({**decision_dict(r), "detectable_drop": 0.03}))  # as a file holds it
    assert decision_result(stored) == r
    assert decision_result({**decision_dict(result("speculation", "eagle3", 4, "skip")),
                            "estimate": None}).estimate is None


def test_a_missing_history_is_stored_as_its_gap_and_an_older_files_line_still_renders():
    from specguard.labels import Level
    from specguard.report.results import decision_text, problem_doc
    from specguard.report.verdict_text import message
    from specguard.store.baseline_file import FieldDifference
    from specguard.store.gaps import GapKind, HistoryGap

    gap = HistoryGap(GapKind.OTHER_ENVIRONMENT, "eagle3", "/b/eagle3.json", Level(8, rate=True),
                     (FieldDifference("tp_size", 1, 2),), record_command="pytest perf_tests --update-baselines")
    r = result("throughput", "eagle3", 8, "skip", rate=True, problem=Problem(Why.OTHER_ENVIRONMENT, gap))
    d = decision_dict(r)
    assert set(problem_doc(Problem(Why.OTHER_ENVIRONMENT, gap))) == _keys(schema.ProblemDoc) - {"reason"}
    assert d["problem"]["detail"] == "" and d["problem"]["gap"]["differing"] == [{"field": "tp_size", "stored": 1, "now": 2}]
    assert decision_text(d) == message(r) == (
        "baseline for eagle3 r8 was recorded with another environment; differing fields: tp_size: stored 1, now 2. "
        "Not compared. To accept this environment, create one with: pytest perf_tests --update-baselines")
    # a schema-3 file written before gaps were data: no `gap`, the line in `detail`, rendered as worded
    old = {**d, "problem": {k: v for k, v in d["problem"].items() if k != "gap"} | {"detail": "no baseline for x"}}
    assert decision_result(old).problem.detail == "no baseline for x" and decision_text(old) == "no baseline for x"


def test_why_a_configuration_was_not_measured_is_stored_as_its_reason_and_an_older_files_line_still_renders():
    from specguard.report.results import decision_text, problem_doc
    from specguard.report.verdict_text import message

    reason = Note.of(NoteKind.SERVER_EXITED, config="eagle3", code=-9)
    r = result("throughput", "eagle3", 8, "error", problem=Problem(Why.UNAVAILABLE, reason))
    d = json.loads(json.dumps(decision_dict(r)))  # as a file holds it
    assert set(problem_doc(Problem(Why.UNAVAILABLE, reason))) == _keys(schema.ProblemDoc) - {"gap"}
    assert d["problem"]["detail"] == "" and d["problem"]["reason"] == {"kind": "server_exited", "config": "eagle3", "code": -9}
    assert decision_result(d) == r
    assert decision_text(d) == message(r) == "server 'eagle3' exited (code -9) during the sweep"
    ref = result("speculation", "eagle3", 8, "error",
                 problem=Problem(Why.REFERENCE_FAILED, Note.of(NoteKind.SERVER_EXITED, config="baseline", code=""),
                                 reference="baseline"))
    assert message(ref).endswith("reference 'baseline' could not be measured: server 'baseline' exited (code None) "
                                 "during the sweep")
    # a file written before reasons were data: no `reason`, the line in `detail`, rendered as worded
    old = {**d, "problem": {k: v for k, v in d["problem"].items() if k != "reason"} | {"detail": "server gone"}}
    assert decision_result(old).problem.detail == "server gone" and decision_text(old) == "server gone"


# -- a cell's summary ---------------------------------------------------------------------------------
def _run(tok_s: float, **kw: object) -> dict:
    return {"output_throughput": tok_s, "latency_ms": {"median_ttft_ms": 10.0, "p99_itl_ms": 4.0}, **kw}


def test_a_cell_summary_is_the_median_of_its_runs_and_names_what_is_missing():
    s = cell_summary([_run(100.0, failed=1), _run(300.0), _run(200.0, failed=2, accept_length=2.5)])
    assert (s["runs"], s["output_throughput"], s["output_throughput_min"], s["output_throughput_max"]) == (3, 200.0, 100.0, 300.0)
    assert s["failed_requests"] == 3 and s["accept_length"] == 2.5
    assert s["median_ttft_ms"] == 10.0 and s["p99_itl_ms"] == 4.0 and s["median_e2e_latency_ms"] is None
    assert not {"request_goodput", "slo_attainment", "load_model", "categories"} & set(s)  # only with SLOs, loads, categories
    with_slo = cell_summary([_run(1.0, request_goodput=2.0, slo_attainment=0.5), _run(1.0)])
    assert with_slo["request_goodput"] == 2.0 and with_slo["slo_attainment"] == 0.5


def test_the_load_model_is_the_runs_one_or_every_distinct_one():
    assert combined_load_model([_run(1.0, load_model="closed-loop c=4")] * 2) == "closed-loop c=4"
    assert combined_load_model([_run(1.0, load_model="poisson 8 req/s, cap 64"), _run(1.0, load_model="closed-loop c=4"),
                                _run(1.0)]) == "closed-loop c=4; poisson 8 req/s, cap 64"
    assert combined_load_model([_run(1.0), _run(1.0, load_model=None)]) == ""


def test_category_medians_count_a_run_without_the_category_as_not_measured_there():
    runs = [_run(1.0, categories={"code": {"accept_length": 3.0, "output_throughput": 10.0}}),
            _run(1.0, categories={"code": {"accept_length": 2.0}, "chat": {"accept_length": 1.5}}),
            _run(1.0)]
    out = category_medians(runs)
    assert list(out) == ["chat", "code"]
    assert out["code"] == {"accept_length": 2.5, "output_throughput": 10.0, "throughput_share": None}
    assert out["chat"]["accept_length"] == 1.5
    assert category_medians([_run(1.0)]) == {}


# -- merging pytest-xdist workers' documents ---------------------------------------------------------
def test_a_worker_that_read_the_server_replaces_one_that_only_skipped_it():
    ran, skipped = seed_a_doc(), seed_a_doc()
    skipped["servers"]["mtp"] = {**skipped["servers"]["mtp"], "effective_args": None, "failure": "skipped here"}
    assert merged_servers([skipped, ran])["mtp"] is ran["servers"]["mtp"]
    assert merged_servers([ran, skipped])["mtp"] is ran["servers"]["mtp"]  # nothing read: the first record stays


# -- the terminal table's labels ---------------------------------------------------------------------
def _decision(gate: str, verdict: str, enforced: bool = True) -> dict:
    return {"gate": gate, "config": "eagle3", "level": "c16", "verdict": verdict,
            "estimate": None, "current": None, "reference": None, "enforced": enforced, "alpha": None}


def _test(outcome: str, kind: str | None = None, gate: str = "throughput") -> dict:
    return {"nodeid": f"t[{gate}]", "config": "eagle3", "level": "c16", "gate": gate, "outcome": outcome,
            "verdict": None, "enforced": True, "kind": kind, "message": "m"}


@pytest.mark.parametrize("gate,verdict,enforced,test,updating,label", [
    # the test's outcome decides
    ("throughput", "pass", True, _test("failed", "regression"), False, "FAIL"),
    ("throughput", "skip", True, _test("failed", "not-measured"), False, "ERROR"),
    ("throughput", "skip", True, _test("skipped"), False, "skip"),
    # a passed test: the decision refines it
    ("throughput", "inconclusive", True, _test("passed"), False, "inconclusive"),
    ("throughput", "fail", True, _test("passed"), False, None),  # only Holm could fail it: its own row says so
    ("speculation", "fail", False, _test("passed"), False, "behind (info)"),
    ("throughput", "fail", True, _test("passed"), True, "recorded"),  # a refresh records the history gates
    ("speculation", "fail", True, _test("passed"), True, None),
    # no test outcome recorded (older files): the decision alone
    ("throughput", "error", True, None, False, "ERROR"),
    ("throughput", "skip", True, None, False, "skip"),
    ("throughput", "pass", True, None, False, None),
])
def test_verdict_labels(gate, verdict, enforced, test, updating, label):
    assert terminal.verdict_label(gate, _decision(gate, verdict, enforced), test, updating) == label


def test_a_gate_without_a_decision_is_blank_only_when_its_test_ran():
    assert terminal.verdict_label("throughput", None, None, False) == "-"
    assert terminal.verdict_label("throughput", None, _test("passed"), False) is None


def test_cells_are_keyed_by_their_tests_and_the_family_test_is_apart():
    doc = {"tests": [_test("passed"), _test("failed", "regression", "accept_length"),
                     {**_test("failed", "regression", "family_holm"), "config": None, "level": None}]}
    assert {k: sorted(v) for k, v in results.tests_by_cell(doc).items()} == {("eagle3", "c16"): ["accept_length", "throughput"]}
    assert terminal.family_test(doc)["gate"] == "family_holm"
    assert terminal.family_test({"tests": doc["tests"][:2]}) is None


# -- the notes under the table ------------------------------------------------------------------------
def test_the_inconclusive_cells_are_those_whose_test_passed_and_whose_gate_is_enforced():
    est = {"ratio": 0.99, "low": 0.95, "high": 1.03, "threshold": 0.97, "between_sd": 0.01,
           "between_source": spread_source_doc(SpreadSource())}
    kept = {**_decision("throughput", "inconclusive"), "estimate": est}
    doc = {"decisions": [kept,
                         {**kept, "gate": "accept_length"},  # its test failed: the table says so already
                         {**kept, "enforced": False},
                         {**kept, "verdict": "pass"},
                         {**kept, "level": "c4", "estimate": None}],
           "tests": [_test("passed"), _test("failed", "regression", "accept_length")]}
    assert resolution.inconclusive_estimates(doc) == [(kept, est)]


def test_accept_length_gates_are_held_to_their_own_prior():
    tol = {"prior_between_sd": 0.012, "prior_between_sd_accept": 0.003}
    assert resolution.prior_between_sd("accept_length[code]", tol) == 0.003
    assert resolution.prior_between_sd("accept_length", tol) == 0.003
    assert resolution.prior_between_sd("throughput", tol) == 0.012
    assert resolution.prior_between_sd("throughput", {}) == 0.0


def test_reference_cells_are_one_line_per_reference_and_users():
    doc = {"reference_roles": [{"config": "baseline", "level": "c16", "for": ["eagle3"]},
                               {"config": "baseline", "level": "c4", "for": ["eagle3"]},
                               {"config": "baseline", "level": "c64", "for": ["eagle3", "mtp"]}]}
    assert terminal.reference_lines(doc) == ["baseline: measured as reference for eagle3 (c4, c16)",
                                             "baseline: measured as reference for eagle3, mtp (c64)"]


def test_server_lines_say_differences_checks_and_failures_in_that_order():
    server = {"engine": "sglang", "command": [], "attached": True, "effective_args": None, "mode": "attached",
              "checks": [{"note": {"kind": "sweep_queues", "capacity": 48, "max_concurrency": 64, "per_rank": 0,
                                   "ranks": 0, "default_cap": 48}, "blocking": False, "strict": False},
                         {"note": {"kind": "attach_difference", "field": "model_path", "suite": "/a", "server": "/b"},
                          "blocking": True, "strict": True}],
              "differences": [{"field": "tp_size", "suite": 1, "server": 2}],
              "failure": "server exited (code 1)\nlog tail", "failure_skipped": False}
    assert terminal.server_lines({"servers": {"eagle3": server}, "configs": []}) == [
        "eagle3: attached server differs from the suite file: tp_size: suite file says 1, server runs 2",
        "eagle3: note: the server runs at most 48 requests at once (SGLang's default cap of 48 under speculation) but "
        "the sweep goes to 64: higher concurrency queues; set max_running_requests on every configuration for a fair sweep",
        "eagle3: ERROR: model_path: suite file says '/a', server runs '/b' (--strict-server-args)",
        "eagle3: ERROR: server exited (code 1)"]


# -- figures ------------------------------------------------------------------------------------------
def test_latency_points_leave_out_failed_cells_and_missing_figures():
    doc = seed_a_doc()
    cells = [c for c in doc["cells"] if c["config"] == "baseline"]
    cells[0]["error"] = "server exited"
    cells[1]["summary"]["p99_ttft_ms"] = None
    points = plots.latency_points(doc, "baseline", "p99_ttft_ms")
    assert [level for level, _ in points] == sorted(int(c["level"][1:]) for c in cells[2:])
    assert all(isinstance(v, float) and math.isfinite(v) for _, v in points)
    assert plots.latency_points(doc, "nobody", "p99_ttft_ms") == []
