"""Racing the grid: measure cheaply, predict, drop the confidently worse, spend runs on the close calls.

Order: (1) the probes (reference, shortest and longest chain, trees) with the first-round
runs; the longer ones only where the shortest chain is not already confidently losing to the
reference beyond the tie tolerance (there no longer chain is tried); (2) the other step counts are predicted from the longest chain's per-position
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
from dataclasses import dataclass, field
from typing import Callable, Protocol, Sequence

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

    def measure(self, runner: "Runner", setting: Setting, levels: Sequence[int], warmup: int, repeats: int) -> None:
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
    ledger = Ledger()
    settings = [reference, *grid]
    levels = sorted(levels)
    chains = sorted((s for s in grid if s.chain and s.eagle_topk == 1), key=lambda s: s.num_steps)
    probes = [reference] + ([chains[0], chains[-1]] if chains else []) + [s for s in grid if s not in chains]
    probes = list(dict.fromkeys(probes))
    rest = [s for s in grid if s not in probes]
    todo = {s: list(levels) for s in probes}
    skipped: dict[Setting, dict[int, float | None]] = {}
    predictions: dict[tuple[Setting, int], float] = {}
    at_least: list[float] = []

    def launch(s: Setting, at: list[int], repeats: int, why: str) -> None:
        left = sum(len(v) for v in todo.values())
        progress(f"tune: {why}: {s.name} at C={','.join(map(str, at))} ({repeats} run{'s' if repeats != 1 else ''} "
                 f"+ {plan.warmup} warmup each); {left} cells queued; {ledger.runs} runs / {ledger.launches} launches so far")
        ledger.measure(runner, s, at, plan.warmup, repeats)
        ledger.events.append(f"{why}: {s.name} C={at} x{repeats}")

    # The reference and the cheapest chain first: where even the cheapest speculation is
    # confidently beyond the tie tolerance below no speculation, no longer chain or tree is
    # probed or predicted (they verify more tokens and draft more passes per step for at most
    # the acceptance of the positions after the first); recorded as skipped, prediction None.
    first = [s for s in probes if s == reference or (chains and s == chains[0])]
    for s in first:
        launch(s, todo.pop(s), plan.first_repeats, "probe")
    lost: list[int] = []
    if plan.predict and chains and not any(s in ledger.failed for s in first):
        floor = 1 - plan.tie_tolerance
        lost = [c for c in levels if ledger.tok_s(chains[0], c) and ledger.tok_s(reference, c)
                and ratio(ledger, chains[0], reference, c, plan, threshold=floor).high < floor]
    for s in [p for p in probes if p not in first]:
        at = [c for c in todo.pop(s) if c not in lost]
        if lost:
            skipped[s] = {c: None for c in lost}
        if at:
            launch(s, at, plan.first_repeats, "probe")
    if plan.predict and chains:
        longest = chains[-1]
        hist: list[int] = []
        for c in levels:
            h = ledger.cells.get((longest, c), CellRuns()).histogram
            hist = [a + b for a, b in zip(hist + [0] * (len(h) - len(hist)), h + [0] * (len(hist) - len(h)))]
        at_least = acceptance_from_histogram(hist)
        for s in rest:
            keep, preds = [], {c: None for c in lost}
            a = predicted_accept_length(at_least, s.num_steps) if s.chain else None
            for c in [c for c in levels if c not in lost]:
                measured = {m.num_steps: (ledger.mean(m, c), ledger.accept_length(m, c)) for m in chains
                            if ledger.tok_s(m, c) and ledger.accept_length(m, c) > 0}
                pred = predict_tok_s(measured, s.num_steps, a) if a is not None else None
                preds[c] = pred
                if pred is None:
                    keep.append(c)
                    continue
                predictions[(s, c)] = pred
                if pred >= (1 - plan.skip_margin) * _best_mean(ledger, settings, c):
                    keep.append(c)
            if keep:
                todo[s] = keep
            skipped_here = {c: preds[c] for c in levels if c not in keep}
            if skipped_here:
                skipped[s] = skipped_here
        for s in list(todo):
            at = todo.pop(s)
            launch(s, at, plan.first_repeats, "predicted close")
    else:
        for s in rest:
            launch(s, list(levels), plan.first_repeats, "first round")

    alive = {c: [s for s in settings if ledger.tok_s(s, c) and s not in ledger.failed] for c in levels}
    for _ in range(plan.max_rounds):
        for c in levels:
            alive[c] = _survivors(ledger, alive[c], c, plan)
        more: dict[Setting, list[int]] = {}
        for c in levels:
            if len(alive[c]) < 2:
                continue
            for s in alive[c]:
                if len(ledger.tok_s(s, c)) < plan.repeats:
                    more.setdefault(s, []).append(c)
        if not more:
            break
        todo = dict(more)
        for s in list(todo):
            at = todo.pop(s)
            need = max(plan.repeats - len(ledger.tok_s(s, c)) for c in at)
            launch(s, at, need, "close call")
    for c in levels:
        alive[c] = _survivors(ledger, alive[c], c, plan)
    return RaceResult(ledger, settings, alive, skipped, predictions, at_least)


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
