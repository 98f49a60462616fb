"""Proving the gate: its false-fail rate and power, measured on the emulator's model.

A whole real-time session of the default suite takes ~90 s, so hundreds of them are out of
reach. The study instead drives the emulator's scheduler in virtual time (``run_closed_loop``:
the scheduler code the real-time server runs, per-step jitter, per-launch drift, one launch
per configuration per session with a new seed), adds the extra noise the real-time client
was measured to add (``measure_noise``), and hands the runs to the functions the pytest
session uses: ``history_gate`` / ``speculation_gate`` at alpha = family alpha / gate tests,
``counts_as_failure`` and ``holm_failures`` at the end. Stored baselines are K earlier
launches, as ``compare_to_history`` sees them.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import sys
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from specguard.decide.baselines import atomic_write_json
from specguard.config import FAIL_RULES, ServerConfig, Suite, Tolerances, load_suite
from specguard.emulator.model import BatchScheduler, SchedulerConfig, run_closed_loop
from specguard.emulator.profile import EmulatorProfile, load_profile
from specguard.emulator.spec import SpecRequest, resolve_settings
from specguard.decide.gates import GateResult, counts_as_failure, crossover, history_gate, holm_failures, speculation_gate
from specguard.decide.stats import INCONCLUSIVE, MIN_SESSIONS_FOR_SPREAD

DEFAULT_SUITE = Path("perf_tests/suite.toml")
# GPU servers (docs/gate-study.md): runs within a launch agree to ~0.2-0.8 %, launches to ~1-2 %.
GPU_WITHIN = 0.005

Runs = tuple[list[float], list[float]]  # (tok/s per run, accept length per run; empty without speculation)
Launch = dict[int, Runs]  # concurrency -> runs of one server launch


@dataclass(frozen=True)
class Noise:
    """Noise of one simulated launch: the model's own (None = the profile's) plus the client's."""

    drift_pct: float | None = None  # per launch, lognormal sd in %
    jitter_pct: float | None = None  # per step
    within: dict[int, float] = field(default_factory=dict)  # extra log sd per run, by concurrency
    between: dict[int, float] = field(default_factory=dict)  # extra log sd per launch, by concurrency
    stall_rate: float = 0.0  # probability that a run stalls (another job takes the cores)
    stall_factors: tuple[float, ...] = ()  # a stalled run's tok/s is one of these x its own
    bias: dict[str, float] = field(default_factory=dict)  # "config cN" -> real / model mean tok/s


# The default suite's real-time client on top of the model, measured by ``measure_noise`` from 8
# real sessions (5 repeats each) on the shared 2-core machine (docs/gate-study.md; re-measure
# with --noise-from). Quiet: the shipped client, load average 0.4-2.4. Busy: the earlier
# httpx-aiohttp client while other jobs kept the load average at 2-7.
EMULATOR_QUIET = Noise(
    within={1: 0.0, 4: 0.0070, 16: 0.0052, 64: 0.0065}, between={1: 0.0, 4: 0.0, 16: 0.0, 64: 0.0},
    stall_rate=0.010, stall_factors=(0.775, 0.886, 0.937, 0.940, 0.945),
    bias={"baseline c1": 0.987, "baseline c4": 0.974, "baseline c16": 0.967, "baseline c64": 0.962,
          "eagle3 c1": 0.993, "eagle3 c4": 0.978, "eagle3 c16": 0.989, "eagle3 c64": 0.998,
          "mtp c1": 0.978, "mtp c4": 0.967, "mtp c16": 0.984, "mtp c64": 0.984})
EMULATOR_BUSY = Noise(
    within={1: 0.0, 4: 0.0121, 16: 0.0170, 64: 0.0242}, between={1: 0.0131, 4: 0.0179, 16: 0.0236, 64: 0.0306},
    stall_rate=0.042, stall_factors=(0.434, 0.566, 0.627, 0.695, 0.740, 0.745, 0.748, 0.789, 0.794, 0.809,
                                     0.815, 0.822, 0.823, 0.828, 0.834, 0.840, 0.845, 0.847, 0.856, 0.862),
    bias={"baseline c1": 0.963, "baseline c4": 0.933, "baseline c16": 0.883, "baseline c64": 0.846,
          "eagle3 c1": 0.916, "eagle3 c4": 0.950, "eagle3 c16": 0.940, "eagle3 c64": 0.940,
          "mtp c1": 0.924, "mtp c4": 0.918, "mtp c16": 0.926, "mtp c64": 0.906})


@dataclass(frozen=True)
class Change:
    """An injected regression: applied to one configuration's current launch only."""

    name: str
    config: str = ""
    step_scale: float = 1.0  # every step takes this much longer (tok/s / step_scale)
    accept_factor: float = 1.0  # accept length times this

    @property
    def is_null(self) -> bool:
        return self.step_scale == 1.0 and self.accept_factor == 1.0


@dataclass(frozen=True)
class GateSettings:
    """One point of the grid: the knobs the study tunes."""

    repeats: int
    tolerances: Tolerances  # history_sessions = K, the stored baseline sessions compared with

    def label(self) -> str:
        t = self.tolerances
        return (f"repeats={self.repeats} K={t.history_sessions} tol={t.throughput:g}/{t.accept_length:g} "
                f"prior={t.prior_between_sd:g}/{t.prior_between_sd_accept:g} alpha={t.family_alpha:g} rule={t.fail_rule}")


# -- simulation --------------------------------------------------------------------------------
def profile_of(cfg: ServerConfig) -> EmulatorProfile:
    """The emulator profile a configuration launches with (``--emulator-profile``, default fast)."""
    args = cfg.args
    for i, a in enumerate(args):
        if a == "--emulator-profile" and i + 1 < len(args):
            return load_profile(args[i + 1])
        if a.startswith("--emulator-profile="):
            return load_profile(a.split("=", 1)[1])
    return load_profile("fast")


def spec_request(cfg: ServerConfig) -> SpecRequest | None:
    if not cfg.speculative_algorithm:
        return None
    return SpecRequest(cfg.speculative_algorithm, cfg.num_steps, cfg.eagle_topk, cfg.num_draft_tokens)


def _scheduler(cfg: ServerConfig, seed: int, noise: Noise | None, change: Change | None) -> BatchScheduler:
    profile = profile_of(cfg)
    spec = spec_request(cfg)
    accept = None
    if change is not None and change.accept_factor != 1.0 and spec is not None:
        natural = resolve_settings(profile, spec, cfg.max_running_requests).spec
        accept = natural.expected_accept_length * change.accept_factor
    settings = resolve_settings(profile, spec, cfg.max_running_requests, accept)
    quiet = noise is None
    return BatchScheduler(SchedulerConfig(
        profile, settings, seed=seed, step_scale=change.step_scale if change else 1.0,
        jitter_pct=0.0 if quiet else noise.jitter_pct, drift_pct=0.0 if quiet else noise.drift_pct))


def simulate_launch(suite: Suite, name: str, seed: int, repeats: int, noise: Noise | None,
                    change: Change | None = None) -> Launch:
    """One server launch measured at every concurrency, runs in sequence as ``measure_cell`` does.

    Warmup runs are not simulated: in virtual time they start from the same empty scheduler as
    every measured run (the prefix cache is flushed before each run), so they change nothing.
    ``noise=None`` gives the noise-free truth.
    """
    cfg = suite.servers[name]
    sched = _scheduler(cfg, seed, noise, change)
    rng = np.random.default_rng([seed, 7])
    same_prompt = suite.workload.kind == "repeated-id"
    out: Launch = {}
    for c in suite.sweep.concurrency:
        offset = rng.normal(0.0, noise.between.get(c, 0.0)) if noise else 0.0
        tok, acc = [], []
        for _ in range(repeats):
            sched.prefix_cache.clear()
            r = run_closed_loop(sched, c, suite.sweep.num_requests(c), suite.workload.input_len,
                                suite.workload.output_len, same_prompt)
            factor = 1.0
            if noise:
                factor = noise.bias.get(f"{name} c{c}", 1.0) * math.exp(offset + rng.normal(0.0, noise.within.get(c, 0.0)))
                if noise.stall_factors and rng.random() < noise.stall_rate:
                    factor *= float(rng.choice(noise.stall_factors))
            tok.append(r.output_throughput * factor)
            if r.accept_length is not None:
                acc.append(r.accept_length)
        out[c] = (tok, acc)
    return out


def _seed(*parts: int) -> int:
    return int(np.random.SeedSequence(list(parts)).generate_state(1)[0])


@dataclass
class Trial:
    """The launches behind one simulated session: K stored sessions, the unchanged current
    session, and the changed configuration's launch for every injected change."""

    history: list[dict[str, Launch]]
    current: dict[str, Launch]
    changed: dict[str, Launch]  # change name -> launch of change.config


def simulate_trial(suite: Suite, index: int, base_seed: int, max_history: int, repeats: int, noise: Noise,
                   changes: Sequence[Change]) -> Trial:
    names = list(suite.servers)
    hist = [{n: simulate_launch(suite, n, _seed(base_seed, index, 1, k, j), repeats, noise) for j, n in enumerate(names)}
            for k in range(max_history)]
    cur = {n: simulate_launch(suite, n, _seed(base_seed, index, 2, 0, j), repeats, noise) for j, n in enumerate(names)}
    changed = {ch.name: simulate_launch(suite, ch.config, _seed(base_seed, index, 3, i, names.index(ch.config)),
                                        repeats, noise, ch)
               for i, ch in enumerate(changes) if not ch.is_null}
    return Trial(hist, cur, changed)


# -- deciding one session, as the pytest session does ---------------------------------------------
def gate_tests(suite: Suite) -> int:
    """Number of gate tests in a full run: throughput per cell, accept length and speculation per
    speculative cell (what the plugin counts to set alpha per cell)."""
    levels = len(suite.sweep.concurrency)
    spec = sum(1 for s in suite.servers.values() if s.speculative)
    return levels * (len(suite.servers) + 2 * spec)


@dataclass
class SessionVerdict:
    failed: bool
    failing: list[GateResult]
    inconclusive: int  # enforced gate results that were inconclusive
    enforced: int
    crossovers: dict[str, int | None]  # speculative configuration -> first level where it loses


def _cut(launch: Launch, repeats: int) -> Launch:
    return {c: (tok[:repeats], acc[:repeats]) for c, (tok, acc) in launch.items()}


def decide_session(suite: Suite, settings: GateSettings, current: dict[str, Launch],
                   history: Sequence[dict[str, Launch]]) -> SessionVerdict:
    """Every gate of one session on simulated runs, with the session's alpha per cell and Holm."""
    tol = settings.tolerances
    alpha_cell = tol.family_alpha / gate_tests(suite)
    r = settings.repeats
    cur = {n: _cut(l, r) for n, l in current.items()}
    hist = [{n: _cut(l, r) for n, l in h.items()} for h in history[: tol.history_sessions]]
    results: list[GateResult] = []
    crossovers: dict[str, int | None] = {}
    for name, cfg in suite.servers.items():
        ratios = {}
        for c in suite.sweep.concurrency:
            tok, acc = cur[name][c]
            results.append(history_gate("throughput", name, c, tok, [h[name][c][0] for h in hist],
                                        tolerance=tol.throughput, prior_between_sd=tol.prior_between_sd,
                                        alpha_cell=alpha_cell, rule=tol.fail_rule))
            if not cfg.speculative:
                continue
            results.append(history_gate("accept_length", name, c, acc, [h[name][c][1] for h in hist],
                                        tolerance=tol.accept_length, prior_between_sd=tol.prior_between_sd_accept,
                                        alpha_cell=alpha_cell, rule=tol.fail_rule))
            limit = cfg.speculation_must_win_up_to
            spec = speculation_gate(name, c, tok, cur[cfg.reference][c][0], cfg.reference,
                                    must_win=limit is not None and c <= limit, tol=tol, alpha_cell=alpha_cell)
            results.append(spec)
            ratios[c] = spec.estimate
        if cfg.speculative:
            crossovers[name] = crossover(ratios)[1]
    failing = [g for g in results if counts_as_failure(g, tol)]
    failing += holm_failures(results, tol.family_alpha)
    enforced = [g for g in results if g.enforced]
    return SessionVerdict(bool(failing), failing, sum(g.verdict == INCONCLUSIVE for g in enforced), len(enforced),
                          crossovers)


def true_crossovers(suite: Suite, bias: dict[str, float] | None = None) -> dict[str, int | None]:
    """First sweep level where speculation loses to its reference: the noise-free model, times
    the real-time client's bias where the study applies one."""
    bias = bias or {}
    tok = {(n, c): runs[0][0] * bias.get(f"{n} c{c}", 1.0)
           for n in suite.servers for c, runs in simulate_launch(suite, n, 0, 1, None).items()}
    out = {}
    for name, cfg in suite.servers.items():
        if cfg.speculative:
            loses = [c for c in suite.sweep.concurrency if tok[(name, c)] < tok[(cfg.reference, c)]]
            out[name] = loses[0] if loses else None
    return out


def level_distance(levels: Sequence[int], a: int | None, b: int | None) -> int:
    """How many sweep levels apart two crossovers are (None = beyond the last level)."""
    idx = {c: i for i, c in enumerate(sorted(levels))}
    return abs(idx.get(a, len(levels)) - idx.get(b, len(levels)))


# -- scenarios ---------------------------------------------------------------------------------
def scenarios(suite: Suite, config: str, noise: Noise | None = None) -> list[Change]:
    """A/A, then the injected regressions of one speculative configuration.

    "speculation 0.95x" slows the configuration so that, at the highest level where it must
    win, it runs at 0.95x its reference (whatever its true gain was): the speculation gate only
    ever sees the current ratio.
    """
    cfg = suite.servers[config]
    out = [Change("A/A")]
    out += [Change(f"tok/s -{p}%", config, step_scale=1 / (1 - p / 100)) for p in (3, 5, 10)]
    out += [Change(f"accept -{p}%", config, accept_factor=1 - p / 100) for p in (5, 10)]
    must_win = [c for c in suite.sweep.concurrency
                if cfg.speculation_must_win_up_to is not None and c <= cfg.speculation_must_win_up_to]
    if must_win and cfg.reference:
        c = must_win[-1]
        bias = noise.bias if noise else {}
        spec = simulate_launch(suite, config, 0, 1, None)[c][0][0] * bias.get(f"{config} c{c}", 1.0)
        ref = simulate_launch(suite, cfg.reference, 0, 1, None)[c][0][0] * bias.get(f"{cfg.reference} c{c}", 1.0)
        out.append(Change(f"speculation 0.95x at c{c}", config, step_scale=spec / ref / 0.95))
    return out


def settings_grid(suite: Suite, repeats: Sequence[int], history: Sequence[int], tolerance: Sequence[float],
                  tolerance_accept: Sequence[float], prior: Sequence[float], prior_accept: Sequence[float],
                  family_alpha: Sequence[float], rules: Sequence[str] | None = None) -> list[GateSettings]:
    base = suite.tolerances
    return [GateSettings(r, replace(base, throughput=t, accept_length=ta, prior_between_sd=p,
                                    prior_between_sd_accept=pa, family_alpha=a, history_sessions=k, fail_rule=rule))
            for rule, r, k, t, ta, p, pa, a in itertools.product(rules or [base.fail_rule], repeats, history, tolerance,
                                                                 tolerance_accept, prior, prior_accept, family_alpha)]


# -- running the study -------------------------------------------------------------------------
@dataclass(frozen=True)
class StudyPlan:
    suite: Suite
    grid: list[GateSettings]
    changes: list[Change]
    noise: Noise
    seed: int


def _trial_outcomes(plan: StudyPlan, index: int) -> list[list[dict[str, Any]]]:
    """Simulate one trial and decide it at every grid point and scenario: [grid][scenario]."""
    max_r = max(s.repeats for s in plan.grid)
    max_k = max(s.tolerances.history_sessions for s in plan.grid)
    return decide_trial(plan, simulate_trial(plan.suite, index, plan.seed, max_k, max_r, plan.noise, plan.changes))


def decide_trial(plan: StudyPlan, trial: Trial) -> list[list[dict[str, Any]]]:
    """One simulated trial decided at every grid point (outer) and scenario (inner)."""
    out = []
    for settings in plan.grid:
        row = []
        for ch in plan.changes:
            current = dict(trial.current)
            if not ch.is_null:
                current[ch.config] = trial.changed[ch.name]
            v = decide_session(plan.suite, settings, current, trial.history)
            row.append({"failed": v.failed, "gates": sorted({g.gate for g in v.failing}),
                        "inconclusive": v.inconclusive, "enforced": v.enforced, "crossovers": v.crossovers})
        out.append(row)
    return out


def wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """95% interval of a rate from k of n, honest near 0 (where 0/200 still allows ~1.9%)."""
    if n == 0:
        return (0.0, 1.0)
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return (max(0.0, centre - half), min(1.0, centre + half))


def _summarise(suite: Suite, change: Change, rows: list[dict[str, Any]], truth: dict[str, int | None]) -> dict[str, Any]:
    n = len(rows)
    fails = sum(r["failed"] for r in rows)
    out: dict[str, Any] = {"scenario": change.name, "sessions": n, "fail_rate": fails / n, "fail_ci95": wilson(fails, n)}
    for gate in ("throughput", "accept_length", "speculation"):
        out[f"{gate}_fail_rate"] = sum(gate in r["gates"] for r in rows) / n
    enforced = sum(r["enforced"] for r in rows)
    out["inconclusive_rate"] = sum(r["inconclusive"] for r in rows) / enforced if enforced else 0.0
    out["sessions_with_inconclusive"] = sum(r["inconclusive"] > 0 for r in rows) / n
    if change.is_null:
        levels = suite.sweep.concurrency
        within = [level_distance(levels, r["crossovers"][name], truth[name]) <= 1 for r in rows for name in truth]
        exact = [r["crossovers"][name] == truth[name] for r in rows for name in truth]
        out["crossover_within_one_level"] = sum(within) / len(within) if within else None
        out["crossover_exact"] = sum(exact) / len(exact) if exact else None
    return out


def summarise(plan: StudyPlan, per_trial: list[list[list[dict[str, Any]]]]) -> list[dict[str, Any]]:
    """Rates per grid point and scenario over the decided trials."""
    truth = true_crossovers(plan.suite, plan.noise.bias)
    return [{"settings": {"repeats": settings.repeats, **asdict(settings.tolerances)}, "label": settings.label(),
             "scenarios": [_summarise(plan.suite, ch, [t[g][s] for t in per_trial], truth)
                           for s, ch in enumerate(plan.changes)]}
            for g, settings in enumerate(plan.grid)]


def run_study(plan: StudyPlan, sessions: int, jobs: int = 1, progress: bool = True) -> dict[str, Any]:
    """Simulate ``sessions`` trials and summarise every grid point and scenario."""
    started = time.monotonic()
    per_trial: list[list[list[dict[str, Any]]]] = []
    if jobs > 1:
        import multiprocessing
        from functools import partial

        with multiprocessing.get_context("fork").Pool(jobs) as pool:
            for out in pool.imap(partial(_trial_outcomes, plan), range(sessions)):
                per_trial.append(out)
                _progress(progress, len(per_trial), sessions, started)
    else:
        for i in range(sessions):
            per_trial.append(_trial_outcomes(plan, i))
            _progress(progress, i + 1, sessions, started)
    return {"grid": summarise(plan, per_trial), "true_crossover": true_crossovers(plan.suite, plan.noise.bias),
            "elapsed_s": round(time.monotonic() - started, 1)}


def _progress(show: bool, done: int, total: int, started: float) -> None:
    if show and (done % 10 == 0 or done == total):
        print(f"  {done}/{total} sessions simulated ({time.monotonic() - started:.0f} s)", file=sys.stderr)


# -- the real-time client's extra noise --------------------------------------------------------
CellLogs = dict[tuple[str, int], np.ndarray]  # (configuration, concurrency) -> log tok/s of the runs
STALL_SDS = 5.0  # a run this many robust sds below its cell's median is a stall (cf. stats.outliers)


def results_logs(doc: dict[str, Any]) -> CellLogs:
    """Measured runs of one results JSON (``pytest perf_tests --results-json``)."""
    return {(c["config"], c["concurrency"]): np.log([r["output_throughput"] for r in c["runs"]])
            for c in doc["cells"] if c["runs"] and not c.get("error")}


@dataclass(frozen=True)
class Spread:
    """Spread of log tok/s at one concurrency, pooled over configurations."""

    within: float  # sd of runs around their cell's mean, stalls left out
    between: float  # sd of a cell's launch means, less what the within-run spread explains
    runs: int
    stall_factors: tuple[float, ...]  # run / cell median of each stalled run


def spreads(sessions: Sequence[CellLogs]) -> dict[int, Spread]:
    """Within-run and between-launch spread per concurrency, robust to stalls.

    On a shared machine a run now and then stalls (another job takes the cores: 0.4-0.9x);
    such runs are counted and set aside so they do not pass for Gaussian spread.
    """
    keys = sorted(set().union(*sessions))
    out = {}
    for c in sorted({k[1] for k in keys}):
        cells = {k: [s[k] for s in sessions if k in s] for k in keys if k[1] == c}
        resid = np.concatenate([g - np.median(g) for gs in cells.values() for g in gs if g.size > 1])
        nonzero = np.abs(resid[resid != 0])
        robust_sd = 1.4826 * float(np.median(nonzero)) if nonzero.size else 0.0
        stalls, kept = [], {}
        for k, gs in cells.items():
            kept[k] = []
            for g in gs:
                low = g < np.median(g) - STALL_SDS * robust_sd if robust_sd > 0 else np.zeros(g.size, bool)
                stalls += [math.exp(x - np.median(g)) for x in g[low]]
                kept[k].append(g[~low])
        groups = [g for gs in kept.values() for g in gs if g.size > 1]
        dof = sum(g.size - 1 for g in groups)
        within2 = sum(float(((g - g.mean()) ** 2).sum()) for g in groups) / dof if dof else 0.0
        between2 = [max(float(np.var([g.mean() for g in gs], ddof=1)) - within2 / float(np.mean([g.size for g in gs])), 0.0)
                    for gs in kept.values() if len(gs) > 1]
        out[c] = Spread(math.sqrt(within2), math.sqrt(float(np.mean(between2))) if between2 else 0.0,
                        sum(g.size for gs in cells.values() for g in gs), tuple(sorted(stalls)))
    return out


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
    sim = [{(n, c): np.log(runs[0]) for j, n in enumerate(suite.servers)
            for c, runs in simulate_launch(suite, n, _seed(seed, i, 9, j), repeats, quiet).items()}
           for i in range(sim_sessions)]
    real_sd, sim_sd = spreads(real), spreads(sim)
    levels = sorted(real_sd)
    within = {c: math.sqrt(max(real_sd[c].within ** 2 - sim_sd[c].within ** 2, 0.0)) for c in levels}
    between = {c: math.sqrt(max(real_sd[c].between ** 2 - sim_sd[c].between ** 2, 0.0)) for c in levels}
    factors = tuple(sorted(f for c in levels for f in real_sd[c].stall_factors))
    runs = sum(real_sd[c].runs for c in levels)
    bias = {f"{n} c{c}": math.exp(float(np.mean([s[(n, c)].mean() for s in real if (n, c) in s]))
                                  - float(np.mean([s[(n, c)].mean() for s in sim])))
            for (n, c) in sorted(sim[0]) if any((n, c) in s for s in real)}
    warm = [math.log(w["output_throughput"]) - float(np.median(np.log([r["output_throughput"] for r in c["runs"]])))
            for d in docs for c in d["cells"] if c["runs"] for w in c.get("warmup_runs", [])]
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
    return replace(quiet, within=within, between=between, stall_rate=report["stall_rate"], stall_factors=factors,
                   bias=bias), report


# -- report ------------------------------------------------------------------------------------
def _matches(settings: dict[str, Any], target: Tolerances, repeats: int) -> bool:
    t = asdict(target)
    return settings["repeats"] == repeats and all(settings.get(k) == v for k, v in t.items() if k != "history_sessions")


def headline(result: dict[str, Any], target: Tolerances, repeats: int) -> dict[str, Any]:
    """The target settings (by default the library's): worst case over the history depths K >= 3
    that were studied (a suite stores 3-5 sessions), and every K on its own."""

    def rates(rows: list[dict[str, Any]], name: str, key: str = "fail_rate") -> list[float]:
        return [s[key] for g in rows for s in g["scenarios"] if s["scenario"] == name]

    def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
        return {"false_fail_rate": max(rates(rows, "A/A")), "power_tok_s_5pct": min(rates(rows, "tok/s -5%")),
                "power_tok_s_10pct": min(rates(rows, "tok/s -10%")),
                "power_accept_10pct": min(rates(rows, "accept -10%")),
                "crossover_within_one_level": min(rates(rows, "A/A", "crossover_within_one_level"))}

    rows = [g for g in result["grid"] if _matches(g["settings"], target, repeats)]
    if not rows:
        return {}
    deep = [g for g in rows if g["settings"]["history_sessions"] >= MIN_SESSIONS_FOR_SPREAD] or rows
    depths = sorted({g["settings"]["history_sessions"] for g in deep})
    return {**summary(deep),
            "headline_settings": f"repeats={repeats} " + " ".join(f"{k}={v}" for k, v in asdict(target).items()
                                                                 if k != "history_sessions")
                                 + ", worst over K in " + ",".join(map(str, depths)),
            "by_history": {str(k): summary([g for g in rows if g["settings"]["history_sessions"] == k])
                           for k in sorted({g["settings"]["history_sessions"] for g in rows})}}


def render_table(result: dict[str, Any]) -> str:
    """One markdown row per grid point: false fails, inconclusive, crossover, power per change."""
    changes = [s["scenario"] for s in result["grid"][0]["scenarios"] if s["scenario"] != "A/A"]
    head = ["rule", "repeats", "K", "tol tok/acc", "prior tok/acc", "alpha", "false-fail (95% CI)", "inconcl.", "xover ±1",
            *[f"P({c})" for c in changes]]
    lines = ["| " + " | ".join(head) + " |", "|" + "---:|" * len(head)]
    for g in result["grid"]:
        st, rows = g["settings"], {s["scenario"]: s for s in g["scenarios"]}
        aa = rows["A/A"]
        lo, hi = aa["fail_ci95"]
        cells = [st.get("fail_rule", "beyond-tolerance"), str(st["repeats"]), str(st["history_sessions"]), f"{st['throughput']:g}/{st['accept_length']:g}",
                 f"{st['prior_between_sd']:g}/{st['prior_between_sd_accept']:g}", f"{st['family_alpha']:g}",
                 f"{aa['fail_rate']:.1%} ({lo:.1%}-{hi:.1%})", f"{aa['inconclusive_rate']:.1%}",
                 f"{aa['crossover_within_one_level']:.1%}", *[f"{rows[c]['fail_rate']:.2f}" for c in changes]]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


# -- command line ------------------------------------------------------------------------------
def _floats(text: str) -> list[float]:
    return [float(x) for x in text.split(",") if x.strip()]


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """`specguard study`: the gate's false-fail rate and power on simulated sessions."""
    p = subparsers.add_parser("study", help="measure the gate's false-fail rate and power on the emulator's model")
    p.add_argument("--suite", type=Path, default=DEFAULT_SUITE)
    p.add_argument("--sessions", type=int, default=200, help="simulated sessions per scenario")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--jobs", type=int, default=1, help="worker processes")
    p.add_argument("--json", dest="json_path", type=Path, help="write the full result here")
    p.add_argument("--config", help="configuration the changes are injected into (default: first speculative)")
    p.add_argument("--headline", choices=("defaults", "suite"), default="suite",
                   help="the top-level rates are for specguard's default tolerances or the suite file's")
    grid = p.add_argument_group("grid (comma-separated lists; default: the suite's value)")
    grid.add_argument("--repeats", type=_ints)
    grid.add_argument("--history", type=_ints, default=[1, 5], help="stored baseline sessions K")
    grid.add_argument("--tolerance", type=_floats, help="throughput tolerance")
    grid.add_argument("--tolerance-accept", type=_floats)
    grid.add_argument("--prior-sd", type=_floats, help="prior between-launch sd of log tok/s")
    grid.add_argument("--prior-sd-accept", type=_floats)
    grid.add_argument("--family-alpha", type=_floats)
    grid.add_argument("--fail-rule", type=lambda t: [x for x in t.split(",") if x],
                      help=f"comma-separated: {', '.join(FAIL_RULES)}")
    noise = p.add_argument_group("noise")
    noise.add_argument("--noise", type=lambda t: [x for x in t.split(",") if x], default=["emulator"],
                       help="comma-separated presets, the first gives the headline: emulator, emulator-busy (the "
                            "fast profile's drift and jitter plus the real-time client's noise measured on a quiet or "
                            "busy machine), gpu-quiet (0.5%% drift per launch), gpu (1%% drift per launch, 0.5%% per run), gpu-drift2 (2%% drift)")
    noise.add_argument("--noise-from", type=Path, nargs="+", metavar="RESULTS_JSON",
                       help="re-measure the emulator preset's client noise from real sessions' --results-json files")
    noise.add_argument("--drift-pct", type=float, help="per-launch model drift, sd in %% (replaces the preset's)")
    noise.add_argument("--jitter-pct", type=float, help="per-step model jitter, sd in %%")
    noise.add_argument("--extra-within-pct", type=float, help="extra per-run noise at every level, sd in %%")
    noise.add_argument("--extra-between-pct", type=float, help="extra per-launch noise at every level, sd in %%")
    noise.add_argument("--stall-rate", type=float, help="probability that a run stalls (0: none)")
    return p


def preset(name: str, levels: Sequence[int], drift_pct: float | None = None,
           jitter_pct: float | None = None) -> Noise:
    """Named noise levels: the default suite's real-time emulator on the shared machine (quiet
    or busy), and GPU servers with 0.5, 1 or 2 % launch-to-launch drift (docs/gate-study.md says why)."""
    if name in ("emulator", "emulator-busy"):
        return replace(EMULATOR_QUIET if name == "emulator" else EMULATOR_BUSY, drift_pct=drift_pct, jitter_pct=jitter_pct)
    drift = {"gpu-quiet": 0.5, "gpu": 1.0, "gpu-drift2": 2.0}[name]
    return Noise(drift_pct=drift if drift_pct is None else drift_pct, jitter_pct=jitter_pct,
                 within={c: GPU_WITHIN for c in levels}, between={}, stall_rate=0.0, stall_factors=(), bias={})


NOISE_PRESETS = ("emulator", "emulator-busy", "gpu-quiet", "gpu", "gpu-drift2")


def _noise(name: str, args: argparse.Namespace, suite: Suite, measured: Noise | None) -> Noise:
    levels = suite.sweep.concurrency
    noise = preset(name, levels, args.drift_pct, args.jitter_pct)
    if measured is not None and name.startswith("emulator"):
        noise = replace(noise, within=measured.within, between=measured.between, stall_rate=measured.stall_rate,
                        stall_factors=measured.stall_factors, bias=measured.bias)
    if args.extra_within_pct is not None:
        noise = replace(noise, within={c: args.extra_within_pct / 100 for c in levels})
    if args.extra_between_pct is not None:
        noise = replace(noise, between={c: args.extra_between_pct / 100 for c in levels})
    if args.stall_rate is not None:
        noise = replace(noise, stall_rate=args.stall_rate)
    return noise


def run(args: argparse.Namespace) -> int:
    suite = load_suite(args.suite)
    config = args.config or next((n for n, s in suite.servers.items() if s.speculative), None)
    if config not in suite.servers or not suite.servers[config].speculative:
        print(f"specguard study: --config must name a speculative configuration of {args.suite}", file=sys.stderr)
        return 2
    bad_rules = [r for r in args.fail_rule or [] if r not in FAIL_RULES]
    if bad_rules:
        print(f"specguard study: unknown --fail-rule {', '.join(bad_rules)}; use {', '.join(FAIL_RULES)}", file=sys.stderr)
        return 2
    unknown = [n for n in args.noise if n not in NOISE_PRESETS]
    if unknown:
        print(f"specguard study: unknown --noise {', '.join(unknown)}; use {', '.join(NOISE_PRESETS)}", file=sys.stderr)
        return 2
    tol = suite.tolerances
    grid = settings_grid(suite, args.repeats or [suite.sweep.repeats], args.history, args.tolerance or [tol.throughput],
                         args.tolerance_accept or [tol.accept_length], args.prior_sd or [tol.prior_between_sd],
                         args.prior_sd_accept or [tol.prior_between_sd_accept], args.family_alpha or [tol.family_alpha],
                         args.fail_rule or [tol.fail_rule])
    measured, noise_report = None, None
    if args.noise_from:
        docs = [json.loads(f.read_text(encoding="utf-8")) for f in args.noise_from]
        measured, noise_report = measure_noise(docs, suite, seed=args.seed)
        print(json.dumps(noise_report, indent=1), file=sys.stderr)
    studies = {}
    for name in args.noise:
        noise = _noise(name, args, suite, measured)
        plan = StudyPlan(suite, grid, scenarios(suite, config, noise), noise, args.seed)
        studies[name] = {"noise": asdict(noise), **run_study(plan, args.sessions, args.jobs)}
        print(f"\nnoise {name}:\n{render_table(studies[name])}")
    target = suite.tolerances if args.headline == "suite" else Tolerances()
    if not headline(studies[args.noise[0]], target, suite.sweep.repeats):
        print(f"specguard study: the grid has no point with the {args.headline} tolerances at repeats="
              f"{suite.sweep.repeats}; the document gets no headline rates", file=sys.stderr)
    doc = {"sessions": args.sessions, **headline(studies[args.noise[0]], target, suite.sweep.repeats),
           "headline_noise": args.noise[0], "headline_of": args.headline,
           "suite": str(args.suite), "changed_config": config, "seed": args.seed, "gate_tests": gate_tests(suite),
           "argv": sys.argv[1:], "noise_measurement": noise_report, "studies": studies}
    if args.json_path:
        atomic_write_json(args.json_path, doc)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="specguard")
    add_parser(parser.add_subparsers(dest="command", required=True))
    return run(parser.parse_args(["study", *(sys.argv[1:] if argv is None else argv)]))


if __name__ == "__main__":
    sys.exit(main())
