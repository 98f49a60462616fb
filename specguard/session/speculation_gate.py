"""The speculation gate: a speculative configuration against its non-speculative reference at one
level, measured in this session where it was (the day cancels), else the reference's stored
sessions of the same environment."""

from __future__ import annotations

from dataclasses import replace

from specguard.decide.consistency import StallBasis
from specguard.decide.gates import CellRuns, GateTest, ReferenceSide, must_win_gate
from specguard.decide.result import Against, Factors, GateResult, Problem, Versus, Why
from specguard.labels import SPECULATION, GateLabel, Verdict
from specguard.session.cells import ACCEPT_LENGTHS, REQUEST_GOODPUTS, STEP_RATES, THROUGHPUTS
from specguard.session.parts import SessionParts


class SpeculationGate:
    """Decides speculation tests on the session's cells and the references' stored sessions."""

    def __init__(self, parts: SessionParts) -> None:
        self._parts = parts

    @property
    def _goodput(self) -> bool:
        return self._parts.suite.tolerances.speculation_metric == "goodput"

    @property
    def _metric(self) -> str:
        return REQUEST_GOODPUTS if self._goodput else THROUGHPUTS

    def decide(self, name: str, level: int, must_win_up_to: int | None, stage: int) -> GateResult:
        """The speculative configuration against its reference: measured in this session where it
        was, else its stored sessions of the same environment."""
        limit = self._parts.planner.must_win_limit(name, must_win_up_to)
        test = GateTest(GateLabel(SPECULATION), name, self._parts.levels.level(level),
                        self._parts.planner.current.alpha_for(SPECULATION, name, level),
                        enforced=limit is not None and level <= limit, stage=stage)
        ref = self._parts.suite.servers[name].reference
        if ref is None:
            return test.problem(Verdict.ERROR, Problem(Why.NO_REFERENCE, str(self._parts.suite.path)))
        spec = self._parts.cells.launch_values(name, level, self._metric)
        if self._goodput and any(v <= 0 for launch in spec for v in launch):
            return test.problem(Verdict.ERROR, Problem(Why.ZERO_GOODPUT, str(self._parts.suite.sweep.slo)))
        if self._parts.cells.cell(ref, level) is not None:
            return self._against_measured(test, ref, spec)
        return self._against_stored(test, ref, spec)

    def _against_measured(self, test: GateTest, ref: str, spec: list[list[float]]) -> GateResult:
        """The reference was measured in this session (the day cancels)."""
        level = test.level.value
        ref_cell = self._parts.cells[(ref, level)]
        if ref_cell.error:
            return test.problem(Verdict.ERROR, Problem(Why.REFERENCE_CELL_FAILED, ref_cell.error.splitlines()[0],
                                                       reference=ref))
        ref_values = self._parts.cells.launch_values(ref, level, self._metric)
        if self._goodput and any(v <= 0 for launch in ref_values for v in launch):
            return test.problem(Verdict.ERROR, Problem(Why.ZERO_GOODPUT, str(self._parts.suite.sweep.slo), reference=ref))
        role = Against.REFERENCE_ROLE if (ref, level) in self._parts.cells.reference_roles else Against.REFERENCE
        side = ReferenceSide(Versus(role, ref), launches=ref_values, stalls=self._stall_basis(ref, level))
        result = self._compare(test, spec, side)
        return result if self._goodput else replace(result, factors=self._factors(test, ref))

    def _against_stored(self, test: GateTest, ref: str, spec: list[list[float]]) -> GateResult:
        """The reference could not be measured here: its stored sessions of this environment, if any."""
        failure = self._parts.pool.state(ref).failure
        if failure is not None and not failure.skip:
            return test.problem(Verdict.ERROR, Problem(Why.REFERENCE_FAILED, failure.reason, reference=ref))
        history, reason, missing = self._parts.histories.reference(test.config, ref, test.level.value, self._metric)
        if history is None:
            problem = Problem(Why.REFERENCE_UNSTORED, reason, reference=ref, context=failure.line if failure else "")
            return test.problem(Verdict.ERROR if missing == Why.HISTORY_UNREADABLE else Verdict.SKIP, problem)
        side = ReferenceSide(Versus(Against.STORED_REFERENCE, ref, sessions=len(history)), history=history)
        return self._compare(test, spec, side)

    def _compare(self, test: GateTest, spec: list[list[float]], side: ReferenceSide) -> GateResult:
        parts, current = self._parts, self._parts.planner.current
        name, level, ref = test.config, test.level.value, side.versus.name
        tol = parts.suite.tolerances
        spec_history = parts.histories.stored(name, level, self._metric)
        side = replace(side, session_spread=parts.histories.spread(self._metric, current.selected_cells),
                       stored=parts.histories.stored(ref, level, self._metric))
        result = must_win_gate(test, CellRuns(spec, spec_history, self._stall_basis(name, level)), side,
                               tol.speculation_min_gain, parts.design.prior(tol.prior_between_sd),
                               parts.design.rule(tol.fail_rule))
        return replace(result, goodput=self._goodput)

    def _stall_basis(self, name: str, level: int) -> StallBasis | None:
        """tok/s's stalls judged as the tok/s gate judges them (SessionParts.stall_basis); good
        requests/s on its own values."""
        return None if self._goodput else self._parts.stall_basis(name, level)

    def _factors(self, test: GateTest, ref: str) -> Factors | None:
        """Where the speculative configuration's speed comes from, against its reference measured
        here: its accept length, and its verify step against the reference's decode step."""
        cells, level = self._parts.cells, test.level.value
        accept = [v for launch in cells.launch_values(test.config, level, ACCEPT_LENGTHS) for v in launch]
        spec_rates = [v for launch in cells.launch_values(test.config, level, STEP_RATES) for v in launch]
        ref_rates = [v for launch in cells.launch_values(ref, level, STEP_RATES) for v in launch]
        if not (accept and spec_rates and ref_rates):
            return None
        return Factors(accept_length=sum(accept) / len(accept), reference_step_ms=1e3 * len(ref_rates) / sum(ref_rates),
                       step_ms=1e3 * len(spec_rates) / sum(spec_rates))

