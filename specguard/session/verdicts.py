"""Each gate test's verdict: which gate runs on which numbers, at which alpha, and the final
decision per test when a configuration was decided in stages (relaunch on suspicion)."""

from __future__ import annotations

from dataclasses import dataclass

from specguard.config import Suite
from specguard.decide.gates import (
    ERROR,
    SKIP,
    GateDesign,
    GateResult,
    final_failures,
    final_results,
    launch_history_gate,
    must_win_gate,
)
from specguard.labels import ACCEPT_LENGTH, SPECULATION, THROUGHPUT, GateLabel
from specguard.session.cells import ACCEPT_LENGTHS, REQUEST_GOODPUTS, THROUGHPUTS, CellStore
from specguard.session.history import Histories
from specguard.session.levels import SweepLevels
from specguard.session.options import ConfigUnavailable
from specguard.session.plan import PlannedTest, Planner
from specguard.session.servers import ServerPool


def _mean(xs: list[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


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


class Verdicts:
    """Decides gate tests on the session's cells and stored histories; keeps every result."""

    def __init__(self, suite: Suite, design: GateDesign, planner: Planner, pool: ServerPool, cells: CellStore,
                 histories: Histories, levels: SweepLevels) -> None:
        self._suite = suite
        self._design = design
        self._planner = planner
        self._pool = pool
        self._cells = cells
        self._histories = histories
        self._levels = levels
        self.results: list[GateResult] = []  # what each test reported, in order
        self.stage1: list[GateResult] = []
        self.later_stages: list[GateResult] = []  # decided again after a relaunch
        self._final: dict[tuple[str, str, int], GateResult] = {}  # (label, config, level) -> decided at sweep

    def report(self, gate: str, name: str, level: int, must_win_up_to: int | None = None,
               category: str = "") -> GateResult:
        """A test's verdict: decided when its configuration was swept in stages, else now (stage 1)."""
        self._planner.saw(PlannedTest(name, level, gate, category))
        decided = self._final.get((str(GateLabel(gate, category)), name, level))
        if decided is not None and must_win_up_to is None:
            return self._record(decided)
        result = self._guarded(gate, name, level, 1, must_win_up_to, category)
        self.stage1.append(result)
        return self._record(result)

    def decide(self, name: str, stage: int) -> list[GateResult]:
        """Decide every planned gate test of a configuration whose cell was measured error-free."""
        out = []
        for t in self._planner.current.selected_tests:
            if t.config != name or self._cells.cell(name, t.level) is None or self._cells.error(name, t.level):
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
        return final_failures(self.stage1, self.later_stages, self._suite.tolerances, self._design)

    def _guarded(self, gate: str, name: str, level: int, stage: int, must_win_up_to: int | None,
                 category: str = "") -> GateResult:
        """Decide one gate; an unexpected exception is an internal error (not measured), never a regression."""
        label = str(GateLabel(gate, category))
        try:
            if gate == SPECULATION:
                return self._speculation(name, level, must_win_up_to, stage)
            return self._history(gate, name, level, stage, category)
        except ConfigUnavailable as exc:
            return GateResult(label, name, level, SKIP if exc.skip else ERROR, exc.line, stage=stage)
        except Exception as exc:  # noqa: BLE001 - reported as one line, the test is "not measured"
            return GateResult(label, name, level, ERROR,
                              f"{label} {name} {self._levels.name(level)}: internal error (a specguard bug): "
                              f"{type(exc).__name__}: {exc}", stage=stage)

    def _history(self, gate: str, name: str, level: int, stage: int, category: str = "") -> GateResult:
        tol = self._suite.tolerances
        label = str(GateLabel(gate, category))
        metric = THROUGHPUTS if gate == THROUGHPUT else str(GateLabel(ACCEPT_LENGTHS, category))
        launches = self._cells.launch_values(name, level, metric)
        current = [v for launch in launches for v in launch]
        if gate == ACCEPT_LENGTH and not current:
            why = (f"no run has an accept length for prompt category {category!r}: its requests carried no "
                   f"spec_verify_ct (per-category accept lengths need per-request counts: api native or openai)"
                   if category else
                   "no run has an accept length: the requests carried no spec_verify_ct and the engine's "
                   "run-level source (if any) saw no drafts")
            return GateResult(label, name, level, ERROR, f"{label} {name} {self._levels.name(level)}: {why}", stage=stage)
        history, reason, is_error = self._histories.cell(name, level, metric)
        if history is None:
            return GateResult(label, name, level, ERROR if is_error else SKIP, reason, current=_mean(current), stage=stage)
        if gate == THROUGHPUT:
            extra = dict(tolerance=tol.throughput, prior_between_sd=tol.prior_between_sd)
        else:
            extra = dict(tolerance=tol.accept_length, prior_between_sd=tol.prior_between_sd_accept, prior_day_sd=0.0)
        alpha = self._planner.current.alpha_for(gate, name, level, category)
        return launch_history_gate(label, name, level, launches, history, alpha_cell=alpha, rule=tol.fail_rule,
                                   design=self._design, stage=stage, **extra)

    def _speculation(self, name: str, level: int, must_win_up_to: int | None, stage: int) -> GateResult:
        """The speculative configuration against its reference: measured in this session where it
        was, else its stored sessions of the same environment."""
        ref = self._suite.servers[name].reference
        pair = _Pair(name, ref or "", level, stage, where=f"speculation {name} {self._levels.name(level)}",
                     goodput=self._suite.tolerances.speculation_metric == "goodput")
        if ref is None:
            return pair.error(f"configuration has no reference in {self._suite.path}")
        spec = self._cells.launch_values(name, level, pair.metric)
        if pair.goodput and any(v <= 0 for launch in spec for v in launch):
            return pair.error(f"goodput 0 in a run: no request met sweep.slo = {self._suite.sweep.slo!r}, so the goodput "
                              f"ratio is undefined; loosen the SLOs or lower the level")
        if self._cells.cell(ref, level) is not None:
            return self._against_measured(pair, spec, must_win_up_to)
        return self._against_stored(pair, spec, must_win_up_to)

    def _against_measured(self, pair: _Pair, spec: list[list[float]], must_win_up_to: int | None) -> GateResult:
        """The reference was measured in this session (the day cancels)."""
        ref_cell = self._cells[(pair.ref, pair.level)]
        if ref_cell.error:
            return pair.error(f"reference {pair.ref} {self._levels.name(pair.level)} could not be measured: "
                              f"{ref_cell.error.splitlines()[0]}")
        ref_values = self._cells.launch_values(pair.ref, pair.level, pair.metric)
        if pair.goodput and any(v <= 0 for launch in ref_values for v in launch):
            return pair.error(f"reference {pair.ref} had goodput 0 in a run (no request met sweep.slo = "
                              f"{self._suite.sweep.slo!r}); the goodput ratio is undefined")
        role = ", measured as reference" if (pair.ref, pair.level) in self._cells.reference_roles else ""
        return self._compare(pair, spec, must_win_up_to, f"{pair.ref} (this session{role})", ref_values, None)

    def _against_stored(self, pair: _Pair, spec: list[list[float]], must_win_up_to: int | None) -> GateResult:
        """The reference could not be measured here: its stored sessions of this environment, if any."""
        ref = pair.ref
        failure = self._pool.state(ref).failure
        if failure is not None and not failure.skip:
            return pair.error(f"reference {ref!r} could not be measured: {failure.line}")
        why = f"reference {ref!r} cannot be measured here ({failure.line})" if failure else f"reference {ref!r} was not measured"
        history, reason, is_error = self._histories.reference(pair.name, ref, pair.level, pair.metric)
        if history is None:
            return GateResult(SPECULATION, pair.name, pair.level, ERROR if is_error else SKIP,
                              f"{pair.where}: {why} and has no usable stored baseline: {reason}", stage=pair.stage)
        label = f"{ref} (stored, {len(history)} session{'s' if len(history) != 1 else ''}, same environment)"
        return self._compare(pair, spec, must_win_up_to, label, None, history)

    def _compare(self, pair: _Pair, spec: list[list[float]], must_win_up_to: int | None, label: str,
                 reference: list[list[float]] | None, reference_history: list[list[float]] | None) -> GateResult:
        limit = self._planner.must_win_limit(pair.name, must_win_up_to)
        result = must_win_gate(
            pair.name, pair.level, spec, reference, label, must_win=limit is not None and pair.level <= limit,
            tol=self._suite.tolerances, alpha_cell=self._planner.current.alpha_for(SPECULATION, pair.name, pair.level),
            design=self._design, spread=self._histories.spread(pair.metric, self._planner.current.selected_cells),
            reference_history=reference_history, stage=pair.stage,
            pair_histories=(self._histories.stored(pair.name, pair.level, pair.metric),
                            self._histories.stored(pair.ref, pair.level, pair.metric)))
        return _on_goodput(result) if pair.goodput else result

    def _record(self, result: GateResult) -> GateResult:
        """The result as its test reports it: named at its level, with the server's notes."""
        if self._levels.rate:  # the gates name the level "c8"; at a rate level it is "r8"
            result.message = result.message.replace(f" {result.config} c{result.concurrency}",
                                                    f" {result.config} r{result.concurrency}")
        notes = self._pool.warnings_for(result.config)
        cell = self._cells.cell(result.config, result.concurrency)
        if cell:
            notes = notes + cell.warnings
        if notes and "\n  notes: " not in result.message:
            result.message += "\n  notes: " + "\n  notes: ".join(dict.fromkeys(notes))
        self.results.append(result)
        return result


def _on_goodput(result: GateResult) -> GateResult:
    """A speculation gate decided on goodput (advanced.speculation_metric = "goodput") says so."""
    where = f"{result.config} c{result.concurrency}:"
    result.message = result.message.replace(" tok/s", " good req/s").replace(
        f"speculation {where}", f"speculation (goodput) {where}")
    return result
