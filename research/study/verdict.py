"""A simulated session's verdict, as the study counts it, and the rules its cells are decided with."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from research.study.simulate import Launch
from specguard.config import Tolerances
from specguard.decide.crossover import CrossoverEstimate
from specguard.decide.gates import GateDesign, GateResult, final_failures, launch_history_gate, must_win_gate
from specguard.decide.stats import RatioEstimate


@dataclass
class SessionVerdict:
    failed: bool
    failing: list[GateResult]
    inconclusive: int  # enforced gate results that were inconclusive
    enforced: int
    crossovers: dict[str, int | None]  # speculative configuration -> first level where it loses
    launches: dict[str, int] = field(default_factory=dict)  # configuration -> launches used
    relaunched: dict[str, list[str]] = field(default_factory=dict)  # configuration -> why (sequential design)
    crossover_estimates: dict[str, CrossoverEstimate] = field(default_factory=dict)
    gates_failed: dict[str, bool] = field(default_factory=dict)  # gate -> some cell of it failed
    # "config cN" -> the half a speculative cell's failing or inconclusive tok/s verdict names
    # ("engine", "drafter", "both" or ""; gates.attribution), from each test's final decision
    attributions: dict[str, str] = field(default_factory=dict)


def cut_repeats(launch: Launch, repeats: int) -> Launch:
    """A launch with its first ``repeats`` runs per level (the grid point's repeats)."""
    return {c: (tok[:repeats], acc[:repeats], rate[:repeats]) for c, (tok, acc, rate) in launch.items()}


def speculation_ratios(results: Sequence[GateResult]) -> dict[str, dict[int, RatioEstimate]]:
    """Speculative configuration -> level -> its speculation gate's estimate."""
    out: dict[str, dict[int, RatioEstimate]] = {}
    for r in results:
        if r.gate == "speculation" and r.estimate is not None:
            out.setdefault(r.config, {})[r.concurrency] = r.estimate
    return out


def _final_failures(final: Sequence[GateResult], tol: Tolerances, design: GateDesign) -> list[GateResult]:
    return final_failures(final, [], tol, design)


@dataclass(frozen=True)
class DecisionRules:
    """The functions a design's cells are decided with: the gates' own by default; a retired
    design brings its own (legacy.py)."""

    history_gate: Callable[..., GateResult] = launch_history_gate
    must_win_gate: Callable[..., GateResult] = must_win_gate
    # the engine's step time and the attribution of a speculative cell's tok/s verdict (issue 23);
    # False for designs that predate them
    step_time: bool = True
    stage_alpha_share: float = 1.0  # of each test's alpha, spent at every stage
    # the session's failures from each test's final decision
    failures: Callable[[Sequence[GateResult], Tolerances, GateDesign], list[GateResult]] = _final_failures
