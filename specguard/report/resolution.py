"""What the cells can catch: the notes under the table on the drops each cell fails for 9 times
in 10 (``report.results.detectable_drop``), and what would make them smaller: inconclusive cells,
attach mode's one launch, and cells compared with too few stored sessions to check the prior."""

from __future__ import annotations

from typing import Any

from specguard.decide.prior import UNCHECKED_BELOW_DOF
from specguard.report.results import detectable_drop, spread_source, tests_by_cell
from specguard.report.schema import DecisionDoc, EstimateDoc, ResultsDoc
from specguard.report.verdict_text import spread_source_text

FULL_HISTORY = 5  # stored sessions the gate study measures the guarantees at (docs/guarantees.md)
CHECKED_FROM = UNCHECKED_BELOW_DOF + 1  # stored sessions from which the prior is used as declared


NOISIER_THAN_PRIOR = 1.25  # a history spread above this multiple of the suite's prior reads as a noisy recording


def resolution_note(doc: ResultsDoc) -> str | None:
    """Why cells are inconclusive, in one line: the spread behind their intervals and the smallest
    drop they can resolve, with what to do about it."""
    inconclusive = inconclusive_estimates(doc)
    if not inconclusive:
        return None
    tol = doc["tolerances"]
    sds = [e["between_sd"] for _, e in inconclusive]
    rule = tol.get("fail_rule", "significant")
    drops = [x for x in (detectable_drop(e, rule) for _, e in inconclusive) if x is not None]
    used = [spread_source(e) for _, e in inconclusive]
    sources = sorted({spread_source_text(s) for s in used})
    from_history = any(s.history is not None for s in used)
    what = (f"baseline history spread up to {max(sds):.1%} ({', '.join(sources)})" if from_history
            else f"between-launch spread {max(sds):.1%} (the suite's prior_between_sd)")
    fix = _resolution_fix(inconclusive, tol, from_history)
    return (f"{len(inconclusive)} gate(s) inconclusive: {what}: these cells catch 9 drops in 10 only from "
            f"{_span(drops)} on; {fix}")


def inconclusive_estimates(doc: ResultsDoc) -> list[tuple[DecisionDoc, EstimateDoc]]:
    """The enforced inconclusive decisions with an estimate whose test passed (or was not
    recorded), each with its estimate: the cells the resolution note speaks of."""
    by_test = tests_by_cell(doc)
    out = []
    for d in doc["decisions"]:
        est = d.get("estimate")
        if d["verdict"] != "inconclusive" or not d["enforced"] or not est:
            continue
        t = by_test.get((d["config"], d["level"]), {}).get(d["gate"])
        if t is not None and t["outcome"] != "passed":
            continue
        out.append((d, est))
    return out


def _resolution_fix(inconclusive: list[tuple[DecisionDoc, EstimateDoc]], tol: dict[str, Any], from_history: bool) -> str:
    """What narrows the intervals. A history noisier than the suite's prior says the recording was
    disturbed: re-record. One as quiet as the prior is the launches' own spread: only more
    launches narrow the interval."""
    if not from_history:
        return "add repeats, or lower prior_between_sd if your launches really vary less"
    if any(e["between_sd"] > NOISIER_THAN_PRIOR * prior_between_sd(d["gate"], tol) for d, e in inconclusive):
        return "re-record the baselines on a quiet machine or add sessions (more --update-baselines runs)"
    return ("the baselines are as quiet as prior_between_sd says, so re-recording will not narrow them; "
            "advanced.launches = 2 will (twice the time)")


def prior_between_sd(gate: str, tolerances: dict[str, Any]) -> float:
    """The suite's declared between-launch spread for a gate: accept length (per category too)
    has its own, every other gate uses the tok/s one."""
    key = "prior_between_sd_accept" if gate.startswith("accept_length") else "prior_between_sd"
    return float(tolerances.get(key, 0.0))


def attach_lines(doc: ResultsDoc) -> list[str]:
    """Attach mode cannot relaunch: the tok/s drop each cell catches 9 times in 10 on its one launch."""
    if not doc["options"].get("attached"):
        return []
    rule = doc["tolerances"].get("fail_rule", "significant")
    drops = [(d["config"], d["level"], detectable_drop(d.get("estimate"), rule))
             for d in doc["decisions"] if d["gate"] == "throughput"]
    shown = [f"{name} {cell} >={drop * 100:.1f}%" for name, cell, drop in drops if drop is not None]
    if not shown:
        return []
    return ["attach mode (one launch, nothing relaunched): the tok/s drop each cell fails for 9 times in 10: "
            + ", ".join(shown) + " (docs/statistics.md: attach mode's power)"]


def few_sessions_lines(doc: ResultsDoc) -> list[str]:
    """Throughput cells compared with one or two stored sessions, one line per count: with one the
    suite's prior spread stands unchecked, with two it is checked on one degree of freedom, so the
    gate counts it double there (decide/prior.py ``unchecked_prior``: a prior set too small cannot
    fail unchanged code); the drops they still catch, and how many more sessions end the widening
    (K = 3) and reach the depth the guarantees were measured at."""
    rule = doc["tolerances"].get("fail_rule", "significant")
    by_k: dict[int, list[tuple[str, float | None]]] = {}
    for d in doc["decisions"]:
        versus, est = d.get("versus"), d.get("estimate")
        if d["gate"] != "throughput" or not versus or versus["against"] != "baseline" or not est:
            continue
        if 0 < versus["sessions"] < CHECKED_FROM:
            by_k.setdefault(versus["sessions"], []).append((f"{d['config']} {d['level']}", detectable_drop(est, rule)))
    prior = float(doc["tolerances"].get("prior_between_sd", 0.0))
    keep = int(doc["tolerances"].get("history_sessions", FULL_HISTORY))
    # a suite that keeps fewer sessions than the guarantees were measured at never reaches them by recording
    raise_keep = f" (raise [tolerances] history_sessions ({keep}) to {FULL_HISTORY} first)" if keep < FULL_HISTORY else ""
    lines = []
    for k, cells in sorted(by_k.items()):
        drops = [x for _, x in cells if x is not None]
        check = ("is unchecked" if k == 1 else "is checked on one degree of freedom")
        lines.append(f"{k} stored session{'s' if k > 1 else ''} behind {len(cells)} throughput cell(s) "
                     f"({', '.join(c for c, _ in cells)}): the prior spread ({prior:.1%}) {check}, so it counts "
                     f"double; they catch tok/s drops from {_span(drops)} on, 9 times in 10; record "
                     f"{CHECKED_FROM - k} more session(s) on unchanged code (pytest perf_tests --update-baselines) "
                     f"to gate at the prior as declared, {FULL_HISTORY - k} for the guarantees "
                     f"docs/guarantees.md gives at K = {FULL_HISTORY}{raise_keep}")
    return lines


def _span(drops: list[float]) -> str:
    if not drops:
        return "-"
    lo, hi = round(min(drops) * 100), round(max(drops) * 100)
    return f"{lo}%" if lo == hi else f"{lo}-{hi}%"
