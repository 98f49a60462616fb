"""The results document: one session's raw numbers, decisions and environment, as versioned JSON.

It is the contract between the measuring side (the pytest plugin) and everything that reads
results afterwards (the terminal table, markdown/HTML reports, `specguard compare`, `specguard
recommend`), so those never need a live session. Schema: docs/results.md.
"""

from __future__ import annotations

import json
import math
import platform
import statistics
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from specguard import __version__
from specguard.decide.baselines import atomic_write_json, now_iso
from specguard.engines import redact
from specguard.decide.gates import GateResult, crossover, holm_failures
from specguard.decide.stats import RatioEstimate

if TYPE_CHECKING:
    from specguard.session import SpecguardSession

SCHEMA = "specguard-results"
SCHEMA_VERSION = 2
REQUIRED_KEYS = ("schema", "schema_version", "created", "specguard_version", "session_id", "suite", "environment",
                 "options", "sweep", "workload", "tolerances", "configs", "servers", "cells", "decisions",
                 "holm_failures", "crossovers", "baseline_updates", "outcome")
CELL_KEYS = ("config", "concurrency", "error", "warnings", "wall_s", "summary", "runs", "warmup_runs")
SUMMARY_LATENCIES = ("median_ttft_ms", "p99_ttft_ms", "median_itl_ms", "p99_itl_ms", "median_e2e_latency_ms")
CONFIG_FIELDS = ("engine", "model_path", "draft_model_path", "speculative_algorithm", "num_steps", "eagle_topk",
                 "num_draft_tokens", "max_running_requests", "reference", "speculation_must_win_up_to")

# Exit statuses of a gate session (docs/ci.md). pytest's own codes keep their meaning.
STATUS_OK, STATUS_REGRESSION, STATUS_NOT_MEASURED = "ok", "regression", "not-measured"


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
    return out


def _configs(sg: "SpecguardSession") -> list[dict[str, Any]]:
    out = []
    for name in sg.suite.servers:
        cfg = sg.server_config(name)
        entry = {"name": name, **{k: getattr(cfg, k) for k in CONFIG_FIELDS}}
        entry["args"] = redact(list(cfg.args), [sg.options.api_key or ""])
        out.append(entry)
    return out


def _servers(sg: "SpecguardSession") -> dict[str, Any]:
    servers = {}
    for name, state in sg.servers.items():
        h = state.handle
        servers[name] = {
            "engine": sg.suite.servers[name].engine,
            "command": h.command if h else [],
            "attached": bool(h and h.attached),
            "effective_args": h.effective.fingerprint_fields() if h else None,
            "checks": [asdict(c) for c in state.checks],
            "failure": str(state.failure) if state.failure else None,
        }
    return servers


def decision_dict(r: GateResult) -> dict[str, Any]:
    d = {k: v for k, v in asdict(r).items() if k != "estimate"}
    d["estimate"] = asdict(r.estimate) if r.estimate else None
    return d


def decision_result(d: dict[str, Any]) -> GateResult:
    """A decision read back from a document, as the gate produced it."""
    fields = {k: v for k, v in d.items() if k != "estimate"}
    est = RatioEstimate(**d["estimate"]) if d.get("estimate") else None
    return GateResult(**fields, estimate=est)


def crossovers(decisions: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """gates.crossover per speculative configuration, from its speculation decisions."""
    by_config: dict[str, dict[int, RatioEstimate]] = {}
    for d in decisions:
        if d["gate"] == "speculation" and d.get("estimate"):
            by_config.setdefault(d["config"], {})[d["concurrency"]] = RatioEstimate(**d["estimate"])
    out = {}
    for name, ratios in by_config.items():
        last_win, first_loss, text = crossover(ratios)
        out[name] = {"last_win": last_win, "first_loss": first_loss, "text": text}
    return out


def results_document(sg: "SpecguardSession") -> dict[str, Any]:
    """Everything one session measured and decided (outcome is filled in by the plugin at the end)."""
    cells = []
    for (name, c), cell in sg.cells.items():
        runs = [asdict(r) for r in cell.runs]
        cells.append({"config": name, "concurrency": c, "error": cell.error, "warnings": cell.warnings,
                      "wall_s": cell.wall_s, "summary": cell_summary(runs), "runs": runs,
                      "warmup_runs": [asdict(r) for r in cell.warmup_runs]})
    decisions = [decision_dict(r) for r in sg.results]
    return clean({
        "schema": SCHEMA,
        "schema_version": SCHEMA_VERSION,
        "created": now_iso(),
        "specguard_version": __version__,
        "session_id": sg.session_id,
        "suite": str(sg.suite.path),
        "environment": {"python": platform.python_version(), "platform": platform.platform(), "gpu": sg.gpu,
                        "git_commit": sg.git_commit},
        "options": {"require_baselines": sg.options.require_baselines, "update_baselines": sg.options.update_baselines,
                    "baseline_dir": str(sg.options.baseline_dir), "attached": bool(sg.options.server_urls)},
        "sweep": asdict(sg.suite.sweep),
        "workload": asdict(sg.suite.workload),
        "tolerances": asdict(sg.suite.tolerances),
        "configs": _configs(sg),
        "servers": _servers(sg),
        "cells": cells,
        "decisions": decisions,
        "holm_failures": [decision_dict(r) for r in sg.holm_extra],
        "crossovers": crossovers(decisions),
        "baseline_updates": list(sg.baseline_updates),
        "outcome": {"status": STATUS_OK, "exit_status": 0, "failed_tests": []},
        "merged_from": 1,
    })


def merge_documents(docs: list[dict[str, Any]]) -> dict[str, Any]:
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
    merged["crossovers"] = crossovers(merged["decisions"])
    extra = holm_failures([decision_result(d) for d in merged["decisions"]], merged["tolerances"]["family_alpha"])
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


def write_results(doc: dict[str, Any], path: Path) -> None:
    atomic_write_json(path, clean(doc))


def validate(doc: Any, source: str = "document") -> dict[str, Any]:
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


def load(path: str | Path) -> dict[str, Any]:
    """Read and validate a results file; errors name the file and what is wrong."""
    p = Path(path)
    try:
        doc = json.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ResultsError(f"{p}: no such file") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ResultsError(f"{p} is not JSON ({exc}); expected a file written by --results-json") from None
    return validate(doc, str(p))


def config_order(doc: dict[str, Any]) -> list[str]:
    return [c["name"] for c in doc["configs"]]


def configs_by_name(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in doc["configs"]}


def sorted_cells(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """Cells in suite order, then by concurrency."""
    order = {n: i for i, n in enumerate(config_order(doc))}
    return sorted(doc["cells"], key=lambda c: (order.get(c["config"], len(order)), c["concurrency"]))


def effective(doc: dict[str, Any], name: str, key: str) -> Any:
    """What the server really ran (effective args) when known, else what the configuration asked for."""
    eff = (doc["servers"].get(name) or {}).get("effective_args") or {}
    if eff.get(key) is not None:
        return eff[key]
    return configs_by_name(doc).get(name, {}).get(key)


def throughputs(doc: dict[str, Any], name: str) -> dict[int, list[float]]:
    """Per-run tok/s of a configuration by concurrency, for error-free cells."""
    return {c["concurrency"]: [r["output_throughput"] for r in c["runs"]]
            for c in doc["cells"] if c["config"] == name and not c["error"] and c["runs"]}
