"""Each gate test's verdict: which gate runs on which numbers, at which alpha, and the final
decision per test when a configuration was decided in stages (relaunch on suspicion)."""

from __future__ import annotations

from specguard.decide.gates import ERROR, SKIP, GateResult, final_failures, final_results
from specguard.labels import SPECULATION, GateLabel
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
        self._final: dict[tuple[str, str, int], GateResult] = {}  # (label, config, level) -> decided at sweep
        self._cell_gates = CellGates(parts)
        self._speculation = SpeculationGate(parts)

    def report(self, gate: str, name: str, level: int, must_win_up_to: int | None = None,
               category: str = "") -> GateResult:
        """A test's verdict: decided when its configuration was swept in stages, else now (stage 1)."""
        self._parts.planner.saw(PlannedTest(name, level, gate, category))
        decided = self._final.get((str(GateLabel(gate, category)), name, level))
        if decided is not None and must_win_up_to is None:
            return self._record(decided)
        result = self._guarded(gate, name, level, 1, must_win_up_to, category)
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
            self._final[(str(GateLabel(t.gate, t.category)), name, t.level)] = result
            out.append(result)
        return out

    def final_results(self) -> list[GateResult]:
        """Each gate test's final decision (gates.final_results)."""
        return final_results(self.stage1, self.later_stages)

    def final_failures(self) -> list[GateResult]:
        """Every enforced failure: per-cell verdicts and Holm over each test's final decision."""
        return final_failures(self.stage1, self.later_stages, self._parts.suite.tolerances, self._parts.design)

    def _guarded(self, gate: str, name: str, level: int, stage: int, must_win_up_to: int | None,
                 category: str = "") -> GateResult:
        """Decide one gate; an unexpected exception is an internal error (not measured), never a regression."""
        label = str(GateLabel(gate, category))
        try:
            if gate == SPECULATION:
                return self._speculation.decide(name, level, must_win_up_to, stage)
            return self._cell_gates.decide(gate, name, level, stage, category)
        except ConfigUnavailable as exc:
            return GateResult(label, name, level, SKIP if exc.skip else ERROR, exc.line, stage=stage)
        except Exception as exc:  # noqa: BLE001 - reported as one line, the test is "not measured"
            return GateResult(label, name, level, ERROR,
                              f"{label} {name} {self._parts.levels.name(level)}: internal error (a specguard bug): "
                              f"{type(exc).__name__}: {exc}", stage=stage)

    def _record(self, result: GateResult) -> GateResult:
        """The result as its test reports it: named at its level, with the server's notes."""
        if self._parts.levels.rate:  # the gates name the level "c8"; at a rate level it is "r8"
            result.message = result.message.replace(f" {result.config} c{result.concurrency}",
                                                    f" {result.config} r{result.concurrency}")
        notes = self._parts.pool.warnings_for(result.config)
        cell = self._parts.cells.cell(result.config, result.concurrency)
        if cell:
            notes = notes + cell.warnings
        if notes and "\n  notes: " not in result.message:
            result.message += "\n  notes: " + "\n  notes: ".join(dict.fromkeys(notes))
        self.results.append(result)
        return result

