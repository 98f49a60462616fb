"""Racing the grid: measure cheaply, predict, drop the confidently worse, spend runs on the close calls.

Order: (1) the probes (reference, shortest and longest chain, trees) with the first-round
runs; the longer ones only where the shortest chain is not already confidently losing to the
reference beyond the tie tolerance (there no longer chain is tried); (2) the other step counts are
predicted from the longest chain's per-position
acceptance and the probes' cost, and measured only at levels where even the optimistic
prediction is within `skip_margin` of the best measured; (3) rounds: at each level every setting
confidently below (1 - tie tolerance) x the best (the gates' two-launch comparison,
`compare_sessions`) is dropped there, and the survivors of close levels are relaunched for the
rest of the full repeats. A dropped setting could not have won a tie either, so the choice is the
one the full grid would make on the same runs. `full_grid` runs everything, for comparison.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
from scipy import special

from specguard.decide.stats import RatioEstimate, compare_sessions
from specguard.tune.grid import REFERENCE, Setting, acceptance_from_histogram, predict_tok_s, predicted_accept_length


@dataclass
class CellRuns:
    """What one launch measured at one concurrency."""

    tok_s: list[float] = field(default_factory=list)
    histogram: list[int] = field(default_factory=list)  # spec_correct_drafts_histogram summed over runs
    accept_lengths: list[float] = field(default_factory=list)
    error: str | None = None


class Runner(Protocol):
    """Launches a setting once and measures it at `levels` (warmup runs discarded)."""

    def measure(self, setting: Setting, levels: Sequence[int], warmup: int, repeats: int) -> dict[int, CellRuns]: ...


@dataclass(frozen=True)
class RacePlan:
    warmup: int = 1
    repeats: int = 3  # the full grid's measured runs per cell
    first_repeats: int = 1  # measured runs per cell in the first round
    confidence: float = 0.95  # for dropping a setting at a level
    launch_sd: float = 0.01  # log-scale spread between launches (the suite's prior_between_sd)
    tie_tolerance: float = 0.05  # within it of the best, the lighter setting wins
    skip_margin: float = 0.05  # predicted below (1 - margin) x best measured at every level: skipped
    max_rounds: int = 3
    predict: bool = True


@dataclass
class Ledger:
    """Every measurement and what it cost (runs include warmup; a launch is one server start)."""

    cells: dict[tuple[Setting, int], CellRuns] = field(default_factory=dict)
    runs: int = 0
    launches: int = 0
    events: list[str] = field(default_factory=list)
    failed: dict[Setting, str] = field(default_factory=dict)
    wall_s: float = 0.0  # time spent in launches and runs

    def measure(self, runner: Runner, setting: Setting, levels: Sequence[int], warmup: int, repeats: int) -> None:
        """One launch through `runner`, timed and recorded."""
        started = time.monotonic()
        measured = runner.measure(setting, levels, warmup, repeats)
        self.wall_s += time.monotonic() - started
        self.add(setting, measured, warmup, repeats)

    def add(self, setting: Setting, measured: dict[int, CellRuns], warmup: int, repeats: int) -> None:
        self.launches += 1
        for c, cell in measured.items():
            self.runs += warmup + repeats
            if cell.error:
                self.failed[setting] = f"c{c}: {cell.error.splitlines()[0]}"
                continue
            have = self.cells.setdefault((setting, c), CellRuns())
            have.tok_s += cell.tok_s
            have.accept_lengths += cell.accept_lengths
            if cell.histogram:
                if len(cell.histogram) > len(have.histogram):
                    have.histogram += [0] * (len(cell.histogram) - len(have.histogram))
                for k, n in enumerate(cell.histogram):
                    have.histogram[k] += n

    def tok_s(self, setting: Setting, c: int) -> list[float]:
        cell = self.cells.get((setting, c))
        return cell.tok_s if cell else []

    def mean(self, setting: Setting, c: int) -> float:
        v = self.tok_s(setting, c)
        return math.exp(float(np.mean(np.log(v)))) if v else 0.0

    def accept_length(self, setting: Setting, c: int) -> float:
        cell = self.cells.get((setting, c))
        if setting.kind == REFERENCE:
            return 1.0
        return float(np.mean(cell.accept_lengths)) if cell and cell.accept_lengths else 0.0


def ratio(ledger: Ledger, a: Setting, b: Setting, c: int, plan: RacePlan, threshold: float = 1.0) -> RatioEstimate:
    """a / b tok/s at c with the gates' two-launch statistics."""
    return compare_sessions(ledger.tok_s(a, c), ledger.tok_s(b, c), threshold=threshold, launch_sd=plan.launch_sd,
                            confidence=plan.confidence)


def tok_s_interval(values: Sequence[float], launch_sd: float, confidence: float) -> tuple[float, float, float]:
    """Geometric mean tok/s and its interval (within-launch spread plus the launch prior)."""
    logs = np.log(np.asarray(values, dtype=float))
    n = logs.size
    var = (float(logs.var(ddof=1)) / n if n > 1 else 0.0) + launch_sd**2
    q = float(special.stdtrit(max(n - 1, 1), 0.5 + confidence / 2)) if n > 1 else float(special.ndtri(0.5 + confidence / 2))
    m, se = float(logs.mean()), math.sqrt(var)
    return math.exp(m), math.exp(m - q * se), math.exp(m + q * se)


def choose(ledger: Ledger, candidates: Sequence[Setting], c: int, plan: RacePlan) -> Setting | None:
    """The best at c; ties within the tolerance (point estimates) go to the lightest."""
    measured = [s for s in candidates if len(ledger.tok_s(s, c)) > 0]
    if not measured:
        return None
    best = max(measured, key=lambda s: ledger.mean(s, c))
    floor = (1 - plan.tie_tolerance) * ledger.mean(best, c)
    return min((s for s in measured if ledger.mean(s, c) >= floor), key=lambda s: (s.weight, s.name))


@dataclass
class RaceResult:
    ledger: Ledger
    settings: list[Setting]  # reference first
    alive: dict[int, list[Setting]]  # per level, the settings not dropped
    skipped: dict[Setting, dict[int, float | None]]  # never measured at a level: predicted tok/s
    predictions: dict[tuple[Setting, int], float] = field(default_factory=dict)
    acceptance_by_position: list[float] = field(default_factory=list)  # longest chain's, all levels pooled


Progress = Callable[[str], None]


def _best_mean(ledger: Ledger, settings: Sequence[Setting], c: int) -> float:
    return max((ledger.mean(s, c) for s in settings if ledger.tok_s(s, c)), default=0.0)


def race(runner: Runner, reference: Setting, grid: Sequence[Setting], levels: Sequence[int], plan: RacePlan,
         progress: Progress = lambda _: None) -> RaceResult:
    """Racing with prediction (module docstring); every launch goes through `runner`."""
    r = _Race(runner, reference, grid, levels, plan, progress)
    lost = r.probe()
    if plan.predict and r.chains:
        r.measure_the_predicted_close(lost)
    else:
        r.measure_the_rest()
    return RaceResult(r.ledger, r.settings, r.close_calls(), r.skipped, r.predictions, r.at_least)


class _Race:
    """One race's state: what is measured, queued, skipped and predicted (``race``'s steps)."""

    def __init__(self, runner: Runner, reference: Setting, grid: Sequence[Setting], levels: Sequence[int],
                 plan: RacePlan, progress: Progress) -> None:
        self.runner, self.reference, self.plan, self.progress = runner, reference, plan, progress
        self.ledger = Ledger()
        self.settings = [reference, *grid]
        self.levels = sorted(levels)
        self.chains = sorted((s for s in grid if s.chain and s.eagle_topk == 1), key=lambda s: s.num_steps)
        ends = [self.chains[0], self.chains[-1]] if self.chains else []
        probes = [reference, *ends, *(s for s in grid if s not in self.chains)]
        self.probes = list(dict.fromkeys(probes))
        self.rest = [s for s in grid if s not in self.probes]
        self.todo: dict[Setting, list[int]] = {s: list(self.levels) for s in self.probes}
        self.skipped: dict[Setting, dict[int, float | None]] = {}
        self.predictions: dict[tuple[Setting, int], float] = {}
        self.at_least: list[float] = []

    def launch(self, s: Setting, at: list[int], repeats: int, why: str) -> None:
        left = sum(len(v) for v in self.todo.values())
        self.progress(f"tune: {why}: {s.name} at C={','.join(map(str, at))} ({repeats} run{'s' if repeats != 1 else ''} "
                      f"+ {self.plan.warmup} warmup each); {left} cells queued; {self.ledger.runs} runs / "
                      f"{self.ledger.launches} launches so far")
        self.ledger.measure(self.runner, s, at, self.plan.warmup, repeats)
        self.ledger.events.append(f"{why}: {s.name} C={at} x{repeats}")

    def probe(self) -> list[int]:
        """The probes with the first-round runs; returns the levels the cheapest chain lost.

        The reference and the cheapest chain first: where even the cheapest speculation is
        confidently beyond the tie tolerance below no speculation, no longer chain or tree is
        probed or predicted (they verify more tokens and draft more passes per step for at most
        the acceptance of the positions after the first); recorded as skipped, prediction None."""
        first = [self.reference, *self.chains[:1]]
        for s in first:
            self.launch(s, self.todo.pop(s), self.plan.first_repeats, "probe")
        lost = self._lost_by_the_cheapest_chain(first)
        for s in [p for p in self.probes if p not in first]:
            at = [c for c in self.todo.pop(s) if c not in lost]
            if lost:
                self.skipped[s] = {c: None for c in lost}
            if at:
                self.launch(s, at, self.plan.first_repeats, "probe")
        return lost

    def _lost_by_the_cheapest_chain(self, first: list[Setting]) -> list[int]:
        """Levels where the shortest chain is confidently below (1 - tie tolerance) x the reference."""
        if not (self.plan.predict and self.chains) or any(s in self.ledger.failed for s in first):
            return []
        floor = 1 - self.plan.tie_tolerance
        cheapest, ledger = self.chains[0], self.ledger
        return [c for c in self.levels if ledger.tok_s(cheapest, c) and ledger.tok_s(self.reference, c)
                and ratio(ledger, cheapest, self.reference, c, self.plan, threshold=floor).high < floor]

    def _longest_chain_acceptance(self) -> list[float]:
        """Per-position acceptance of the longest chain, its histograms pooled over every level."""
        hist: list[int] = []
        for c in self.levels:
            h = self.ledger.cells.get((self.chains[-1], c), CellRuns()).histogram
            hist = [a + b for a, b in zip(hist + [0] * (len(h) - len(hist)), h + [0] * (len(hist) - len(h)))]
        return acceptance_from_histogram(hist)

    def _worth_measuring(self, s: Setting, lost: list[int]) -> tuple[list[int], dict[int, float | None]]:
        """The levels where ``s``'s prediction is within the skip margin of the best measured (or
        cannot be made), and its prediction per level (None: not predicted)."""
        keep: list[int] = []
        preds: dict[int, float | None] = {c: None for c in lost}
        a = predicted_accept_length(self.at_least, s.num_steps) if s.chain else None
        for c in [c for c in self.levels if c not in lost]:
            measured = {m.num_steps: (self.ledger.mean(m, c), self.ledger.accept_length(m, c)) for m in self.chains
                        if self.ledger.tok_s(m, c) and self.ledger.accept_length(m, c) > 0}
            pred = predict_tok_s(measured, s.num_steps, a) if a is not None else None
            preds[c] = pred
            if pred is None:
                keep.append(c)
                continue
            self.predictions[(s, c)] = pred
            if pred >= (1 - self.plan.skip_margin) * _best_mean(self.ledger, self.settings, c):
                keep.append(c)
        return keep, preds

    def measure_the_predicted_close(self, lost: list[int]) -> None:
        """The other step counts, predicted from the longest chain, measured where they come close."""
        self.at_least = self._longest_chain_acceptance()
        for s in self.rest:
            keep, preds = self._worth_measuring(s, lost)
            if keep:
                self.todo[s] = keep
            skipped_here = {c: preds[c] for c in self.levels if c not in keep}
            if skipped_here:
                self.skipped[s] = skipped_here
        for s in list(self.todo):
            self.launch(s, self.todo.pop(s), self.plan.first_repeats, "predicted close")

    def measure_the_rest(self) -> None:
        for s in self.rest:
            self.launch(s, list(self.levels), self.plan.first_repeats, "first round")

    def close_calls(self) -> dict[int, list[Setting]]:
        """Rounds: drop the confidently worse at each level, relaunch the survivors of close levels
        for the rest of the full repeats; the settings alive per level at the end."""
        ledger, plan, levels = self.ledger, self.plan, self.levels
        alive = {c: [s for s in self.settings if ledger.tok_s(s, c) and s not in ledger.failed] for c in levels}
        for _ in range(plan.max_rounds):
            for c in levels:
                alive[c] = _survivors(ledger, alive[c], c, plan)
            more = self._short_of_repeats(alive)
            if not more:
                break
            self.todo = dict(more)
            for s in list(self.todo):
                at = self.todo.pop(s)
                self.launch(s, at, max(plan.repeats - len(ledger.tok_s(s, c)) for c in at), "close call")
        for c in levels:
            alive[c] = _survivors(ledger, alive[c], c, plan)
        return alive

    def _short_of_repeats(self, alive: dict[int, list[Setting]]) -> dict[Setting, list[int]]:
        """Per setting, the close levels (two or more alive) where it has fewer than the full repeats."""
        more: dict[Setting, list[int]] = {}
        for c in self.levels:
            if len(alive[c]) < 2:
                continue
            for s in alive[c]:
                if len(self.ledger.tok_s(s, c)) < self.plan.repeats:
                    more.setdefault(s, []).append(c)
        return more


def _survivors(ledger: Ledger, alive: list[Setting], c: int, plan: RacePlan) -> list[Setting]:
    """Drop settings confidently below (1 - tie tolerance) x the best at c (they cannot win or tie)."""
    if len(alive) < 2:
        return alive
    best = max(alive, key=lambda s: ledger.mean(s, c))
    keep = []
    for s in alive:
        if s is best:
            keep.append(s)
            continue
        floor = 1 - plan.tie_tolerance
        est = ratio(ledger, s, best, c, plan, threshold=floor)
        if not est.high < floor:
            keep.append(s)
    return keep


def full_grid(runner: Runner, reference: Setting, grid: Sequence[Setting], levels: Sequence[int], plan: RacePlan,
              progress: Progress = lambda _: None) -> RaceResult:
    """Every setting at every level with the full repeats (the yardstick racing is held to)."""
    ledger = Ledger()
    settings = [reference, *grid]
    for i, s in enumerate(settings):
        progress(f"tune (full grid): {s.name}, {len(settings) - i - 1} settings left")
        ledger.measure(runner, s, list(levels), plan.warmup, plan.repeats)
    alive = {c: [s for s in settings if ledger.tok_s(s, c) and s not in ledger.failed] for c in levels}
    return RaceResult(ledger, settings, alive, {})


def choices(result: RaceResult, plan: RacePlan, *, adaptive_only: bool = False) -> dict[int, Setting | None]:
    """The chosen setting per level (among the adaptive-expressible ones when asked)."""
    out = {}
    for c, alive in sorted(result.alive.items()):
        pool = [s for s in alive if s.adaptive_expressible] if adaptive_only else alive
        if adaptive_only and not pool:  # every expressible one dropped: the best of those measured
            pool = [s for s in result.settings if s.adaptive_expressible and result.ledger.tok_s(s, c)]
        out[c] = choose(result.ledger, pool, c, plan)
    return out
