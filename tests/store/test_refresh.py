"""One `--update-baselines` invocation: staged writes committed all or nothing, and what it did
as data (store/refresh.py), in the words the summary prints (report/baseline_text.py)."""

from __future__ import annotations

import errno
import json
from pathlib import Path

from specguard.labels import Level
from specguard.report.baseline_text import document_lines, outcome_lines, problem_text, written_line
from specguard.store.baseline_file import Fingerprint, RunSample, StoredSession
from specguard.store.baselines import BaselineStore, BaselineWrite, StagedWrite
from specguard.store.refresh import (
    BaselineOutcome,
    BaselineProblem,
    BaselineStage,
    ProblemKind,
    Refresh,
    SkippedConfig,
    WriteFailureKind,
    commit_baseline_stages,
    stage_problems,
    write_failure,
)

C1, C4, C16, R8 = Level(1), Level(4), Level(16), Level(8, rate=True)


def session(sid: str, tok: list[float]) -> StoredSession:
    runs = [RunSample(i, "L1", t, 1000, 1000 / t, 8, 0, 3.0, 333) for i, t in enumerate(tok)]
    return StoredSession(session_id=sid, date="2026-11-29T00:00:00+00:00", provenance={"git_commit": "abc"}, runs=runs)


def _reason(outcome: BaselineOutcome) -> str:
    return outcome_lines(outcome)[0]


def test_a_store_that_cannot_be_written_is_one_line_naming_the_path_and_the_fix(tmp_path):
    from specguard.report.baseline_text import write_failure_text
    d = tmp_path / "b"
    in_the_way = write_failure(FileExistsError(17, "File exists", str(d)), d)
    assert in_the_way.kind == WriteFailureKind.IN_THE_WAY and in_the_way.where == str(d)
    assert "a file is in the way" in write_failure_text(in_the_way)
    assert write_failure_text(write_failure(PermissionError(13, "Permission denied", str(d)), d)) == (
        f"cannot write baselines under {d}: permission denied; make it writable or pass --baseline-dir DIR")
    full = write_failure_text(write_failure(OSError(errno.ENOSPC, "No space left on device", str(d / "x.json")), d))
    assert full.startswith(f"cannot write baselines under {d / 'x.json'}: the disk is full") and "\n" not in full
    assert write_failure_text(write_failure(ValueError("Out of range float values"), d)) == (
        "ValueError: Out of range float values")
    d.write_text("a file where the directory goes")
    stage = BaselineStage(complete=True, problems=[], writes=[StagedWrite("eagle3", Fingerprint({"a": 1}),
                                                                          {4: session("s1", [100.0, 101.0])})])
    out = commit_baseline_stages([stage], BaselineStore(d), keep=5)
    assert out.failed and out.write_failed and not out.written and out.result == Refresh.WRITE_FAILED
    assert _reason(out).startswith(f"nothing written: cannot write baselines under {d}") and d.read_text().startswith("a file")


# -- the parts of an all-or-nothing refresh --------------------------------------------------------
def test_stage_problems_put_the_interrupt_first_and_name_each_uncovered_cell_once():
    planned = [("eagle3", C4), ("eagle3", C16), ("baseline", C4)]
    failed = BaselineProblem(ProblemKind.HAD_ERRORS, "eagle3", C16, "3 failed requests")
    gw0 = BaselineStage(complete=False, problems=[failed], writes=[], planned=planned, covered=[("eagle3", C4)])
    gw1 = BaselineStage(complete=True, problems=[], writes=[], planned=planned, covered=[])
    # eagle3 c16 is the subject of gw0's problem already; baseline c4 was measured by nobody
    assert stage_problems([gw0, gw1], interrupted=True) == [
        BaselineProblem(ProblemKind.INTERRUPTED), failed, BaselineProblem(ProblemKind.NOT_MEASURED, "baseline", C4)]
    assert [problem_text(p) for p in stage_problems([gw0, gw1], interrupted=True)] == [
        "the run was interrupted", "eagle3 c16 had errors (3 failed requests)", "baseline c4 not measured"]
    # every worker of an interrupted run says so: one problem, first, whoever said it
    again = BaselineStage(complete=False, problems=[failed, BaselineProblem(ProblemKind.INTERRUPTED)], writes=[])
    assert stage_problems([again, again], interrupted=False) == [BaselineProblem(ProblemKind.INTERRUPTED), failed]
    assert stage_problems([again], interrupted=True) == [BaselineProblem(ProblemKind.INTERRUPTED), failed]
    assert stage_problems([BaselineStage(complete=True, problems=[], writes=[], planned=planned, covered=planned)],
                          interrupted=False) == []


def test_a_request_rate_cell_is_named_by_its_level():
    """Problems carry the Level, so a request-rate sweep's cells read r8, never c8 (issue 29)."""
    stage = BaselineStage(complete=True, problems=[], writes=[], planned=[("eagle3", R8)], covered=[])
    (missing,) = stage_problems([stage], interrupted=False)
    assert missing == BaselineProblem(ProblemKind.NOT_MEASURED, "eagle3", R8)
    assert problem_text(missing) == "eagle3 r8 not measured"
    assert problem_text(BaselineProblem(ProblemKind.NOT_MEASURED, "eagle3", R8, "server exited")) == (
        "eagle3 r8 not measured (server exited)")


def test_a_refresh_with_problems_writes_nothing_and_shows_three_of_them(tmp_path):
    write = StagedWrite("eagle3", Fingerprint({"a": 1}), {4: session("s1", [100.0, 101.0])})
    problems = [BaselineProblem(ProblemKind.NOT_MEASURED, f"p{i}", C4) for i in range(1, 6)]
    skipped = SkippedConfig("vllm", "no such engine here")
    stage = BaselineStage(complete=False, problems=problems, writes=[write], skipped=[skipped, skipped])
    out = commit_baseline_stages([stage], BaselineStore(tmp_path), keep=5)
    assert out.result == Refresh.INCOMPLETE and out.problems == tuple(problems) and out.skipped == (skipped,)
    assert outcome_lines(out) == [
        "nothing written (all or nothing): p1 c4 not measured; p2 c4 not measured; p3 c4 not measured; and 2 more",
        "vllm: nothing to write (skipped: no such engine here)"]
    assert not out.written and not out.write_failed
    assert not (tmp_path / "eagle3.json").exists()
    nothing = commit_baseline_stages([BaselineStage(complete=True, problems=[], writes=[])], BaselineStore(tmp_path), 5)
    assert nothing.result == Refresh.NOTHING_MEASURED and outcome_lines(nothing) == ["nothing written: no cell was measured"]
    assert outcome_lines(BaselineOutcome(Refresh.NOT_REQUESTED)) == []


def test_written_line_names_the_replaced_file_only_when_there_was_one(tmp_path):
    path = str(tmp_path / "eagle3.json")
    write = BaselineWrite("eagle3", path, (C4, R8), sessions_kept=3)
    assert written_line(write) == f"eagle3: wrote 2 cell(s) to {path}"
    assert written_line(BaselineWrite("eagle3", path, (C4, R8), 3, "not valid JSON")) == (
        f"eagle3: wrote 2 cell(s) to {path} (replaced an unusable file: not valid JSON)")


def test_a_written_refresh_says_what_each_file_holds_now(tmp_path):
    store = BaselineStore(tmp_path)
    fp = Fingerprint({"a": 1})
    for i in range(3):
        stage = BaselineStage(complete=True, problems=[],
                              writes=[StagedWrite("eagle3", fp, {4: session(f"s{i}", [100.0]), "r8": session(f"r{i}", [9.0])})])
        out = commit_baseline_stages([stage], store, keep=2)
    assert out.result == Refresh.WRITTEN and out.paths == [str(tmp_path / "eagle3.json")]
    assert out.writes == (BaselineWrite("eagle3", str(tmp_path / "eagle3.json"), (C4, R8), sessions_kept=2),)
    assert outcome_lines(out) == [f"eagle3: wrote 2 cell(s) to {tmp_path / 'eagle3.json'}"]


def test_an_outcome_reads_back_from_the_results_document_and_renders_the_same(tmp_path):
    outcomes = [
        BaselineOutcome(Refresh.WRITTEN, writes=(BaselineWrite("e", "/b/e.json", (C4, R8), 2, "bad"),),
                        skipped=(SkippedConfig("v", "why"),)),
        BaselineOutcome(Refresh.INCOMPLETE, problems=(BaselineProblem(ProblemKind.INTERRUPTED),
                                                      BaselineProblem(ProblemKind.HAD_ERRORS, "e", C16, "x"))),
        BaselineOutcome(Refresh.WRITE_FAILED, failure=write_failure(PermissionError(13, "no", "/b"), Path("/b"))),
    ]
    for o in outcomes:
        stored = json.loads(json.dumps(o.to_json()))  # as a results file holds it
        assert BaselineOutcome.from_json(stored) == o
        doc = {"baseline_outcome": stored, "baseline_updates": ["(ignored: the data is there)"]}
        assert document_lines(doc) == outcome_lines(o)
    # a file written before the data: its lines as that specguard worded them
    assert document_lines({"baseline_updates": ["eagle3: wrote 2 cell(s) to x"]}) == ["eagle3: wrote 2 cell(s) to x"]


def test_a_stage_travels_to_the_xdist_controller_whole():
    stage = BaselineStage(complete=False, problems=[BaselineProblem(ProblemKind.NOT_MEASURED, "e", R8, "why")],
                          writes=[StagedWrite("e", Fingerprint({"x": 1}), {4: session("s", [1.0]), "r8": session("t", [2.0])})],
                          skipped=[SkippedConfig("v", "skip")], planned=[("e", R8), ("e", C4)], covered=[("e", C4)])
    assert BaselineStage.from_json(json.loads(json.dumps(stage.to_json()))) == stage
