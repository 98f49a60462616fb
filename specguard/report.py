"""What people read: the end-of-session table and the versioned results JSON."""

from __future__ import annotations

import math
import platform
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from specguard import __version__
from specguard.baselines import atomic_write_json, now_iso
from specguard.gates import GateResult, crossover

if TYPE_CHECKING:
    from specguard.session import SpecguardSession

RESULTS_SCHEMA = "specguard-results"
RESULTS_SCHEMA_VERSION = 1


def _median(xs: list[float]) -> float:
    ys = sorted(x for x in xs if x is not None and not math.isnan(x))
    if not ys:
        return math.nan
    n = len(ys)
    return ys[n // 2] if n % 2 else (ys[n // 2 - 1] + ys[n // 2]) / 2


def _fmt(x: float | None, spec: str = ".1f") -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, spec)


def _ratio_text(r: GateResult | None) -> str:
    if r is None:
        return "-"
    if r.estimate is None:
        return r.verdict
    e = r.estimate
    return f"{(e.ratio - 1) * 100:+.1f}% [{(e.low - 1) * 100:+.1f},{(e.high - 1) * 100:+.1f}]"


def results_by_cell(sg: "SpecguardSession") -> dict[tuple[str, int], dict[str, GateResult]]:
    out: dict[tuple[str, int], dict[str, GateResult]] = {}
    for r in sg.results:
        out.setdefault((r.config, r.concurrency), {})[r.gate] = r
    return out


def render_summary(sg: "SpecguardSession") -> str:
    """One row per configuration x concurrency; short enough for a CI log."""
    by_cell = results_by_cell(sg)
    head = (f"{'config':<12} {'C':>4} {'tok/s':>9} {'vs baseline [CI]':>24} {'accept':>6} "
            f"{'TTFT p50/p99 ms':>16} {'ITL p50/p99 ms':>15} {'spec/ref [CI]':>24}  verdict")
    lines = [head, "-" * len(head)]
    for (name, c), cell in sorted(sg.cells.items(), key=lambda kv: (list(sg.suite.servers).index(kv[0][0]), kv[0][1])):
        gates = by_cell.get((name, c), {})
        runs = cell.runs
        tok = _median([r.output_throughput for r in runs])
        acc = _median([r.accept_length for r in runs if r.accept_length is not None])
        ttft = f"{_fmt(_median([r.latency_ms.get('median_ttft_ms') for r in runs]))}/{_fmt(_median([r.latency_ms.get('p99_ttft_ms') for r in runs]))}"
        itl = f"{_fmt(_median([r.latency_ms.get('median_itl_ms') for r in runs]), '.2f')}/{_fmt(_median([r.latency_ms.get('p99_itl_ms') for r in runs]), '.2f')}"
        verdicts = " ".join(f"{g[:4]}:{r.verdict}" + ("" if r.enforced else "(info)") for g, r in gates.items())
        if cell.error:
            verdicts = "ERROR: " + cell.error.splitlines()[0][:80]
        lines.append(f"{name:<12} {c:>4} {_fmt(tok):>9} {_ratio_text(gates.get('throughput')):>24} {_fmt(acc, '.2f'):>6} "
                     f"{ttft:>16} {itl:>15} {_ratio_text(gates.get('speculation')):>24}  {verdicts}")
    for name in sg.suite.servers:
        spec = {r.concurrency: r.estimate for r in sg.results
                if r.gate == "speculation" and r.config == name and r.estimate is not None}
        if spec:
            lines.append(f"{name}: {crossover(spec)[2]}")
    for name, state in sg.servers.items():
        for check in state.checks:
            lines.append(f"{name}: {'ERROR' if check.blocking else 'note'}: {check.message}")
    for r in getattr(sg, "holm_extra", []):
        lines.append(f"FAIL (Holm, family alpha {sg.suite.tolerances.family_alpha}): {r.message.splitlines()[0]}")
    for u in sg.baseline_updates:
        lines.append(f"baselines: {u}")
    return "\n".join(lines)


def results_document(sg: "SpecguardSession") -> dict[str, Any]:
    """Every run's raw numbers, the decisions and the environment (documented in docs/results.md)."""
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
    cells = []
    for (name, c), cell in sg.cells.items():
        cells.append({
            "config": name, "concurrency": c, "error": cell.error, "warnings": cell.warnings, "wall_s": cell.wall_s,
            "runs": [asdict(r) for r in cell.runs], "warmup_runs": [asdict(r) for r in cell.warmup_runs],
        })
    decisions = []
    for r in sg.results:
        d = {k: v for k, v in asdict(r).items() if k != "estimate"}
        d["estimate"] = asdict(r.estimate) if r.estimate else None
        decisions.append(d)
    return {
        "schema": RESULTS_SCHEMA,
        "schema_version": RESULTS_SCHEMA_VERSION,
        "created": now_iso(),
        "specguard_version": __version__,
        "session_id": sg.session_id,
        "suite": str(sg.suite.path),
        "environment": {"python": platform.python_version(), "platform": platform.platform(), "gpu": sg.gpu,
                        "git_commit": sg.git_commit},
        "sweep": asdict(sg.suite.sweep),
        "workload": asdict(sg.suite.workload),
        "tolerances": asdict(sg.suite.tolerances),
        "references": {n: c.reference for n, c in sg.suite.servers.items() if c.reference},
        "servers": servers,
        "cells": cells,
        "decisions": decisions,
    }


def _clean(obj: Any) -> Any:
    """NaN/inf are not JSON; store them as null."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: _clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clean(v) for v in obj]
    return obj


def write_results(sg: "SpecguardSession", path: Path) -> None:
    atomic_write_json(path, _clean(results_document(sg)))
