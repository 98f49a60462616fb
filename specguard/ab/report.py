"""What an A/B comparison reports: the terminal table, the results document (schema
"specguard-ab", docs/ab.md) and the markdown summary, all from one list of rows."""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Final, Literal, TypeVar

from specguard.ab.builds import Build
from specguard.ab.decision import (
    BETTER,
    DIFFERENT,
    POOLED_SHARE,
    PRIOR_DOF,
    WORSE,
    GateCell,
    GateGroup,
    Look,
    look_shares,
    prior_check,
    shown_ratio,
)
from specguard.ab.rounds import BuildComparison
from specguard.ab.schema import AbCellDoc, AbDoc, AbGroupDoc, AbLookDoc, AbSpreadDoc, BisectDoc
from specguard.labels import ACCEPT_LENGTH, SPECULATION, STEP_TIME, THROUGHPUT
from specguard.report.results import spread_source_doc
from specguard.report.terminal import fmt_num
from specguard.store.documents import Document

SCHEMA: Final[Literal["specguard-ab"]] = "specguard-ab"
SCHEMA_VERSION = 4  # 2: one-sided p_worse per look, O'Brien-Fleming shares; 3: closed testing, groups[];
# 4: a look's between_source as data (report/schema.py SpreadSourceDoc), not a phrase
AB: Document[AbDoc] = Document(SCHEMA, SCHEMA_VERSION, AbDoc, what="A/B results file",
                               make="write one with: specguard ab ... --results-json FILE")
BISECT: Document[BisectDoc] = Document("specguard-bisect", 1, BisectDoc, what="bisect results file",
                                       make="write one with: specguard bisect ... --results-json FILE")
T = TypeVar("T")
GATE_SHOWN = {THROUGHPUT: "tok/s", STEP_TIME: "step ms", ACCEPT_LENGTH: "accept", SPECULATION: "spec/ref"}
COLUMNS = ("config", "level", "gate", "A", "B", "B/A [CI]", "decision", "rounds")


def _median(values: Sequence[float]) -> float:
    ordered = sorted(values)
    n = len(ordered)
    return ordered[n // 2] if n % 2 else (ordered[n // 2 - 1] + ordered[n // 2]) / 2


def _figure(cmp: BuildComparison, cell: GateCell, build: str, launches: int) -> float | None:
    """A build's location as the decision sees it: the geometric mean of its launches' medians
    over the launches the shown look used, so B / A is the table's ratio (an arithmetic mean
    would let one stalled run pull A and B apart from it). Step time in ms from the step rate."""
    medians = [_median(runs) for runs in cmp.values(build, cell.config, cell.level, cell.gate)[:launches] if runs]
    if not medians:
        return None
    location = math.exp(sum(math.log(m) for m in medians) / len(medians))
    return 1e3 / location if cell.gate == STEP_TIME else location


def cell_row(cmp: BuildComparison, cell: GateCell) -> AbCellDoc:
    """One cell's row of the results document (and of every table)."""
    look = cell.shown_look()
    a = b = ratio = low = high = None
    if look is not None:
        a, b = _figure(cmp, cell, "A", look.launches), _figure(cmp, cell, "B", look.launches)
        ratio, low, high = shown_ratio(look, cell.spec)
    return {
        "config": cell.config, "level": cell.level, "level_name": cmp.selection.level_name(cell.level),
        "gate": cell.gate, "decision": "error" if cell.error else cell.decision, "direction": cell.direction(),
        "rounds": look.launches if look else 0, "decided_round": cell.decided_round, "alpha": cell.alpha,
        "tolerance": cell.spec.tolerance, "prior_sd": cell.spec.prior_sd, "error": cell.error,
        "p_closed": cell.p_closed, "p_adjusted": cell.p_adjusted(cmp.budget),
        "p_adjusted_better": cell.p_adjusted(cmp.budget, BETTER),
        "a": a, "b": b, "ratio": ratio, "low": low, "high": high, "looks": [_look_doc(seen) for seen in cell.looks],
        # every run's value per launch, as decided (step time: steps per second; speculation: run ratios)
        "a_runs": cmp.values("A", cell.config, cell.level, cell.gate),
        "b_runs": cmp.values("B", cell.config, cell.level, cell.gate),
    }


def _look_doc(seen: Look) -> AbLookDoc:
    est = seen.estimate
    return {"round": seen.round_no, "launches": seen.launches, "ratio": est.ratio, "low": est.low, "high": est.high,
            "confidence": est.confidence, "p_worse": seen.p_worse, "pass_low": est.pass_low,
            "pass_high": seen.pass_high,
            "dof": est.dof if math.isfinite(est.dof) else None,  # inf: no variance at all
            "between_sd": est.between_sd, "between_source": spread_source_doc(est.between_source)}


def rows(cmp: BuildComparison) -> list[AbCellDoc]:
    return [cell_row(cmp, cell) for cell in cmp.sorted_cells()]


def group_row(cmp: BuildComparison, group: GateGroup) -> AbGroupDoc:
    """One configuration's gate over its levels: the closed test's first step."""
    look = group.decided_look or (group.looks[-1] if group.looks else None)
    ratio = low = high = None
    if look is not None:
        ratio, low, high = shown_ratio(look, group.cells[0].spec)
    return {"config": group.config, "gate": group.gate, "levels": [c.level for c in group.cells],
            "decision": group.decision, "direction": group.direction, "decided_round": group.decided_round,
            "alpha": group.alpha, "p_closed": group.p_closed(cmp.budget, WORSE),
            "p_closed_better": group.p_closed(cmp.budget, BETTER), "p_pooled": group.p_pooled(cmp.budget),
            "rounds": look.launches if look else max((c.looks[-1].launches for c in group.cells if c.looks), default=0),
            "ratio": ratio, "low": low, "high": high}


def group_rows(cmp: BuildComparison) -> list[AbGroupDoc]:
    return [group_row(cmp, g) for g in cmp.level_groups()]


def _group_table_cells(row: AbGroupDoc) -> list[str]:
    """A group decided different, as a table row: level "all", no A and B (its ratio is pooled)."""
    ratio = "-" if row["ratio"] is None else f"{row['ratio']:.3f} [{row['low']:.3f}, {row['high']:.3f}]"
    return [row["config"], "all", GATE_SHOWN[row["gate"]], "-", "-", ratio, f"different ({row['direction']})",
            str(row["rounds"])]


def _table_body(cmp: BuildComparison) -> list[list[str]]:
    """Every cell's row; after a configuration's last cell, an "all" row per gate whose group was
    decided different."""
    decided: dict[str, list[AbGroupDoc]] = {}
    for g in group_rows(cmp):
        if g["decision"] == DIFFERENT:
            decided.setdefault(g["config"], []).append(g)
    body: list[list[str]] = []
    cells = rows(cmp)
    for i, row in enumerate(cells):
        body.append(table_cells(row))
        if i + 1 == len(cells) or cells[i + 1]["config"] != row["config"]:
            body += [_group_table_cells(g) for g in decided.get(row["config"], [])]
    return body


def decision_text(row: AbCellDoc) -> str:
    if row["decision"] == DIFFERENT:
        return f"different ({row['direction']})"
    return str(row["decision"])


def _num(x: float | None) -> str:
    return "-" if x is None or not math.isfinite(x) else fmt_num(x)


def table_cells(row: AbCellDoc) -> list[str]:
    """The row's columns as text (COLUMNS)."""
    ratio = "-" if row["ratio"] is None else f"{row['ratio']:.3f} [{row['low']:.3f}, {row['high']:.3f}]"
    return [row["config"], row["level_name"], GATE_SHOWN[row["gate"]], _num(row["a"]), _num(row["b"]), ratio,
            decision_text(row), str(row["rounds"])]


def ci_note(cmp: BuildComparison) -> str:
    level = 1 - 2 * (1 - cmp.budget.pass_confidence)
    return (f"A, B: each build's launches' medians, geometric mean; B/A [CI]: B over A with its {level:.0%} interval "
            f"(the equivalence test's); step ms is step time, lower is better; rounds: launches per build behind it")


def render_text(cmp: BuildComparison, builds: Sequence[Build], title: str, *, exit_code: bool = True) -> str:
    """The terminal table, then the builds, what could not be measured and the outcome (with
    the exit code it means for `specguard ab`; a bisect step's has none)."""
    body = _table_body(cmp)
    widths = [max(len(h), *(len(b[i]) for b in body)) if body else len(h) for i, h in enumerate(COLUMNS)]
    line = "  ".join
    out = [title, line(h.ljust(w) for h, w in zip(COLUMNS, widths)), "-" * (sum(widths) + 2 * (len(widths) - 1))]
    out += [line(c.ljust(w) for c, w in zip(b, widths)).rstrip() for b in body]
    out.append(ci_note(cmp))
    out += [f"{b.name}: {b.describe()}" for b in builds]
    out += notes(cmp)
    out.append(outcome_line(cmp, exit_code=exit_code))
    return "\n".join(out)


def notes(cmp: BuildComparison) -> list[str]:
    lines = [f"not compared: {name}: {why}" for name, why in cmp.dropped.items()]
    lines += [f"not measured: {line}" for line in cmp.not_measured()]
    spreads = [_spread_text(gate, row) for gate, row in launch_spreads(cmp).items()]
    if spreads:
        lines.append("launch spread in this run (decided on; the prior only checked): " + "; ".join(spreads))
    return lines


def launch_spreads(cmp: BuildComparison) -> dict[str, AbSpreadDoc]:
    """Per gate: the run's launch spread (sd, dof) beside the prior's, and whether it contradicts it."""
    out: dict[str, AbSpreadDoc] = {}
    for gate, spec in cmp.specs.items():
        found = cmp.spread_of(gate)
        if found is not None:
            out[gate] = {"sd": math.sqrt(found.var), "dof": found.dof, "prior_sd": spec.prior_sd,
                         "contradicts_prior": prior_check(found, spec.prior_sd)}
    return out


def _spread_text(gate: str, row: AbSpreadDoc) -> str:
    verdict = "above the prior (chi-square at 1 %): measure the machine" if row["contradicts_prior"] else "consistent"
    return f"{GATE_SHOWN.get(gate, gate)} {row['sd']:.2%} ({row['dof']:g} dof) vs prior {row['prior_sd']:.2%}, {verdict}"


def outcome_line(cmp: BuildComparison, *, exit_code: bool = True) -> str:
    counts: dict[str, int] = {}
    for row in rows(cmp):
        counts[decision_text(row)] = counts.get(decision_text(row), 0) + 1
    tally = ", ".join(f"{n} {what}" for what, n in sorted(counts.items()))
    across = [f"{GATE_SHOWN[g.gate]} {g.config}" for g in cmp.group_regressions()]
    if across:
        tally += f"; worse at one level or more: {', '.join(across)}"
    launches = len(cmp.launches)
    code = f" -> exit {cmp.exit_code()}" if exit_code else ""
    return f"{tally or 'nothing decided'}; {cmp.rounds_run} rounds, {launches} launches{code}"


def results_doc(cmp: BuildComparison, builds: Sequence[Build], *, suite_path: str, mode: str, argv: Sequence[str]) -> AbDoc:
    """The results document (docs/ab.md "Results JSON")."""
    budget = cmp.budget
    return {
        "schema": SCHEMA, "schema_version": SCHEMA_VERSION, "suite": suite_path, "mode": mode, "argv": list(argv),
        "builds": [b.to_json() for b in builds],
        "design": {"max_rounds": budget.max_rounds, "family_alpha": budget.family_alpha,
                   "pass_confidence": budget.pass_confidence, "prior_dof": PRIOR_DOF, "order": "ABBA",
                   "min_rounds": budget.first_look, "looks": budget.looks,
                   "look_shares": {str(n): v for n, v in look_shares(budget).items()},
                   "alpha_per_look": "the cell alpha x its look's share (O'Brien-Fleming spending, Bonferroni over the "
                                     "looks)",
                   "directions": "worse and better apart, each one-sided at the family alpha",
                   "closed_testing": "per configuration and gate, per direction: the test pooled over its levels at "
                                     f"{POOLED_SHARE:g} of its alpha or its smallest cell at the rest; then each "
                                     "cell with p x (cells - 1) below the group's alpha",
                   "launch_spread": "this run's launches of the other configurations, with the cell's own; the prior "
                                    "weighs nothing"},
        "launch_spreads": launch_spreads(cmp),
        "configs": cmp.selection.configs, "levels": cmp.selection.levels, "references": cmp.selection.references,
        "launches": [{"round": x.round_no, "build": x.build, "config": x.config, "wall_s": round(x.wall_s, 2),
                      "error": x.error, "skipped": x.skipped} for x in cmp.launches],
        "cells": rows(cmp),
        "groups": group_rows(cmp),
        "not_compared": cmp.dropped, "not_measured": cmp.not_measured(),
        "outcome": {"exit_code": cmp.exit_code(), "rounds": cmp.rounds_run,
                    "regressions": [f"{c.gate} {c.config} {cmp.selection.level_name(c.level)}" for c in cmp.regressions()]
                    + [f"{g.gate} {g.config} all levels" for g in cmp.group_regressions()]},
    }


def render_markdown(cmp: BuildComparison, builds: Sequence[Build], title: str, *, exit_code: bool = True) -> str:
    head = "| " + " | ".join(COLUMNS) + " |\n|" + "---|" * len(COLUMNS)
    body = ["| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |" for cells in _table_body(cmp)]
    extra = [f"- {b.name}: `{b.describe()}`" for b in builds] + [f"- {line}" for line in notes(cmp)]
    outcome = f"**{outcome_line(cmp, exit_code=exit_code)}**"
    return "\n".join([f"## {title}", "", outcome, "", head, *body, "", ci_note(cmp), "", *extra, ""])


def write_outputs(markdown: str, doc: T, document: Document[T], results_json: str | None,
                  report_dir: str | None) -> list[Path]:
    """--results-json (checked against its `document`'s model first) and --report-dir/summary.md
    (also appended to $GITHUB_STEP_SUMMARY)."""
    written = []
    if results_json:
        document.save(doc, results_json)
        written.append(Path(results_json))
    if report_dir:
        path = Path(report_dir) / "summary.md"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(markdown, encoding="utf-8")
        written.append(path)
        step_summary = os.environ.get("GITHUB_STEP_SUMMARY")
        if step_summary:
            with open(step_summary, "a", encoding="utf-8") as f:
                f.write(markdown + "\n")
    return written


__all__ = ["SCHEMA", "SCHEMA_VERSION", "cell_row", "render_markdown", "render_text", "results_doc", "rows",
           "write_outputs"]
