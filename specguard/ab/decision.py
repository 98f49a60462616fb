"""The A/B decision of one cell's gate, made after every round as Chromium Pinpoint does: the two
builds are "different", "same" (within the tolerance), or more rounds are needed; at the budget
an open cell ends "undecided" (docs/ab.md).

Everything is B over A on a log scale, oriented so that a ratio below 1 is worse (tok/s, accept
length, steps per second, speculation's tok/s over its reference's). The statistics are
``decide.stats.compare_launch_sets`` with the launch as the unit of replication:

- **different**: B/A is significantly away from 1 (two-sided) at the cell's share of the family
  alpha. The cell is looked at after every round from ``min_rounds`` on, so each look spends an
  equal share of it (Bonferroni over the looks): a cell's p-value is the number of possible looks
  x its smallest look's, valid however many looks it took. Weighted Holm over every cell of the
  run at the family alpha then adds the "different" cells the per-cell split misses.
- **same**: an equivalence test (TOST): the interval at ``pass_confidence`` (one-sided at each
  end) lies within 1 +- tolerance.

No decision before each build has ``min_rounds`` (2) launches: with one launch each the
launch-to-launch spread is the declared prior alone, and a prior below the machine's real spread
would make false decisions either way. From two launches on, the launches' own spread is pooled
with the prior and replaces a prior it contradicts (``stats.checked_prior``), as a cell's stored
history does in the gate. A decided cell keeps its decision and asks for no more rounds.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from specguard.decide.stats import RatioEstimate, compare_launch_sets, history_spread, holm_adjust, pool_spreads

DIFFERENT, SAME, UNDECIDED, ERROR = "different", "same", "undecided", "error"
WORSE, BETTER = "worse", "better"
BUILD_A, BUILD_B = "A", "B"


def abba_order(round_no: int) -> tuple[str, str]:
    """The builds' order in a round (from 1): A B, B A, A B, ... so rounds 1-4 launch A B B A A B
    B A, and a drift over the run (a warming machine) weighs on both builds alike."""
    if round_no < 1:
        raise ValueError(f"rounds count from 1, got {round_no}")
    return (BUILD_A, BUILD_B) if round_no % 2 == 1 else (BUILD_B, BUILD_A)


@dataclass(frozen=True)
class GateSpec:
    """How one gate is decided: its tolerance, the declared launch-to-launch spread of its values
    (log scale), its weight in the family, and ``inverted`` for a gate whose values are rates of
    what the table shows (step time: decided on steps per second, shown in ms)."""

    gate: str
    tolerance: float
    prior_sd: float
    weight: float
    inverted: bool = False


@dataclass(frozen=True)
class Look:
    """One look at a cell: B/A after ``launches`` launches of each build."""

    round_no: int
    launches: int
    estimate: RatioEstimate
    p_two_sided: float

    @property
    def pass_high(self) -> float:
        """The equivalence interval's upper end: symmetric to ``pass_low`` on the log scale."""
        low = self.estimate.pass_low
        assert low is not None  # every look asks compare_launch_sets for it
        return self.estimate.ratio ** 2 / low


@dataclass
class GateCell:
    """One gate of one cell (configuration x level) through the rounds."""

    config: str
    level: int
    spec: GateSpec
    alpha: float = 0.0  # its share of the family alpha (weighted Bonferroni)
    looks: list[Look] = field(default_factory=list)
    decision: str = UNDECIDED
    decided_round: int | None = None
    decided_look: Look | None = None
    p_holm: float | None = None
    error: str | None = None

    @property
    def gate(self) -> str:
        return self.spec.gate

    @property
    def open(self) -> bool:
        """Still asks for rounds: undecided, and measurable."""
        return self.decision == UNDECIDED and self.error is None

    def p_adjusted(self, looks: int) -> float | None:
        """Bonferroni over the looks: the looks it could take x its smallest two-sided p (at most 1)."""
        if not self.looks:
            return None
        return min(1.0, looks * min(look.p_two_sided for look in self.looks))

    def best_look(self) -> Look | None:
        """The look whose p-value is the cell's (the smallest); the latest on ties."""
        if not self.looks:
            return None
        return min(reversed(self.looks), key=lambda look: look.p_two_sided)

    def shown_look(self) -> Look | None:
        """The look the table shows: the deciding one, else the latest."""
        return self.decided_look or (self.looks[-1] if self.looks else None)

    def direction(self) -> str | None:
        """"worse" or "better" for a "different" cell (a ratio below 1 is worse), else None."""
        if self.decision != DIFFERENT or self.decided_look is None:
            return None
        return WORSE if self.decided_look.estimate.ratio < 1 else BETTER


def look_at(a: Sequence[Sequence[float]], b: Sequence[Sequence[float]], spec: GateSpec, *, round_no: int,
            alpha_look: float, pass_confidence: float, prior_dof: float) -> Look:
    """B/A from each build's launches (one list of run values per launch). Same machine, same
    hours: no day part (prior_day_sd 0), the whole declared spread is the launches' own. The
    launches' spread within each build (L - 1 dof each) checks the prior and replaces it where
    they contradict it (``stats.checked_prior``)."""
    own = pool_spreads([history_spread(a), history_spread(b)])
    if own is not None:
        own = replace(own, source="both builds' launches")
    est = compare_launch_sets(b, a, threshold=1 - spec.tolerance, prior_between_sd=spec.prior_sd, prior_day_sd=0.0,
                              confidence=1 - alpha_look, rule="significant", prior_dof=prior_dof,
                              pass_confidence=pass_confidence, pool=own)
    # est.p_value is one-sided (small: B below A); "different" is either way
    p_two = min(1.0, 2 * min(est.p_value, 1 - est.p_value))
    return Look(round_no, min(len(a), len(b)), est, p_two)


def shown_ratio(look: Look, spec: GateSpec) -> tuple[float, float, float]:
    """(ratio, low, high) as the table shows it: the equivalence interval (at pass confidence),
    of step time itself for an inverted gate."""
    est = look.estimate
    low = est.pass_low if est.pass_low is not None else est.low
    high = look.pass_high
    if spec.inverted:
        return 1 / est.ratio, 1 / high, 1 / low
    return est.ratio, low, high


def equivalent(look: Look, spec: GateSpec) -> bool:
    """"Same": the whole equivalence interval of what the table shows within 1 +- tolerance."""
    _ratio, low, high = shown_ratio(look, spec)
    return low >= 1 - spec.tolerance and high <= 1 + spec.tolerance


@dataclass(frozen=True)
class Budget:
    """The statistics of a run: family alpha, pass confidence, the prior's weight, the rounds."""

    family_alpha: float
    pass_confidence: float
    prior_dof: float
    max_rounds: int
    min_rounds: int = 2  # launches per build before any decision (at most max_rounds)

    @property
    def first_look(self) -> int:
        """The launches per build of a cell's first look."""
        return max(1, min(self.min_rounds, self.max_rounds))

    @property
    def looks(self) -> int:
        """Looks a cell can take: one per round from the first look to the budget."""
        return self.max_rounds - self.first_look + 1

    def alpha_look(self, cell: GateCell) -> float:
        return cell.alpha / self.looks


def set_alphas(cells: Sequence[GateCell], family_alpha: float) -> None:
    """Weighted Bonferroni: each cell gets family_alpha x its weight / the weights' sum (fixed
    before any data, from what is measured)."""
    total = sum(c.spec.weight for c in cells)
    for c in cells:
        c.alpha = family_alpha * c.spec.weight / total if total > 0 else family_alpha


def add_look(cell: GateCell, a: Sequence[Sequence[float]], b: Sequence[Sequence[float]], round_no: int,
             budget: Budget) -> None:
    """Look at an open cell again with its launches so far, once both builds have
    ``budget.first_look`` launches; a build without values makes the cell an error."""
    a_runs, b_runs = [list(x) for x in a if x], [list(x) for x in b if x]
    if not a_runs or not b_runs:
        missing = "A" if not a_runs else "B"
        cell.error = f"{cell.gate} {cell.config}: build {missing} has no {cell.gate} values"
        return
    if any(v <= 0 or not math.isfinite(v) for x in (*a_runs, *b_runs) for v in x):
        cell.error = f"{cell.gate} {cell.config}: a value is not positive and finite"
        return
    if min(len(a_runs), len(b_runs)) < budget.first_look:
        return
    cell.looks.append(look_at(a_runs, b_runs, cell.spec, round_no=round_no, alpha_look=budget.alpha_look(cell),
                              pass_confidence=budget.pass_confidence, prior_dof=budget.prior_dof))


def _p_or_one(p: float | None) -> float:
    return 1.0 if p is None else p


def decide_round(cells: Sequence[GateCell], round_no: int, budget: Budget) -> None:
    """After a round: weighted Holm over every cell's p-value makes open cells "different"
    ("different" wins over "same": a significant change within the tolerance is still a change);
    then an open cell whose latest look is this round's and is equivalent becomes "same"."""
    _holm_step(cells, round_no, budget)
    _equivalence_step(cells, round_no)


def _holm_step(cells: Sequence[GateCell], round_no: int, budget: Budget) -> None:
    """Weighted Holm (weights: the cells' alphas) over every looked-at cell's Bonferroni-over-
    looks p-value, decided ones included (they are in the family); only open cells change."""
    tested = [c for c in cells if c.looks and c.error is None]
    if not tested:
        return
    p_values = [_p_or_one(c.p_adjusted(budget.looks)) for c in tested]
    for cell, p in zip(tested, holm_adjust(p_values, [c.alpha for c in tested])):
        cell.p_holm = p
        if cell.open and p < budget.family_alpha:
            cell.decision, cell.decided_round, cell.decided_look = DIFFERENT, round_no, cell.best_look()


def _equivalence_step(cells: Sequence[GateCell], round_no: int) -> None:
    for cell in cells:
        latest = cell.looks[-1] if cell.looks else None
        if cell.open and latest is not None and latest.round_no == round_no and equivalent(latest, cell.spec):
            cell.decision, cell.decided_round, cell.decided_look = SAME, round_no, latest


__all__ = ["BETTER", "BUILD_A", "BUILD_B", "DIFFERENT", "ERROR", "SAME", "UNDECIDED", "WORSE", "Budget", "GateCell",
           "GateSpec", "Look", "abba_order", "add_look", "decide_round", "equivalent", "look_at", "set_alphas",
           "shown_ratio"]
