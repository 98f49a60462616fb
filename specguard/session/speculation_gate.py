"""The speculation gate: a speculative configuration against its non-speculative reference at one
level, measured in this session where it was (the day cancels), else the reference's stored
sessions of the same environment."""

from __future__ import annotations

from dataclasses import dataclass

from specguard.decide.gates import ERROR, SKIP, GateResult, must_win_gate
from specguard.labels import SPECULATION
from specguard.session.cells import REQUEST_GOODPUTS, STEP_RATES, THROUGHPUTS
from specguard.session.parts import SessionParts


@dataclass(frozen=True)
class _Pair:
    """One speculation test: the speculative configuration and its reference at one level."""

    name: str
    ref: str
    level: int
    stage: int
    where: str  # "speculation eagle3 c16": how its messages begin
    goodput: bool  # decided on request goodput rather than tok/s

    @property
    def metric(self) -> str:
        return REQUEST_GOODPUTS if self.goodput else THROUGHPUTS

    def error(self, message: str) -> GateResult:
        return GateResult(SPECULATION, self.name, self.level, ERROR, f"{self.where}: {message}", stage=self.stage)


class SpeculationGate:
    """Decides speculation tests on the session's cells and the references' stored sessions."""

    def __init__(self, parts: SessionParts) -> None:
        self._parts = parts

    def decide(self, name: str, level: int, must_win_up_to: int | None, stage: int) -> GateResult:
        """The speculative configuration against its reference: measured in this session where it
        was, else its stored sessions of the same environment."""
        ref = self._parts.suite.servers[name].reference
        pair = _Pair(name, ref or "", level, stage, where=f"speculation {name} {self._parts.levels.name(level)}",
                     goodput=self._parts.suite.tolerances.speculation_metric == "goodput")
        if ref is None:
            return pair.error(f"configuration has no reference in {self._parts.suite.path}")
        spec = self._parts.cells.launch_values(name, level, pair.metric)
        if pair.goodput and any(v <= 0 for launch in spec for v in launch):
            return pair.error(f"goodput 0 in a run: no request met sweep.slo = {self._parts.suite.sweep.slo!r}, so the goodput "
                              f"ratio is undefined; loosen the SLOs or lower the level")
        if self._parts.cells.cell(ref, level) is not None:
            return self._against_measured(pair, spec, must_win_up_to)
        return self._against_stored(pair, spec, must_win_up_to)

    def _against_measured(self, pair: _Pair, spec: list[list[float]], must_win_up_to: int | None) -> GateResult:
        """The reference was measured in this session (the day cancels)."""
        ref_cell = self._parts.cells[(pair.ref, pair.level)]
        if ref_cell.error:
            return pair.error(f"reference {pair.ref} {self._parts.levels.name(pair.level)} could not be measured: "
                              f"{ref_cell.error.splitlines()[0]}")
        ref_values = self._parts.cells.launch_values(pair.ref, pair.level, pair.metric)
        if pair.goodput and any(v <= 0 for launch in ref_values for v in launch):
            return pair.error(f"reference {pair.ref} had goodput 0 in a run (no request met sweep.slo = "
                              f"{self._parts.suite.sweep.slo!r}); the goodput ratio is undefined")
        role = ", measured as reference" if (pair.ref, pair.level) in self._parts.cells.reference_roles else ""
        return self._compare(pair, spec, must_win_up_to, f"{pair.ref} (this session{role})", ref_values, None)

    def _against_stored(self, pair: _Pair, spec: list[list[float]], must_win_up_to: int | None) -> GateResult:
        """The reference could not be measured here: its stored sessions of this environment, if any."""
        ref = pair.ref
        failure = self._parts.pool.state(ref).failure
        if failure is not None and not failure.skip:
            return pair.error(f"reference {ref!r} could not be measured: {failure.line}")
        why = f"reference {ref!r} cannot be measured here ({failure.line})" if failure else f"reference {ref!r} was not measured"
        history, reason, is_error = self._parts.histories.reference(pair.name, ref, pair.level, pair.metric)
        if history is None:
            return GateResult(SPECULATION, pair.name, pair.level, ERROR if is_error else SKIP,
                              f"{pair.where}: {why} and has no usable stored baseline: {reason}", stage=pair.stage)
        label = f"{ref} (stored, {len(history)} session{'s' if len(history) != 1 else ''}, same environment)"
        return self._compare(pair, spec, must_win_up_to, label, None, history)

    def _compare(self, pair: _Pair, spec: list[list[float]], must_win_up_to: int | None, label: str,
                 reference: list[list[float]] | None, reference_history: list[list[float]] | None) -> GateResult:
        limit = self._parts.planner.must_win_limit(pair.name, must_win_up_to)
        parts, current = self._parts, self._parts.planner.current
        result = must_win_gate(
            pair.name, pair.level, spec, reference, label, must_win=limit is not None and pair.level <= limit,
            tol=parts.suite.tolerances, alpha_cell=current.alpha_for(SPECULATION, pair.name, pair.level),
            design=parts.design, spread=parts.histories.spread(pair.metric, current.selected_cells),
            reference_history=reference_history, stage=pair.stage,
            pair_histories=(parts.histories.stored(pair.name, pair.level, pair.metric),
                            parts.histories.stored(pair.ref, pair.level, pair.metric)))
        if reference is not None and not pair.goodput:
            result.message = result.message.replace(" -> ", self._halves(pair) + " -> ", 1)
        return _on_goodput(result) if pair.goodput else result

    def _halves(self, pair: _Pair) -> str:
        """Where the speculative configuration's speed comes from, against its reference measured
        here: its accept length, and its verify step against the reference's decode step."""
        accept = [v for launch in self._parts.cells.launch_values(pair.name, pair.level, "accept_lengths") for v in launch]
        spec_rates = [v for launch in self._parts.cells.launch_values(pair.name, pair.level, STEP_RATES) for v in launch]
        ref_rates = [v for launch in self._parts.cells.launch_values(pair.ref, pair.level, STEP_RATES) for v in launch]
        if not (accept and spec_rates and ref_rates):
            return ""
        spec_ms, ref_ms = 1e3 * len(spec_rates) / sum(spec_rates), 1e3 * len(ref_rates) / sum(ref_rates)
        mean_accept = sum(accept) / len(accept)
        # tok/s per request = accept length / step time: the drafter's factor times the engine's
        return (f"; the drafter's accept length {mean_accept:.2f} x the engine's step time ratio {ref_ms / spec_ms:.2f} "
                f"({ref_ms:.3g} ms the reference's decode step / {spec_ms:.3g} ms the verify step) "
                f"= {mean_accept * ref_ms / spec_ms:.2f}")


def _on_goodput(result: GateResult) -> GateResult:
    """A speculation gate decided on goodput (advanced.speculation_metric = "goodput") says so."""
    where = f"{result.config} c{result.concurrency}:"
    result.message = result.message.replace(" tok/s", " good req/s").replace(
        f"speculation {where}", f"speculation (goodput) {where}")
    return result
