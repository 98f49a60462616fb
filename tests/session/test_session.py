"""The session: plan (family and references), attach-mode differences, stored references of the
same environment only, damaged baselines as errors, and all-or-nothing baseline writes.

Unit tests build the session's state by hand; the e2e tests start emulator servers on
127.0.0.1 (launched by the session, or by hand as a user would start SGLang) with no HTTP mocked.
"""

from __future__ import annotations

import fcntl
import json
import os
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from dataclasses import replace
from pathlib import Path

import httpx
import pytest
from emulator_suite import write_emulator_suite
from gate_support import result
from process_support import interruptible, kill_tree
from session_support import fake_cell, fake_server, make_session, make_suite, run, stored_session

from specguard.decide.prior import SpreadSource
from specguard.decide.result import GateResult, Why
from specguard.decide.stats import RatioEstimate
from specguard.engines import EffectiveArgs
from specguard.labels import Verdict
from specguard.measure.sweep import CellMeasurement
from specguard.notes import Note, NoteKind
from specguard.report.baseline_text import outcome_lines
from specguard.report.note_text import note_line
from specguard.report.results import decision_dict, decision_result, decision_text
from specguard.report.terminal import relaunch_texts
from specguard.report.verdict_text import message
from specguard.session import ConfigUnavailable, GateSession, PlannedTest, RunOptions
from specguard.session.history import is_speculative_field
from specguard.session.results import relaunch_doc
from specguard.session.servers import ServerState, attach_differences
from specguard.store.baseline_file import Fingerprint
from specguard.store.baselines import BaselineStore
from specguard.store.gaps import GapKind, HistoryGap
from specguard.store.refresh import BaselineOutcome, BaselineStage, commit_baseline_stages

ERROR, SKIP = Verdict.ERROR, Verdict.SKIP
NOT_ATTACHED = Note.of(NoteKind.NOT_ATTACHED, config="baseline", attached="eagle3")

REPO = Path(__file__).resolve().parents[2]


# -- plan ---------------------------------------------------------------------------------------
def test_plan_counts_the_selected_family_and_the_references_it_needs(tmp_path):
    sg = make_session(tmp_path)
    # `-k eagle3`: six eagle3 tests, no baseline test selected
    tests = [PlannedTest("eagle3", c, g) for c in (1, 4) for g in ("throughput", "accept_length", "speculation")]
    plan = sg.plan(tests)
    assert plan.family_size == 6
    # weighted Bonferroni (gates.family_alphas): throughput 1, accept length 0.25, must-win
    # speculation 2 (eagle3 must win up to c4 in this suite): 2 + 0.5 + 4 = 6.5 shares
    fam = sg.suite.tolerances.family_alpha
    assert sg.planner.current.alpha_cell == pytest.approx(fam / 6.5)
    assert plan.alpha_for("accept_length", "eagle3", 4) == pytest.approx(fam * 0.25 / 6.5)
    assert plan.alpha_for("speculation", "eagle3", 1) == pytest.approx(fam * 2 / 6.5)
    assert sum(plan.alphas.values()) == pytest.approx(fam)
    assert plan.reference_cells == {("baseline", 1): ["eagle3"], ("baseline", 4): ["eagle3"]}
    assert plan.selected_cells == [("eagle3", 1), ("eagle3", 4)]
    # only the c1 speculation test selected: only baseline c1 travels with it
    plan = sg.plan([PlannedTest("eagle3", 1, "speculation"), PlannedTest("eagle3", 4, "throughput")])
    assert plan.reference_cells == {("baseline", 1): ["eagle3"]} and plan.family_size == 2
    with pytest.raises(ValueError, match="unknown gate"):
        sg.plan([PlannedTest("eagle3", 1, "latency")])


def test_alpha_is_read_only(tmp_path):
    sg = make_session(tmp_path)
    with pytest.raises(AttributeError):
        sg.planner.current.alpha_cell = 0.5  # type: ignore[misc]


# -- attach-mode differences -------------------------------------------------------------------
def test_attach_differences_name_each_suite_value_the_server_does_not_run(tmp_path):
    cfg = make_suite(tmp_path).servers["eagle3"]
    eff = EffectiveArgs(model_path="/models/other", speculative_algorithm="EAGLE3", num_steps=5, eagle_topk=4,
                        num_draft_tokens=8, max_running_requests=256, tp_size=1, draft_model_path=cfg.draft_model_path)
    lines = [note_line(d.note()) for d in attach_differences(cfg, eff)]
    assert lines == ["model_path: suite file says '/models/specguard-fast', server runs '/models/other'",
                     "num_steps: suite file says 3, server runs 5", "eagle_topk: suite file says 1, server runs 4",
                     "num_draft_tokens: suite file says 4, server runs 8",
                     "max_running_requests: suite file says 64, server runs 256"]
    same = EffectiveArgs(model_path=cfg.model_path, speculative_algorithm="EAGLE3", num_steps=3, eagle_topk=1,
                         num_draft_tokens=4, max_running_requests=64, tp_size=1)
    assert attach_differences(cfg, same) == []


def test_speculative_fields_are_told_from_the_environment():
    assert all(map(is_speculative_field, ["speculative_algorithm", "num_steps", "eagle_topk", "num_draft_tokens",
                                          "draft_model_path", "speculative_adaptive", "speculative_ngram_max_bfs_breadth"]))
    assert not any(map(is_speculative_field, ["model_path", "engine_version", "gpu", "tp_size", "max_running_requests",
                                              "attention_backend", "workload"]))


# -- stored references: same environment, all K sessions ---------------------------------------
def _record_reference(sg: GateSession, fields: dict, sessions: list[list[float]], c: int = 1) -> None:
    store = BaselineStore(sg.options.baseline_dir)
    for i, tok in enumerate(sessions):
        store.record_sessions("baseline", Fingerprint(fields), {c: stored_session(f"s{i}", tok)}, keep=5)


def _reference_fields(sg: GateSession, **changes) -> dict:
    """The fingerprint a baseline server of this environment would have had."""
    fake_server(sg, "baseline")
    fields = dict(sg.histories.fingerprint("baseline").fields)
    del sg.pool.states["baseline"]
    fields.update(changes)
    return fields


def test_speculation_uses_every_stored_session_of_the_same_environment_only(tmp_path):
    sg = make_session(tmp_path, server_urls={"eagle3": "http://127.0.0.1:9"})
    sg.plan([PlannedTest("eagle3", 1, "speculation")])
    fake_server(sg, "eagle3")
    fake_cell(sg, "eagle3", 1, [300.0, 303.0, 297.0])
    sg.pool.states["baseline"] = ServerState(failure=ConfigUnavailable(NOT_ATTACHED, skip=True))
    # another environment (another model), recorded later: must not be used
    _record_reference(sg, _reference_fields(sg, model_path="/models/other"), [[50.0, 51.0]] * 3)
    r = sg.speculation_result("eagle3", 1, None)
    assert r.verdict == SKIP
    assert "model_path: stored '/models/other', now '/models/specguard-fast'" in message(r)
    assert "another environment" in message(r)
    # the same environment: all three sessions and their spread are used
    _record_reference(sg, _reference_fields(sg), [[100.0, 101.0], [104.0, 103.0], [98.0, 99.0]])
    r = sg.speculation_result("eagle3", 1, None)
    assert r.verdict == "pass", message(r)
    assert "baseline (stored, 3 sessions, same environment)" in message(r)
    assert r.reference == pytest.approx(sum([100, 101, 104, 103, 98, 99]) / 6)


def test_a_stored_reference_may_differ_only_in_speculation_and_the_capacity_sglang_derives_from_it(tmp_path):
    sg = make_session(tmp_path, server_urls={"eagle3": "http://127.0.0.1:9"})
    fake_server(sg, "eagle3", max_running_requests=48)  # SGLang's default cap under speculation
    fake_cell(sg, "eagle3", 1, [300.0, 303.0, 297.0])
    sg.pool.states["baseline"] = ServerState(failure=ConfigUnavailable(NOT_ATTACHED, skip=True))
    _record_reference(sg, _reference_fields(sg, max_running_requests=128, decode_cuda_graph_bs=[1, 2, 4]),
                      [[100.0, 101.0], [104.0, 103.0]])
    r = sg.speculation_result("eagle3", 1, None)
    assert r.verdict == "pass" and "2 sessions, same environment" in message(r), message(r)
    _record_reference(sg, _reference_fields(sg, engine_version="0.5.22"), [[100.0, 101.0]])  # newer, other version
    assert "2 sessions, same environment" in message(sg.speculation_result("eagle3", 1, None))


def test_reference_measured_with_an_error_is_not_measured_never_a_stored_fallback(tmp_path):
    sg = make_session(tmp_path)
    sg.plan([PlannedTest("eagle3", 1, "speculation")])
    fake_server(sg, "eagle3")
    fake_cell(sg, "eagle3", 1, [300.0, 303.0])
    fake_cell(sg, "baseline", 1, [], error="ServerBusy: 3 running, 2 waiting requests not sent by specguard")
    _record_reference(sg, _reference_fields(sg), [[100.0, 101.0]] * 3)
    r = sg.speculation_result("eagle3", 1, None)
    assert r.verdict == ERROR and "reference baseline c1 could not be measured: ServerBusy" in message(r)


@pytest.mark.parametrize("content,what", [
    ("{trunc", "not valid JSON"),
    ('{"schema": "specguard-baseline", "schema_version": 1, "configuration": "mtp", "entries": {}}', "belongs to configuration 'mtp'"),
    ('{"hello": 1}', "not a specguard baseline"),
])
def test_a_damaged_or_foreign_baseline_is_an_error_naming_the_file(tmp_path, content, what):
    sg = make_session(tmp_path)
    fake_server(sg, "eagle3")
    fake_cell(sg, "eagle3", 1, [300.0, 303.0])
    path = tmp_path / "baselines" / "eagle3.json"
    path.parent.mkdir()
    path.write_text(content)
    for r in (sg.throughput_result("eagle3", 1), sg.accept_length_result("eagle3", 1)):
        assert r.verdict == ERROR, message(r)
        assert str(path) in message(r) and what in message(r)
    (tmp_path / "baselines" / "baseline.json").write_text(content.replace('"mtp"', '"eagle3"'))
    sg.pool.states["baseline"] = ServerState(failure=ConfigUnavailable(NOT_ATTACHED, skip=True))
    r = sg.speculation_result("eagle3", 1, None)
    assert r.verdict == ERROR and "baseline.json" in message(r)


def test_a_fingerprint_mismatch_is_a_skip_naming_the_fields_and_a_hint_for_this_run(tmp_path):
    sg = make_session(tmp_path, server_urls={None: "http://127.0.0.1:9"})
    fake_server(sg, "eagle3")
    fake_cell(sg, "eagle3", 1, [300.0, 303.0])
    fields = dict(sg.histories.fingerprint("eagle3").fields, max_running_requests=128)
    BaselineStore(tmp_path / "baselines").record_sessions("eagle3", Fingerprint(fields), {1: stored_session("s", [1.0, 2.0])}, keep=5)
    r = sg.throughput_result("eagle3", 1)
    assert r.verdict == SKIP
    assert "max_running_requests: stored 128, now 64" in message(r)
    assert "-k 'eagle3 and c1'" in message(r) and "--server-url http://127.0.0.1:9" in message(r)
    assert f"--baseline-dir {tmp_path / 'baselines'}" in message(r)


def test_each_missing_history_is_told_apart_and_reads_back_from_the_results_document(tmp_path):
    sg = make_session(tmp_path)
    fake_server(sg, "eagle3")
    sg.cells.cells[("eagle3", 1)] = CellMeasurement("eagle3", 1, runs=[replace(run(t), step_time_ms=5.0) for t in (300, 303)])
    store, path = BaselineStore(tmp_path / "baselines"), tmp_path / "baselines" / "eagle3.json"
    hint = sg.histories.record_hint("eagle3", 1)
    assert hint.startswith("pytest ") and "--update-baselines -k 'eagle3 and c1'" in hint
    seen = []

    def gap(r: GateResult, kind: GapKind, line: str) -> None:
        assert r.verdict == SKIP and r.problem is not None and isinstance(r.problem.detail, HistoryGap)
        assert r.problem.detail.kind == kind and message(r) == line
        seen.append(r)

    gap(sg.throughput_result("eagle3", 1), GapKind.NO_FILE, f"no baseline for eagle3 c1 in {path}; create one with: {hint}")
    # this environment recorded at another level only (65e213e worded it "recorded with another
    # environment; differing fields: ." though nothing differed): a first run of this cell
    fp = sg.histories.fingerprint("eagle3")
    store.record_sessions("eagle3", fp, {4: stored_session("s", [1.0, 2.0])}, keep=5)
    gap(sg.throughput_result("eagle3", 1), GapKind.NO_CELL, f"no baseline for eagle3 c1 in {path}; create one with: {hint}")
    assert sg.throughput_result("eagle3", 1).problem.why == Why.NO_BASELINE
    # recorded before step times were stored (so were 65e213e's; these sessions have none)
    store.record_sessions("eagle3", fp, {1: stored_session("s", [1.0, 2.0])}, keep=5)
    gap(sg.step_time_result("eagle3", 1), GapKind.NO_FIGURES,
        f"the baseline for eagle3 c1 in {path} has no step times (its runs were recorded without them); "
        f"create one with: {hint}")
    for r in seen:  # a results file holds the gap as data and renders the same line
        stored = json.loads(json.dumps(decision_dict(r)))
        assert stored["problem"]["detail"] == "" and stored["problem"]["gap"]["level"] == "c1"
        assert decision_result(stored) == r and decision_text(stored) == message(r)


def test_an_internal_error_in_a_gate_is_not_measured_never_a_regression(tmp_path):
    sg = make_session(tmp_path)
    fake_server(sg, "eagle3")
    fake_cell(sg, "eagle3", 1, [300.0, -1.0])  # log of a negative throughput: a bug upstream
    fields = sg.histories.fingerprint("eagle3").fields
    BaselineStore(tmp_path / "baselines").record_sessions("eagle3", Fingerprint(fields), {1: stored_session("s", [1.0, 2.0])}, keep=5)
    r = sg.throughput_result("eagle3", 1)
    assert r.verdict == ERROR and "internal error (a specguard bug)" in message(r)


# -- baseline writes: all or nothing --------------------------------------------------------------
def _reason(outcome: BaselineOutcome) -> str:
    """The refresh's first summary line: why nothing was written (report/baseline_text.py)."""
    return outcome_lines(outcome)[0]


def _complete_session(tmp_path: Path) -> GateSession:
    sg = make_session(tmp_path, update_baselines=True)
    sg.plan([PlannedTest(n, c, "throughput") for n in ("baseline", "eagle3") for c in (1, 4)])
    for name in ("baseline", "eagle3"):
        fake_server(sg, name)
        for c in (1, 4):
            fake_cell(sg, name, c, [100.0 + c, 101.0 + c])
    return sg


def test_baselines_are_written_only_when_every_planned_cell_was_measured(tmp_path):
    sg = _complete_session(tmp_path)
    del sg.cells.cells[("eagle3", 4)]  # e.g. interrupted before it
    out = sg.write_baselines()
    assert out.requested and not out.written
    assert _reason(out) == "nothing written (all or nothing): eagle3 c4 not measured"
    assert outcome_lines(sg.baseline_outcome) == [_reason(out)]
    assert not list(tmp_path.rglob("*.json"))

    sg = _complete_session(tmp_path)
    sg.cells[("baseline", 1)].error = "RuntimeError: /flush_cache answered 400"
    assert _reason(sg.write_baselines()).endswith("baseline c1 had errors (RuntimeError: /flush_cache answered 400)")

    sg = _complete_session(tmp_path)
    assert "the run was interrupted" in _reason(sg.write_baselines(interrupted=True))

    sg = _complete_session(tmp_path)
    out = sg.write_baselines()
    assert out.written and len(out.paths) == 2 and outcome_lines(out)[0].startswith("baseline: wrote 2 cell(s) to ")
    assert sg.write_baselines() is out  # one step, once


def test_reference_cells_block_the_commit_but_are_not_written(tmp_path):
    sg = make_session(tmp_path, update_baselines=True)
    sg.plan([PlannedTest("eagle3", 1, "speculation")])
    fake_server(sg, "eagle3")
    fake_server(sg, "baseline")
    fake_cell(sg, "eagle3", 1, [300.0, 301.0])
    fake_cell(sg, "baseline", 1, [100.0, 101.0], error="only 1 of 2 runs completed")
    assert "baseline c1 had errors" in _reason(sg.write_baselines())
    sg = make_session(tmp_path, update_baselines=True)
    sg.plan([PlannedTest("eagle3", 1, "speculation")])
    fake_server(sg, "eagle3")
    fake_server(sg, "baseline")
    fake_cell(sg, "eagle3", 1, [300.0, 301.0])
    fake_cell(sg, "baseline", 1, [100.0, 101.0])
    out = sg.write_baselines()
    assert out.written and [Path(p).name for p in out.paths] == ["eagle3.json"]


def test_written_files_follow_the_umask(tmp_path):
    old = os.umask(0o002)
    try:
        out = _complete_session(tmp_path).write_baselines()
    finally:
        os.umask(old)
    assert {oct(Path(p).stat().st_mode & 0o777) for p in out.paths} == {oct(0o664)}


def _worker(tmp_path: Path, worker: str, config: str) -> GateSession:
    """An xdist worker: it plans the whole selection (as every worker does) and measures its share."""
    sg = make_session(tmp_path / worker, update_baselines=True, worker_id=worker)
    sg.plan([PlannedTest(n, c, "throughput") for n in ("baseline", "eagle3") for c in (1, 4)])
    fake_server(sg, config)
    for c in (1, 4):
        fake_cell(sg, config, c, [100.0 + c, 101.0 + c])
    return sg


def _via_json(stage: BaselineStage) -> BaselineStage:
    return BaselineStage.from_json(json.loads(json.dumps(stage.to_json())))


def test_xdist_stages_commit_together_or_not_at_all(tmp_path):
    gw0, gw1 = _worker(tmp_path, "gw0", "baseline"), _worker(tmp_path, "gw1", "eagle3")
    stage0, stage1 = _via_json(gw0.stage_baselines()), _via_json(gw1.stage_baselines())
    assert stage0.complete and stage1.complete  # each answers only for its own share
    out = commit_baseline_stages([stage0], BaselineStore(tmp_path / "shared"), keep=5)  # gw1 crashed: no stage from it
    assert not out.written and _reason(out) == "nothing written (all or nothing): eagle3 c1 not measured; eagle3 c4 not measured"
    assert not (tmp_path / "shared").exists()
    gw1.cells[("eagle3", 4)].error = "only 1 of 2 runs completed"
    out = commit_baseline_stages([stage0, _via_json(gw1.stage_baselines())], BaselineStore(tmp_path / "shared"), keep=5)
    assert not out.written and "eagle3 c4 had errors" in _reason(out)
    out = commit_baseline_stages([stage0, stage1], BaselineStore(tmp_path / "shared"), keep=5)
    assert out.written and sorted(p.name for p in (tmp_path / "shared").glob("*.json")) == ["baseline.json", "eagle3.json"]


def test_a_second_xdist_worker_refuses_a_configuration_another_one_claimed(tmp_path):
    claim = tmp_path / "claims"
    first = make_session(tmp_path, claim_dir=claim, worker_id="gw0")
    second = make_session(tmp_path, claim_dir=claim, worker_id="gw1")
    first.pool._claim("eagle3")
    first.pool._claim("eagle3")  # its own claim again: fine (a relaunch on the same worker)
    with pytest.raises(ConfigUnavailable) as err:
        second.pool._claim("eagle3")
    assert "already measured by pytest-xdist worker gw0: each configuration (with its reference) must stay on one worker" in str(err.value)
    assert not err.value.skip and "\n" not in str(err.value)


# -- end to end: real emulator servers on 127.0.0.1 -----------------------------------------------
def _lock_is_free(path: Path) -> bool:
    with open(path, "a") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        fcntl.flock(f, fcntl.LOCK_UN)
        return True


def with_suite(sg: GateSession, **sweep_keys) -> GateSession:
    """A new session of the same options whose suite's [sweep] has these keys (a session never
    changes its suite)."""
    return GateSession(replace(sg.suite, sweep=replace(sg.suite.sweep, **sweep_keys)), sg.options)


def _small(sg: GateSession, relaunch: str = "off") -> GateSession:
    """Short runs; one launch per configuration unless the test is about relaunching."""
    return with_suite(sg, warmup=0, repeats=2, requests_per_worker=2, relaunch=relaunch)


@pytest.mark.e2e
def test_the_reference_travels_with_a_selected_speculative_cell(tmp_path):
    lock = tmp_path / "launch.lock"
    sg = _small(make_session(tmp_path, launch_lock=lock))
    sg.plan([PlannedTest("eagle3", 1, "throughput"), PlannedTest("eagle3", 1, "speculation")])  # as -k "eagle3 and c1"
    try:
        cell = sg.measure("eagle3", 1)
        assert not cell.error, cell.error
        assert not _lock_is_free(lock)  # a launched server holds the run's launch lock
        assert ("baseline", 1) in sg.cells and not sg.cells[("baseline", 1)].error
        assert sg.pool.states["baseline"].stopped  # measured first, then stopped: one server at a time
        assert sg.cells.reference_only() == {"baseline": ["eagle3"]}
        assert sg.cells.reference_roles.get(("baseline", 1), []) == ["eagle3"]
        r = sg.speculation_result("eagle3", 1, None)
        assert r.verdict not in (SKIP, ERROR), message(r)
        assert "baseline (this session, measured as reference)" in message(r)
    finally:
        sg.stop_all()
    assert _lock_is_free(lock)
    port = int(sg.pool.states["eagle3"].handle.base_url.rsplit(":", 1)[1])
    with pytest.raises(httpx.HTTPError):
        httpx.get(f"http://127.0.0.1:{port}/health", timeout=2)


@pytest.mark.e2e
@pytest.mark.parametrize("max_launches", [3, 2])
def test_a_suspicious_speculation_cell_relaunches_both_configurations_and_decides_again(tmp_path, max_launches):
    # eagle3 made 3x slower per step: it loses to its reference at c1, a suspicious (p < 0.05) cell
    # after every launch, so the pair is launched again until sweep.max_launches (default 3)
    sg = _small(make_session(tmp_path, server_args={"eagle3": ["--emulator-step-scale", "3.0"]}), relaunch="on-suspicion")
    assert sg.design.sequential and sg.design.launches == 1 and sg.design.max_launches == 3  # the default design
    if max_launches != 3:
        sg = with_suite(sg, max_launches=max_launches)  # the design follows the suite (gates.design_of)
        assert sg.design.max_launches == max_launches
    sg.plan([PlannedTest("eagle3", 1, "speculation")])
    try:
        assert not sg.measure("eagle3", 1).error
    finally:
        sg.stop_all()
    assert set(sg.relaunches) == {"eagle3", "baseline"}, sg.relaunches
    assert len(sg.relaunches["eagle3"]) == max_launches - 1, sg.relaunches
    texts = {name: [t for launch in launches for t in relaunch_texts(relaunch_doc(launch))]
             for name, launches in sg.relaunches.items()}
    assert texts["eagle3"][0].startswith("speculation eagle3 c1: p = ")
    assert texts["baseline"][0].startswith("reference of speculation eagle3 c1")
    if max_launches == 3:
        assert texts["eagle3"][1].startswith("launch 3: speculation eagle3 c1: p = ")
        assert texts["baseline"][1].startswith("launch 3: reference of speculation eagle3 c1")
    assert len(sg.cells.launch_cells[("eagle3", 1)]) == max_launches and len(sg.cells.launch_cells[("baseline", 1)]) == max_launches
    assert len({lid for lid, _ in sg.cells.launch_cells[("eagle3", 1)]}) == max_launches  # real launches
    r = sg.speculation_result("eagle3", 1, None)
    assert (r.stage, r.launches, r.verdict) == (max_launches, max_launches, "fail"), message(r)
    assert [x.stage for x in sg.verdicts.stage1] == [1]
    assert [x.stage for x in sg.verdicts.later_stages] == list(range(2, max_launches + 1))
    assert sg.verdicts.final_results() == [r] and r in sg.final_failures()
    samples = sg.recorder.run_samples("eagle3", 1)
    assert len(samples) == 2 * max_launches and len({s.launch_id for s in samples}) == max_launches


def _decision(gate: str, config: str, c: int, p: float, verdict: str, stage: int) -> GateResult:
    est = RatioEstimate(ratio=0.95, low=0.90, high=1.002, threshold=0.97, p_value=p, dof=10.0, confidence=0.99,
                        between_sd=0.01, between_source=SpreadSource(), test_at=1.0)
    return result(gate, config, c, verdict, est, stage=stage)


def test_holm_uses_each_tests_final_decision_so_the_family_test_and_the_cells_agree(tmp_path):
    # issue 14: eagle3 c1 looked suspicious at stage 1 (p = 0.0004: Holm over 4 tests rejects it,
    # 4 x 0.0004 < 0.01, though the cell alone did not fail), was relaunched and its pooled stage-2
    # decision passes (p = 0.4). Its test reports stage 2, so the family test must not fail on the
    # superseded stage-1 p-value: results JSON's holm_failures and the family_holm test agree with it.
    from specguard.report.results import family_holm
    from specguard.session.results import build_results
    sg = make_session(tmp_path)
    assert sg.design.sequential
    holm_alpha = sg.suite.tolerances.family_alpha  # Holm runs at the family alpha over the final decisions
    stage1 = [_decision("throughput", "eagle3", 1, 0.0004, "inconclusive", 1),
              _decision("throughput", "eagle3", 4, 0.3, "pass", 1),
              _decision("throughput", "baseline", 1, 0.5, "pass", 1),
              _decision("throughput", "baseline", 4, 0.5, "pass", 1)]
    assert 4 * 0.0004 < holm_alpha
    sg.verdicts.stage1.extend(stage1)
    stage2 = _decision("throughput", "eagle3", 1, 0.4, "pass", 2)
    sg.verdicts.later_stages.append(stage2)
    sg.results.extend([stage2, *stage1[1:]])  # what the four tests reported
    final = sg.verdicts.final_results()
    assert len(final) == 4 and stage2 in final and stage1[0] not in final
    assert sg.final_failures() == []
    doc = build_results(sg)
    assert doc["holm_failures"] == [] and family_holm(doc)["outcome"] == "passed"
    # a final decision Holm rejects still fails the family test, naming the decision the cell reports
    p = holm_alpha / 4 * 0.8
    sg.verdicts.later_stages[0] = sg.results[0] = _decision("throughput", "eagle3", 1, p, "inconclusive", 2)
    assert sg.final_failures() == [sg.verdicts.later_stages[0]]
    doc = build_results(sg)
    assert [(d["config"], d["level"], d["stage"]) for d in doc["holm_failures"]] == [("eagle3", "c1", 2)]
    assert family_holm(doc)["outcome"] == "failed" and "4 gate tests" in family_holm(doc)["message"]
    sg.verdicts.later_stages[0] = sg.results[0] = _decision("throughput", "eagle3", 1, holm_alpha / 4 * 1.2, "inconclusive", 2)
    assert sg.final_failures() == []


EAGLE_5_4_8_CAP_256 = ("--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", "/models/d",
                       "--speculative-num-steps", "5", "--speculative-eagle-topk", "4",
                       "--speculative-num-draft-tokens", "8", "--max-running-requests", "256")


@pytest.mark.e2e
def test_attach_measures_a_server_launched_otherwise_and_reports_each_difference(tmp_path, emulator):
    url = emulator(*EAGLE_5_4_8_CAP_256)
    sg = _small(make_session(tmp_path, server_urls={None: url}))
    sg.plan([PlannedTest("eagle3", 1, "throughput"), PlannedTest("eagle3", 1, "speculation")])
    cell = sg.measure("eagle3", 1)
    assert not cell.error, cell.error
    state = sg.pool.states["eagle3"]
    assert state.mode == "attached" and not any(c.blocking for c in state.checks)
    assert [d.field for d in state.differences] == ["draft_model_path", "num_steps", "eagle_topk",
                                                    "num_draft_tokens", "max_running_requests"]
    assert Note.of(NoteKind.ATTACH_DIFFERENCE, field="max_running_requests", suite=64, server=256) in sg.pool.notes_for("eagle3")
    # the server's own values are the fingerprint: a later change of the server is a named mismatch
    fp = sg.histories.fingerprint("eagle3").fields
    assert (fp["num_steps"], fp["eagle_topk"], fp["num_draft_tokens"], fp["max_running_requests"]) == (5, 4, 8, 256)
    # the bare URL cannot stand for the baseline (no speculation): no stored reference -> skip saying why
    r = sg.speculation_result("eagle3", 1, None)
    assert r.verdict == SKIP and "server runs EAGLE3; config baseline needs no speculation" in message(r)
    assert "no stored reference" in message(r)

    strict = _small(make_session(tmp_path, server_urls={None: url}, strict_server_args=True))
    with pytest.raises(ConfigUnavailable) as err:
        strict.measure("eagle3", 1)
    assert "max_running_requests: suite file says 64, server runs 256 (--strict-server-args)" in str(err.value)
    assert not err.value.skip


@pytest.mark.e2e
def test_attach_by_name_measures_the_reference_and_leaves_the_unnamed_unlaunched(tmp_path, emulator):
    spec_url = emulator(*EAGLE_5_4_8_CAP_256)
    base_url = emulator("--max-running-requests", "256")
    sg = _small(make_session(tmp_path, server_urls={"eagle3": spec_url, "baseline": base_url}))
    sg.plan([PlannedTest("eagle3", 1, "speculation")])  # -k eagle3: baseline's own tests deselected
    sg.measure("eagle3", 1)
    r = sg.speculation_result("eagle3", 1, None)
    assert r.verdict not in (SKIP, ERROR), message(r)
    assert sg.cells.reference_only() == {"baseline": ["eagle3"]}

    only_spec = _small(make_session(tmp_path, server_urls={"eagle3": spec_url}))
    only_spec.plan([PlannedTest("eagle3", 1, "speculation")])
    only_spec.measure("eagle3", 1)
    assert "baseline" not in {n for n, s in only_spec.pool.states.items() if s.handle is not None}  # nothing launched
    r = only_spec.speculation_result("eagle3", 1, None)
    assert r.verdict == SKIP and "add --server-url baseline=URL" in message(r)


# -- SIGINT during --update-baselines: every file as it was, or every file updated ----------------
SIGINT_TRIALS = 20


def _sigint_suite(tmp_path: Path) -> Path:
    text = write_emulator_suite(tmp_path / "suite.toml", concurrency=(1,), output_len=16).read_text()
    text = text.replace("requests_per_worker = 4", "requests_per_worker = 2").replace("warmup = 1", "warmup = 0")
    (tmp_path / "suite.toml").write_text(text.replace("repeats = 3", "repeats = 2"))
    return tmp_path / "suite.toml"


@pytest.mark.e2e
def test_sigint_during_update_baselines_leaves_files_identical_or_fully_updated(tmp_path, emulator):
    import random

    rng = random.Random(20261130)
    base_url = emulator()
    spec_url = emulator("--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", "/models/d",
                        "--speculative-num-steps", "3", "--speculative-eagle-topk", "1",
                        "--speculative-num-draft-tokens", "4", "--max-running-requests", "64")
    suite = _sigint_suite(tmp_path)
    bdir = tmp_path / "baselines"
    cmd = [sys.executable, "-m", "pytest", str(REPO / "perf_tests"), "-p", "no:cacheprovider", "-q",
           "--suite", str(suite), "--baseline-dir", str(bdir), "--benchmark-disable", "--update-baselines",
           "--server-url", f"baseline={base_url}", "--server-url", f"eagle3={spec_url}",
           "--server-log-dir", str(tmp_path / "logs")]

    def snapshot() -> dict[str, bytes]:
        return {p.name: p.read_bytes() for p in sorted(bdir.glob("*.json"))}

    started = time.monotonic()
    first = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=120)
    full_s = time.monotonic() - started
    assert first.returncode == 0, first.stdout + first.stderr
    before = snapshot()
    assert sorted(before) == ["baseline.json", "eagle3.json"]
    outcomes = {"identical": 0, "updated": 0, "finished before the signal": 0}
    for trial in range(SIGINT_TRIALS):
        delay = rng.uniform(0.2, full_s)  # from pytest's start-up to the commit at the end
        proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
                                preexec_fn=interruptible)
        try:
            time.sleep(delay)
            signalled = proc.poll() is None
            if signalled:
                proc.send_signal(signal.SIGINT)
            else:
                outcomes["finished before the signal"] += 1
            out, _ = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                kill_tree(proc)  # the servers it started too
        after = snapshot()
        assert not list(bdir.glob("*.tmp")) and not list(bdir.glob(".*.tmp")), f"trial {trial}: temp file left"
        changed = sorted(n for n in after if after[n] != before.get(n))
        if not changed:
            assert signalled, f"trial {trial}: an uninterrupted run wrote nothing\n{out.decode()}"
            outcomes["identical"] += 1
            continue
        assert changed == ["baseline.json", "eagle3.json"], f"trial {trial} after {delay:.2f}s: partial write {changed}\n{out.decode()}"
        new_ids = set()
        for name in changed:
            doc = json.loads(after[name])
            new_ids |= {e["cells"]["c1"]["sessions"][-1]["session_id"] for e in doc["entries"].values()}
        assert len(new_ids) == 1, f"trial {trial}: files updated by different sessions {new_ids}"
        outcomes["updated"] += 1
        before = after
    assert outcomes["identical"] + outcomes["updated"] == SIGINT_TRIALS
    assert outcomes["identical"] >= 3, outcomes  # signals must land mid-run too, or the test proves little
    print(f"SIGINT trials: {outcomes} (full run {full_s:.1f}s)")


@pytest.mark.e2e
def test_launch_mode_bounds_random_ids_by_the_models_config_json(tmp_path):
    # SGLang 0.5.23 embeds ids unchecked: one id >= vocab_size crashes the server
    # (layers/vocab_parallel_embedding.py, VocabParallelEmbedding), so the ids follow the model's config.json.
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"], "vocab_size": 1000}))
    sg = _small(make_session(tmp_path))
    sg = GateSession(replace(sg.suite, servers={**sg.suite.servers,
                                                "baseline": replace(sg.suite.servers["baseline"], model_path=str(model))}),
                     sg.options)
    sg.plan([PlannedTest("baseline", 1, "throughput")])
    try:
        assert not sg.measure("baseline", 1).error
    finally:
        sg.stop_all()
    bound = sg.pool.vocab_bounds["baseline"]
    assert bound.vocab_size == 1000 and str(model) in bound.source
    ids = [i for p in sg.pool.workload_for("baseline").prompts for i in p.input_ids]
    assert max(ids) < 1000 and max(i for p in sg.workload.prompts for i in p.input_ids) >= 1000
    assert sg.histories.fingerprint("baseline").fields["workload"] == sg.pool.workload_for("baseline").digest() != sg.workload.digest()


@pytest.mark.e2e
def test_a_corrupted_baseline_file_fails_the_run_as_not_measured(tmp_path):
    suite = _sigint_suite(tmp_path)
    bdir = tmp_path / "baselines"
    bdir.mkdir()
    (bdir / "baseline.json").write_text('{"schema": "specguard-baseline", "schema_version": 1, "entr')  # truncated
    junit = tmp_path / "junit.xml"
    cmd = [sys.executable, "-m", "pytest", str(REPO / "perf_tests"), "-p", "no:cacheprovider", "-q",
           "--suite", str(suite), "--baseline-dir", str(bdir), "--benchmark-disable", "-k", "[baseline-c1]",
           "--server-log-dir", str(tmp_path / "logs"), "--junitxml", str(junit)]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=180)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 3, out  # not measured (docs/ci.md), never a pass or a skip
    assert f"baseline file {bdir / 'baseline.json'} is not valid JSON" in out
    assert "skipped" not in out and "Traceback" not in out
    cases = {c.get("name"): [x.tag for x in c] for c in ET.parse(junit).getroot().iter("testcase")}
    assert "failure" in cases["test_throughput[baseline-c1]"], cases


def test_a_request_floor_is_in_the_fingerprint_only_when_set_and_requests_replaces_it(tmp_path):
    # Stored sessions measured with another run size must not be compared: the floor is part of
    # the fingerprint, but only when set, so suites without one keep their stored baselines.
    sg = make_session(tmp_path)
    fake_server(sg, "eagle3")
    assert "min_requests_per_run" not in sg.histories.fingerprint("eagle3").fields
    sg = with_suite(sg, min_requests_per_run=32)
    fake_server(sg, "eagle3")
    assert sg.histories.fingerprint("eagle3").fields["min_requests_per_run"] == 32
    assert sg.levels.sweep_at(1).num_requests(1) == 32 and sg.levels.sweep_at(16).num_requests(16) == 64
    fixed = make_session(tmp_path, requests_per_run=8)  # --requests 8: exactly 8 per run, floor or not
    fixed = with_suite(fixed, min_requests_per_run=32)
    fake_server(fixed, "eagle3")
    assert fixed.levels.sweep_at(1).num_requests(1) == 8 and "min_requests_per_run" not in fixed.histories.fingerprint("eagle3").fields


def test_a_vocabulary_bound_note_reaches_the_configurations_notes(tmp_path):
    # the bound only the suite's value could give (no config.json, no server answer) is said on the
    # configuration's results; before, ServerPool.vocab_notes held it and nothing read it
    from session_support import fake_server, make_suite

    from specguard.workload import VocabBound
    sg = GateSession(make_suite(tmp_path), RunOptions(baseline_dir=tmp_path / "b", log_dir=tmp_path / "l"))
    fake_server(sg, "eagle3")
    assert sg.pool.notes_for("eagle3") == []
    unread = Note.of(NoteKind.VOCAB_UNREAD, vocab_size=32000, why="", default=1)
    sg.pool.vocab_bounds["eagle3"] = VocabBound(32000, "workload.vocab_size", note=unread)
    assert sg.pool.notes_for("eagle3") == [unread]
