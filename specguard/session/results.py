"""The results document, built once from a finished gate session (report/results.py has the type)."""

from __future__ import annotations

import platform
from dataclasses import asdict

from specguard import __version__
from specguard.decide.gates import counts_as_failure
from specguard.decide.result import GateResult
from specguard.engines import redact
from specguard.labels import STATUS_OK
from specguard.report.baseline_text import outcome_lines
from specguard.report.crossovers import crossovers
from specguard.report.results import (
    CONFIG_FIELDS,
    SCHEMA,
    SCHEMA_VERSION,
    check_doc,
    clean,
    decision_dict,
    detectable_drop,
    note_doc,
    outcome_doc,
    run_doc,
)
from specguard.report.schema import CellDoc, ConfigDoc, RelaunchDoc, ResultsDoc, ServerDoc
from specguard.report.summary import cell_summary
from specguard.session.campaign import Relaunch
from specguard.session.gate_session import GateSession
from specguard.store.baseline_file import now_iso


def _configs(sg: GateSession) -> list[ConfigDoc]:
    out: list[ConfigDoc] = []
    for name in sg.suite.servers:
        cfg = sg.pool.config(name)
        entry = {"name": name, **{k: getattr(cfg, k) for k in CONFIG_FIELDS}}
        entry["args"] = redact(list(cfg.args), [sg.options.api_key or ""])
        out.append(entry)  # type: ignore[arg-type]  # keys are CONFIG_FIELDS
    return out


def _servers(sg: GateSession) -> dict[str, ServerDoc]:
    servers: dict[str, ServerDoc] = {}
    for name, state in sg.pool.states.items():
        h = state.handle
        servers[name] = {
            "engine": sg.suite.servers[name].engine,
            "command": h.command if h else [],
            "attached": bool(h and h.attached),
            "effective_args": h.effective.fingerprint_fields() if h else None,
            "checks": [check_doc(c) for c in state.checks],
            "failure": str(state.failure) if state.failure else None,
            "failure_reason": note_doc(state.failure.reason) if state.failure else None,
            # a skip (this server cannot serve the configuration here) is not an error of the server
            "failure_skipped": bool(state.failure and state.failure.skip),
            "mode": state.mode,
            "differences": [asdict(d) for d in state.differences],
        }
    return servers


def _cells(sg: GateSession) -> list[CellDoc]:
    cells: list[CellDoc] = []
    for (name, level), cell in sg.cells.items():
        runs = [run_doc(r) for r in cell.runs]
        cells.append({"config": name, "level": sg.levels.name(level), "error": cell.error,
                      "notes": [note_doc(n) for n in cell.notes], "wall_s": cell.wall_s, "summary": cell_summary(runs),
                      "runs": runs, "warmup_runs": [run_doc(r) for r in cell.warmup_runs]})
    return cells


def _holm_only(sg: GateSession) -> list[GateResult]:
    """Gates the family-wise correction fails although their own test did not (the design's
    `final_failures`: Holm over each test's final decision)."""
    out: dict[object, GateResult] = {}
    for r in sg.final_failures():
        if counts_as_failure(r, sg.suite.tolerances) or (sg.options.update_baselines and r.gate.is_history):
            continue
        out.setdefault(r.key, r)
    return list(out.values())


def relaunch_doc(relaunch: Relaunch) -> RelaunchDoc:
    return {"stage": relaunch.stage, "failed": relaunch.failed,
            "reasons": [{"why": r.why.value, "gate": str(r.gate), "config": r.config, "level": r.level.name,
                         "ratio": r.ratio, "p_value": r.p_value, "limit_p": r.limit_p} for r in relaunch.reasons]}


def build_results(sg: GateSession) -> ResultsDoc:
    """Everything one session measured and decided; the plugin adds the tests and the outcome."""
    decisions = [decision_dict(r) for r in sg.results]
    refresh = sg.baseline_outcome if sg.baseline_outcome is not None and sg.baseline_outcome.requested else None
    for d in decisions:  # what each verdict could resolve at its own level (docs/results.md)
        d["detectable_drop"] = detectable_drop(d["estimate"], sg.suite.tolerances.fail_rule)
    doc: ResultsDoc = clean({
        "schema": SCHEMA,
        "schema_version": SCHEMA_VERSION,
        "created": now_iso(),
        "specguard_version": __version__,
        "session_id": sg.session_id,
        "suite": str(sg.suite.path),
        "environment": {"python": platform.python_version(), "platform": platform.platform(), "gpu": sg.histories.gpu,
                        "git_commit": sg.git_commit},
        "options": {"require_baselines": sg.options.require_baselines, "update_baselines": sg.options.update_baselines,
                    "baseline_dir": str(sg.options.baseline_dir), "attached": sg.options.attach_mode},
        "sweep": asdict(sg.suite.sweep),
        "workload": asdict(sg.suite.workload),
        "tolerances": asdict(sg.suite.tolerances),
        "configs": _configs(sg),
        "servers": _servers(sg),
        "cells": _cells(sg),
        "decisions": decisions,
        "holm_failures": [decision_dict(r) for r in _holm_only(sg)],
        "crossovers": {},
        # what --update-baselines did, as data; and in words for readers of the field before it
        "baseline_outcome": outcome_doc(refresh) if refresh else None,
        "baseline_updates": outcome_lines(refresh) if refresh else [],
        "outcome": {"status": STATUS_OK, "exit_status": 0, "failed_tests": []},
        "merged_from": 1,
        "reference_roles": [{"config": name, "level": sg.levels.name(level), "for": list(users)}
                            for (name, level), users in sorted(sg.cells.reference_roles.items())],
        "relaunches": {k: [relaunch_doc(r) for r in v] for k, v in sg.relaunches.items()},
        "soaks": {name: {"concurrency": sg.suite.soak.concurrency, "window_s": sg.suite.soak.window_s,
                         "warmup_windows": sg.suite.soak.warmup_windows, "windows": [asdict(r) for r in windows]}
                  for name, windows in sg.soaks.items()},
        "run_notes": [note_doc(n) for n in sg.campaign.design_notes()],
    })
    doc["crossovers"] = crossovers(doc)
    return doc
