"""Results documents built by hand (no servers), with known curves, for report/compare/recommend tests."""

from __future__ import annotations

import copy
from typing import Any

from specguard.report.results import SCHEMA, SCHEMA_VERSION
from specguard.report.summary import cell_summary

# Seed figure A (the seed-figures reference (shared with the team, outside this repository)): tok/s by concurrency.
SEED_A = {
    "baseline": {1: 108, 4: 286, 16: 873, 32: 1359, 64: 2327, 128: 2800},
    "mtp": {1: 121.5, 4: 400.5, 16: 1209, 32: 1502, 64: 1571, 128: 1635},
}
MTP = {"speculative_algorithm": "NEXTN", "num_steps": 1, "eagle_topk": 1, "num_draft_tokens": 2,
       "effective_algorithm": "EAGLE", "max_running_requests": 48}


def _run(tok_s: float, concurrency: int, accept: float | None) -> dict[str, Any]:
    latency = {"median_ttft_ms": 50.0 * concurrency ** 0.5, "p99_ttft_ms": 90.0 * concurrency ** 0.5,
               "median_itl_ms": 1000 * concurrency / tok_s, "p99_itl_ms": 2500 * concurrency / tok_s,
               "median_e2e_latency_ms": 1000.0}
    return {"concurrency": concurrency, "num_requests": 4 * concurrency, "completed": 4 * concurrency, "failed": 0,
            "duration_s": 1.0, "total_input_tokens": 0, "total_output_tokens": int(tok_s), "output_throughput": tok_s,
            "request_throughput": 1.0, "latency_ms": latency, "accept_length": accept, "total_verify_ct": 0,
            "server_accept_length": {}, "tokens_estimated": False, "errors": [], "notes": []}


def make_doc(curves: dict[str, dict[int, float]], settings: dict[str, dict[str, Any]] | None = None, *,
             spread: float = 0.01, accept: dict[str, float] | None = None, scale: float = 1.0,
             workload: dict[str, Any] | None = None) -> dict[str, Any]:
    """A results document: three runs per cell at value x (1 - spread, 1, 1 + spread) x scale.

    `settings[name]` marks a configuration speculative (keys as in MTP; reference defaults to
    the first curve's name).
    """
    settings = settings or {}
    names = list(curves)
    configs, servers, cells = [], {}, []
    for name in names:
        s = settings.get(name, {})
        ref = s.get("reference", names[0]) if s else None
        configs.append({"name": name, "engine": "emulator", "model_path": "/models/m", "draft_model_path": None,
                        "speculative_algorithm": s.get("speculative_algorithm"), "num_steps": s.get("num_steps"),
                        "eagle_topk": s.get("eagle_topk"), "num_draft_tokens": s.get("num_draft_tokens"),
                        "max_running_requests": None if s else 512, "reference": ref,
                        "speculation_must_win_up_to": None, "args": []})
        eff = {"engine_version": "0.5.23", "model_path": "/models/m", "speculative_algorithm": s.get("effective_algorithm"),
               "draft_model_path": None, "num_steps": s.get("num_steps"), "eagle_topk": s.get("eagle_topk"),
               "num_draft_tokens": s.get("num_draft_tokens"),
               "max_running_requests": s.get("max_running_requests", 512), "tp_size": 1}
        servers[name] = {"engine": "emulator", "command": ["python", "-m", "specguard.emulator.launch_server"],
                         "attached": False, "effective_args": eff, "checks": [], "failure": None,
                         "failure_skipped": False, "mode": "launched", "differences": []}
        for c, v in curves[name].items():
            acc = (accept or {}).get(name, 2.0 if s else None)
            runs = [_run(v * scale * f, c, acc) for f in (1 - spread, 1.0, 1 + spread)]
            cells.append({"config": name, "level": f"c{c}", "error": None, "notes": [], "wall_s": 3.0,
                          "summary": cell_summary(runs), "runs": runs, "warmup_runs": []})
    return {
        "schema": SCHEMA, "schema_version": SCHEMA_VERSION, "created": "2026-11-29T00:00:00+00:00",
        "specguard_version": "0.1.0", "session_id": "synthetic", "suite": "synthetic.toml",
        "environment": {"python": "3", "platform": "test", "gpu": "none", "git_commit": "abc"},
        "options": {"require_baselines": False, "update_baselines": False, "baseline_dir": "b", "attached": False},
        "sweep": {"concurrency": sorted({c for v in curves.values() for c in v}), "requests_per_worker": 4,
                  "warmup": 1, "repeats": 3, "api": "native", "read_timeout_s": 60.0, "run_timeout_s": 600.0},
        "workload": workload or {"kind": "repeated-id", "input_len": 1000, "output_len": 100, "seed": 0,
                                 "repeated_id": 23066, "path": None},
        "tolerances": {"throughput": 0.03, "accept_length": 0.03, "speculation_min_gain": 0.0, "family_alpha": 0.01,
                       "prior_between_sd": 0.01, "prior_between_sd_accept": 0.003, "history_sessions": 5,
                       "inconclusive": "pass"},
        "configs": configs, "servers": servers, "cells": cells, "decisions": [], "holm_failures": [],
        "crossovers": {}, "baseline_updates": [],
        "outcome": {"status": "ok", "exit_status": 0, "failed_tests": []}, "merged_from": 1,
    }


def seed_a_doc(**kw: Any) -> dict[str, Any]:
    return make_doc(copy.deepcopy(SEED_A), {"mtp": dict(MTP)}, **kw)


def as_rate_sweep(doc: dict[str, Any]) -> dict[str, Any]:
    """The same document relabelled as an open-loop sweep: each level N becomes N requests/s (rN)."""
    doc["sweep"]["request_rate"] = list(doc["sweep"]["concurrency"])
    for item in [*doc["cells"], *doc["decisions"]]:
        item["level"] = "r" + item["level"][1:]
    return doc
