"""The real-time client's extra noise: real sessions' spreads less the virtual-time model's own."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from research.study.noise import Noise
from research.study.simulate import seed_of, simulate_launch
from specguard.config import Suite
from specguard.labels import Level

CellLogs = dict[tuple[str, int], np.ndarray]  # (configuration, concurrency) -> log tok/s of the runs
STALL_SDS = 5.0  # a run this many robust sds below its cell's median is a stall (cf. stats.outliers)


def results_logs(doc: dict[str, Any]) -> CellLogs:
    """Measured runs of one results JSON (``pytest perf_tests --results-json``): levels by name
    ("c16", schema 3), or by number in files older specguards wrote."""
    cells = doc["cells"]
    def clients(c: dict[str, Any]) -> int:
        return Level.parse(c["level"]).value if "level" in c else int(c["concurrency"])
    return {(c["config"], clients(c)): np.log([r["output_throughput"] for r in c["runs"]])
            for c in cells if c["runs"] and not c.get("error")}


@dataclass(frozen=True)
class Spread:
    """Spread of log tok/s at one concurrency, pooled over configurations."""

    within: float  # sd of runs around their cell's mean, stalls left out
    between: float  # sd of a cell's launch means, less what the within-run spread explains
    runs: int
    stall_factors: tuple[float, ...]  # run / cell median of each stalled run


def _robust_sd(cells: dict[Any, list[np.ndarray]]) -> float:
    """1.4826 x the median absolute residual from each run group's median (zeros left out)."""
    resid = np.concatenate([g - np.median(g) for gs in cells.values() for g in gs if g.size > 1])
    nonzero = np.abs(resid[resid != 0])
    return 1.4826 * float(np.median(nonzero)) if nonzero.size else 0.0


def _set_stalls_apart(cells: dict[Any, list[np.ndarray]], robust_sd: float
                      ) -> tuple[dict[Any, list[np.ndarray]], list[float]]:
    """The runs without the stalled ones, and each stalled run's factor (run / its group's median)."""
    stalls: list[float] = []
    kept: dict[Any, list[np.ndarray]] = {}
    for k, gs in cells.items():
        kept[k] = []
        for g in gs:
            low = g < np.median(g) - STALL_SDS * robust_sd if robust_sd > 0 else np.zeros(g.size, bool)
            stalls += [math.exp(x - np.median(g)) for x in g[low]]
            kept[k].append(g[~low])
    return kept, stalls


def _within_between(kept: dict[Any, list[np.ndarray]]) -> tuple[float, float]:
    """Pooled within-run variance, and the mean over cells of their launch means' variance net of it."""
    groups = [g for gs in kept.values() for g in gs if g.size > 1]
    dof = sum(g.size - 1 for g in groups)
    within2 = sum(float(((g - g.mean()) ** 2).sum()) for g in groups) / dof if dof else 0.0
    between2 = [max(float(np.var([g.mean() for g in gs], ddof=1)) - within2 / float(np.mean([g.size for g in gs])), 0.0)
                for gs in kept.values() if len(gs) > 1]
    return within2, float(np.mean(between2)) if between2 else 0.0


def spreads(sessions: Sequence[CellLogs]) -> dict[int, Spread]:
    """Within-run and between-launch spread per concurrency, robust to stalls.

    On a shared machine a run now and then stalls (another job takes the cores: 0.4-0.9x);
    such runs are counted and set aside so they do not pass for Gaussian spread.
    """
    keys = sorted(set().union(*sessions))
    out = {}
    for c in sorted({k[1] for k in keys}):
        cells = {k: [s[k] for s in sessions if k in s] for k in keys if k[1] == c}
        kept, stalls = _set_stalls_apart(cells, _robust_sd(cells))
        within2, between2 = _within_between(kept)
        out[c] = Spread(math.sqrt(within2), math.sqrt(between2),
                        sum(g.size for gs in cells.values() for g in gs), tuple(sorted(stalls)))
    return out


def _model_sessions(suite: Suite, quiet: Noise, repeats: int, sim_sessions: int, seed: int) -> list[CellLogs]:
    """The virtual-time model's own sessions, each configuration launched anew, as the real ones."""
    return [{(n, c): np.log(runs[0]) for j, n in enumerate(suite.servers)
             for c, runs in simulate_launch(suite, n, seed_of(seed, i, 9, j), repeats, quiet).items()}
            for i in range(sim_sessions)]


def _real_over_model(real: list[CellLogs], sim: list[CellLogs]) -> dict[str, float]:
    """Per cell "config cN": the real mean tok/s over the model's (geometric means)."""
    return {f"{n} c{c}": math.exp(float(np.mean([s[(n, c)].mean() for s in real if (n, c) in s]))
                                  - float(np.mean([s[(n, c)].mean() for s in sim])))
            for (n, c) in sorted(sim[0]) if any((n, c) in s for s in real)}


def _warmup_offsets(docs: Sequence[dict[str, Any]]) -> list[float]:
    """Each warmup run's log tok/s less its cell's median measured run."""
    return [math.log(w["output_throughput"]) - float(np.median(np.log([r["output_throughput"] for r in c["runs"]])))
            for d in docs for c in d["cells"] if c["runs"] for w in c.get("warmup_runs", [])]


def measure_noise(docs: Sequence[dict[str, Any]], suite: Suite, sim_sessions: int = 30, seed: int = 0,
                  noise: Noise | None = None) -> tuple[Noise, dict[str, Any]]:
    """The client's extra spread: real sessions' spreads less the virtual-time model's own.

    Each real session launched every configuration anew, so its cells are one launch each.
    Variances subtract (independent noise); where the model already explains the real spread
    the extra term is 0. Stalls become a per-run probability and the observed slowdowns. Also
    reports real/model means per cell and the warmup runs' offset from the measured runs.
    ``noise`` gives the model's own drift and jitter (default: the profile's).
    """
    quiet = Noise(drift_pct=noise.drift_pct, jitter_pct=noise.jitter_pct) if noise else Noise()
    real = [results_logs(d) for d in docs]
    repeats = max(v.size for s in real for v in s.values())
    sim = _model_sessions(suite, quiet, repeats, sim_sessions, seed)
    real_sd, sim_sd = spreads(real), spreads(sim)
    levels = sorted(real_sd)
    within = {c: math.sqrt(max(real_sd[c].within ** 2 - sim_sd[c].within ** 2, 0.0)) for c in levels}
    between = {c: math.sqrt(max(real_sd[c].between ** 2 - sim_sd[c].between ** 2, 0.0)) for c in levels}
    factors = tuple(sorted(f for c in levels for f in real_sd[c].stall_factors))
    runs = sum(real_sd[c].runs for c in levels)
    bias = _real_over_model(real, sim)
    warm = _warmup_offsets(docs)
    report = {
        "real_sessions": len(docs), "repeats": repeats, "sim_sessions": sim_sessions,
        "by_concurrency": {c: {"real_within_sd": real_sd[c].within, "real_between_sd": real_sd[c].between,
                               "model_within_sd": sim_sd[c].within, "model_between_sd": sim_sd[c].between,
                               "extra_within_sd": within[c], "extra_between_sd": between[c],
                               "stalls": len(real_sd[c].stall_factors), "runs": real_sd[c].runs} for c in levels},
        "stall_rate": len(factors) / runs if runs else 0.0, "stall_factors": factors,
        "real_over_model": bias,
        "warmup_log_offset": {"mean": float(np.mean(warm)), "sd": float(np.std(warm, ddof=1))} if len(warm) > 1 else None,
    }
    return replace(quiet, within=within, between=between, stall_rate=len(factors) / runs if runs else 0.0,
                   stall_factors=factors, bias=bias), report
