"""Outcomes: the one record every output is rendered from, the session-level Holm test, the exit
code, and the end of the session (baselines written, results document, reports, summary).

Every output (pytest's counts, the summary line, the table, JSON, markdown, HTML, JUnit) is
derived from the test reports recorded here. Holm's family-wise correction is its own
session-level test, `specguard::family_holm`, reported like a test at the end of the session.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal

import pytest

from specguard.decide.result import Why
from specguard.labels import STATUS_NOT_MEASURED, STATUS_REGRESSION, ExitCode, Verdict, is_history_gate, status_of
from specguard.plugin import state
from specguard.plugin.collection import cell_of
from specguard.plugin.fixtures import FAILURE_KIND
from specguard.plugin.hints import record_command
from specguard.plugin.scheduling import WORKER_OUTPUT_KEY, WORKER_STAGE_KEY, claim_dir, commit_worker_stages, is_worker
from specguard.report.baseline_text import outcome_lines
from specguard.report.merge import merge_documents
from specguard.report.results import family_holm, note_doc, outcome_doc, write_results
from specguard.report.schema import DecisionDoc, FailedTestDoc, ResultsDoc, TestDoc
from specguard.report.terminal import render_summary
from specguard.session.results import build_results
from specguard.store.refresh import BaselineOutcome

HOLM_NODEID = "specguard::family_holm"
_PACKAGE = Path(__file__).resolve().parents[1]


def _raised_in_specguard(excinfo: pytest.ExceptionInfo[BaseException]) -> bool:
    """Whether the exception's innermost frame is specguard's own code (not a test file's)."""
    tb = excinfo.tb
    while tb.tb_next is not None:
        tb = tb.tb_next
    return _PACKAGE in Path(tb.tb_frame.f_code.co_filename).resolve().parents


def _is_gate_test(item: pytest.Item) -> bool:
    """A specguard test: the shipped gate tests, a user's own test that uses the `specguard`
    fixture or carries the `specguard` marker. Any other test of a project is left alone."""
    return (cell_of(item) is not None or "specguard" in getattr(item, "fixturenames", ())
            or item.get_closest_marker("specguard") is not None)


class TestLog:
    """Every specguard test's outcome and why failed tests failed (a regression, or a measurement
    that did not happen). The kind travels as a user property of the report, so an xdist
    controller sees it too. Specguard's own verdicts say their kind; an `assert` in a test file
    is a regression; anything raised inside specguard (an internal error, an internal assert)
    or in setup/teardown means nothing was measured. Failure reports are cut to their message
    (no traceback, no chained exceptions) unless --specguard-debug or --tb=long asks for more.
    Tests that are not specguard's (`_is_gate_test`) are left alone."""

    __test__ = False  # not a test class, whatever its name

    def __init__(self, debug: bool) -> None:
        self.debug = debug
        self.tests: dict[str, TestDoc] = {}

    @property
    def failed(self) -> list[FailedTestDoc]:
        # _entry gives every failed test its kind; a missing one reads as _entry's default
        return [{"nodeid": t["nodeid"], "kind": t["kind"] or STATUS_NOT_MEASURED, "message": t["message"]}
                for t in self.tests.values() if t["outcome"] == "failed"]

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
        report = yield
        if not report.failed or call.excinfo is None or not _is_gate_test(item):
            return report
        exc = call.excinfo.value
        if FAILURE_KIND in dict(report.user_properties):
            if not self.debug and isinstance(exc, pytest.fail.Exception):
                report.longrepr = exc.msg
            return report
        user_assert = (call.when == "call" and call.excinfo.errisinstance((AssertionError, pytest.fail.Exception))
                       and not _raised_in_specguard(call.excinfo))
        kind = STATUS_REGRESSION if user_assert else STATUS_NOT_MEASURED
        report.user_properties = [*report.user_properties, (FAILURE_KIND, kind)]
        item.user_properties.append((FAILURE_KIND, kind))  # JUnit reads the properties of the last report
        if cell_of(item) is not None and not user_assert and not self.debug:
            first = (str(exc).strip().splitlines() or [""])[0]
            report.longrepr = (f"specguard internal error during {call.when}: {type(exc).__name__}: {first}; "
                               f"counted as not measured; rerun with --specguard-debug for the traceback")
        return report

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        props = dict(report.user_properties)
        if not ("gate" in props or FAILURE_KIND in props or report.nodeid == HOLM_NODEID):
            return
        if report.when == "call" or report.failed or report.skipped:
            entry = self.tests.get(report.nodeid)
            if entry is not None and entry["outcome"] == "failed" and not report.failed:
                return  # a passing teardown does not undo a failed call
            self.tests[report.nodeid] = self._entry(report, props)

    @staticmethod
    def _entry(report: pytest.TestReport, props: dict[str, Any]) -> TestDoc:
        outcome = "failed" if report.failed else "skipped" if report.skipped else "passed"
        if report.skipped and isinstance(report.longrepr, tuple):
            message = str(report.longrepr[2])
        else:
            crash = getattr(report.longrepr, "reprcrash", None)
            message = crash.message if crash else report.longreprtext if report.longrepr else ""
        first = next((ln for ln in message.splitlines() if ln.strip()), "")
        if first.startswith("Skipped: "):
            first = first[len("Skipped: "):]
        return {"nodeid": report.nodeid, "config": props.get("config"), "level": props.get("level"),
                "gate": props.get("gate") or ("family_holm" if report.nodeid == HOLM_NODEID else None),
                "category": props.get("category") or None,
                "outcome": outcome, "verdict": props.get("verdict"), "enforced": props.get("enforced", True),
                "kind": props.get(FAILURE_KIND, STATUS_NOT_MEASURED) if outcome == "failed" else None,
                "message": first[:300]}


def _emit_holm_test(config: pytest.Config, holm: dict[str, str]) -> None:
    """Report Holm's family-wise decision as the session-level test specguard::family_holm."""
    from _pytest.reports import TestReport  # pytest has no public constructor for a report

    failed = holm["outcome"] == "failed"
    props: list[tuple[str, object]] = [("gate", "family_holm"), ("verdict", "fail" if failed else "pass")]
    if failed:
        props.append((FAILURE_KIND, STATUS_REGRESSION))
    location = ("specguard", None, "family_holm")
    phases: list[tuple[Literal["setup", "call", "teardown"], Literal["passed", "failed"], str | None]] = [
        ("setup", "passed", None), ("call", "failed" if failed else "passed", holm["message"] if failed else None),
        ("teardown", "passed", None)]
    terminal = config.pluginmanager.get_plugin("terminalreporter")
    hook = config.pluginmanager.subset_hook_caller("pytest_runtest_logreport", [terminal] if terminal else [])
    for when, outcome, longrepr in phases:
        report = TestReport(HOLM_NODEID, location, {"family_holm": 1}, outcome, longrepr, when, user_properties=list(props))
        # Every plugin sees it (JUnit, this log, xdist); the terminal reporter only counts it, so
        # its progress line stays at 100% and `N passed/failed` includes it.
        hook(report=report)
        if terminal is not None and when == "call":
            category = config.hook.pytest_report_teststatus(report=report, config=config)[0]
            terminal.stats.setdefault(category, []).append(report)


LOG = pytest.StashKey[TestLog]()


def exit_status(current: int, failed: list[FailedTestDoc], baselines_failed: bool = False) -> int:
    """1 when a test found a regression (Holm's family test included), 3 when tests failed only
    because they could not measure, or a refresh wrote nothing; pytest's other codes stay."""
    kinds = {f["kind"] for f in failed}
    if current not in (ExitCode.OK, ExitCode.REGRESSION):
        return int(current)
    if STATUS_REGRESSION in kinds:
        return int(ExitCode.REGRESSION)
    if STATUS_NOT_MEASURED in kinds or baselines_failed:
        return int(ExitCode.NOT_MEASURED)
    return int(current)


def _interrupted(session: pytest.Session, exitstatus: int) -> bool:
    return exitstatus == ExitCode.INTERRUPTED or bool(session.shouldstop) or bool(session.shouldfail)


def _counts(tests: Iterable[TestDoc]) -> dict[str, int]:
    out = {"passed": 0, "failed": 0, "skipped": 0}
    for t in tests:
        out[t["outcome"]] += 1
    return out


def _first_run(doc: ResultsDoc) -> bool:
    """No stored baseline for any gated cell of this run (and not recording one now)."""
    if doc["options"].get("update_baselines"):
        return False
    hist = [d for d in doc["decisions"] if is_history_gate(d["gate"])]
    return bool(hist) and all(d["verdict"] == Verdict.SKIP and _missing(d) == Why.NO_BASELINE for d in hist)


def _missing(d: DecisionDoc) -> str | None:
    """Why a decision had nothing to compare with (decide.result.Why), if that was its problem."""
    problem = d.get("problem")
    return problem["why"] if problem else None


def _session_document(config: pytest.Config, interrupted: bool) -> tuple[ResultsDoc, BaselineOutcome | None] | None:
    """This process's results document and what its baseline refresh did; None when specguard
    had nothing to do. A worker hands both to the controller instead."""
    if state.SESSION in config.stash:
        sg = config.stash[state.SESSION]
        sg.stop_all()
        outcome = None
        if is_worker(config):
            stage = sg.stage_baselines(interrupted=interrupted)
        else:
            outcome = sg.write_baselines(interrupted=interrupted)
        if not (sg.cells or sg.results or sg.baselines_requested or sg.pool.states):
            return None
        doc = build_results(sg)
        if is_worker(config):  # the controller merges, reports and commits baselines
            output: dict[str, str] = config.workeroutput  # type: ignore[attr-defined]  # set by pytest-xdist
            output[WORKER_OUTPUT_KEY] = json.dumps(doc)
            if sg.options.update_baselines:
                output[WORKER_STAGE_KEY] = json.dumps(stage.to_json())
            return None
        return doc, outcome
    if config.stash.get(state.WORKER_DOCS, None):
        doc = merge_documents(config.stash[state.WORKER_DOCS])
        outcome = commit_worker_stages(config, interrupted)
        if outcome is not None:
            doc["baseline_outcome"] = outcome_doc(outcome)
            doc["baseline_updates"] = [*doc["baseline_updates"], *outcome_lines(outcome)]
        run_dir = claim_dir(config)
        if run_dir is not None:  # the workers' claims and launch lock are this run's only
            shutil.rmtree(run_dir, ignore_errors=True)
        return doc, outcome
    return None


@pytest.hookimpl(tryfirst=True)  # before junitxml writes its file: the Holm test must be in it
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    config = session.config
    interrupted = _interrupted(session, exitstatus)
    found = _session_document(config, interrupted)
    if found is None:
        return
    doc, baselines = found
    holm = family_holm(doc)
    if holm is not None and not interrupted:
        _emit_holm_test(config, holm)
    log = config.stash[LOG]
    status = exit_status(session.exitstatus, log.failed, baselines_failed=bool(baselines and baselines.write_failed))
    session.exitstatus = status
    doc["tests"] = sorted(log.tests.values(), key=lambda t: t["nodeid"])
    doc["outcome"] = {"status": status_of(status),
                      "exit_status": status, "failed_tests": log.failed, "counts": _counts(log.tests.values())}
    doc["run_notes"] = [*(note_doc(n) for n in config.stash[state.RUN_NOTES]), *doc.get("run_notes", [])]
    if _first_run(doc):
        doc["hints"] = {"record": record_command(config)}
    config.stash[state.DOC] = doc
    if config.getoption("--results-json"):
        write_results(doc, Path(config.getoption("--results-json")))
    if config.getoption("--report-dir"):
        # the report's page and plots (~500 lines, matplotlib when installed) load only when asked for
        from specguard.report.publish import write_report_dir

        write_report_dir(doc, Path(config.getoption("--report-dir")))


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    doc = config.stash.get(state.DOC, None)
    if doc is None or not (doc["cells"] or doc["baseline_updates"] or doc["servers"]):
        return
    terminalreporter.write_sep("=", "specguard summary")
    terminalreporter.write_line(render_summary(doc))
    report_dir = config.getoption("--report-dir")
    if report_dir:
        terminalreporter.write_line(f"specguard report: {Path(report_dir) / 'report.html'}")
