"""The results document: one session's raw numbers, decisions and environment, as versioned JSON.

It is the contract between the measuring side (the pytest plugin) and everything that reads
results afterwards (the terminal table, markdown/HTML reports, `specguard compare`, `specguard
recommend`), so those never need a live session. Schema: docs/results.md.
"""

from __future__ import annotations

import dataclasses
import json
import math
import statistics
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from specguard import __version__
from specguard.decide.baselines import atomic_write_json
from specguard.decide.crossover import CrossoverEstimate
from specguard.decide.gates import GateResult, holm_failures
from specguard.decide.stats import RatioEstimate
from specguard.labels import GateLabel
from specguard.report.schema import (
    CellDoc,
    ConfigDoc,
    CrossoverDoc,
    DecisionDoc,
    EstimateDoc,
    LatencyKey,
    ResultsDoc,
    ServerDoc,
    SummaryDoc,
)

if TYPE_CHECKING:  # recommend imports this module
    from specguard.report.recommend import LevelRatio

SCHEMA = "specguard-results"
SCHEMA_VERSION = 2
REQUIRED_KEYS = ("schema", "schema_version", "created", "specguard_version", "session_id", "suite", "environment",
                 "options", "sweep", "workload", "tolerances", "configs", "servers", "cells", "decisions",
                 "holm_failures", "crossovers", "baseline_updates", "outcome")
CELL_KEYS = ("config", "concurrency", "error", "warnings", "wall_s", "summary", "runs", "warmup_runs")
CONFIG_FIELDS = ("engine", "model_path", "draft_model_path", "speculative_algorithm", "num_steps", "eagle_topk",
                 "num_draft_tokens", "max_running_requests", "reference", "speculation_must_win_up_to")


class ResultsError(ValueError):
    """A file that is not a results document this version of specguard can read."""


def median(values: list[Any]) -> float | None:
    """Median of the finite numbers among `values` (None when there are none)."""
    xs = [float(v) for v in values if isinstance(v, (int, float)) and math.isfinite(v)]
    return statistics.median(xs) if xs else None


def cell_summary(runs: list[dict[str, Any]]) -> SummaryDoc:
    """Per-cell medians over the measured runs: what tables and plots show."""
    tok_s = [r["output_throughput"] for r in runs]
    out: SummaryDoc = {
        "runs": len(runs),
        "output_throughput": median(tok_s),
        "output_throughput_min": min(tok_s, default=None),
        "output_throughput_max": max(tok_s, default=None),
        "accept_length": median([r.get("accept_length") for r in runs]),
        "step_time_ms": median([r.get("step_time_ms") for r in runs]),
        "failed_requests": sum(r.get("failed", 0) for r in runs),
        "median_ttft_ms": _latency_median(runs, "median_ttft_ms"),
        "p99_ttft_ms": _latency_median(runs, "p99_ttft_ms"),
        "median_itl_ms": _latency_median(runs, "median_itl_ms"),
        "p99_itl_ms": _latency_median(runs, "p99_itl_ms"),
        "median_e2e_latency_ms": _latency_median(runs, "median_e2e_latency_ms"),
    }
    if any(r.get("request_goodput") is not None for r in runs):  # [sweep] slo / --slo (bench_serving's key)
        out["request_goodput"] = median([r.get("request_goodput") for r in runs])
        out["slo_attainment"] = median([r.get("slo_attainment") for r in runs])
    load_model = combined_load_model(runs)
    if load_model:
        out["load_model"] = load_model
    categories = category_medians(runs)
    if categories:
        out["categories"] = categories
    return out


def _latency_median(runs: list[dict[str, Any]], key: LatencyKey) -> float | None:
    return median([r.get("latency_ms", {}).get(key) for r in runs])


def combined_load_model(runs: list[dict[str, Any]]) -> str:
    """How the runs loaded the server: their one load model, or every distinct one joined by "; "
    ("" when no run says)."""
    return "; ".join(sorted({r["load_model"] for r in runs if r.get("load_model")}))


CATEGORY_FIGURES = ("accept_length", "output_throughput", "throughput_share")


def category_medians(runs: list[dict[str, Any]]) -> dict[str, dict[str, float | None]]:
    """Per prompt category, the medians over the runs of CATEGORY_FIGURES (the per-category
    accept-length gates' figures); a run without the category counts as not measured there."""
    names = sorted({n for r in runs for n in (r.get("categories") or {})})
    per_run = [r.get("categories") or {} for r in runs]
    return {n: {k: median([(cats.get(n) or {}).get(k) for cats in per_run]) for k in CATEGORY_FIGURES} for n in names}


def detectable_drop(estimate: EstimateDoc | None, rule: str = "significant") -> float | None:
    """The smallest drop this cell could have failed for, from its interval's half-width h on the
    log scale: a drop d is significant once (1 - d) e^h < 1 (rule "significant", and it must also
    be beyond the tolerance), or < 1 - tolerance ("beyond-tolerance")."""
    if not estimate or not estimate.get("low") or not estimate.get("high") or estimate["low"] <= 0:
        return None
    h = (math.log(estimate["high"]) - math.log(estimate["low"])) / 2
    threshold = estimate.get("threshold") or 1.0
    if rule == "beyond-tolerance":
        return 1 - threshold * math.exp(-h)
    return max(1 - math.exp(-h), 1 - threshold)


def decision_dict(r: GateResult) -> DecisionDoc:
    """A verdict as the document stores it. asdict keeps every field of GateResult and of its
    RatioEstimate, so a field added there is stored without an edit here (tests/report/test_report.py
    pins that DecisionDoc and EstimateDoc name each one)."""
    d = {k: v for k, v in asdict(r).items() if k != "estimate"}
    d["estimate"] = asdict(r.estimate) if r.estimate else None
    return cast(DecisionDoc, d)


def decision_result(d: DecisionDoc) -> GateResult:
    """A decision read back from a document, as the gate produced it."""
    known = {f.name for f in dataclasses.fields(GateResult)} - {"estimate"}
    fields: dict[str, Any] = {k: v for k, v in d.items() if k in known}  # derived keys (detectable_drop) are not the gate's
    stored = d.get("estimate")
    est = RatioEstimate(**stored) if stored else None
    return GateResult(**fields, estimate=est)


def crossovers(doc: ResultsDoc) -> dict[str, CrossoverDoc]:
    """Per speculative configuration, where it stops paying against its reference: the same
    estimator and confidence as `specguard recommend` (decide/crossover.py through
    report/recommend.py `crossing`: the ratio curve interpolated on log concurrency, with its
    interval), so the two never disagree."""
    from specguard.report import recommend  # recommend imports this module

    out: dict[str, CrossoverDoc] = {}
    conf = recommend.DEFAULT_CONFIDENCE
    for cfg in doc["configs"]:
        ref = cfg.get("reference")
        if not ref:
            continue
        curve = recommend.ratio_curve(throughputs(doc, cfg["name"]), throughputs(doc, ref),
                                      launch_sd=doc["tolerances"]["prior_between_sd"], confidence=conf)
        if len(curve) < 2:  # one level has no crossover to speak of (recommend refuses it too)
            continue
        x = recommend.crossing(curve)
        out[cfg["name"]] = {"estimate": x.estimate, "low": x.low, "high": x.high, "last_win": x.last_ahead,
                            "first_loss": x.first_behind, "confident": x.confident, "confidence": conf,
                            "text": crossover_text(cfg["name"], ref, x, curve, conf, recommend.level_kind(doc))}
    return out


def crossover_text(name: str, ref: str, x: CrossoverEstimate, curve: list[LevelRatio], conf: float,
                   kind: str = "concurrency") -> str:
    """The crossover sentence, worded as `specguard recommend` words it (levels c16, or r8 in a
    request-rate sweep: `kind`, recommend.level_kind)."""
    from specguard.report import recommend

    levels = [r.concurrency for r in curve]

    def lv(level: float | str) -> str:
        return recommend.level_label(kind, level)

    noun, unit = recommend.level_noun(kind), (" req/s" if kind == recommend.REQUEST_RATE else "")
    if x.below_range:
        return f"behind {ref} from the lowest measured {noun} ({lv(levels[0])})"
    if x.estimate is None:
        return f"ahead of {ref} at every measured {noun} ({lv(levels[0])}-{lv(levels[-1])}); no crossover in range"
    # the estimator sets both levels around a crossover whenever it has one
    assert x.last_ahead is not None and x.first_behind is not None
    lo = f"{x.low:.0f}" if x.low is not None else f"below {lv(levels[0])}"
    hi = f"{x.high:.0f}" if x.high is not None else f"beyond {lv(levels[-1])}"
    return (f"crossover vs {ref} at {lv('~')}{x.estimate:.1f}{unit} ({conf:.0%} CI {lo}-{hi}), between measured "
            f"{lv(x.last_ahead)} and {lv(x.first_behind)}{'' if x.confident else ', not confidently resolved'}")


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
    return f"{r.gate} {r.config} c{r.concurrency} ratio {r.estimate.describe()} p={r.estimate.p_value:.2g}"


def merge_documents(docs: list[ResultsDoc]) -> ResultsDoc:
    """One document from pytest-xdist workers' documents (each measured different cells).

    Holm is re-applied over all workers' decisions, since the family is the whole session.
    """
    if len(docs) == 1:
        return docs[0]
    merged = _union(docs)
    merged["crossovers"] = crossovers(merged)
    extra = holm_failures(holm_decisions(merged), merged["tolerances"]["family_alpha"])
    merged["holm_failures"] = [decision_dict(r) for r in extra]
    merged["merged_from"] = sum(d.get("merged_from", 1) for d in docs)
    return merged


def _union(docs: list[ResultsDoc]) -> ResultsDoc:
    """The first document with what every worker measured and recorded: servers, cells, decisions,
    baseline writes, reference roles and relaunches (what is derived from them is not redone here)."""
    merged = docs[0].copy()
    merged["servers"] = merged_servers(docs)
    merged["cells"] = [x for d in docs for x in d["cells"]]
    merged["decisions"] = [x for d in docs for x in d["decisions"]]
    merged["baseline_updates"] = [x for d in docs for x in d["baseline_updates"]]
    merged["reference_roles"] = [x for d in docs for x in d.get("reference_roles", [])]
    merged["relaunches"] = {k: v for d in docs for k, v in (d.get("relaunches") or {}).items()}
    return merged


def merged_servers(docs: list[ResultsDoc]) -> dict[str, ServerDoc]:
    """Each configuration's server record from the workers' documents: the first one, replaced by
    any that read the server's effective arguments (a worker that only skipped a configuration
    knows less than one that ran it)."""
    servers: dict[str, ServerDoc] = {}
    for d in docs:
        for name, server in d["servers"].items():
            if name not in servers or server.get("effective_args"):
                servers[name] = server
    return servers


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
    """The document itself if this specguard can read it; else ResultsError saying why."""
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        found = doc.get("schema") if isinstance(doc, dict) else type(doc).__name__
        raise ResultsError(f"{source} is not a specguard results file (schema {found!r}, expected {SCHEMA!r}); "
                           f"write one with: pytest perf_tests --results-json FILE")
    version = doc.get("schema_version")
    if version != SCHEMA_VERSION:
        raise ResultsError(f"{source} has results schema_version {version!r}; this specguard ({__version__}) reads "
                           f"version {SCHEMA_VERSION} only: re-run the sweep, or use the specguard that wrote it")
    missing = [k for k in REQUIRED_KEYS if k not in doc]
    if missing:
        raise ResultsError(f"{source} is a damaged results file: missing {', '.join(missing)}")
    for cell in doc["cells"]:
        absent = [k for k in CELL_KEYS if k not in cell]
        if absent:
            raise ResultsError(f"{source}: cell {cell.get('config')} c{cell.get('concurrency')} lacks {', '.join(absent)}")
    return cast(ResultsDoc, doc)  # JSON becomes the typed document here, once its keys are checked


def load(path: str | Path) -> ResultsDoc:
    """Read and validate a results file; errors name the file and what is wrong."""
    p = Path(path)
    try:
        doc = json.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ResultsError(f"{p}: no such file") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ResultsError(f"{p} is not JSON ({exc}); expected a file written by --results-json") from None
    return validate(doc, str(p))


def config_order(doc: ResultsDoc) -> list[str]:
    return [c["name"] for c in doc["configs"]]


def configs_by_name(doc: ResultsDoc) -> dict[str, ConfigDoc]:
    return {c["name"]: c for c in doc["configs"]}


def sorted_cells(doc: ResultsDoc) -> list[CellDoc]:
    """Cells in suite order, then by concurrency."""
    order = {n: i for i, n in enumerate(config_order(doc))}
    return sorted(doc["cells"], key=lambda c: (order.get(c["config"], len(order)), c["concurrency"]))


def effective(doc: ResultsDoc, name: str, key: str) -> Any:
    """What the server really ran (effective args) when known, else what the configuration asked for."""
    server = doc["servers"].get(name)
    eff = (server.get("effective_args") if server else None) or {}
    if eff.get(key) is not None:
        return eff[key]
    config = configs_by_name(doc).get(name)
    return config.get(key) if config else None


def throughputs(doc: ResultsDoc, name: str) -> dict[int, list[float]]:
    """Per-run tok/s of a configuration by concurrency, for error-free cells."""
    return {c["concurrency"]: [r["output_throughput"] for r in c["runs"]]
            for c in doc["cells"] if c["config"] == name and not c["error"] and c["runs"]}
