"""The end-of-session table: one row per configuration x concurrency, short enough for a CI log.

It reads the results document (specguard/report/results.py), so a controller that merged pytest-xdist
workers' results prints the same table as a single process does.
"""

from __future__ import annotations

from typing import Any

from specguard.report.results import STATUS_NOT_MEASURED, STATUS_REGRESSION, sorted_cells

GATE_SHORT = {"throughput": "tput", "accept_length": "accept", "speculation": "spec"}


def fmt(x: float | None, spec: str = ".1f") -> str:
    return "-" if x is None else format(x, spec)


def pct_ci(estimate: dict[str, Any] | None, verdict: str = "-") -> str:
    """'+1.2% [-0.4,+2.8]' from a decision's estimate; the verdict when there is none."""
    if not estimate:
        return verdict
    return (f"{(estimate['ratio'] - 1) * 100:+.1f}% [{(estimate['low'] - 1) * 100:+.1f},"
            f"{(estimate['high'] - 1) * 100:+.1f}]")


def decisions_by_cell(doc: dict[str, Any]) -> dict[tuple[str, int], dict[str, dict[str, Any]]]:
    out: dict[tuple[str, int], dict[str, dict[str, Any]]] = {}
    for d in doc["decisions"]:
        out.setdefault((d["config"], d["concurrency"]), {})[d["gate"]] = d
    return out


def cell_verdict(cell: dict[str, Any], gates: dict[str, dict[str, Any]]) -> str:
    """'pass', or the gates that did not pass grouped by outcome: 'FAIL: tput; inconclusive: accept'."""
    if cell["error"]:
        return "ERROR: " + cell["error"].splitlines()[0][:40]
    groups: dict[str, list[str]] = {}
    for gate, d in gates.items():
        v = d["verdict"]
        if not d["enforced"]:
            label = "behind (info)" if v == "fail" else None
        else:
            label = None if v == "pass" else v.upper() if v in ("fail", "error") else v
        if label:
            groups.setdefault(label, []).append(GATE_SHORT.get(gate, gate))
    order = ["ERROR", "FAIL", "inconclusive", "skip", "behind (info)"]
    return "; ".join(f"{label}: {','.join(groups[label])}" for label in order if label in groups) or "pass"


COLUMNS = (("config", "config", "<12"), ("C", "concurrency", ">4"), ("tok/s", "tok_s", ">9"),
           ("vs baseline [CI]", "vs_baseline", ">22"), ("accept", "accept", ">6"),
           ("TTFT p50/p99 ms", "ttft", ">17"), ("ITL p50/p99 ms", "itl", ">15"),
           ("spec/ref [CI]", "spec_ref", ">22"), ("verdict", "verdict", ""))


def summary_rows(doc: dict[str, Any]) -> list[dict[str, str]]:
    """The table's cells as text, keyed by COLUMNS' keys; shared by the terminal, markdown and HTML."""
    by_cell = decisions_by_cell(doc)
    rows = []
    for cell in sorted_cells(doc):
        s, gates = cell["summary"], by_cell.get((cell["config"], cell["concurrency"]), {})
        tput, spec = gates.get("throughput"), gates.get("speculation")
        rows.append({
            "config": cell["config"], "concurrency": str(cell["concurrency"]), "tok_s": fmt(s["output_throughput"]),
            "vs_baseline": pct_ci(tput and tput["estimate"], tput["verdict"] if tput else "-"),
            "accept": fmt(s["accept_length"], ".2f"),
            "ttft": f"{fmt(s['median_ttft_ms'])}/{fmt(s['p99_ttft_ms'])}",
            "itl": f"{fmt(s['median_itl_ms'], '.2f')}/{fmt(s['p99_itl_ms'], '.2f')}",
            "spec_ref": pct_ci(spec and spec["estimate"], spec["verdict"] if spec else "-"),
            "verdict": cell_verdict(cell, gates),
        })
    return rows


def notes(doc: dict[str, Any]) -> list[str]:
    """Crossovers, server notes, Holm failures and baseline writes: the lines under the table."""
    lines = [f"{name}: {x['text']}" for name, x in doc["crossovers"].items()]
    for name, server in doc["servers"].items():
        for check in server["checks"]:
            lines.append(f"{name}: {'ERROR' if check['blocking'] else 'note'}: {check['message']}")
        if server.get("failure"):
            lines.append(f"{name}: ERROR: {server['failure'].splitlines()[0]}")
    alpha = doc["tolerances"]["family_alpha"]
    lines += [f"FAIL (Holm, family alpha {alpha}): {d['message'].splitlines()[0]}" for d in doc["holm_failures"]]
    lines += [f"baselines: {u}" for u in doc["baseline_updates"]]
    return lines


def render_summary(doc: dict[str, Any]) -> str:
    """The terminal table, the notes and the outcome line."""
    head = " ".join(format(title, align) for title, _, align in COLUMNS)
    lines = [head, "-" * len(head)]
    for row in summary_rows(doc):
        lines.append(" ".join(format(row[key], align) for _, key, align in COLUMNS))
    return "\n".join([*lines, *notes(doc), outcome_line(doc)])


def outcome_line(doc: dict[str, Any]) -> str:
    """One line CI logs can grep: the status and the exit code it maps to (docs/ci.md)."""
    o = doc["outcome"]
    kinds = [t["kind"] for t in o["failed_tests"]]
    detail = []
    if kinds.count(STATUS_REGRESSION) or doc["holm_failures"]:
        detail.append(f"{kinds.count(STATUS_REGRESSION) + len(doc['holm_failures'])} regression(s)")
    if kinds.count(STATUS_NOT_MEASURED):
        detail.append(f"{kinds.count(STATUS_NOT_MEASURED)} test(s) not measured")
    return f"specguard: {o['status']}{' (' + ', '.join(detail) + ')' if detail else ''}, exit {o['exit_status']}"
