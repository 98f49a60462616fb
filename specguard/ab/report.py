"""What an A/B comparison reports: the terminal table, the results document (schema
"specguard-ab", docs/ab.md) and the markdown summary, all from one list of rows."""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from specguard.ab.builds import Build
from specguard.ab.decision import BETTER, DIFFERENT, PRIOR_DOF, GateCell, look_shares, prior_check, shown_ratio
from specguard.ab.rounds import Comparison
from specguard.labels import ACCEPT_LENGTH, SPECULATION, STEP_TIME, THROUGHPUT
from specguard.report.terminal import fmt_num
from specguard.store.atomic import atomic_write_json

SCHEMA, SCHEMA_VERSION = "specguard-ab", 2  # 2: one-sided p_worse per look, O'Brien-Fleming shares
GATE_SHOWN = {THROUGHPUT: "tok/s", STEP_TIME: "step ms", ACCEPT_LENGTH: "accept", SPECULATION: "spec/ref"}
COLUMNS = ("config", "level", "gate", "A", "B", "B/A [CI]", "decision", "rounds")


def _median(values: Sequence[float]) -> float:
    ordered = sorted(values)
    n = len(ordered)
    return ordered[n // 2] if n % 2 else (ordered[n // 2 - 1] + ordered[n // 2]) / 2


def _figure(cmp: Comparison, cell: GateCell, build: str, launches: int) -> float | None:
    """A build's location as the decision sees it: the geometric mean of its launches' medians
    over the launches the shown look used, so B / A is the table's ratio (an arithmetic mean
    would let one stalled run pull A and B apart from it). Step time in ms from the step rate."""
    medians = [_median(runs) for runs in cmp.values(build, cell.config, cell.level, cell.gate)[:launches] if runs]
    if not medians:
        return None
    location = math.exp(sum(math.log(m) for m in medians) / len(medians))
    return 1e3 / location if cell.gate == STEP_TIME else location


def cell_row(cmp: Comparison, cell: GateCell) -> dict[str, Any]:
    """One cell's row of the results document (and of every table)."""
    look = cell.shown_look()
    row: dict[str, Any] = {
        "config": cell.config, "level": cell.level, "level_name": cmp.selection.level_name(cell.level),
        "gate": cell.gate, "decision": "error" if cell.error else cell.decision, "direction": cell.direction(),
        "rounds": look.launches if look else 0, "decided_round": cell.decided_round, "alpha": cell.alpha,
        "tolerance": cell.spec.tolerance, "prior_sd": cell.spec.prior_sd, "error": cell.error,
        "p_holm": cell.p_holm, "p_adjusted": cell.p_adjusted(cmp.budget),
        "p_adjusted_better": cell.p_adjusted(cmp.budget, BETTER),
        "a": None, "b": None, "ratio": None, "low": None, "high": None, "looks": [],
    }
    # every run's value per launch, as decided (step time: steps per second; speculation: run ratios)
    row["a_runs"] = cmp.values("A", cell.config, cell.level, cell.gate)
    row["b_runs"] = cmp.values("B", cell.config, cell.level, cell.gate)
    if look is not None:
        row["a"], row["b"] = _figure(cmp, cell, "A", look.launches), _figure(cmp, cell, "B", look.launches)
        row["ratio"], row["low"], row["high"] = shown_ratio(look, cell.spec)
    for seen in cell.looks:
        est = seen.estimate
        row["looks"].append({"round": seen.round_no, "launches": seen.launches, "ratio": est.ratio,
                             "low": est.low, "high": est.high, "confidence": est.confidence,
                             "p_worse": seen.p_worse, "pass_low": est.pass_low, "pass_high": seen.pass_high,
                             "dof": est.dof if math.isfinite(est.dof) else None,  # inf: no variance at all
                             "between_sd": est.between_sd, "between_source": est.between_source})
    return row


def rows(cmp: Comparison) -> list[dict[str, Any]]:
    return [cell_row(cmp, cell) for cell in cmp.sorted_cells()]


def decision_text(row: dict[str, Any]) -> str:
    if row["decision"] == DIFFERENT:
        return f"different ({row['direction']})"
    return str(row["decision"])


def _num(x: float | None) -> str:
    return "-" if x is None or not math.isfinite(x) else fmt_num(x)


def table_cells(row: dict[str, Any]) -> list[str]:
    """The row's columns as text (COLUMNS)."""
    ratio = "-" if row["ratio"] is None else f"{row['ratio']:.3f} [{row['low']:.3f}, {row['high']:.3f}]"
    return [row["config"], row["level_name"], GATE_SHOWN[row["gate"]], _num(row["a"]), _num(row["b"]), ratio,
            decision_text(row), str(row["rounds"])]


def ci_note(cmp: Comparison) -> str:
    level = 1 - 2 * (1 - cmp.budget.pass_confidence)
    return (f"A, B: each build's launches' medians, geometric mean; B/A [CI]: B over A with its {level:.0%} interval "
            f"(the equivalence test's); step ms is step time, lower is better; rounds: launches per build behind it")


def render_text(cmp: Comparison, builds: Sequence[Build], title: str, *, exit_code: bool = True) -> str:
    """The terminal table, then the builds, what could not be measured and the outcome (with
    the exit code it means for `specguard ab`; a bisect step's has none)."""
    body = [table_cells(r) for r in rows(cmp)]
    widths = [max(len(h), *(len(b[i]) for b in body)) if body else len(h) for i, h in enumerate(COLUMNS)]
    line = "  ".join
    out = [title, line(h.ljust(w) for h, w in zip(COLUMNS, widths)), "-" * (sum(widths) + 2 * (len(widths) - 1))]
    out += [line(c.ljust(w) for c, w in zip(b, widths)).rstrip() for b in body]
    out.append(ci_note(cmp))
    out += [f"{b.name}: {b.describe()}" for b in builds]
    out += notes(cmp)
    out.append(outcome_line(cmp, exit_code=exit_code))
    return "\n".join(out)


def notes(cmp: Comparison) -> list[str]:
    lines = [f"not compared: {name}: {why}" for name, why in cmp.dropped.items()]
    lines += [f"not measured: {line}" for line in cmp.not_measured()]
    spreads = [_spread_text(gate, row) for gate, row in launch_spreads(cmp).items()]
    if spreads:
        lines.append("launch spread in this run (decided on; the prior only checked): " + "; ".join(spreads))
    return lines


def launch_spreads(cmp: Comparison) -> dict[str, dict[str, Any]]:
    """Per gate: the run's launch spread (sd, dof) beside the prior's, and whether it contradicts it."""
    out: dict[str, dict[str, Any]] = {}
    for gate, spec in cmp.specs.items():
        found = cmp.spread_of(gate)
        if found is not None:
            out[gate] = {"sd": math.sqrt(found.var), "dof": found.dof, "prior_sd": spec.prior_sd,
                         "contradicts_prior": prior_check(found, spec.prior_sd)}
    return out


def _spread_text(gate: str, row: dict[str, Any]) -> str:
    verdict = "above the prior (chi-square at 1 %): measure the machine" if row["contradicts_prior"] else "consistent"
    return f"{GATE_SHOWN.get(gate, gate)} {row['sd']:.2%} ({row['dof']:g} dof) vs prior {row['prior_sd']:.2%}, {verdict}"


def outcome_line(cmp: Comparison, *, exit_code: bool = True) -> str:
    counts: dict[str, int] = {}
    for row in rows(cmp):
        counts[decision_text(row)] = counts.get(decision_text(row), 0) + 1
    tally = ", ".join(f"{n} {what}" for what, n in sorted(counts.items()))
    launches = len(cmp.launches)
    code = f" -> exit {cmp.exit_code()}" if exit_code else ""
    return f"{tally or 'nothing decided'}; {cmp.rounds_run} rounds, {launches} launches{code}"


def results_doc(cmp: Comparison, builds: Sequence[Build], *, suite_path: str, mode: str, argv: Sequence[str]) -> dict[str, Any]:
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
                   "holm": "weighted, over every cell, per direction",
                   "launch_spread": "this run's launches of the other configurations, with the cell's own; the prior "
                                    "weighs nothing"},
        "launch_spreads": launch_spreads(cmp),
        "configs": cmp.selection.configs, "levels": cmp.selection.levels, "references": cmp.selection.references,
        "launches": [{"round": x.round_no, "build": x.build, "config": x.config, "wall_s": round(x.wall_s, 2),
                      "error": x.error, "skipped": x.skipped} for x in cmp.launches],
        "cells": rows(cmp),
        "not_compared": cmp.dropped, "not_measured": cmp.not_measured(),
        "outcome": {"exit_code": cmp.exit_code(), "rounds": cmp.rounds_run,
                    "regressions": [f"{c.gate} {c.config} {cmp.selection.level_name(c.level)}" for c in cmp.regressions()]},
    }


def render_markdown(cmp: Comparison, builds: Sequence[Build], title: str, *, exit_code: bool = True) -> str:
    head = "| " + " | ".join(COLUMNS) + " |\n|" + "---|" * len(COLUMNS)
    body = ["| " + " | ".join(c.replace("|", "\\|") for c in table_cells(r)) + " |" for r in rows(cmp)]
    extra = [f"- {b.name}: `{b.describe()}`" for b in builds] + [f"- {line}" for line in notes(cmp)]
    outcome = f"**{outcome_line(cmp, exit_code=exit_code)}**"
    return "\n".join([f"## {title}", "", outcome, "", head, *body, "", ci_note(cmp), "", *extra, ""])


def write_outputs(markdown: str, doc: dict[str, Any], results_json: str | None, report_dir: str | None) -> list[Path]:
    """--results-json and --report-dir/summary.md (also appended to $GITHUB_STEP_SUMMARY)."""
    written = []
    if results_json:
        atomic_write_json(Path(results_json), doc)
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
