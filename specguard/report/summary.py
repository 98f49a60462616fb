"""A cell's summary: the medians over its measured runs that tables, plots and the test
properties show (the results document stores it beside the runs, docs/results.md)."""

from __future__ import annotations

import math
import statistics
from typing import Any

from specguard.report.schema import LatencyKey, SummaryDoc


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
