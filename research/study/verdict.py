"""A simulated session's verdict, as the study counts it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from research.study.simulate import Launch
from specguard.decide.crossover import CrossoverEstimate
from specguard.decide.result import GateResult
from specguard.decide.stats import RatioEstimate
from specguard.labels import SPECULATION


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


def later_runs(launch: Launch, repeats: int) -> Launch:
    """A launch's runs after its first ``repeats`` per level, up to ``repeats`` more: the same
    server measured again (session_decisions ``_remeasure``); empty where none were simulated."""
    return {c: (tok[repeats:2 * repeats], acc[repeats:2 * repeats], rate[repeats:2 * repeats])
            for c, (tok, acc, rate) in launch.items()}


def speculation_ratios(results: Sequence[GateResult]) -> dict[str, dict[int, RatioEstimate]]:
    """Speculative configuration -> level -> its speculation gate's estimate."""
    out: dict[str, dict[int, RatioEstimate]] = {}
    for r in results:
        if r.gate.gate == SPECULATION and r.estimate is not None:
            out.setdefault(r.config, {})[r.level.value] = r.estimate
    return out
