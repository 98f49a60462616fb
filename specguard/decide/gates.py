"""The three gates, each a one-line verdict with its evidence.

- throughput: this session's tok/s against the stored baseline history of the cell;
- accept length: the same on per-run accept lengths (ratio of sums within each run);
- speculation: a speculative configuration against its non-speculative reference, measured in
  this session when both are selected, else against the reference's stored baseline.

Per-cell tests use alpha / m (m gate cells in the session); the session end applies Holm to all
p-values, which can only add failures (see `holm_failures`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from specguard.config import Tolerances
from specguard.decide.stats import FAIL, INCONCLUSIVE, PASS, RatioEstimate, compare_sessions, compare_to_history, holm_adjust

SKIP, ERROR = "skip", "error"


@dataclass
class GateResult:
    gate: str  # "throughput", "accept_length", "speculation"
    config: str
    concurrency: int
    verdict: str  # pass / fail / inconclusive / skip / error
    message: str
    estimate: RatioEstimate | None = None
    current: float | None = None  # mean of this session's samples
    reference: float | None = None  # mean of what it was compared with
    enforced: bool = True  # speculation gate outside the must-win range only reports
    alpha: float | None = None

    @property
    def failed(self) -> bool:
        return self.verdict == FAIL and self.enforced


def _mean(xs: Sequence[float]) -> float:
    return sum(xs) / len(xs) if xs else math.nan


def gate_confidence(alpha_cell: float) -> float:
    """Two-sided CI level whose upper bound is the one-sided test at alpha_cell."""
    return 1 - 2 * alpha_cell


def _line(gate: str, config: str, c: int, unit: str, cur: float, ref: float, ref_name: str,
          est: RatioEstimate, tol_text: str, verdict: str) -> str:
    ci = f"{est.confidence * 100:.2f}% CI"
    return (f"{gate} {config} c{c}: {cur:.4g}{unit} vs {ref_name} {ref:.4g}{unit}, ratio {est.describe()} ({ci}, "
            f"between-launch sd {est.between_sd:.1%} from {est.between_source}), {tol_text} -> {verdict.upper()}")


def history_gate(gate: str, config: str, concurrency: int, current: Sequence[float],
                 history: Sequence[Sequence[float]], *, tolerance: float, prior_between_sd: float,
                 alpha_cell: float, rule: str) -> GateResult:
    """Fail iff current/baseline is significantly below 1 and estimated below 1 - tolerance
    (rule "significant"), or its whole interval is below 1 - tolerance ("beyond-tolerance")."""
    if len(current) < 2:
        return GateResult(gate, config, concurrency, ERROR, f"{gate} {config} c{concurrency}: only {len(current)} samples; need >= 2")
    est = compare_to_history(current, history, threshold=1 - tolerance, prior_between_sd=prior_between_sd,
                             confidence=gate_confidence(alpha_cell), rule=rule)
    verdict = est.outcome()
    unit = " tok/s" if gate == "throughput" else ""
    base_mean = _mean([v for s in history for v in s])
    msg = _line(gate, config, concurrency, unit, _mean(current), base_mean,
                f"baseline ({len(history)} session{'s' if len(history) != 1 else ''})", est,
                f"tolerance {tolerance:.0%}, rule {rule}", verdict)
    return GateResult(gate, config, concurrency, verdict, msg, est, _mean(current), base_mean, alpha=alpha_cell)


def speculation_gate(config: str, concurrency: int, spec: Sequence[float], reference: Sequence[float],
                     reference_name: str, *, must_win: bool, tol: Tolerances, alpha_cell: float) -> GateResult:
    """Speculative vs reference tok/s at one concurrency; enforced only where it must win."""
    threshold = 1 + tol.speculation_min_gain
    est = compare_sessions(spec, reference, threshold=threshold, launch_sd=tol.prior_between_sd,
                           confidence=gate_confidence(alpha_cell))
    verdict = est.outcome()
    where = "must win here" if must_win else "report only"
    msg = _line("speculation", config, concurrency, " tok/s", _mean(spec), _mean(reference), reference_name, est,
                f"must not be below {threshold:.2f}x ({where})", verdict)
    return GateResult("speculation", config, concurrency, verdict, msg, est, _mean(spec), _mean(reference),
                      enforced=must_win, alpha=alpha_cell)


def counts_as_failure(result: GateResult, tol: Tolerances) -> bool:
    if not result.enforced:
        return False
    if result.verdict in (FAIL, ERROR):
        return True
    return result.verdict == INCONCLUSIVE and tol.inconclusive == "fail"


def holm_failures(results: Sequence[GateResult], family_alpha: float) -> list[GateResult]:
    """Enforced results that Holm rejects at the family level but the per-cell test passed
    (rejected = significantly below the tested ratio, with the estimate beyond the threshold)."""
    tested = [r for r in results if r.estimate is not None and r.enforced]
    adjusted = holm_adjust([r.estimate.p_value for r in tested])
    return [r for r, p in zip(tested, adjusted)
            if p < family_alpha and r.estimate.ratio < r.estimate.threshold and r.verdict != FAIL]


def crossover(ratios: dict[int, RatioEstimate]) -> tuple[int | None, int | None, str]:
    """Where speculation stops paying: (last level it confidently wins, first level it confidently
    loses, text). The crossover lies between them."""
    levels = sorted(ratios)
    wins = [c for c in levels if ratios[c].low > 1.0]
    losses = [c for c in levels if ratios[c].high < 1.0]
    first_loss = next((c for c in levels if ratios[c].ratio < 1.0), None)
    if first_loss is None:
        return (levels[-1] if levels else None, None, "speculation is ahead at every measured concurrency")
    below = [c for c in levels if c < first_loss]
    if not below:
        return (None, first_loss, f"speculation is behind from the first measured concurrency ({first_loss})")
    last_win = below[-1]
    certainty = "confidently" if last_win in wins and first_loss in losses else "not confidently"
    return (last_win, first_loss, f"crossover between c{last_win} and c{first_loss} ({certainty} resolved)")


__all__ = ["ERROR", "FAIL", "INCONCLUSIVE", "PASS", "SKIP", "GateResult", "counts_as_failure", "crossover",
           "history_gate", "holm_failures", "speculation_gate"]
