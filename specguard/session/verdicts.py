"""Each gate test's verdict: which gate runs on which numbers, at which alpha, and the final
decision per test when a configuration was decided in stages (relaunch on suspicion)."""

from __future__ import annotations

from dataclasses import replace

from specguard.decide.gates import final_failures, final_results
from specguard.decide.result import GateResult, Problem, Why
from specguard.labels import SPECULATION, GateLabel, Level, Verdict
from specguard.session.cell_gates import CellGates
from specguard.session.options import ConfigUnavailable
from specguard.session.parts import SessionParts
from specguard.session.plan import PlannedTest
from specguard.session.speculation_gate import SpeculationGate


class Verdicts:
    """Decides gate tests on the session's cells and stored histories; keeps every result."""

    def __init__(self, parts: SessionParts) -> None:
        self._parts = parts
        self.results: list[GateResult] = []  # what each test reported, in order
        self.stage1: list[GateResult] = []
        self.later_stages: list[GateResult] = []  # decided again after a relaunch
        self._final: dict[tuple[GateLabel, str, Level], GateResult] = {}  # decided at the sweep, by test
        self._cell_gates = CellGates(parts)
        self._speculation = SpeculationGate(parts)

    def report(self, gate: str, name: str, level: int, must_win_up_to: int | None = None,
               category: str = "") -> GateResult:
        """A test's verdict: decided when its configuration was swept in stages, else now (stage 1)."""
        self._parts.planner.saw(PlannedTest(name, level, gate, category))
        decided = self._final.get((GateLabel(gate, category), name, self._parts.levels.level(level)))
        if decided is not None and must_win_up_to is None:
            return self._record(decided)
        result = self._guarded(gate, name, level, 1, must_win_up_to, category)
        self.stage1.append(result)
        return self._record(result)

    def record_soak(self, result: GateResult) -> GateResult:
        """A soak test's result (decided on its own windows, session/soak.py), kept with the others."""
        self.stage1.append(result)
        return self._record(result)

    def decide(self, name: str, stage: int) -> list[GateResult]:
        """Decide every planned gate test of a configuration whose cell was measured error-free."""
        out = []
        for t in self._parts.planner.current.selected_tests:
            if t.config != name or self._parts.cells.cell(name, t.level) is None or self._parts.cells.error(name, t.level):
                continue
            result = self._guarded(t.gate, name, t.level, stage, None, t.category)
            (self.stage1 if stage == 1 else self.later_stages).append(result)
            self._final[result.key] = result
            out.append(result)
        return out

    def runs_disagree(self, name: str, level: int) -> bool:
        """The cell's last measurement has runs that disagree, as its gates judge it (CellGates.runs_disagree)."""
        return self._cell_gates.runs_disagree(name, level)

    def final_results(self) -> list[GateResult]:
        """Each gate test's final decision (gates.final_results)."""
        return final_results(self.stage1, self.later_stages)

    def final_failures(self) -> list[GateResult]:
        """Every enforced failure: per-cell verdicts and Holm over each test's final decision."""
        return final_failures(self.stage1, self.later_stages, self._parts.suite.tolerances, self._parts.design)

    def _guarded(self, gate: str, name: str, level: int, stage: int, must_win_up_to: int | None,
                 category: str = "") -> GateResult:
        """Decide one gate; an unexpected exception is an internal error (not measured), never a regression."""
        label, at = GateLabel(gate, category), self._parts.levels.level(level)
        try:
            if gate == SPECULATION:
                return self._speculation.decide(name, level, must_win_up_to, stage)
            return self._cell_gates.decide(gate, name, level, stage, category)
        except ConfigUnavailable as exc:
            return GateResult(label, name, at, Verdict.SKIP if exc.skip else Verdict.ERROR, stage=stage,
                              problem=Problem(Why.UNAVAILABLE, exc.reason))
        except Exception as exc:  # noqa: BLE001 - reported as one line, the test is "not measured"
            return GateResult(label, name, at, Verdict.ERROR, stage=stage,
                              problem=Problem(Why.INTERNAL_ERROR, f"{type(exc).__name__}: {exc}"))

    def _record(self, result: GateResult) -> GateResult:
        """The result as its test reports it, with the server's and the measurement's notes."""
        notes = self._parts.pool.notes_for(result.config)
        cell = self._parts.cells.cell(result.config, result.level.value)
        if cell:
            notes += cell.notes
        recorded = replace(result, notes=tuple(dict.fromkeys([*result.notes, *notes])))
        self.results.append(recorded)
        return recorded
