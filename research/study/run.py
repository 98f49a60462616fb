"""Running a study: simulate trials, decide each at every grid point and scenario, summarise the rates."""

from __future__ import annotations

import math
import sys
import time
from typing import Any, cast

from research.study.cache import cached_trial
from research.study.plan import StudyPlan, max_launches
from research.study.session_decisions import decide_session, remeasures
from research.study.simulate import ACCEPTANCE_DROP, ENGINE_SLOWDOWN, Change, Trial
from research.study.truth import CROSSOVER_FACTOR, level_distance, true_crossover_c, true_crossovers, within_factor
from research.study.verdict import SessionVerdict
from specguard.config import Suite

Outcome = dict[str, Any]  # one session's outcome at one grid point and scenario (``decide_trial``)


def _trial_outcomes(plan: StudyPlan, index: int) -> list[list[Outcome]]:
    """Simulate one trial and decide it at every grid point and scenario: [grid][scenario]."""
    # a grid point that re-measures a disagreeing cell on the same server reads that launch's next runs
    max_r = max(s.repeats * (2 if remeasures(s) else 1) for s in plan.grid)
    max_k = max(s.tolerances.history_sessions for s in plan.grid)
    return decide_trial(plan, cached_trial(plan, index, max_k, max_r, max_launches(plan.grid)))


def _outcome(v: SessionVerdict, runs_per_launch: int) -> Outcome:
    launches = sum(v.launches.values())
    return {"failed": v.failed, "gates": sorted({str(g.gate) for g in v.failing}),
            "failed_cells": sorted({f"{g.gate} {g.config} {g.level}" for g in v.failing}),
            "attributions": dict(v.attributions),
            "inconclusive": v.inconclusive, "enforced": v.enforced, "crossovers": v.crossovers,
            "crossover_c": {n: e.estimate for n, e in v.crossover_estimates.items()},
            "launches": launches, "configs": len(v.launches), "runs": launches * runs_per_launch,
            "relaunched": sorted(v.relaunched)}


def decide_trial(plan: StudyPlan, trial: Trial) -> list[list[Outcome]]:
    """One simulated trial decided at every grid point (outer) and scenario (inner)."""
    out = []
    levels = len(plan.suite.sweep.concurrency)
    for settings in plan.grid:
        row = []
        per_run = settings.repeats + plan.suite.sweep.warmup
        for ch in plan.changes:
            current, more = dict(trial.current), dict(trial.more)
            if not ch.is_null:
                current[ch.config] = trial.changed[ch.name]
                more[ch.config] = trial.changed_more.get(ch.name, [])
            v = decide_session(plan.suite, settings, current, trial.history, more)
            row.append(_outcome(v, levels * per_run))
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


def _share(hits: list[bool]) -> float | None:
    return sum(hits) / len(hits) if hits else None


LEVEL_GATES = ("throughput", "step_time")  # the gates whose failing cell at a level catches a slowdown there


def _level_fail_rates(change: Change, levels: list[int], rows: list[Outcome]) -> dict[str, dict[str, float]]:
    """The changed configuration's cells: per level, the share of sessions where the cell failed
    by throughput, by step_time, and by either."""
    n = len(rows)
    out: dict[str, dict[str, float]] = {}
    for c in levels:
        by = {g: [f"{g} {change.config} c{c}" in r.get("failed_cells", ()) for r in rows] for g in LEVEL_GATES}
        out[f"c{c}"] = {**{g: sum(hits) / n for g, hits in by.items()},
                        "either": sum(any(h) for h in zip(*by.values())) / n}
    return out


def _names_wrongly(change: Change, outcome: Outcome) -> bool:
    """A one-half change whose failing or inconclusive tok/s verdict on the changed configuration
    names the other half ("both" included): a step-only change read as the drafter's, an
    acceptance-only one as the engine's."""
    wrong = ("drafter", "both") if change.gate == "step_time" else ("engine", "both")
    prefix = f"{change.config} c"
    return any(half in wrong for cell, half in outcome.get("attributions", {}).items() if cell.startswith(prefix))


def _fail_rates(change: Change, rows: list[Outcome]) -> dict[str, Any]:
    n = len(rows)
    fails = sum(r["failed"] for r in rows)
    out: dict[str, Any] = {"scenario": change.name, "isolates": change.gate, "sessions": n, "fail_rate": fails / n,
                           "fail_ci95": wilson(fails, n)}
    for gate in ("throughput", "accept_length", "step_time", "speculation"):
        out[f"{gate}_fail_rate"] = sum(gate in r["gates"] for r in rows) / n
    enforced = sum(r["enforced"] for r in rows)
    out["inconclusive_rate"] = sum(r["inconclusive"] for r in rows) / enforced if enforced else 0.0
    out["sessions_with_inconclusive"] = sum(r["inconclusive"] > 0 for r in rows) / n
    return out


def _cost(rows: list[Outcome]) -> dict[str, float]:
    n = len(rows)
    launches = configs = 0
    for r in rows:
        launches += cast(int, r.get("launches", r.get("configs", 1)))
        configs += cast(int, r.get("configs", 1))
    return {"launches_per_config": launches / configs,
            "runs_per_session": sum(r.get("runs", 0) for r in rows) / n,
            "sessions_relaunching": sum(bool(r.get("relaunched")) for r in rows) / n}


def _crossover_scores(suite: Suite, rows: list[Outcome], truth: dict[str, int | None],
                      truth_c: dict[str, float | None]) -> dict[str, float | None]:
    levels = suite.sweep.concurrency
    within = [level_distance(levels, r["crossovers"][name], truth[name]) <= 1 for r in rows for name in truth]
    exact = [r["crossovers"][name] == truth[name] for r in rows for name in truth]
    close = [within_factor(r["crossover_c"].get(name), truth_c[name], CROSSOVER_FACTOR)
             for r in rows for name in truth_c if "crossover_c" in r]
    return {"crossover_within_one_level": _share(within), "crossover_exact": _share(exact),
            "crossover_within_1_25x": _share(close)}


def _summarise(suite: Suite, change: Change, rows: list[Outcome], truth: dict[str, int | None],
               truth_c: dict[str, float | None]) -> dict[str, Any]:
    """One scenario at one grid point: fail rates, cost, on A/A the crossover's scores, under a
    change the changed configuration's cells per level, and under a one-half change (step time
    or acceptance alone) how often a tok/s verdict named the wrong half."""
    out = {**_fail_rates(change, rows), **_cost(rows)}
    if change.is_null:
        out.update(_crossover_scores(suite, rows, truth, truth_c))
    else:
        out["level_fail_rates"] = _level_fail_rates(change, suite.sweep.concurrency, rows)
    if change.name in (ENGINE_SLOWDOWN, ACCEPTANCE_DROP):
        out["wrong_half_rate"] = sum(_names_wrongly(change, r) for r in rows) / len(rows)
    return out


def _attribution_correct(changes: list[Change], per_trial: list[list[list[Outcome]]], g: int) -> float | None:
    """Share of sessions where neither one-half change named the wrong half (both scenarios decided
    on the same trial): the engine slowdown never read as the drafter's, the acceptance drop never
    as the engine's."""
    pair = [(s, ch) for s, ch in enumerate(changes) if ch.name in (ENGINE_SLOWDOWN, ACCEPTANCE_DROP)]
    if len(pair) != 2 or not per_trial:
        return None
    right = [not any(_names_wrongly(ch, t[g][s]) for s, ch in pair) for t in per_trial]
    return sum(right) / len(right)


def summarise(plan: StudyPlan, per_trial: list[list[list[Outcome]]]) -> list[dict[str, Any]]:
    """Rates per grid point and scenario over the decided trials."""
    truth = true_crossovers(plan.suite, plan.noise.bias)
    truth_c = {n: true_crossover_c(plan.suite, n, plan.noise.bias) for n in truth}
    return [{"settings": settings.settings_record(),
             "label": settings.label(),
             "attribution_correct": _attribution_correct(plan.changes, per_trial, g),
             "scenarios": [_summarise(plan.suite, ch, [t[g][s] for t in per_trial], truth, truth_c)
                           for s, ch in enumerate(plan.changes)]}
            for g, settings in enumerate(plan.grid)]


def run_study(plan: StudyPlan, sessions: int, jobs: int = 1, progress: bool = True) -> dict[str, Any]:
    """Simulate ``sessions`` trials and summarise every grid point and scenario."""
    started = time.monotonic()
    per_trial: list[list[list[Outcome]]] = []
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
    truth = true_crossovers(plan.suite, plan.noise.bias)
    return {"grid": summarise(plan, per_trial), "true_crossover": truth,
            "true_crossover_c": {n: true_crossover_c(plan.suite, n, plan.noise.bias) for n in truth},
            "elapsed_s": round(time.monotonic() - started, 1)}


def _progress(show: bool, done: int, total: int, started: float) -> None:
    if show and (done % 10 == 0 or done == total):
        print(f"  {done}/{total} sessions simulated ({time.monotonic() - started:.0f} s)", file=sys.stderr)
