"""Retired gate rules, kept for the study's comparisons (docs/gate-study.md; docs/statistics.md,
"Retired rules"). The gates no longer have them.

- ``legacy``: one launch per configuration, this session's runs against the stored sessions
  with the between-session spread as known (the larger of the prior and, from 3 stored sessions
  on, the history's: ``compare_to_history``), the speculation gate on the prior alone
  (``speculation_gate``), equal alpha for every gate test and ordinary Holm.
- ``on-suspicion-r1`` (the first issue-14 design): the gates' launch comparisons, but each stage
  tested at half the cell alpha and Holm at half the family alpha ("halves", a union bound over
  at most two stages), and the prior never checked against the history (``R1_RULES``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from research.study.plan import GateSettings, gate_tests
from research.study.simulate import Launch, reference_of
from research.study.verdict import DecisionRules, SessionVerdict, cut_repeats, speculation_ratios
from specguard.config import Suite, Tolerances
from specguard.decide.crossover import estimate_crossover
from specguard.decide.gates import (
    ERROR,
    GateDesign,
    GateResult,
    counts_as_failure,
    gate_confidence,
    holm_failures,
    pair_spread,
    verdict_line,
)
from specguard.decide.stats import (
    INCONCLUSIVE,
    RatioEstimate,
    _finish,
    _logs,
    _pooled_within_var,
    compare_launch_sets,
    compare_launches,
    compare_sessions,
    null_ratio,
)

MIN_SESSIONS_FOR_SPREAD = 3  # legacy: fewer stored sessions, the prior between-session spread is used


def _mean(xs: Sequence[float]) -> float:
    return sum(xs) / len(xs) if xs else math.nan


def compare_to_history(current: Sequence[float], history: Sequence[Sequence[float]], *, threshold: float,
                       prior_between_sd: float, confidence: float, rule: str = "beyond-tolerance") -> RatioEstimate:
    """This session's runs against K stored sessions (a prediction-interval comparison).

    Var(log ratio) = sb2 (this launch's own offset) + sw2/n_c + (sb2 + sw2/n_h)/K.
    sb2 is the larger of the declared prior and, with >= 3 sessions, the history's estimate:
    a few sessions can reveal more spread than declared, but are too few to trust less.
    """
    cur = _logs(current, "current")
    sessions = [_logs(s, "baseline") for s in history if len(s)]
    if not sessions:
        raise ValueError("no baseline sessions to compare with")
    sw2, dof_w = _pooled_within_var([cur, *sessions])
    means = np.array([s.mean() for s in sessions])
    k = len(sessions)
    n_h = float(np.mean([s.size for s in sessions]))
    prior2 = prior_between_sd**2
    sb2, source = prior2, "prior"
    if k >= MIN_SESSIONS_FOR_SPREAD:
        est = max(float(means.var(ddof=1)) - sw2 / n_h, 0.0)
        if est > prior2:
            sb2, source = est, f"history of {k} sessions"
    diff = float(cur.mean() - means.mean())
    within = sw2 / cur.size + sw2 / (n_h * k)
    between = sb2 * (1 + 1 / k)
    return _finish(diff, [(within, dof_w), (between, math.inf)], threshold, confidence, math.sqrt(sb2), source,
                   null_ratio(threshold, rule))


def history_gate(gate: str, config: str, concurrency: int, current: Sequence[float],
                 history: Sequence[Sequence[float]], *, tolerance: float, prior_between_sd: float,
                 alpha_cell: float, rule: str) -> GateResult:
    """Fail iff current/baseline is significantly below 1 and estimated below 1 - tolerance
    (rule "significant"), or its whole interval is below 1 - tolerance ("beyond-tolerance")."""
    if len(current) < 2:
        return GateResult(gate, config, concurrency, ERROR,
                          f"{gate} {config} c{concurrency}: only {len(current)} samples; need >= 2")
    est = compare_to_history(current, history, threshold=1 - tolerance, prior_between_sd=prior_between_sd,
                             confidence=gate_confidence(alpha_cell), rule=rule)
    verdict = est.outcome()
    unit = " tok/s" if gate == "throughput" else ""
    base_mean = _mean([v for s in history for v in s])
    msg = verdict_line(gate, config, concurrency, unit, _mean(current), base_mean,
                       f"baseline ({len(history)} session{'s' if len(history) != 1 else ''})", est,
                       f"tolerance {tolerance:.0%}, rule {rule}", verdict)
    return GateResult(gate, config, concurrency, verdict, msg, est, _mean(current), base_mean, alpha=alpha_cell)


def speculation_gate(config: str, concurrency: int, spec: Sequence[float], reference: Sequence[float],
                     reference_name: str, *, must_win: bool, tol: Tolerances, alpha_cell: float) -> GateResult:
    """Speculative vs reference tok/s at one concurrency, both one launch, the launch spread from
    the prior alone; enforced only where it must win."""
    threshold = 1 + tol.speculation_min_gain
    est = compare_sessions(spec, reference, threshold=threshold, launch_sd=tol.prior_between_sd,
                           confidence=gate_confidence(alpha_cell))
    verdict = est.outcome()
    where = "must win here" if must_win else "report only"
    msg = verdict_line("speculation", config, concurrency, " tok/s", _mean(spec), _mean(reference), reference_name, est,
                       f"must not be below {threshold:.2f}x ({where})", verdict)
    return GateResult("speculation", config, concurrency, verdict, msg, est, _mean(spec), _mean(reference),
                      enforced=must_win, alpha=alpha_cell)


def _legacy_cells(suite: Suite, tol: Tolerances, cur: dict[str, Launch], hist: list[dict[str, Launch]],
                  alpha_cell: float) -> list[GateResult]:
    """Every gate test of a one-launch session under the legacy gates."""
    results: list[GateResult] = []
    for name, cfg in suite.servers.items():
        for c in suite.sweep.concurrency:
            tok, acc = cur[name][c][0], cur[name][c][1]
            results.append(history_gate("throughput", name, c, tok, [h[name][c][0] for h in hist],
                                        tolerance=tol.throughput, prior_between_sd=tol.prior_between_sd,
                                        alpha_cell=alpha_cell, rule=tol.fail_rule))
            if not cfg.speculative:
                continue
            results.append(history_gate("accept_length", name, c, acc, [h[name][c][1] for h in hist],
                                        tolerance=tol.accept_length, prior_between_sd=tol.prior_between_sd_accept,
                                        alpha_cell=alpha_cell, rule=tol.fail_rule))
            limit, ref = cfg.speculation_must_win_up_to, reference_of(cfg)
            results.append(speculation_gate(name, c, tok, cur[ref][c][0], ref,
                                            must_win=limit is not None and c <= limit, tol=tol, alpha_cell=alpha_cell))
    return results


def decide_legacy_session(suite: Suite, settings: GateSettings, current: dict[str, Launch],
                          history: Sequence[dict[str, Launch]]) -> SessionVerdict:
    """One session under the legacy gates: one launch, alpha = family alpha / gate tests, Holm."""
    tol = settings.tolerances
    r = settings.repeats
    cur = {n: cut_repeats(launch, r) for n, launch in current.items()}
    hist = [{n: cut_repeats(session, r) for n, session in h.items()} for h in history[: tol.history_sessions]]
    results = _legacy_cells(suite, tol, cur, hist, tol.family_alpha / gate_tests(suite, step_time=False))
    failing = [g for g in results if counts_as_failure(g, tol)]
    failing += holm_failures(results, tol.family_alpha)
    enforced = [g for g in results if g.enforced]
    estimates = {n: estimate_crossover(rt) for n, rt in speculation_ratios(results).items()}
    return SessionVerdict(bool(failing), failing, sum(g.verdict == INCONCLUSIVE for g in enforced), len(enforced),
                          {n: e.first_behind for n, e in estimates.items()}, {n: 1 for n in suite.servers}, {},
                          estimates, {g.gate: True for g in failing})


# -- on-suspicion-r1 -------------------------------------------------------------------------
R1_STAGE_ALPHA_SHARE = 0.5  # "halves": each of the (at most two) stages at half the cell alpha
_DESIGN = GateDesign()


def unchecked_history_gate(gate: str, config: str, concurrency: int, launches: Sequence[Sequence[float]],
                           history: Sequence[Sequence[float]], *, tolerance: float, prior_between_sd: float,
                           alpha_cell: float, rule: str, design: GateDesign = _DESIGN,
                           prior_day_sd: float | None = None, stage: int = 1) -> GateResult:
    """``gates.launch_history_gate`` with the prior never checked against the cell's history."""
    runs = [v for launch in launches for v in launch]
    if len(runs) < 2:
        return GateResult(gate, config, concurrency, ERROR,
                          f"{gate} {config} c{concurrency}: only {len(runs)} samples; need >= 2")
    day = design.prior_day_sd if prior_day_sd is None else prior_day_sd
    est = compare_launches(launches, history, threshold=1 - tolerance, prior_between_sd=prior_between_sd,
                           prior_day_sd=min(day, prior_between_sd), confidence=gate_confidence(alpha_cell), rule=rule,
                           prior_dof=design.prior_dof, pass_confidence=design.pass_confidence)
    verdict = est.outcome()
    unit = " tok/s" if gate == "throughput" else ""
    base_mean = _mean([v for s in history for v in s])
    n_l = sum(1 for launch in launches if len(launch))
    msg = verdict_line(gate, config, concurrency, unit, _mean(runs), base_mean,
                       f"baseline ({len(history)} session{'s' if len(history) != 1 else ''})", est,
                       f"tolerance {tolerance:.0%}, rule {rule}" + (f", {n_l} launches" if n_l > 1 else ""), verdict)
    return GateResult(gate, config, concurrency, verdict, msg, est, _mean(runs), base_mean, alpha=alpha_cell,
                      launches=n_l, stage=stage)


def unchecked_must_win_gate(config: str, concurrency: int, spec: Sequence[Sequence[float]],
                            reference: Sequence[Sequence[float]], reference_name: str, *, must_win: bool,
                            tol: Tolerances, alpha_cell: float, design: GateDesign = _DESIGN, stage: int = 1,
                            pair_histories: tuple[Sequence[Sequence[float]], Sequence[Sequence[float]]] | None = None
                            ) -> GateResult:
    """``gates.must_win_gate`` against the reference's launches in this session, with the prior
    never checked against the pair's histories."""
    threshold = 1 + tol.speculation_min_gain
    own = pair_spread(*pair_histories) if pair_histories is not None else None
    est = compare_launch_sets(spec, reference, threshold=threshold, prior_between_sd=tol.prior_between_sd,
                              prior_day_sd=min(design.prior_day_sd, tol.prior_between_sd),
                              confidence=gate_confidence(alpha_cell), rule="significant", spread=own,
                              prior_dof=design.prior_dof, pass_confidence=design.pass_confidence)
    verdict = est.outcome()
    where = "must win here" if must_win else "report only"
    runs, ref_runs = [v for launch in spec for v in launch], [v for launch in reference for v in launch]
    n_l = sum(1 for launch in spec if len(launch))
    msg = verdict_line("speculation", config, concurrency, " tok/s", _mean(runs), _mean(ref_runs), reference_name, est,
                       f"fails if confidently below {threshold:.2f}x ({where})", verdict)
    return GateResult("speculation", config, concurrency, verdict, msg, est, _mean(runs), _mean(ref_runs),
                      enforced=must_win, alpha=alpha_cell, launches=n_l, stage=stage)


def _halves_failures(final: Sequence[GateResult], tol: Tolerances, design: GateDesign) -> list[GateResult]:
    """Per-cell verdicts, and Holm at half the family alpha (union bound over two stages)."""
    return [r for r in final if counts_as_failure(r, tol)] + holm_failures(final, tol.family_alpha * R1_STAGE_ALPHA_SHARE)


R1_RULES = DecisionRules(history_gate=unchecked_history_gate, must_win_gate=unchecked_must_win_gate, step_time=False,
                         stage_alpha_share=R1_STAGE_ALPHA_SHARE, failures=_halves_failures)

__all__ = ["MIN_SESSIONS_FOR_SPREAD", "R1_RULES", "compare_to_history", "decide_legacy_session", "history_gate",
           "speculation_gate", "unchecked_history_gate", "unchecked_must_win_gate"]
