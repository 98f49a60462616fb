"""How a session measures: one launch of a configuration at a time, references first, and under
the sequential design (`[sweep] relaunch = "on-suspicion"`) more launches while a cell stays
suspicious, each stage decided on all launches pooled (docs/statistics.md)."""

from __future__ import annotations

import time
from dataclasses import dataclass, replace

from specguard.config import Suite
from specguard.decide.gates import GateDesign, RelaunchReason, RelaunchWhy, relaunch_plan
from specguard.decide.result import GateResult
from specguard.labels import SPECULATION
from specguard.measure.progress import Progress
from specguard.measure.sweep import CellMeasurement, Driver, RunControl, measure_cell, plain_driver
from specguard.notes import Note, NoteKind
from specguard.session.cells import CellStore
from specguard.session.levels import SweepLevels
from specguard.session.options import ConfigUnavailable, RunOptions
from specguard.session.parts import SessionParts
from specguard.session.plan import Planner
from specguard.session.servers import ServerPool
from specguard.session.verdicts import Verdicts


@dataclass(frozen=True)
class Relaunch:
    """One more launch of a configuration: the stage it serves, the tests that asked for it, and
    why it failed (the server's line), if it did."""

    stage: int
    reasons: tuple[RelaunchReason, ...]
    failed: str | None = None


class Campaign:
    """Measures cells on the pool's servers into the cell store, deciding stages as it goes."""

    def __init__(self, parts: SessionParts, options: RunOptions, verdicts: Verdicts) -> None:
        self._suite: Suite = parts.suite
        self._options = options
        self._design: GateDesign = parts.design
        self._planner: Planner = parts.planner
        self._pool: ServerPool = parts.pool
        self._cells: CellStore = parts.cells
        self._verdicts = verdicts
        self._levels: SweepLevels = parts.levels
        self._started = time.monotonic()
        self._progress: Progress | None = None
        self.relaunches: dict[str, list[Relaunch]] = {}  # configuration -> its launches after the first

    def set_progress(self, progress: Progress | None) -> None:
        """Where each run's progress text goes (the plugin's live line), or nowhere."""
        self._progress = progress

    def measure(self, name: str, level: int, driver: Driver = plain_driver) -> CellMeasurement:
        """The cell's measurement (every launch of it), taken once and shared by its tests.

        Before a speculative configuration's first cell, the reference cells its selected
        speculation tests need are measured (then their server stopped), so only one server runs
        at a time and `-k eagle3` still compares with a reference measured here and now. Under a
        staged design the first test of a configuration measures all its selected cells and
        decides them stage by stage.
        """
        cell = self._cells.cell(name, level)
        if cell is not None:
            return cell
        self._measure_references_for(name)
        if self._staged(name):
            self._sweep_configuration(name, level, driver)
        else:
            self._measure_launch(name, level, driver)
            self._again_if_runs_disagree(name, level)
        measured = self._cells.cell(name, level)
        assert measured is not None
        return measured

    def design_notes(self) -> list[Note]:
        """Where the suite's gate design could not be followed for a configuration this session
        measured (the summary's run notes)."""
        notes = []
        measured = {name for name, _level in self._cells}
        fixed = ", ".join(n for n in self._suite.servers if n in measured and not self._pool.can_relaunch(n))
        if fixed and self._design.sequential:
            notes.append(Note.of(NoteKind.NO_RELAUNCH, configs=fixed))
        if fixed and self._design.launches > 1:
            notes.append(Note.of(NoteKind.ONE_LAUNCH, configs=fixed, launches=self._design.launches))
        return notes

    def _staged(self, name: str) -> bool:
        """A plan, a design that needs whole-configuration stages, and a server that can be
        launched again (launched here, or attached with a restart_command)."""
        if not self._planner.planned or not self._pool.can_relaunch(name):
            return False
        return self._design.sequential or self._design.launches > 1

    def _measure_launch(self, name: str, level: int, driver: Driver = plain_driver) -> CellMeasurement:
        """Measure one launch of a cell on the configuration's current server; merge it into the cell."""
        self._cells.attempted.add((name, level))
        elapsed = time.monotonic() - self._started
        deadline = self._suite.sweep.session_timeout_s
        if elapsed > deadline:
            raise ConfigUnavailable(Note.of(NoteKind.DEADLINE_REACHED, config=name, level=self._levels.name(level),
                                            deadline_s=deadline, elapsed_s=elapsed), skip=False)
        handle = self._pool.get(name)
        cfg = self._pool.config(name)
        try:
            load = replace(self._levels.load_at(level), api=handle.engine.choose_api(self._suite.sweep.api),
                           extra_body=handle.engine.request_extra_body(cfg))
            control = RunControl(driver, self._progress, self._options.max_failed_requests)
            cell = measure_cell(handle, self._pool.workload_for(name), self._levels.sweep_at(level), load, control)
            cell.concurrency = level  # the level (a rate in rate mode; the cap is in each run's load_model)
        except Exception as exc:  # a bug in specguard: the cell is not measured, never a regression
            cell = CellMeasurement(config=name, concurrency=level,
                                   error=f"internal error while measuring (a specguard bug): {type(exc).__name__}: {exc}")
        merged = self._cells.add(name, level, self._pool.state(name).launch_id, cell)
        if cell.error:
            self._pool.check_still_serving(name)
        return merged

    def _again_if_runs_disagree(self, name: str, level: int) -> None:
        """Where the configuration is not relaunched (attach mode, or relaunch = "off"): one more
        measurement on the same server when the last one's runs disagree (a stall? see
        decide/consistency.py); the gates set the disagreeing one aside, and a cell whose second
        measurement disagrees too is not measured."""
        if not self._cells.error(name, level) and self._verdicts.runs_disagree(name, level):
            self._measure_launch(name, level)

    def _add_launch(self, name: str, levels: list[int], driver: Driver = plain_driver) -> str | None:
        """A new server launch of `name` (stopping the current one) measuring `levels`; the
        reason it could not, or None."""
        try:
            self._pool.relaunch(name)  # get() then measures a new launch
        except ConfigUnavailable as exc:
            return exc.line
        for level in levels:
            try:
                m = self._measure_launch(name, level, driver)
            except ConfigUnavailable as exc:
                return exc.line
            failure = self._pool.state(name).failure
            if m.error and failure is not None:
                return failure.line
        return None

    def _first_stage(self, name: str, levels: list[int], level: int, driver: Driver) -> ConfigUnavailable | None:
        """`design.launches` launches of every selected level; the failure that stopped it, if any."""
        for launch_no in range(self._design.launches):
            todo = [c for c in levels if self._cells.launches(name, c) == launch_no and not self._cells.error(name, c)]
            if not todo:
                continue
            if launch_no > 0:
                self._pool.relaunch(name)
            for c in todo:
                try:
                    self._measure_launch(name, c, driver if c == level else plain_driver)
                except ConfigUnavailable as exc:
                    return exc
        return None

    def _sweep_configuration(self, name: str, level: int, driver: Driver) -> None:
        """Stage 1 (every selected level, `design.launches` launches) and its decisions; then, while
        `relaunch_plan` names the configuration, one more launch and the next stage's decisions."""
        levels = sorted({c for n, c in self._planner.current.selected_cells if n == name} | {level})
        failure = self._first_stage(name, levels, level, driver)
        if self._cells.cell(name, level) is None:
            raise failure or ConfigUnavailable(
                Note.of(NoteKind.NOT_MEASURED, config=name, level=self._levels.name(level)), skip=False)
        results: list[GateResult] | None = self._verdicts.decide(name, stage=1)
        if not self._design.sequential or not self._pool.can_relaunch(name):
            return
        stage = 1
        while results is not None and max(self._cells.launches(name, c) for c in levels) < self._design.max_launches:
            stage += 1
            results = self._relaunch_stage(name, levels, results, stage)

    def _relaunch_stage(self, name: str, levels: list[int], results: list[GateResult], stage: int) -> list[GateResult] | None:
        """One more launch of `name` (and its reference, where a speculation cell asks for it) when
        `relaunch_plan` names it, and the stage's decisions; None when the campaign is done. A
        reference whose own runs disagreed at one of `name`'s cells is launched again alone."""
        refs = {n: cfg.reference for n, cfg in self._suite.servers.items()}
        wanted = relaunch_plan(results, refs, self._design.suspicion_p, self._design.reference_losing_p)
        ref = self._suite.servers[name].reference
        ref_levels = sorted({r.level.value for r in results if r.gate.gate == SPECULATION})
        ref_goes, replacing = self._reference_goes(name, levels, ref, ref_levels, wanted)
        if name not in wanted and not (replacing and ref_goes):
            return None
        why = None
        if ref and ref_goes:
            self._pool.stop(name)
            why = self._add_launch(ref, ref_levels)
            self._pool.stop(ref)
            self._note_relaunch(ref, stage, wanted[ref], why)
        if name in wanted:
            why = self._add_launch(name, [c for c in levels if not self._cells.error(name, c)], plain_driver)
            self._note_relaunch(name, stage, wanted[name], why)
        decided = self._verdicts.decide(name, stage=stage)
        return None if why else decided

    def _reference_goes(self, name: str, levels: list[int], ref: str | None, ref_levels: list[int],
                        wanted: dict[str, list[RelaunchReason]]) -> tuple[bool, bool]:
        """(the reference is launched again, it replaces a launch whose runs disagreed at one of
        `name`'s speculation cells)."""
        if not ref or ref not in wanted or not ref_levels:
            return False, False
        replacing = any(w.why == RelaunchWhy.RUNS_DISAGREE and w.config == name for w in wanted[ref])
        return self._reference_can_follow(ref, ref_levels, name, levels, replacing), replacing

    def _reference_can_follow(self, ref: str, ref_levels: list[int], name: str, levels: list[int],
                              replacing: bool) -> bool:
        """The reference was started, can be launched again and is healthy; and either it replaces
        a launch whose runs disagreed (`replacing`, up to sweep.max_launches) or it has no more
        launches than `name` at the speculation levels (it comes along to keep the pair level,
        never to get ahead)."""
        state = self._pool.state(ref)
        if state.mode == "" or not self._pool.can_relaunch(ref) or state.failure is not None:
            return False
        ref_launches = [self._cells.launches(ref, c) for c in ref_levels]
        if replacing:
            return max(ref_launches) < self._design.max_launches
        return max(ref_launches) <= max(self._cells.launches(name, c) for c in levels)

    def _note_relaunch(self, name: str, stage: int, reasons: list[RelaunchReason], failed: str | None) -> None:
        """Why a configuration was launched again (the summary's "relaunched" line), per stage."""
        self.relaunches.setdefault(name, []).append(Relaunch(stage, tuple(reasons), failed))

    def _measure_references_for(self, name: str) -> None:
        plan = self._planner.current
        needed = sorted(c for (ref, c), specs in plan.reference_cells.items()
                        if name in specs and self._cells.cell(ref, c) is None)
        ref = self._suite.servers[name].reference
        if not ref or not needed:
            return
        selected = set(plan.selected_cells)
        launches = self._design.launches if self._staged(ref) else 1
        for launch_no in range(launches):
            if launch_no > 0:
                self._pool.relaunch(ref)
            if not self._reference_launch(ref, needed, launch_no, selected, plan.reference_cells):
                break
        self._pool.stop(ref)

    def _reference_launch(self, ref: str, needed: list[int], launch_no: int, selected: set[tuple[str, int]],
                          users: dict[tuple[str, int], list[str]]) -> bool:
        """One launch of a reference at the levels a speculation test needs; False when it could not start."""
        for c in needed:
            if self._cells.launches(ref, c) != launch_no or self._cells.error(ref, c):
                continue
            try:
                self._measure_launch(ref, c)
                if not self._staged(ref):
                    self._again_if_runs_disagree(ref, c)
            except ConfigUnavailable:
                return False  # remembered in the pool's failure; the speculation gate says why
            if (ref, c) not in selected:
                self._cells.note_reference_role(ref, c, users[(ref, c)])
        return True
