"""The results document: one session's raw numbers, decisions and environment, as versioned JSON.

It is the contract between the measuring side (the pytest plugin) and everything that reads
results afterwards (the terminal table, markdown/HTML reports, `specguard compare`, `specguard
recommend`), so those never need a live session. Schema: docs/results.md.
"""

from __future__ import annotations

import math
from dataclasses import asdict
from pathlib import Path
from typing import Any, cast

from scipy import special

from specguard.decide.consistency import SetAside
from specguard.decide.prior import HistoryOf, Origin, SpreadSource
from specguard.decide.result import (
    Against,
    Attribution,
    Drift,
    Factors,
    GateResult,
    Half,
    PositionShare,
    Problem,
    Soak,
    SoakMetric,
    SoakShift,
    Versus,
    Why,
)
from specguard.decide.stats import RatioEstimate
from specguard.engines import ArgCheck
from specguard.labels import GateLabel, Level, Verdict
from specguard.measure.metrics import RunMetrics
from specguard.notes import Note
from specguard.report.schema import (
    BaselineOutcomeDoc,
    CellDoc,
    CheckDoc,
    ConfigDoc,
    DecisionDoc,
    EstimateDoc,
    NoteDoc,
    ProblemDoc,
    ResultsDoc,
    SoakDoc,
    SpreadSourceDoc,
    TestDoc,
)
from specguard.report.upgrade import upgrade
from specguard.report.verdict_text import message, ratio_text
from specguard.store.atomic import atomic_write_json
from specguard.store.baseline_file import FieldDifference
from specguard.store.documents import Document, DocumentError
from specguard.store.gaps import GapKind, HistoryGap
from specguard.store.refresh import BaselineOutcome

SCHEMA = "specguard-results"
SCHEMA_VERSION = 7
CONFIG_FIELDS = ("engine", "model_path", "draft_model_path", "speculative_algorithm", "num_steps", "eagle_topk",
                 "num_draft_tokens", "max_running_requests", "reference", "speculation_must_win_up_to")


class ResultsError(DocumentError):
    """A file that is not a results document this version of specguard can read."""


RESULTS: Document[ResultsDoc] = Document(
    SCHEMA, SCHEMA_VERSION, ResultsDoc, what="results file", make="write one with: pytest perf_tests --results-json FILE",
    readable=(1, 2, 3, 4, 5, 6), upgrade=upgrade, error=ResultsError)  # every version specguard ever wrote (report/upgrade.py)


def note_doc(n: Note) -> NoteDoc:
    """A note as stored: its kind and its figures as keys beside it."""
    return cast(NoteDoc, n.to_json())


def check_doc(c: ArgCheck) -> CheckDoc:
    """A server check as stored: its note, and whether (and why) it blocked."""
    return {"note": note_doc(c.note), "blocking": c.blocking, "strict": c.strict}


def run_doc(r: RunMetrics) -> dict[str, Any]:
    """One run's metrics as stored (`runs[]` of a cell, and of a bench file): its fields, the notes as data."""
    return {**asdict(r), "notes": [note_doc(n) for n in r.notes]}


CellKey = tuple[str, str]  # (configuration, level name)


def tests_by_cell(doc: ResultsDoc) -> dict[CellKey, dict[str, TestDoc]]:
    """Each cell's test outcomes by gate (the session-level family_holm test has no cell)."""
    out: dict[CellKey, dict[str, TestDoc]] = {}
    for t in doc.get("tests") or []:
        config, level, gate = t.get("config"), t.get("level"), t.get("gate")
        if config is not None and level is not None and gate:
            out.setdefault((config, level), {})[gate] = t
    return out


DETECTION_POWER = 0.9  # the probability with which the drop ``detectable_drop`` names fails
_Z_POWER = float(special.ndtri(DETECTION_POWER))  # 1.2816


def detectable_drop(estimate: EstimateDoc | None, rule: str = "significant") -> float | None:
    """The drop this cell fails for with probability DETECTION_POWER, from its interval: the
    half-width h = t se on the log scale (t the fail test's quantile at its confidence and dof).
    Under rule "significant" a drop d fails when the upper bound falls below 1 and the estimate
    below the threshold: 1 - d = e^-(h + z se), or threshold e^-(z se) where that is lower; under
    "beyond-tolerance" when the upper bound falls below the threshold: threshold e^-(h + z se).
    The drop whose estimate would just reach significance (h alone) is caught half the time."""
    if not estimate or not estimate.get("low") or not estimate.get("high") or estimate["low"] <= 0:
        return None
    h = (math.log(estimate["high"]) - math.log(estimate["low"])) / 2
    confidence, dof = estimate.get("confidence"), estimate.get("dof")
    t = float(special.stdtrit(dof, (1 + confidence) / 2)) if confidence and dof and 0 < confidence < 1 else None
    se = h / t if t and t > 0 else h / 2  # an older file without its level: about a 95 % interval's
    threshold = estimate.get("threshold") or 1.0
    if rule == "beyond-tolerance":
        return 1 - threshold * math.exp(-(h + _Z_POWER * se))
    return max(1 - math.exp(-(h + _Z_POWER * se)), 1 - threshold * math.exp(-_Z_POWER * se))


def _estimate_doc(e: RatioEstimate | None) -> EstimateDoc | None:
    if e is None:
        return None
    return cast(EstimateDoc, {**asdict(e), "between_source": spread_source_doc(e.between_source)})


def spread_source_doc(s: SpreadSource) -> SpreadSourceDoc:
    h = s.history
    return {"prior": s.prior, "dropped_prior_sd": s.dropped_prior_sd, "widened": s.widened,
            "launches": list(s.launches), "levels_pooled": s.levels_pooled, "legacy_text": s.legacy_text,
            "history": {"of": h.of.value, "count": h.count, "names": list(h.names)}
            if h else None}


def spread_source(d: EstimateDoc) -> SpreadSource:
    """A stored estimate's ``between_source`` as data."""
    s, h = d["between_source"], d["between_source"]["history"]
    return SpreadSource(prior=s["prior"], dropped_prior_sd=s["dropped_prior_sd"], widened=s["widened"],
                        launches=tuple(s["launches"]), levels_pooled=s["levels_pooled"], legacy_text=s["legacy_text"],
                        history=Origin(HistoryOf(h["of"]), h["count"], tuple(h["names"])) if h else None)


def _estimate(d: EstimateDoc | None) -> RatioEstimate | None:
    if not d:
        return None
    figures: dict[str, Any] = {**d, "between_source": spread_source(d)}
    return RatioEstimate(**figures)


def decision_dict(r: GateResult) -> DecisionDoc:
    """A decision as the document stores it: every field of GateResult, labels and levels by name,
    enums by value (tests/report/test_report.py pins that DecisionDoc names each field)."""
    a, p = r.attribution, r.problem
    return {
        "gate": str(r.gate), "config": r.config, "level": r.level.name, "verdict": r.verdict.value,
        "estimate": _estimate_doc(r.estimate), "current": r.current, "reference": r.reference,
        "versus": ({"against": r.versus.against.value, "name": r.versus.name, "sessions": r.versus.sessions}
                   if r.versus else None),
        "tolerance": r.tolerance, "rule": r.rule, "enforced": r.enforced, "alpha": r.alpha, "launches": r.launches,
        "stage": r.stage,
        "attribution": ({"half": a.half.value, "step_rate": _estimate_doc(a.step_rate), "accept": _estimate_doc(a.accept)}
                        if a else None),
        "factors": cast(Any, asdict(r.factors)) if r.factors else None, "goodput": r.goodput,
        "problem": problem_doc(p) if p else None,
        "drift": cast(Any, asdict(r.drift)) if r.drift else None, "notes": [note_doc(n) for n in r.notes],
        "positions": [{"position": s.position, "verdict": s.verdict.value, "estimate": _estimate_doc(s.estimate),
                       "current": s.current, "reference": s.reference} for s in r.positions],
        "soak": ({"windows": r.soak.windows, "warmup": r.soak.warmup, "half": r.soak.half.value,
                  "stalled": list(r.soak.stalled),
                  "shifts": [{"metric": s.metric.value, "window": s.window, "before": s.before, "after": s.after,
                              "low": s.low, "high": s.high, "p_value": s.p_value} for s in r.soak.shifts]}
                 if r.soak else None),
        "set_aside": [{"launch": a.launch, "runs": list(a.runs), "gap": a.gap, "limit": a.limit, "config": a.config}
                      for a in r.set_aside],
    }


def decision_result(d: DecisionDoc) -> GateResult:
    """A decision read back from a document, as the gate produced it."""
    v, a, p = d.get("versus"), d.get("attribution"), d.get("problem")
    return GateResult(
        gate=GateLabel.parse(d["gate"]), config=d["config"], level=Level.parse(d["level"]), verdict=Verdict(d["verdict"]),
        estimate=_estimate(d.get("estimate")), current=d.get("current"), reference=d.get("reference"),
        versus=Versus(Against(v["against"]), v["name"], v["sessions"]) if v else None, tolerance=d.get("tolerance"),
        rule=d.get("rule", ""), enforced=d.get("enforced", True), alpha=d.get("alpha"), launches=d.get("launches", 1),
        stage=d.get("stage", 1),
        attribution=Attribution(Half(a["half"]), _estimate(a["step_rate"]), _estimate(a["accept"])) if a else None,
        factors=Factors(**f) if (f := d.get("factors")) else None, goodput=d.get("goodput", False),
        problem=problem_of_doc(p) if p else None,
        drift=Drift(**dr) if (dr := d.get("drift")) else None,
        notes=tuple(Note.from_json(n) for n in d.get("notes") or ()),
        positions=tuple(PositionShare(s["position"], Verdict(s["verdict"]), _estimate(s["estimate"]), s["current"],
                                      s["reference"]) for s in d.get("positions") or ()),
        soak=_soak(d.get("soak")),
        set_aside=tuple(SetAside(a["launch"], tuple(a["runs"]), a["gap"], a["limit"], a["config"])
                        for a in d.get("set_aside") or ()))


def _soak(d: SoakDoc | None) -> Soak | None:
    if not d:
        return None
    shifts = tuple(SoakShift(SoakMetric(s["metric"]), s["window"], s["before"], s["after"], s["low"], s["high"],
                             s["p_value"]) for s in d["shifts"])
    return Soak(d["windows"], d["warmup"], shifts, Half(d["half"]), tuple(d["stalled"]))


def problem_doc(p: Problem) -> ProblemDoc:
    """A decision's problem as stored: a stored history's gap under `gap`, why a configuration could
    not be measured under `reason` (a note), every other detail a line."""
    gap = p.detail if isinstance(p.detail, HistoryGap) else None
    reason = p.detail if isinstance(p.detail, Note) else None
    doc: ProblemDoc = {"why": p.why.value, "detail": "" if gap or reason else str(p.detail), "value": p.value,
                       "limit": p.limit, "count": p.count, "reference": p.reference, "context": p.context}
    if reason is not None:
        doc["reason"] = note_doc(reason)
    if gap is not None:
        doc["gap"] = {"kind": gap.kind.value, "config": gap.config, "path": gap.path, "level": gap.level.name,
                      "differing": [{"field": d.field, "stored": d.stored, "now": d.now} for d in gap.differing],
                      "category": gap.category, "metric": gap.metric, "record_command": gap.record_command,
                      "detail": gap.detail}
    return doc


def problem_of_doc(p: ProblemDoc) -> Problem:
    g, reason = p.get("gap"), p.get("reason")
    if reason:
        return Problem(Why(p["why"]), Note.from_json(reason), p["value"], p["limit"], p["count"], p["reference"],
                       p["context"])
    detail = p["detail"] if not g else HistoryGap(
        GapKind(g["kind"]), g["config"], g["path"], Level.parse(g["level"]),
        tuple(FieldDifference(d["field"], d["stored"], d["now"]) for d in g["differing"]), g["category"], g["metric"],
        g["record_command"], g["detail"])
    return Problem(Why(p["why"]), detail, p["value"], p["limit"], p["count"], p["reference"], p["context"])


def outcome_doc(o: BaselineOutcome) -> BaselineOutcomeDoc:
    """What --update-baselines did, as the document stores it (store/refresh.py writes the shape)."""
    return cast(BaselineOutcomeDoc, o.to_json())


def decision_text(d: DecisionDoc) -> str:
    """A stored decision's line: rendered from its fields, or as worded by an older specguard."""
    legacy = d.get("legacy_message")
    return legacy if legacy is not None else message(decision_result(d))


def holm_decisions(doc: ResultsDoc) -> list[GateResult]:
    """The decisions in Holm's family: enforced gate tests with an estimate (a run that records
    new baselines does not gate throughput/accept length on the old ones, so those are out)."""
    updating = doc.get("options", {}).get("update_baselines")
    out = []
    for d in doc["decisions"]:
        if not d.get("estimate") or not d.get("enforced", True):
            continue
        if updating and GateLabel.parse(d["gate"]).is_history:  # per category too
            continue
        out.append(decision_result(d))
    return out


def family_holm(doc: ResultsDoc) -> dict[str, str] | None:
    """Holm's family-wise decision as the session-level test `specguard::family_holm` ({outcome,
    message}): failed when Holm rejects a gate whose per-cell test did not fail; None when nothing
    was tested."""
    family = holm_decisions(doc)
    if not family:
        return None
    alpha = doc["tolerances"]["family_alpha"]
    extra = [decision_result(d) for d in doc["holm_failures"]]
    if not extra:
        return {"outcome": "passed", "message": f"family (Holm, alpha {alpha}, {len(family)} gate tests): no further failure"}
    cells = "; ".join(_holm_cell(r) for r in extra)
    return {"outcome": "failed",
            "message": f"family (Holm, alpha {alpha}, {len(family)} gate tests): {len(extra)} drop(s) significant "
                       f"across the session though not at their per-cell level: {cells}"}


def _holm_cell(r: GateResult) -> str:
    """One drop only Holm's correction failed: its cell, ratio and p-value."""
    assert r.estimate is not None  # Holm's family holds only decisions with an estimate (holm_decisions)
    return f"{r.gate} {r.config} {r.level} ratio {ratio_text(r.estimate)} p={r.estimate.p_value:.2g}"


def clean(obj: Any) -> Any:
    """NaN/inf are not JSON; store them as null."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [clean(v) for v in obj]
    return obj


def write_results(doc: ResultsDoc, path: Path) -> None:
    atomic_write_json(path, clean(doc))


def validate(doc: Any, source: str = "document") -> ResultsDoc:
    """The document as this specguard reads it (an older version upgraded in memory, report/upgrade.py),
    checked against its model; else ResultsError saying why."""
    return RESULTS.validate(doc, source)


def load(path: str | Path) -> ResultsDoc:
    """Read and validate a results file; errors name the file and what is wrong."""
    return RESULTS.load(path)


def config_order(doc: ResultsDoc) -> list[str]:
    return [c["name"] for c in doc["configs"]]


def configs_by_name(doc: ResultsDoc) -> dict[str, ConfigDoc]:
    return {c["name"]: c for c in doc["configs"]}


def cell_level(cell: CellDoc) -> Level:
    return Level.parse(cell["level"])


def sorted_cells(doc: ResultsDoc) -> list[CellDoc]:
    """Cells in suite order, then by level."""
    order = {n: i for i, n in enumerate(config_order(doc))}
    return sorted(doc["cells"], key=lambda c: (order.get(c["config"], len(order)), cell_level(c)))


def effective(doc: ResultsDoc, name: str, key: str) -> Any:
    """What the server really ran (effective args) when known, else what the configuration asked for."""
    server = doc["servers"].get(name)
    eff = (server.get("effective_args") if server else None) or {}
    if eff.get(key) is not None:
        return eff[key]
    config = configs_by_name(doc).get(name)
    return config.get(key) if config else None


def throughputs(doc: ResultsDoc, name: str) -> dict[int, list[float]]:
    """Per-run tok/s of a configuration by level value (clients, or requests/s), for error-free cells."""
    return {cell_level(c).value: [r["output_throughput"] for r in c["runs"]]
            for c in doc["cells"] if c["config"] == name and not c["error"] and c["runs"]}
