"""The A/B decision of one cell's gate, made after every round as Chromium Pinpoint does: the two
builds are "different" (worse, or better), "same" (within the tolerance), or more rounds are
needed; at the budget an open cell ends "undecided" (docs/ab.md).

Everything is B over A on a log scale, oriented so that a ratio below 1 is worse (tok/s, accept
length, steps per second, speculation's tok/s over its reference's). The statistics are
``decide.stats.compare_launch_sets`` with the launch as the unit of replication:

- **the launch spread** is the run's own: both builds' launches of every *other* launched
  configuration at this gate (``run_spread``: the variance of a launch's location between its
  launches, per level, pooled; L - 1 dof per configuration and build), combined with this cell's
  own launches by ``compare_launch_sets``. The suite's prior is not plugged in (a prior below the
  machine's spread is what makes false decisions); ``prior_check`` says whether the run's spread
  contradicts it. The day part of a spread cancels within one interleaved run.
- **different (worse)** and **different (better)** are two one-sided tests, each direction its own
  family at the family alpha: exit 1 is about "worse" alone, so "worse" is not charged for the
  other side. Within a cell the alpha is spent over the looks by the O'Brien-Fleming spending
  function of Lan and DeMets (``look_shares``): almost nothing at the first looks, most at the last,
  each look's increment tested by Bonferroni (valid whatever the looks' correlation). A cell's
  p-value is min over looks of p / its look's share.
- **closed testing over a configuration's levels** (``decide_round``): a configuration's cells at
  one gate form a group whose alpha is the sum of theirs. The group's hypothesis "no level
  changed" is tested by a test pooled over its levels (each launch's log runs averaged over the
  levels, which share the launch's offset; a model of every launch of the run at the gate that
  takes out the machine's drift, ``trend.trend_estimate``) at ``POOLED_SHARE`` of the group's alpha, or by its
  smallest cell p at the rest (Bonferroni); a cell is different when its group's test rejects and its own
  p, times the cells of the group less one, is below the group's alpha (every smaller
  intersection tested by Bonferroni). A rejected group is itself a decision ("worse at one level
  or more", on every level's evidence) even where no single level is.
- **same**: an equivalence test (TOST): the interval at ``pass_confidence`` (one-sided at each
  end) lies within 1 +- tolerance, at every look that has not found a difference: its
  multiplicity is the looks' (a cell that looks "same" once is kept "same"; docs/ab.md).

No decision before each build has ``min_rounds`` (2) launches. A decided cell keeps its decision
and asks for no more rounds.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import numpy as np
from scipy import special

from specguard.ab.trend import Contrast, LaunchPoint, trend_estimate
from specguard.decide.prior import PRIOR_CHECK_P, HistoryOf, Origin, Prior, SpreadEstimate
from specguard.decide.stats import Criterion, RatioEstimate, Rule, compare_launch_sets

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
    """One look at a cell: B/A after ``launches`` launches of each build; ``p_worse`` is the
    one-sided p of "B is not below A" (small: B worse)."""

    round_no: int
    launches: int
    estimate: RatioEstimate
    p_worse: float

    def p(self, direction: str) -> float:
        """The one-sided p of no change the ``direction`` way ("worse" or "better")."""
        return self.p_worse if direction == WORSE else 1 - self.p_worse

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
    p_closed: float | None = None  # the closed test's adjusted p, deciding direction ("worse" while undecided)
    error: str | None = None

    @property
    def gate(self) -> str:
        return self.spec.gate

    @property
    def open(self) -> bool:
        """Still asks for rounds: undecided, and measurable."""
        return self.decision == UNDECIDED and self.error is None

    def p_adjusted(self, budget: Budget, direction: str = WORSE) -> float | None:
        """The cell's p-value the ``direction`` way over its looks so far: min over looks of the
        look's one-sided p / its share of the cell's alpha (``look_shares``), at most 1."""
        return _p_over_looks(self.looks, budget, direction)

    def best_look(self, budget: Budget, direction: str = WORSE) -> Look | None:
        """The look whose p-value is the cell's the ``direction`` way; the latest on ties."""
        return _best_look(self.looks, budget, direction)

    def shown_look(self) -> Look | None:
        """The look the table shows: the deciding one, else the latest."""
        return self.decided_look or (self.looks[-1] if self.looks else None)

    def direction(self) -> str | None:
        """"worse" or "better" for a "different" cell (a ratio below 1 is worse), else None."""
        if self.decision != DIFFERENT or self.decided_look is None:
            return None
        return WORSE if self.decided_look.estimate.ratio < 1 else BETTER


def _p_over_looks(looks: Sequence[Look], budget: Budget, direction: str) -> float | None:
    if not looks:
        return None
    shares = look_shares(budget)
    return min(1.0, min(look.p(direction) / shares[look.launches] for look in looks))


def _best_look(looks: Sequence[Look], budget: Budget, direction: str) -> Look | None:
    if not looks:
        return None
    shares = look_shares(budget)
    return min(reversed(looks), key=lambda look: look.p(direction) / shares[look.launches])


# The pooled test's share of a group's alpha; its smallest cell has the rest. A drop at every level
# is what a build change usually brings (1000 simulated runs, eagle3 tok/s -3 %, seed 11, while the
# pooled test still used compare_launch_sets: caught 0.83 with the whole alpha pooled, 0.81 at 0.8,
# 0.78 at 0.5; docs/ab.md); the rest keeps a large drop at one level decidable when the pooled test
# dilutes it (at 0.2 of a cell's Bonferroni alpha).
POOLED_SHARE = 0.8


@dataclass
class GateGroup:
    """A configuration's cells at one gate (one per level), tested together first: closed testing
    (``decide_round``). ``looks`` are of the test pooled over the levels."""

    config: str
    gate: str
    cells: list[GateCell]
    looks: list[Look] = field(default_factory=list)
    decision: str = UNDECIDED
    direction: str | None = None  # "worse" or "better" once different
    decided_round: int | None = None
    decided_look: Look | None = None

    @property
    def alpha(self) -> float:
        return sum(c.alpha for c in self.cells)

    @property
    def open(self) -> bool:
        """Still asks for pooled looks: undecided, and every level measurable."""
        return self.decision == UNDECIDED and all(c.error is None for c in self.cells)

    def p_pooled(self, budget: Budget, direction: str = WORSE) -> float | None:
        """The pooled test's p-value the ``direction`` way over its looks (as a cell's)."""
        return _p_over_looks(self.looks, budget, direction)

    def p_closed(self, budget: Budget, direction: str = WORSE) -> float:
        """The p-value of "no level changed the ``direction`` way", to compare with the group's
        alpha: the pooled test at ``POOLED_SHARE`` of it and the smallest cell at the rest
        (Bonferroni); a group of one cell is that cell."""
        cells = [p for c in self.cells if c.error is None and (p := c.p_adjusted(budget, direction)) is not None]
        smallest = min(cells, default=1.0) * len(self.cells)
        if len(self.cells) == 1:
            return min(1.0, smallest)
        return min(1.0, _p_or_one(self.p_pooled(budget, direction)) / POOLED_SHARE, smallest / (1 - POOLED_SHARE))


def run_spread(sets: Sequence[Sequence[Sequence[Sequence[float]]]], names: Sequence[str]) -> SpreadEstimate | None:
    """A gate's launch-to-launch spread in this run: ``sets`` holds, per configuration and build,
    per level, its launches' run values (one list per launch). Per configuration and build, the
    variance of a launch's location (median of its log runs) between its launches, averaged over
    the levels (which share each launch's offset, so together they count as one: L - 1 dof); pooled
    over configurations and builds. It keeps the run-to-run part of a location's variance, which
    ``compare_launch_sets`` counts again: a little conservative."""
    total, dof, launches = 0.0, 0.0, 0
    for levels in sets:
        variances = [float(np.var([np.median(np.log(runs)) for runs in launches], ddof=1))
                     for launches in levels if len(launches) >= 2 and all(len(r) for r in launches)]
        counts = [len(launches) for launches in levels if len(launches) >= 2]
        if not variances:
            continue
        total += float(np.mean(variances)) * (min(counts) - 1)
        dof += min(counts) - 1
        launches += min(counts)
    return SpreadEstimate(total / dof, dof, Origin(HistoryOf.LAUNCHES, launches, tuple(names))) if dof > 0 else None


def prior_check(spread: SpreadEstimate | None, prior_sd: float, p: float = PRIOR_CHECK_P) -> bool | None:
    """Whether the run's launch spread contradicts the declared prior as too small (chi-square,
    one-sided at ``p``, as ``prior.checked_prior``); None without an estimate or a prior."""
    if spread is None or spread.dof <= 0 or prior_sd <= 0:
        return None
    return bool(spread.dof * spread.var / prior_sd**2 > float(special.chdtri(spread.dof, p)))


# The prior's weight in pseudo degrees of freedom: none. A run's own launches (every configuration's,
# ``run_spread``) estimate its launch spread; a prior below the machine's made false decisions.
PRIOR_DOF = 0.0

def look_estimate(a: Sequence[Sequence[float]], b: Sequence[Sequence[float]], spec: GateSpec, *, alpha_look: float,
                  pass_confidence: float, spread: SpreadEstimate | None = None) -> RatioEstimate:
    """B/A from each build's launches (one list of run values per launch). Same machine, same
    hours: no day part. The launch spread is ``spread`` (the other configurations' launches,
    ``run_spread``) combined with both builds' own launches (L - 1 dof each); the prior weighs
    nothing (0 pseudo dof). The interval shown is at 1 - ``alpha_look`` two-sided."""
    est = compare_launch_sets(b, a, Criterion(1 - spec.tolerance, 1 - alpha_look, Rule("significant", pass_confidence)),
                              Prior(spec.prior_sd, dof=PRIOR_DOF), spread=spread)
    return replace(est, between_source=replace(est.between_source, prior=False))


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
    """The statistics of a run: family alpha, pass confidence, the rounds."""

    family_alpha: float
    pass_confidence: float
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
        """The level of the interval a look shows: the cell's alpha at its last look's share."""
        return cell.alpha * look_shares(self)[self.max_rounds]


SHARES_AT = 40  # the spending function's shape is taken at a cell alpha of family alpha / this (default suite: 46)
# Every look keeps at least this share (then all are renormalized): pure O'Brien-Fleming gives the
# first look 0.1 %, so that a 30 % regression took a third round; 5 % costs the last look 4 points.
MIN_LOOK_SHARE = 0.05


@functools.lru_cache(maxsize=64)
def _shares(first: int, last: int, alpha: float) -> dict[int, float]:
    z = float(special.ndtri(1 - alpha / 2))
    spent = {n: 2 * (1 - float(special.ndtr(z / math.sqrt(n / last)))) for n in range(first, last + 1)}
    steps = {n: spent[n] - (spent[n - 1] if n > first else 0.0) for n in spent}
    total = sum(steps.values())
    floored = {n: max(v / total, MIN_LOOK_SHARE) for n, v in steps.items()}
    return {n: v / sum(floored.values()) for n, v in floored.items()}


def look_shares(budget: Budget) -> dict[int, float]:
    """Each look's share of a cell's alpha, by launches per build (first look .. max_rounds): the
    increments of Lan and DeMets' O'Brien-Fleming spending function alpha(t) = 2 - 2 Phi(z_{a/2} /
    sqrt t) at t = launches / max_rounds, normalized to 1, each at least MIN_LOOK_SHARE (fixed
    before any data). At the default budget (looks after 2, 3 and 4 launches, at a cell alpha of
    family alpha / SHARES_AT) 4.8 %, 8.9 % and 86.4 %, where Bonferroni over the looks gave each a
    third."""
    return _shares(budget.first_look, budget.max_rounds, budget.family_alpha / SHARES_AT)


def set_alphas(cells: Sequence[GateCell], family_alpha: float) -> None:
    """Weighted Bonferroni: each cell gets family_alpha x its weight / the weights' sum (fixed
    before any data, from what is measured)."""
    total = sum(c.spec.weight for c in cells)
    for c in cells:
        c.alpha = family_alpha * c.spec.weight / total if total > 0 else family_alpha


def checked_runs(cell: GateCell, a: Sequence[Sequence[float]], b: Sequence[Sequence[float]],
                  budget: Budget) -> tuple[list[list[float]], list[list[float]]] | None:
    """Both builds' launches once each has ``budget.first_look`` of them; None before, and None
    with ``cell.error`` set when a build has no values or a value is not positive and finite."""
    a_runs, b_runs = [list(x) for x in a if x], [list(x) for x in b if x]
    if not a_runs or not b_runs:
        missing = "A" if not a_runs else "B"
        cell.error = f"{cell.gate} {cell.config}: build {missing} has no {cell.gate} values"
        return None
    if any(v <= 0 or not math.isfinite(v) for x in (*a_runs, *b_runs) for v in x):
        cell.error = f"{cell.gate} {cell.config}: a value is not positive and finite"
        return None
    if min(len(a_runs), len(b_runs)) < budget.first_look:
        return None
    return a_runs, b_runs


def add_look(cell: GateCell, a: Sequence[Sequence[float]], b: Sequence[Sequence[float]], round_no: int,
             budget: Budget, spread: SpreadEstimate | None = None) -> None:
    """Look at an open cell again with its launches so far, once both builds have
    ``budget.first_look`` launches (``spread``: the run's, ``run_spread``); a build without values
    makes the cell an error."""
    runs = checked_runs(cell, a, b, budget)
    if runs is None:
        return
    a_runs, b_runs = runs
    est = look_estimate(a_runs, b_runs, cell.spec, alpha_look=budget.alpha_look(cell),
                        pass_confidence=budget.pass_confidence, spread=spread)
    # est.p_value is one-sided: small = B below A
    cell.looks.append(Look(round_no, min(len(a_runs), len(b_runs)), est, est.p_value))


def add_ratio_look(cell: GateCell, points: Sequence[LaunchPoint], reference: str, round_no: int,
                   budget: Budget) -> None:
    """Look at an open speculation cell again (its ratios already ``checked_runs``): its B/A is the
    contrast of its configuration's and ``reference``'s build effects in the run's tok/s model at
    the cell's level (``points``, ``trend.trend_estimate``), whose covariance counts the reference
    launches both share."""
    pair = [p for p in points if p.config in (cell.config, reference)]
    launches = min(sum(p.config == c and p.build_b == b for p in pair) for c in (cell.config, reference)
                   for b in (False, True))
    est = trend_estimate(points, Contrast(cell.config, reference, levels_pooled=False), cell.spec.tolerance,
                         alpha_look=budget.alpha_look(cell), pass_confidence=budget.pass_confidence)
    if est is not None:
        cell.looks.append(Look(round_no, launches, est, est.p_value))


def add_group_look(group: GateGroup, points: Sequence[LaunchPoint], round_no: int, budget: Budget,
                   reference: str | None = None) -> None:
    """Look at an open group again: its test pooled over the levels, on the run's model of every
    launch at its gate (``points``; ``trend.trend_estimate``; a speculation group: every launch's
    tok/s and its ``reference``), once both builds of its configuration have
    ``budget.first_look`` launches and one is new since its last look."""
    own = [p for p in points if p.config == group.config]
    launches = min(sum(not p.build_b for p in own), sum(p.build_b for p in own))
    seen = group.looks[-1].launches if group.looks else 0
    if len(group.cells) < 2 or launches < budget.first_look or launches <= seen:
        return
    alpha_look = group.alpha * POOLED_SHARE * look_shares(budget)[budget.max_rounds]
    est = trend_estimate(points, Contrast(group.config, reference), group.cells[0].spec.tolerance,
                         alpha_look=alpha_look, pass_confidence=budget.pass_confidence)
    if est is not None:
        group.looks.append(Look(round_no, launches, est, est.p_value))


def _p_or_one(p: float | None) -> float:
    return 1.0 if p is None else p


def decide_round(groups: Sequence[GateGroup], round_no: int, budget: Budget) -> None:
    """After a round: the closed test makes groups and open cells "different" ("different" wins
    over "same": a significant change within the tolerance is still a change); then an open cell
    whose latest look is this round's and is equivalent becomes "same"."""
    for group in groups:
        _closed_step(group, round_no, budget)
    _equivalence_step([c for g in groups for c in g.cells], round_no)


def _closed_step(group: GateGroup, round_no: int, budget: Budget) -> None:
    """Per direction ("worse", then "better"): the group's test at its alpha; where it rejects,
    each open cell whose p x (cells - 1) is below that alpha too. Decided cells and groups keep
    their decisions; ``p_closed`` is each cell's adjusted p on the family alpha's scale."""
    alpha, m = group.alpha, len(group.cells)
    if alpha <= 0:
        return
    scale = budget.family_alpha / alpha
    for direction in (WORSE, BETTER):
        p_group = group.p_closed(budget, direction)
        if group.decision == UNDECIDED and p_group <= alpha and any(c.looks for c in group.cells):
            group.decision, group.direction, group.decided_round = DIFFERENT, direction, round_no
            group.decided_look = _best_look(group.looks, budget, direction)
        for cell in group.cells:
            p_cell = cell.p_adjusted(budget, direction)
            if p_cell is None or cell.error is not None:
                continue
            adjusted = min(1.0, max(p_group, p_cell * max(m - 1, 1)) * scale)
            if cell.open and direction == WORSE:
                cell.p_closed = adjusted
            if cell.open and adjusted <= budget.family_alpha:
                cell.decision, cell.decided_round = DIFFERENT, round_no
                cell.decided_look, cell.p_closed = cell.best_look(budget, direction), adjusted


def _equivalence_step(cells: Sequence[GateCell], round_no: int) -> None:
    for cell in cells:
        latest = cell.looks[-1] if cell.looks else None
        if cell.open and latest is not None and latest.round_no == round_no and equivalent(latest, cell.spec):
            cell.decision, cell.decided_round, cell.decided_look = SAME, round_no, latest


__all__ = ["BETTER", "BUILD_A", "BUILD_B", "DIFFERENT", "ERROR", "POOLED_SHARE", "SAME", "UNDECIDED", "WORSE", "Budget",
           "GateCell", "GateGroup", "GateSpec", "Look", "abba_order", "add_group_look", "add_look", "add_ratio_look",
           "checked_runs", "decide_round", "equivalent", "look_estimate", "look_shares", "prior_check",
           "run_spread", "set_alphas", "shown_ratio"]
