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
from typing import Any, TypedDict

from specguard import __version__
from specguard.decide.baselines import atomic_write_json
from specguard.decide.gates import GateResult, holm_failures
from specguard.decide.stats import RatioEstimate
from specguard.labels import GateLabel

SCHEMA = "specguard-results"
SCHEMA_VERSION = 2
REQUIRED_KEYS = ("schema", "schema_version", "created", "specguard_version", "session_id", "suite", "environment",
                 "options", "sweep", "workload", "tolerances", "configs", "servers", "cells", "decisions",
                 "holm_failures", "crossovers", "baseline_updates", "outcome")
CELL_KEYS = ("config", "concurrency", "error", "warnings", "wall_s", "summary", "runs", "warmup_runs")
SUMMARY_LATENCIES = ("median_ttft_ms", "p99_ttft_ms", "median_itl_ms", "p99_itl_ms", "median_e2e_latency_ms")
CONFIG_FIELDS = ("engine", "model_path", "draft_model_path", "speculative_algorithm", "num_steps", "eagle_topk",
                 "num_draft_tokens", "max_running_requests", "reference", "speculation_must_win_up_to")


# The document's parts, as typed dictionaries: what it holds is checked where it is built
# (session/results.py) and where it is read (the renderers, compare, recommend). docs/results.md.
class ConfigDoc(TypedDict, total=False):
    name: str
    engine: str
    model_path: str
    draft_model_path: str | None
    speculative_algorithm: str | None
    num_steps: int | None
    eagle_topk: int | None
    num_draft_tokens: int | None
    max_running_requests: int | None
    reference: str | None
    speculation_must_win_up_to: int | None
    args: list[str]


class ServerDoc(TypedDict):
    engine: str
    command: list[str]
    attached: bool
    effective_args: dict[str, Any] | None
    checks: list[dict[str, Any]]
    failure: str | None
    failure_skipped: bool
    mode: str
    differences: list[dict[str, Any]]


class CellDoc(TypedDict):
    config: str
    concurrency: int  # the level: clients, or requests/s in a request-rate sweep
    error: str | None
    warnings: list[str]
    wall_s: float
    summary: dict[str, Any]
    runs: list[dict[str, Any]]  # measure.metrics.RunMetrics, as stored
    warmup_runs: list[dict[str, Any]]


class FailedTestDoc(TypedDict):
    nodeid: str
    kind: str
    message: str


class OutcomeDoc(TypedDict, total=False):
    status: str
    exit_status: int
    failed_tests: list[FailedTestDoc]
    counts: dict[str, int]


class ResultsDoc(TypedDict, total=False):
    schema: str
    schema_version: int
    created: str
    specguard_version: str
    session_id: str
    suite: str
    environment: dict[str, str]
    options: dict[str, Any]
    sweep: dict[str, Any]
    workload: dict[str, Any]
    tolerances: dict[str, Any]
    configs: list[ConfigDoc]
    servers: dict[str, ServerDoc]
    cells: list[CellDoc]
    decisions: list[dict[str, Any]]  # decision_dict(GateResult) + detectable_drop
    holm_failures: list[dict[str, Any]]
    crossovers: dict[str, dict[str, Any]]
    baseline_updates: list[str]
    outcome: OutcomeDoc
    merged_from: int
    reference_roles: list[dict[str, Any]]
    relaunches: dict[str, list[str]]
    tests: list[dict[str, Any]]  # plugin.outcomes.TestLog entries
    run_notes: list[str]
    hints: dict[str, str]


class ResultsError(ValueError):
    """A file that is not a results document this version of specguard can read."""


def median(values: list[Any]) -> float | None:
    """Median of the finite numbers among `values` (None when there are none)."""
    xs = [float(v) for v in values if isinstance(v, (int, float)) and math.isfinite(v)]
    return statistics.median(xs) if xs else None


def cell_summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Per-cell medians over the measured runs: what tables and plots show."""
    out: dict[str, Any] = {
        "runs": len(runs),
        "output_throughput": median([r["output_throughput"] for r in runs]),
        "output_throughput_min": min((r["output_throughput"] for r in runs), default=None),
        "output_throughput_max": max((r["output_throughput"] for r in runs), default=None),
        "accept_length": median([r.get("accept_length") for r in runs]),
        "failed_requests": sum(r.get("failed", 0) for r in runs),
    }
    for key in SUMMARY_LATENCIES:
        out[key] = median([r.get("latency_ms", {}).get(key) for r in runs])
    if any(r.get("request_goodput") is not None for r in runs):  # [sweep] slo / --slo (bench_serving's key)
        out["request_goodput"] = median([r.get("request_goodput") for r in runs])
        out["slo_attainment"] = median([r.get("slo_attainment") for r in runs])
    models = sorted({r["load_model"] for r in runs if r.get("load_model")})
    if models:
        out["load_model"] = models[0] if len(models) == 1 else "; ".join(models)
    names = sorted({n for r in runs for n in (r.get("categories") or {})})
    if names:  # per prompt category: medians over the runs (the per-category accept-length gates' figures)
        out["categories"] = {n: {k: median([((r.get("categories") or {}).get(n) or {}).get(k) for r in runs])
                                 for k in ("accept_length", "output_throughput", "throughput_share")} for n in names}
    return out


def detectable_drop(estimate: dict[str, Any] | None, rule: str = "significant") -> float | None:
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


def decision_dict(r: GateResult) -> dict[str, Any]:
    d = {k: v for k, v in asdict(r).items() if k != "estimate"}
    d["estimate"] = asdict(r.estimate) if r.estimate else None
    return d


def decision_result(d: dict[str, Any]) -> GateResult:
    """A decision read back from a document, as the gate produced it."""
    known = {f.name for f in dataclasses.fields(GateResult)} - {"estimate"}
    fields = {k: v for k, v in d.items() if k in known}  # derived keys (detectable_drop) are not the gate's
    est = RatioEstimate(**d["estimate"]) if d.get("estimate") else None
    return GateResult(**fields, estimate=est)


def crossovers(doc: ResultsDoc) -> dict[str, dict[str, Any]]:
    """Per speculative configuration, where it stops paying against its reference: the same
    estimator and confidence as `specguard recommend` (decide/crossover.py through
    report/recommend.py `crossing`: the ratio curve interpolated on log concurrency, with its
    interval), so the two never disagree."""
    from specguard.report import recommend  # recommend imports this module

    out: dict[str, dict[str, Any]] = {}
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


def crossover_text(name: str, ref: str, x: Any, curve: list[Any], conf: float, kind: str = "concurrency") -> str:
    """The crossover sentence, worded as `specguard recommend` words it (levels c16, or r8 in a
    request-rate sweep: `kind`, recommend.level_kind)."""
    from specguard.report import recommend

    levels = [r.concurrency for r in curve]
    lv = lambda level: recommend.level_label(kind, level)  # noqa: E731
    noun, unit = recommend.level_noun(kind), (" req/s" if kind == recommend.REQUEST_RATE else "")
    if x.below_range:
        return f"behind {ref} from the lowest measured {noun} ({lv(levels[0])})"
    if x.estimate is None:
        return f"ahead of {ref} at every measured {noun} ({lv(levels[0])}-{lv(levels[-1])}); no crossover in range"
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


def family_holm(doc: ResultsDoc) -> dict[str, Any] | None:
    """Holm's family-wise decision as the session-level test `specguard::family_holm`: failed
    when Holm rejects a gate whose per-cell test did not fail; None when nothing was tested."""
    family = holm_decisions(doc)
    if not family:
        return None
    alpha = doc["tolerances"]["family_alpha"]
    extra = [decision_result(d) for d in doc["holm_failures"]]
    if not extra:
        return {"outcome": "passed", "message": f"family (Holm, alpha {alpha}, {len(family)} gate tests): no further failure"}
    cells = "; ".join(f"{r.gate} {r.config} c{r.concurrency} ratio {r.estimate.describe()} p={r.estimate.p_value:.2g}"
                      for r in extra)
    return {"outcome": "failed",
            "message": f"family (Holm, alpha {alpha}, {len(family)} gate tests): {len(extra)} drop(s) significant "
                       f"across the session though not at their per-cell level: {cells}"}


def merge_documents(docs: list[ResultsDoc]) -> ResultsDoc:
    """One document from pytest-xdist workers' documents (each measured different cells).

    Holm is re-applied over all workers' decisions, since the family is the whole session.
    """
    if len(docs) == 1:
        return docs[0]
    merged = dict(docs[0])
    merged["servers"] = {}
    for d in docs:  # a worker that only skipped a configuration knows less than one that ran it
        for name, server in d["servers"].items():
            if name not in merged["servers"] or server.get("effective_args"):
                merged["servers"][name] = server
    for key in ("cells", "decisions", "baseline_updates"):
        merged[key] = [x for d in docs for x in d[key]]
    merged["reference_roles"] = [x for d in docs for x in d.get("reference_roles", [])]
    merged["relaunches"] = {k: v for d in docs for k, v in (d.get("relaunches") or {}).items()}
    merged["crossovers"] = crossovers(merged)
    extra = holm_failures(holm_decisions(merged), merged["tolerances"]["family_alpha"])
    merged["holm_failures"] = [decision_dict(r) for r in extra]
    merged["merged_from"] = sum(d.get("merged_from", 1) for d in docs)
    return merged


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
    return doc


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
    eff = (doc["servers"].get(name) or {}).get("effective_args") or {}
    if eff.get(key) is not None:
        return eff[key]
    return configs_by_name(doc).get(name, {}).get(key)


def throughputs(doc: ResultsDoc, name: str) -> dict[int, list[float]]:
    """Per-run tok/s of a configuration by concurrency, for error-free cells."""
    return {c["concurrency"]: [r["output_throughput"] for r in c["runs"]]
            for c in doc["cells"] if c["config"] == name and not c["error"] and c["runs"]}
