"""Short calls of the gates for tests: a cell named as the tests name it ("throughput", "x", 4), the
suite's tolerances and priors as keywords, built into decide/'s value objects (GateTest, Prior,
Rule, ReferenceSide) exactly as session/cell_gates.py and session/speculation_gate.py build them."""

from __future__ import annotations

from specguard.config import Tolerances
from specguard.decide.gates import (
    CellRuns,
    GateDesign,
    GateTest,
    ReferenceSide,
    launch_history_gate,
    must_win_gate,
    step_time_gate,
)
from specguard.decide.prior import SpreadEstimate
from specguard.decide.result import Against, GateResult, Versus
from specguard.decide.stats import RatioEstimate
from specguard.labels import GateLabel, Level, Verdict

DESIGN = GateDesign()  # the library's design


def gate_test(gate: str, config: str, c: int, alpha: float, *, stage: int = 1, enforced: bool = True,
              rate: bool = False) -> GateTest:
    return GateTest(GateLabel.parse(gate), config, Level(c, rate), alpha, enforced=enforced, stage=stage)


def history_gate(gate: str, config: str, c: int, launches, history, *, tolerance: float, prior_between_sd: float,
                 alpha_cell: float, rule: str = "significant", design: GateDesign = DESIGN,
                 prior_day_sd: float | None = None, stage: int = 1) -> GateResult:
    return launch_history_gate(gate_test(gate, config, c, alpha_cell, stage=stage), CellRuns(launches, history), tolerance,
                               design.prior(prior_between_sd, prior_day_sd), design.rule(rule))


def step_gate(config: str, c: int, launches, history, *, tolerance: float, prior_between_sd: float, alpha_cell: float,
              rule: str = "significant", design: GateDesign = DESIGN, stage: int = 1) -> GateResult:
    return step_time_gate(gate_test("step_time", config, c, alpha_cell, stage=stage), CellRuns(launches, history), tolerance,
                          design.prior(prior_between_sd), design.rule(rule))


def speculation_gate(config: str, c: int, spec, reference, reference_name: str, *, must_win: bool, tol: Tolerances,
                     alpha_cell: float, design: GateDesign = DESIGN, spread: SpreadEstimate | None = None,
                     reference_history=None, stage: int = 1, pair_histories=None) -> GateResult:
    """The speculation gate against the reference's launches (``reference``) or, without them, its
    stored sessions (``reference_history``)."""
    if reference:
        versus = Versus(Against.REFERENCE, reference_name)
    else:
        versus = Versus(Against.STORED_REFERENCE, reference_name, len(reference_history or []))
    side = ReferenceSide(versus, launches=reference or None, history=reference_history,
                         stored=pair_histories[1] if pair_histories is not None else None, session_spread=spread)
    test = gate_test("speculation", config, c, alpha_cell, stage=stage, enforced=must_win)
    spec_history = pair_histories[0] if pair_histories else ()
    return must_win_gate(test, CellRuns(spec, spec_history), side, tol.speculation_min_gain, design.prior(tol.prior_between_sd),
                         design.rule(tol.fail_rule))


def result(gate: str, config: str, c: int, verdict: str, estimate: RatioEstimate | None = None, *,
           rate: bool = False, **fields) -> GateResult:
    """A hand-made decision: only the fields a test names matter."""
    return GateResult(GateLabel.parse(gate), config, Level(c, rate), Verdict(verdict), estimate, **fields)
