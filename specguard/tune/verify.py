"""`specguard tune --verify`: one session that launches the tuned adaptive config beside SGLang's
default one, the reference and each level's best fixed setting, judged per level with the gates'
statistics."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from specguard.config import Suite, Tolerances
from specguard.decide.gates import gate_confidence
from specguard.decide.stats import RatioEstimate, compare_sessions
from specguard.labels import Verdict
from specguard.tune.grid import ADAPTIVE, FIXED, REFERENCE, Setting, geometric_mean
from specguard.tune.race import Ledger, RacePlan, Runner


@dataclass(frozen=True)
class Contenders:
    """What the verify session measures beside the reference and SGLang's default adaptive config:
    the tuned adaptive config, each level's best fixed setting from the search (``choice``), and
    ``single``, the speculative fixed setting with the best total in the search, measured at
    every level too, so the tuned config's total can be set against the one fixed speculative
    setting a deployment would otherwise run everywhere."""

    tuned: Setting
    choice: dict[int, Setting | None]
    single: Setting | None = None

    def best_at(self, c: int) -> Setting:
        return self.choice.get(c) or Setting(REFERENCE)


def verify(runner: Runner, levels: Sequence[int], plan: RacePlan, suite: Suite,
           contenders: Contenders) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """One session: the contenders, the default adaptive config and the reference, judged per
    level with the gates' statistics (two enforced tests per level)."""
    tol = suite.tolerances
    ledger = _verify_session(runner, levels, plan, contenders)
    alpha_cell = tol.family_alpha / (2 * len(levels))
    conf = gate_confidence(alpha_cell)
    rows: list[dict[str, Any]] = []
    failed: list[int] = []
    for c in levels:
        row = _verify_level(ledger, c, contenders, tol, plan, conf)
        if any(row["verdicts"][k].get("verdict") in (Verdict.FAIL, Verdict.ERROR)
               for k in ("vs_best_fixed", "vs_no_speculation")):
            failed.append(c)
        rows.append(row)
    totals = _verify_totals(ledger, levels, rows)
    return rows, {"totals_tok_s": totals.pop("totals_tok_s"), "confidence": conf, "alpha_cell": alpha_cell,
                  "failed_levels": failed, **totals, "runs": ledger.runs, "launches": ledger.launches,
                  "wall_s": round(ledger.wall_s, 1), "failed_cells": {s.name: why for s, why in ledger.failed.items()}}


def _verify_session(runner: Runner, levels: Sequence[int], plan: RacePlan, contenders: Contenders) -> Ledger:
    """The verify session's launches: tuned, default adaptive, reference at every level; each
    chosen fixed setting where it was chosen; ``single`` wherever the search left it unmeasured."""
    ledger = Ledger()
    tuned, choice, single = contenders.tuned, contenders.choice, contenders.single
    reference, default = Setting(REFERENCE), Setting(ADAPTIVE, adaptive_config="default")
    for s in (tuned, default, reference):
        ledger.measure(runner, s, levels, plan.warmup, plan.repeats)
    for s in dict.fromkeys(v for v in choice.values() if v is not None and v.kind == FIXED):
        ledger.measure(runner, s, [c for c in levels if choice.get(c) == s], plan.warmup, plan.repeats)
    if single is not None:
        missing = [c for c in levels if not ledger.tok_s(single, c)]
        if missing:
            ledger.measure(runner, single, missing, plan.warmup, plan.repeats)
    return ledger


def _winner(e: RatioEstimate, rival: str) -> str:
    return "tuned" if e.low > 1 else rival if e.high < 1 else "tie (within noise)"


def _verify_level(ledger: Ledger, c: int, contenders: Contenders, tol: Tolerances, plan: RacePlan,
                  conf: float) -> dict[str, Any]:
    """One level of the verify session: the tuned config against the best fixed setting (must
    not be worse beyond the tolerance), no speculation (must win) and the default adaptive config."""
    best, tuned = contenders.best_at(c), contenders.tuned
    reference, default = Setting(REFERENCE), Setting(ADAPTIVE, adaptive_config="default")

    def est(a: Setting, b: Setting, threshold: float, rule: str) -> RatioEstimate | None:
        if not ledger.tok_s(a, c) or not ledger.tok_s(b, c):
            return None
        return compare_sessions(ledger.tok_s(a, c), ledger.tok_s(b, c), threshold=threshold, launch_sd=plan.launch_sd,
                                confidence=conf, rule=rule)

    e_fixed = est(tuned, best, 1 - tol.throughput, tol.fail_rule)
    e_ref = est(tuned, reference, 1 + tol.speculation_min_gain, "beyond-tolerance")
    e_def = est(tuned, default, 1.0, "beyond-tolerance")
    row: dict[str, Any] = {
        "concurrency": c, "tuned_tok_s": _r(ledger, tuned, c), "default_adaptive_tok_s": _r(ledger, default, c),
        "best_fixed_tok_s": _r(ledger, best, c), "best_fixed_setting": best.name,
        "no_speculation_tok_s": _r(ledger, reference, c)}
    verdicts: dict[str, dict[str, Any]] = {}
    for key, e in (("vs_best_fixed", e_fixed), ("vs_no_speculation", e_ref), ("vs_default_adaptive", e_def)):
        if e is None:
            verdicts[key] = {"verdict": "error", "detail": "not measured"}
            continue
        verdicts[key] = {"ratio": round(e.ratio, 4), "low": round(e.low, 4), "high": round(e.high, 4),
                         "threshold": e.threshold, "verdict": e.outcome()}
    if e_def is not None:
        verdicts["vs_default_adaptive"]["winner"] = _winner(e_def, "default adaptive")
    if e_fixed is not None:
        verdicts["vs_best_fixed"]["winner"] = _winner(e_fixed, best.name)
    row["verdicts"] = verdicts
    return row


def _verify_totals(ledger: Ledger, levels: Sequence[int], rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Totals over the levels, and the tuned config's gain over each comparator."""
    sums = {k: None if any(r[k] is None for r in rows) else round(sum(r[k] for r in rows), 2)
            for k in ("tuned_tok_s", "default_adaptive_tok_s", "best_fixed_tok_s", "no_speculation_tok_s")}
    both = [r for r in rows if r["tuned_tok_s"] and r["default_adaptive_tok_s"]]
    everywhere = [(s, sum(ledger.mean(s, c) for c in levels)) for s in ledger_settings(ledger)
                  if s.kind != ADAPTIVE and all(ledger.tok_s(s, c) for c in levels)]
    best_single = max(everywhere, key=lambda x: x[1], default=None)
    best_spec = max(((s, t) for s, t in everywhere if s.kind == FIXED), key=lambda x: x[1], default=None)

    def against(best: tuple[Setting, float] | None) -> dict[str, Any] | None:
        return None if best is None else {"setting": best[0].name, "tok_s": round(best[1], 2),
                                          "tuned_over_it": _gain(sums["tuned_tok_s"], best[1])}

    return {"totals_tok_s": sums,
            "tuned_over_default_adaptive": _gain(sums["tuned_tok_s"], sums["default_adaptive_tok_s"]),
            # every level weighs the same here (the total is dominated by the highest levels)
            "tuned_over_default_adaptive_per_level_geomean": round(geometric_mean(
                [r["tuned_tok_s"] / r["default_adaptive_tok_s"] for r in both]) - 1, 4) if both else None,
            "tuned_over_no_speculation": _gain(sums["tuned_tok_s"], sums["no_speculation_tok_s"]),
            "best_single_fixed_measured_everywhere": against(best_single),
            # the verify record keeps no speculation apart from the fixed settings: this is the
            # best one speculative setting run at every level
            "best_single_fixed_speculative_measured_everywhere": against(best_spec)}


def ledger_settings(ledger: Ledger) -> list[Setting]:
    return list(dict.fromkeys(s for s, _ in ledger.cells))


def _r(ledger: Ledger, s: Setting, c: int) -> float | None:
    return round(ledger.mean(s, c), 2) if ledger.tok_s(s, c) else None


def _gain(a: float | None, b: float | None) -> float | None:
    return round(a / b - 1, 4) if a and b else None
