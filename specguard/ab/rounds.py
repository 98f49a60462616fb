"""Rounds of an A/B comparison: which configurations a round launches, in which order, and the
decisions after it. The launching itself is a callable (``Launcher``), so the rules here run the
same on servers (``ab.launcher``) and on synthetic launches (the tests).

A round launches every configuration that still has an open cell once per build, in ABBA order
(``decision.abba_order``); a reference configuration also stays in while a speculative
configuration's speculation cells are open (their ratio needs both in each build). After a
round every open cell (and its configuration's group of levels) is looked at again and decided
(``decision.decide_round``, closed testing); at the budget
(``Budget.max_rounds`` rounds) the open cells end undecided.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from specguard.ab.decision import (
    BUILD_A,
    BUILD_B,
    DIFFERENT,
    WORSE,
    Budget,
    GateCell,
    GateGroup,
    GateSpec,
    abba_order,
    add_group_look,
    add_look,
    add_ratio_look,
    checked_runs,
    decide_round,
    run_spread,
    set_alphas,
)
from specguard.ab.trend import LaunchPoint, launch_location
from specguard.decide.prior import SpreadEstimate
from specguard.labels import ACCEPT_LENGTH, SPECULATION, STEP_TIME, THROUGHPUT, ExitCode, Level

# The per-run series a launch reports for each level, by the gate that reads it.
STEP_RATE = "step_rate"  # steps per second of a request, 1000 / RunMetrics.step_time_ms
METRIC_OF = {THROUGHPUT: THROUGHPUT, ACCEPT_LENGTH: ACCEPT_LENGTH, STEP_TIME: STEP_RATE}
GATE_ORDER = (THROUGHPUT, STEP_TIME, ACCEPT_LENGTH, SPECULATION)
Progress = Callable[[str], None]


@dataclass
class LaunchResult:
    """One launch of a configuration in one build: each level's per-run series, or why not."""

    build: str
    config: str
    round_no: int
    values: dict[int, dict[str, list[float]]] = field(default_factory=dict)  # level -> metric -> runs
    error: str | None = None
    skipped: bool = False  # attach mode: that build's server does not serve the configuration
    wall_s: float = 0.0


Launcher = Callable[[str, str, int], LaunchResult]  # (build, configuration, round) -> its launch


@dataclass(frozen=True)
class Selection:
    """What a comparison measures: configurations (suite order), the speculative ones, each
    speculative configuration's reference where it is measured too, and the levels."""

    configs: list[str]
    levels: list[int]
    speculative: frozenset[str] = frozenset()
    references: dict[str, str] = field(default_factory=dict)  # speculative -> reference (both measured)
    rate: bool = False  # the levels are request rates ([sweep] request_rate), named r8, not c8

    def level_name(self, level: int) -> str:
        return Level(level, self.rate).name


class BuildComparison:
    """Runs the rounds of one A/B comparison and holds what they found."""

    def __init__(self, selection: Selection, specs: dict[str, GateSpec], budget: Budget, launcher: Launcher,
                 progress: Progress | None = None) -> None:
        self.selection = selection
        self.specs = specs
        self.budget = budget
        self._launcher = launcher
        self._progress = progress or (lambda _line: None)
        self.launches: list[LaunchResult] = []
        self.cells: list[GateCell] = []
        self.groups: list[GateGroup] = []  # per configuration and gate, its cells over the levels
        self.failed: dict[str, str] = {}  # configuration -> why it could not be measured
        self.dropped: dict[str, str] = {}  # configuration -> why it is not compared (attach mode)
        self.rounds_run = 0

    def run(self) -> None:
        for round_no in range(1, self.budget.max_rounds + 1):
            active = self.active(round_no)
            if not active:
                break
            for config in active:
                self._launch_both(config, round_no)
            if round_no == 1:
                self._plan_cells()
            self._fail_cells()
            self._look(round_no)
            decide_round(self.groups, round_no, self.budget)
            self.rounds_run = round_no

    def _fail_cells(self) -> None:
        """Open cells of a configuration that could not be measured (or whose reference could not,
        for a speculation cell) end as errors: no later round can decide them."""
        for cell in self.cells:
            ref = self.selection.references.get(cell.config) if cell.gate == SPECULATION else None
            own, of_ref = self.failed.get(cell.config), self.failed.get(ref) if ref else None
            if cell.open and (own or of_ref):
                cell.error = own or f"reference {ref}: {of_ref}"

    def active(self, round_no: int) -> list[str]:
        """The configurations this round launches (suite order)."""
        live = [c for c in self.selection.configs if c not in self.failed and c not in self.dropped]
        if round_no == 1:
            return live
        return [c for c in live if self._needs_round(c)]

    def _needs_round(self, config: str) -> bool:
        if any(cell.open for cell in self.cells if cell.config == config):
            return True
        return any(cell.open and cell.gate == SPECULATION and self.selection.references.get(cell.config) == config
                   for cell in self.cells)

    def _launch_both(self, config: str, round_no: int) -> None:
        for build in abba_order(round_no):
            result = self._launcher(build, config, round_no)
            self.launches.append(result)
            if result.skipped and round_no == 1:
                self.dropped[config] = f"build {build}: {result.error}"
                return
            if result.error is not None:
                self.failed[config] = f"round {round_no}, build {build}: {result.error}"
                return  # the other build's launch would decide nothing

    def _plan_cells(self) -> None:
        """Every gate of every measured cell, and its share of the family alpha (fixed once the
        first round has shown which configurations the servers serve, before any decision)."""
        sel = self.selection
        for config in sel.configs:
            if config in self.dropped:
                continue
            ref = sel.references.get(config)
            gates = [THROUGHPUT, STEP_TIME]
            if config in sel.speculative:
                gates.append(ACCEPT_LENGTH)
                if ref is not None and ref not in self.dropped:
                    gates.append(SPECULATION)
            for gate in gates:
                cells = [GateCell(config, level, self.specs[gate]) for level in sel.levels]
                self.groups.append(GateGroup(config, gate, cells))
                self.cells += cells
        set_alphas(self.cells, self.budget.family_alpha)

    def values(self, build: str, config: str, level: int, gate: str) -> list[list[float]]:
        """One list of run values per launch of the build, in launch order (speculation: each
        launch's tok/s over its reference's in the same round, run by run)."""
        if gate == SPECULATION:
            spec = self.values(build, config, level, THROUGHPUT)
            ref = self.values(build, self.selection.references[config], level, THROUGHPUT)
            return [[s / r for s, r in zip(s_runs, r_runs)] for s_runs, r_runs in zip(spec, ref)]
        metric = METRIC_OF[gate]
        return [launch.values[level][metric] for launch in self.launches
                if launch.build == build and launch.config == config and launch.error is None
                and level in launch.values and launch.values[level].get(metric)]

    def _look(self, round_no: int) -> None:
        spreads: dict[tuple[str, str], SpreadEstimate | None] = {}
        for cell in self.cells:
            if not cell.open:
                continue
            a = self.values(BUILD_A, cell.config, cell.level, cell.gate)
            b = self.values(BUILD_B, cell.config, cell.level, cell.gate)
            if cell.looks and min(len(a), len(b)) <= cell.looks[-1].launches:
                continue  # nothing new since its last look
            if cell.gate == SPECULATION:
                if checked_runs(cell, a, b, self.budget) is not None:
                    add_ratio_look(cell, self.launch_points(THROUGHPUT, cell.level),
                                   self.selection.references[cell.config], round_no, self.budget)
                continue
            key = (cell.config, cell.gate)
            if key not in spreads:
                spreads[key] = self.spread_without(cell.config, cell.gate)
            add_look(cell, a, b, round_no, self.budget, spreads[key])
        points: dict[str, list[LaunchPoint]] = {}
        for group in self.groups:
            if len(group.cells) > 1 and group.open and any(c.looks for c in group.cells):
                # a speculation ratio's B/A is a contrast in the tok/s model (trend.trend_estimate)
                gate = THROUGHPUT if group.gate == SPECULATION else group.gate
                if gate not in points:
                    points[gate] = self.launch_points(gate)
                reference = self.selection.references[group.config] if group.gate == SPECULATION else None
                add_group_look(group, points[gate], round_no, self.budget, reference)

    def launch_points(self, gate: str, level: int | None = None) -> list[LaunchPoint]:
        """Every measured launch of a configuration that has ``gate`` (not speculation, whose
        values are ratios of two launches), in launch order, located over every level or at
        ``level`` alone: the trend model's data."""
        configs = {c.config for c in self.cells if c.gate == gate}
        metric = METRIC_OF[gate]
        levels = self.selection.levels if level is None else [level]
        points = []
        for slot, launch in enumerate(self.launches):
            if launch.config not in configs or launch.error is not None:
                continue
            location = launch_location([launch.values.get(lv, {}).get(metric) or [] for lv in levels])
            if location is not None:
                points.append(LaunchPoint(launch.config, launch.build == BUILD_B, slot, location))
        return points

    def spread_of(self, gate: str) -> SpreadEstimate | None:
        """The run's launch spread at ``gate`` over every configuration that has it (reported
        beside the prior; each decision uses ``spread_without``)."""
        configs = sorted({c.config for c in self.cells if c.gate == gate})
        sets = [[self.values(build, config, level, gate) for level in self.selection.levels]
                for config in configs for build in (BUILD_A, BUILD_B)]
        return run_spread(sets, configs)

    def spread_without(self, config: str, gate: str) -> SpreadEstimate | None:
        """The run's launch spread at ``gate`` from both builds' launches of every other
        configuration that has the gate (``decision.run_spread``): independent of ``config``'s
        own launches, which ``compare_launch_sets`` adds."""
        others = sorted({c.config for c in self.cells if c.gate == gate and c.config != config})
        sets = [[self.values(build, other, level, gate) for level in self.selection.levels]
                for other in others for build in (BUILD_A, BUILD_B)]
        return run_spread(sets, others)

    # -- what the reports read ------------------------------------------------------------------
    def sorted_cells(self) -> list[GateCell]:
        order = {name: i for i, name in enumerate(self.selection.configs)}
        return sorted(self.cells, key=lambda c: (order[c.config], c.level, GATE_ORDER.index(c.gate)))

    def regressions(self) -> list[GateCell]:
        """Cells decided "different" in the worse direction."""
        return [c for c in self.sorted_cells() if c.decision == DIFFERENT and c.direction() == WORSE]

    def level_groups(self) -> list[GateGroup]:
        """The groups of more than one level (a group of one is its cell)."""
        return [g for g in self.groups if len(g.cells) > 1]

    def group_regressions(self) -> list[GateGroup]:
        """Configurations found worse at a gate at one level or more (closed testing's first
        step, on every level's evidence), whether or not a single level is."""
        return [g for g in self.level_groups() if g.decision == DIFFERENT and g.direction == WORSE]

    def not_measured(self) -> list[str]:
        """One line per configuration or cell that could not be measured."""
        lines = [f"{name}: {why}" for name, why in self.failed.items()]
        lines += [f"{c.gate} {c.config} {self.selection.level_name(c.level)}: {c.error}" for c in self.cells
                  if c.error and c.config not in self.failed]
        if not self.cells and not self.failed:
            lines.append("no configuration was measured in both builds")
        return lines

    def exit_code(self) -> int:
        """1: a gate decided "different" for the worse, at a cell or over a configuration's levels
        (a confident regression stands even when another cell could not be measured); 3: something
        could not be measured; 0: otherwise."""
        if self.regressions() or self.group_regressions():
            return int(ExitCode.REGRESSION)
        if self.not_measured():
            return int(ExitCode.NOT_MEASURED)
        return int(ExitCode.OK)


__all__ = ["GATE_ORDER", "METRIC_OF", "STEP_RATE", "BuildComparison", "LaunchResult", "Launcher", "Selection"]
