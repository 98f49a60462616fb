"""The end-of-session table: one row per configuration x concurrency, short enough for a CI log.

It reads the results document (specguard/report/results.py), so a controller that merged pytest-xdist
workers' results prints the same table as a single process does. Verdict labels come from the
tests' recorded outcomes (doc["tests"]) when present, so the table, the summary line, JSON,
markdown, HTML, JUnit and pytest's own counts say the same thing about every cell.
"""

from __future__ import annotations

import math
import textwrap

from specguard.decide.gates import RelaunchReason, RelaunchWhy
from specguard.labels import SOAK, STATUS_NOT_MEASURED, STATUS_REGRESSION, GateLabel, Level
from specguard.notes import Note, NoteKind
from specguard.report.baseline_text import document_lines
from specguard.report.crossovers import crossover_line, level_kind
from specguard.report.note_text import check_line, note_line
from specguard.report.resolution import attach_lines, few_sessions_lines, resolution_note
from specguard.report.results import CellKey, decision_result, detectable_drop, sorted_cells, tests_by_cell
from specguard.report.schema import CellDoc, DecisionDoc, EstimateDoc, RelaunchDoc, ResultsDoc, ServerDoc, TestDoc
from specguard.report.verdict_text import message, relaunch_reason

GATE_SHORT = {"throughput": "tput", "accept_length": "accept", "step_time": "step", "speculation": "spec"}
VERDICT_ORDER = ["FAIL", "ERROR", "skip", "inconclusive", "behind (info)", "recorded"]


def short_gate(gate: str) -> str:
    """'tput', 'accept', or 'accept[code]' for one prompt category's accept-length gate."""
    label = GateLabel.parse(gate)
    return str(GateLabel(GATE_SHORT.get(label.gate, label.gate), label.category))


def fmt(x: float | None, spec: str = ".1f") -> str:
    return "-" if x is None else format(x, spec)


def fmt_num(x: float | None) -> str:
    """A figure as people read it: 14712.3, 98.41, 2.873 (never 1.47e+04)."""
    if x is None or not math.isfinite(x):
        return "-"
    if abs(x) >= 100:
        return f"{x:.1f}"
    if abs(x) >= 10:
        return f"{x:.2f}"
    return f"{x:.3f}"


def shorten(text: str, width: int = 60) -> str:
    """The first line, cut at a word boundary with an ellipsis (never mid-word)."""
    first = (text.strip().splitlines() or [""])[0]
    return textwrap.shorten(first, width=width, placeholder=" ...") if len(first) > width else first


def pct_ci(estimate: EstimateDoc | None, verdict: str = "-") -> str:
    """A decision's change and the bound its pass rule used: '+0.4% (>=-1.7%, 95%)' (a pass
    needs that one-sided bound at or above the threshold); a file written before the pass had its
    own level gives its two-sided interval with the interval's level, '+1.2% [-0.4,+2.8] 99.9%';
    the verdict when there is no estimate."""
    if not estimate:
        return verdict
    change = f"{(estimate['ratio'] - 1) * 100:+.1f}%"
    low, level = estimate.get("pass_low"), estimate.get("pass_confidence")
    if low is not None and level:
        return f"{change} (>={(low - 1) * 100:+.1f}%, {level:.0%})"
    return (f"{change} [{(estimate['low'] - 1) * 100:+.1f},{(estimate['high'] - 1) * 100:+.1f}] "
            f"{estimate['confidence']:.1%}")


def decisions_by_cell(doc: ResultsDoc) -> dict[CellKey, dict[str, DecisionDoc]]:
    out: dict[CellKey, dict[str, DecisionDoc]] = {}
    for d in doc["decisions"]:
        out.setdefault((d["config"], d["level"]), {})[d["gate"]] = d
    return out


def family_test(doc: ResultsDoc) -> TestDoc | None:
    """The session-level test specguard::family_holm (Holm across the session), when it ran."""
    return next((t for t in doc.get("tests") or [] if t.get("gate") == "family_holm"), None)


def verdict_label(gate: str, decision: DecisionDoc | None, test: TestDoc | None, updating: bool) -> str | None:
    """What one gate of a cell shows; None for a plain pass. The test's outcome decides (FAIL is
    a failed test, skip a skipped one); the decision only refines a passed test."""
    if test is not None and test["outcome"] in ("failed", "skipped"):
        return outcome_label(test)
    if decision is None:
        return None if test is not None else "-"
    return decision_label(gate, decision, tested=test is not None, updating=updating)


def outcome_label(test: TestDoc) -> str:
    """A failed or skipped test's label: FAIL for a regression, ERROR for a cell not measured, skip."""
    if test["outcome"] == "skipped":
        return "skip"
    return "FAIL" if test.get("kind") == STATUS_REGRESSION else "ERROR"


def decision_label(gate: str, decision: DecisionDoc, tested: bool, updating: bool) -> str | None:
    """A decision's label when its test passed (`tested`) or no test outcome was recorded; None
    for a plain pass. A refresh (`updating`) records instead of gating the history gates."""
    v = decision["verdict"]
    if updating and GateLabel.parse(gate).is_history:
        return None if v in ("pass", "skip") else "recorded"
    if not decision["enforced"]:
        return "behind (info)" if v == "fail" else None
    if not tested:  # a document without test outcomes (older files): the decision alone
        return None if v == "pass" else v.upper() if v in ("fail", "error") else v
    return "inconclusive" if v == "inconclusive" else None


def cell_verdict(cell: CellDoc, gates: dict[str, DecisionDoc], tests: dict[str, TestDoc] | None = None,
                 updating: bool = False) -> str:
    """'pass', or the gates that did not pass grouped by outcome: 'FAIL: tput; inconclusive: accept'."""
    tests = tests or {}
    if cell["error"]:
        return "ERROR: " + shorten(cell["error"], 40)
    groups: dict[str, list[str]] = {}
    for gate in dict.fromkeys([*gates, *tests]):
        label = verdict_label(gate, gates.get(gate), tests.get(gate), updating)
        if label and label != "-":
            groups.setdefault(label, []).append(short_gate(gate))
    return "; ".join(f"{label}: {','.join(groups[label])}" for label in VERDICT_ORDER if label in groups) or "pass"


COLUMNS = (("config", "config", "<12"), ("C", "concurrency", ">4"), ("tok/s", "tok_s", ">9"),
           ("vs baseline (bound)", "vs_baseline", ">20"), ("caught 90%", "resolves", ">10"),
           ("accept", "accept", ">6"),
           ("step ms", "step_ms", ">7"),
           ("TTFT p50/p99 ms", "ttft", ">17"), ("ITL p50/p99 ms", "itl", ">15"),
           ("spec/ref (bound)", "spec_ref", ">20"), ("verdict", "verdict", ""))


def summary_rows(doc: ResultsDoc) -> list[dict[str, str]]:
    """The table's cells as text, keyed by COLUMNS' keys; shared by the terminal, markdown and HTML."""
    by_cell = decisions_by_cell(doc)
    by_test = tests_by_cell(doc)
    updating = bool(doc.get("options", {}).get("update_baselines"))
    rows = []
    for cell in sorted_cells(doc):
        key = (cell["config"], cell["level"])
        gates, tests = by_cell.get(key, {}), by_test.get(key)
        if gates or tests or cell["error"]:
            verdict = cell_verdict(cell, gates, tests, updating)
        else:
            verdict = _reference_only(doc, key)
        rows.append({**_figure_columns(doc, cell, gates), "verdict": verdict})
    family = _family_row(doc)
    if family is not None:
        rows.append(family)
    return rows


def _figure_columns(doc: ResultsDoc, cell: CellDoc, gates: dict[str, DecisionDoc]) -> dict[str, str]:
    """A cell's row up to its verdict: the cell, its figures and its throughput and speculation ratios."""
    s = cell["summary"]
    tput, spec = gates.get("throughput"), gates.get("speculation")
    drop = detectable_drop(tput["estimate"] if tput else None, doc["tolerances"].get("fail_rule", "significant"))
    return {
        "config": cell["config"], "concurrency": level_column(Level.parse(cell["level"])),
        "tok_s": fmt_num(s["output_throughput"]),
        "vs_baseline": _ratio_column(tput),
        "resolves": f">={drop * 100:.1f}%" if drop is not None else "-",
        "accept": fmt(s["accept_length"], ".2f"),
        "step_ms": fmt(s.get("step_time_ms"), ".2f"),
        "ttft": f"{fmt(s['median_ttft_ms'])}/{fmt(s['p99_ttft_ms'])}",
        "itl": f"{fmt(s['median_itl_ms'], '.2f')}/{fmt(s['p99_itl_ms'], '.2f')}",
        "spec_ref": _ratio_column(spec),
    }


def _ratio_column(decision: DecisionDoc | None) -> str:
    """A gate's ratio with its interval; its verdict when it has no estimate; "-" without the gate."""
    if decision is None:
        return "-"
    return pct_ci(decision["estimate"], decision["verdict"])


def _family_row(doc: ResultsDoc) -> dict[str, str] | None:
    """The last row: Holm's session-level test, with the cells only it failed."""
    family = family_test(doc)
    if family is None:
        return None
    blank = {key: "" for _, key, _ in COLUMNS}
    verdict = "pass" if family["outcome"] == "passed" else "FAIL: " + ", ".join(
        f"{d['config']}-{d['level']} {short_gate(d['gate'])}" for d in doc["holm_failures"])
    return {**blank, "config": "family", "concurrency": "all", "vs_baseline": "Holm across the session",
            "verdict": verdict}


def _reference_only(doc: ResultsDoc, key: CellKey) -> str:
    """The verdict column of a cell none of whose own tests ran."""
    users = [u for r in doc.get("reference_roles") or [] if (r["config"], r["level"]) == key for u in r["for"]]
    if users:
        return f"reference for {', '.join(users)}"
    return "-"


def _failure_note(name: str, failure: str, server: ServerDoc, doc: ResultsDoc) -> str:
    """A configuration that did not run (`failure`, its server record's): an error, or (skipped) a
    server that does not serve it, with the way to measure it when it is another configuration's
    reference."""
    reason = server.get("failure_reason")
    first = note_line(Note.from_json(reason)) if reason else failure.splitlines()[0]  # older files: their first line
    if not server.get("failure_skipped"):
        return f"{name}: ERROR: {first}"
    users = [c["name"] for c in doc.get("configs") or [] if c.get("reference") == name]
    if users and server.get("mode") != "launched":
        return (f"{name}: not measured ({first}); {', '.join(users)} need{'s' if len(users) == 1 else ''} it as "
                f"reference: give it its own server with --server-url {name}=URL")
    return f"{name}: not measured ({first})"


def notes(doc: ResultsDoc) -> list[str]:
    """Crossovers, server notes, Holm, references, baseline writes: the lines under the table."""
    kind = level_kind(doc)
    lines = [f"{name}: {crossover_line(x, kind)}" for name, x in doc["crossovers"].items()]
    lines += server_lines(doc) + reference_lines(doc) + category_lines(doc) + load_lines(doc)
    lines += relaunch_lines(doc) + soak_lines(doc)
    lines += regression_halves(doc) + attach_lines(doc) + few_sessions_lines(doc)
    family = family_test(doc)
    if family is not None and family["outcome"] == "failed":
        lines.append(f"family_holm FAILED: {family['message']}")
    resolution = resolution_note(doc)
    if resolution:
        lines.append(resolution)
    lines += [f"baselines: {u}" for u in document_lines(doc)]
    lines += [note_line(Note.from_json(n)) for n in doc.get("run_notes") or []]
    return lines


def soak_lines(doc: ResultsDoc) -> list[str]:
    """Each soak test's line (its windows and what slid), under the table: a soak has no cell in it."""
    return [message(decision_result(d)).split("\n")[0] for d in doc["decisions"] if d["gate"] == SOAK]


def regression_halves(doc: ResultsDoc) -> list[str]:
    """Engine regressions and drafter regressions named apart: failed step-time and accept-length
    gates, and the half a speculative cell's failed tok/s verdict was attributed to."""
    engine: dict[str, list[str]] = {}
    drafter: dict[str, list[str]] = {}
    for d in doc["decisions"]:
        if d["verdict"] != "fail" or not d.get("enforced", True):
            continue
        label, cell = GateLabel.parse(d["gate"]), d["level"]
        moved = d.get("attribution")
        half = {"step_time": "engine", "accept_length": "drafter"}.get(label.gate) or (moved["half"] if moved else "")
        if half in ("engine", "both"):
            engine.setdefault(d["config"], []).append(cell)
        if half in ("drafter", "both"):
            drafter.setdefault(d["config"], []).append(cell)
    out = []
    for what, cells in (("engine regressions (step time)", engine), ("drafter regressions (accept length)", drafter)):
        if cells:
            out.append(f"{what}: " + "; ".join(f"{name} {', '.join(dict.fromkeys(levels))}"
                                               for name, levels in cells.items()))
    return out


def relaunch_lines(doc: ResultsDoc) -> list[str]:
    """One line per relaunched configuration: why each launch after the first was made."""
    return [f"relaunched {name}: {'; '.join(r for launch in launches for r in relaunch_texts(launch))}"
            for name, launches in (doc.get("relaunches") or {}).items()]


def relaunch_texts(launch: RelaunchDoc) -> list[str]:
    """One launch after the first: each reason it was made, and why it failed if it did."""
    if "lines" in launch:  # a schema-2 file's lines, as worded then
        return list(launch["lines"])
    stage = launch.get("stage", 2)
    label = f"launch {stage}: " if stage > 2 else ""
    reasons = [RelaunchReason(RelaunchWhy(r["why"]), GateLabel.parse(r["gate"]), r["config"], Level.parse(r["level"]),
                              r["ratio"], r["p_value"], r["limit_p"]) for r in launch.get("reasons", [])]
    failed = launch.get("failed")
    return [label + relaunch_reason(r) for r in reasons] + ([f"relaunch failed: {failed}"] if failed else [])


def server_lines(doc: ResultsDoc) -> list[str]:
    """Per configuration: how the attached server differs from the suite file, the checks of the
    server against the configuration, and why it did not run."""
    lines = []
    for name, server in doc["servers"].items():
        for diff in server.get("differences") or []:
            line = note_line(Note.of(NoteKind.ATTACH_DIFFERENCE, field=diff["field"], suite=diff["suite"], server=diff["server"]))
            lines.append(f"{name}: attached server differs from the suite file: {line}")
        for check in server["checks"]:
            line = check_line(Note.from_json(check["note"]), check["strict"])
            lines.append(f"{name}: {'ERROR' if check['blocking'] else 'note'}: {line}")
        failure = server.get("failure")
        if failure:
            lines.append(_failure_note(name, failure, server, doc))
    return lines


def reference_lines(doc: ResultsDoc) -> list[str]:
    """Reference cells measured only for deselected speculative tests: one line per reference and
    set of users, with the levels."""
    roles: dict[str, dict[str, list[Level]]] = {}
    for r in doc.get("reference_roles") or []:
        roles.setdefault(r["config"], {}).setdefault(", ".join(r["for"]), []).append(Level.parse(r["level"]))
    return [f"{ref}: measured as reference for {who} ({', '.join(map(str, sorted(levels)))})"
            for ref, users in roles.items() for who, levels in users.items()]


def level_column(level: Level) -> str:
    """A level as the table's C column shows it: "16" (clients), or "r8" (requests/s)."""
    return level.name if level.rate else str(level.value)


def load_lines(doc: ResultsDoc) -> list[str]:
    """The load model of the sweep (open loop only) and each configuration's goodput per level."""
    sweep = doc.get("sweep") or {}
    lines = []
    if sweep.get("request_rate"):
        shape = "Poisson" if sweep.get("burstiness", 1.0) == 1.0 else f"gamma (burstiness {sweep['burstiness']:g})"
        cap = sweep.get("max_concurrency") or 64
        lines.append(f"load: open loop, {shape} arrivals at r{', r'.join(map(str, sweep['request_rate']))} req/s, "
                     f"at most {cap} requests in flight")
    goodput: dict[str, list[str]] = {}
    for cell in sorted_cells(doc):
        g = cell["summary"].get("request_goodput")
        if g is not None:
            goodput.setdefault(cell["config"], []).append(
                f"{level_column(Level.parse(cell['level']))} {fmt(g, '.2f')} "
                f"({fmt(cell['summary'].get('slo_attainment'), '.0%')})")
    if goodput:
        slo = sweep.get("slo") or "the SLOs"
        lines += [f"{name} goodput req/s under {slo} (share meeting it): {', '.join(parts)}" for name, parts in goodput.items()]
    return lines


def category_lines(doc: ResultsDoc) -> list[str]:
    """One line per cell with per-category accept-length gates: each category's accept length,
    its change against the baseline and its test's outcome (the overall figure is in the table)."""
    by_test = tests_by_cell(doc)
    lines = []
    for key, gates in decisions_by_cell(doc).items():
        tests = by_test.get(key, {})
        parts = [_category_part(gate, d, tests.get(gate)) for gate, d in sorted(gates.items())
                 if gate.startswith("accept_length[")]
        if parts:
            whole = _overall_part(gates.get("accept_length"), tests.get("accept_length"))
            lines.append(f"{key[0]} {key[1]} accept length: {whole}by category: {', '.join(parts)}")
    return lines


def _category_part(gate: str, decision: DecisionDoc, test: TestDoc | None) -> str:
    """'code 2.410 -1.2% FAIL': one category's accept length, its change and its label."""
    label = verdict_label(gate, decision, test, False)
    est = decision.get("estimate")
    change = f" {(est['ratio'] - 1) * 100:+.1f}%" if est else ""
    return _labelled(f"{gate[len('accept_length['):-1]} {fmt(decision.get('current'), '.3f')}{change}", label)


def _overall_part(overall: DecisionDoc | None, test: TestDoc | None) -> str:
    """'overall 2.380 -0.4%; ' before the categories, when the cell's accept length has an estimate."""
    est = overall.get("estimate") if overall is not None else None
    if overall is None or not est:
        return ""
    label = verdict_label("accept_length", overall, test, False)
    return _labelled(f"overall {fmt(overall.get('current'), '.3f')} {(est['ratio'] - 1) * 100:+.1f}%", label) + "; "


def _labelled(text: str, label: str | None) -> str:
    """The text with its gate label after it; a plain pass ("" / None) and "no decision" ("-") add nothing."""
    return text + (f" {label}" if label and label != "-" else "")


def render_summary(doc: ResultsDoc) -> str:
    """The terminal table, the notes, the outcome line and, on a first run, how to record baselines."""
    head = " ".join(format(title, align) for title, _, align in COLUMNS)
    lines = [head, "-" * len(head)]
    for row in summary_rows(doc):
        lines.append(" ".join(format(row[key], align) for _, key, align in COLUMNS).rstrip())
    first_run = first_run_line(doc)
    tail = [first_run] if first_run else []
    return "\n".join([*lines, *notes(doc), outcome_line(doc), *tail])


def first_run_line(doc: ResultsDoc) -> str | None:
    record = (doc.get("hints") or {}).get("record")
    return f"no baselines yet: record them for this run with: {record}" if record else None


def outcome_line(doc: ResultsDoc) -> str:
    """One line CI logs can grep: the status, the tests' counts and the exit code (docs/ci.md).
    Counted from the same test outcomes pytest counts, Holm's family test included."""
    o = doc["outcome"]
    kinds = [t["kind"] for t in o["failed_tests"]]
    detail = []
    if kinds.count(STATUS_REGRESSION):
        detail.append(f"{kinds.count(STATUS_REGRESSION)} regression(s)")
    if kinds.count(STATUS_NOT_MEASURED):
        detail.append(f"{kinds.count(STATUS_NOT_MEASURED)} test(s) not measured")
    counts = o.get("counts")
    tally = ", ".join(f"{counts[k]} {k}" for k in ("failed", "passed", "skipped") if counts.get(k)) if counts else ""
    text = "; ".join(x for x in (", ".join(detail), tally) if x)
    return f"specguard: {o['status']}{' (' + text + ')' if text else ''}, exit {o['exit_status']}"
