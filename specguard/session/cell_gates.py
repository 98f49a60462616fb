"""The gates of one cell against its stored history: tok/s, accept length (and each prompt
category's), and the engine's step time; for a speculative configuration also whether speculation
runs at all, whether its acceptance drifts within the session, and which half a tok/s change
comes from (the engine's step time or the drafter's accept length)."""

from __future__ import annotations

from specguard.decide.gates import (
    ATTRIBUTION_CONFIDENCE,
    ERROR,
    FAIL,
    SKIP,
    GateResult,
    attribution,
    launch_history_gate,
    step_time_gate,
)
from specguard.decide.stats import RatioEstimate, downward_trend
from specguard.labels import ACCEPT_LENGTH, STEP_TIME, THROUGHPUT, GateLabel
from specguard.session.cells import ACCEPT_LENGTHS, STEP_RATES, THROUGHPUTS
from specguard.session.parts import SessionParts

DRIFT_P = 0.01  # one-sided p below which a cell's falling accept length is reported


def _mean(xs: list[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


class CellGates:
    """Decides a cell's history gates on the session's cells and the stored sessions."""

    def __init__(self, parts: SessionParts) -> None:
        self._parts = parts

    def decide(self, gate: str, name: str, level: int, stage: int, category: str = "") -> GateResult:
        label = str(GateLabel(gate, category))
        metric = {THROUGHPUT: THROUGHPUTS, STEP_TIME: STEP_RATES}.get(gate, str(GateLabel(ACCEPT_LENGTHS, category)))
        launches = self._parts.cells.launch_values(name, level, metric)
        current = [v for launch in launches for v in launch]
        where = f"{label} {name} {self._parts.levels.name(level)}"
        if gate == ACCEPT_LENGTH:
            stopped = self._not_running(name, level, current, stage) if not category else None
            if stopped is not None:
                return stopped
            if not current:
                return GateResult(label, name, level, ERROR, f"{where}: {self._no_accept_length(category)}", stage=stage)
        if gate == STEP_TIME and not current:
            return GateResult(label, name, level, ERROR, f"{where}: no run has a step time: no request decoded two or "
                              f"more tokens", stage=stage)
        history, reason, is_error = self._parts.histories.cell(name, level, metric)
        if history is None:
            result = GateResult(label, name, level, ERROR if is_error else SKIP, reason, current=_mean(current),
                                stage=stage)
        else:
            result = self._against_history(gate, label, name, level, stage, launches, history, category)
        if gate == ACCEPT_LENGTH and not category:
            self._drift(result, name, level)
        return result

    def _against_history(self, gate: str, label: str, name: str, level: int, stage: int,
                         launches: list[list[float]], history: list[list[float]], category: str) -> GateResult:
        tol = self._parts.suite.tolerances
        alpha = self._parts.planner.current.alpha_for(gate, name, level, category)
        if gate == STEP_TIME:
            return step_time_gate(name, level, launches, history, tolerance=tol.step_time,
                                  prior_between_sd=tol.prior_between_sd, alpha_cell=alpha, rule=tol.fail_rule,
                                  design=self._parts.design, stage=stage)
        if gate == ACCEPT_LENGTH:
            return launch_history_gate(label, name, level, launches, history, tolerance=tol.accept_length,
                                       prior_between_sd=tol.prior_between_sd_accept, prior_day_sd=0.0, alpha_cell=alpha,
                                       rule=tol.fail_rule, design=self._parts.design, stage=stage)
        result = launch_history_gate(label, name, level, launches, history, tolerance=tol.throughput,
                                     prior_between_sd=tol.prior_between_sd, alpha_cell=alpha, rule=tol.fail_rule,
                                     design=self._parts.design, stage=stage)
        if self._parts.suite.servers[name].speculative and result.estimate is not None:
            self._attribute(result, name, level)
        return result

    def _attribute(self, result: GateResult, name: str, level: int) -> None:
        """Which half of a speculative cell's tok/s change moved, with intervals, in its message."""
        step = self._estimate(STEP_TIME, name, level)
        accept = self._estimate(ACCEPT_LENGTH, name, level)
        if step is None and accept is None:
            return
        half, text = attribution(step, accept)
        result.attribution = half
        moved = {"engine": "the engine moved", "drafter": "the drafter moved", "both": "both halves moved"}.get(
            half, "neither half resolved")
        result.message = result.message.replace(" -> ", f"; {text} ({moved}) -> ", 1)

    def _estimate(self, gate: str, name: str, level: int) -> RatioEstimate | None:
        """A gate's estimate at the attribution's confidence (not a decision: nothing is recorded)."""
        metric = STEP_RATES if gate == STEP_TIME else ACCEPT_LENGTHS
        launches = self._parts.cells.launch_values(name, level, metric)
        history, _, _ = self._parts.histories.cell(name, level, metric)
        if not history or sum(len(launch) for launch in launches) < 2:
            return None
        tol = self._parts.suite.tolerances
        sd = tol.prior_between_sd_accept if gate == ACCEPT_LENGTH else tol.prior_between_sd
        one_sided = (1 - ATTRIBUTION_CONFIDENCE) / 2
        return launch_history_gate(gate, name, level, launches, history, tolerance=0.0, prior_between_sd=sd,
                                   alpha_cell=one_sided, rule=tol.fail_rule, design=self._parts.design,
                                   prior_day_sd=0.0 if gate == ACCEPT_LENGTH else None).estimate

    def _not_running(self, name: str, level: int, accept: list[float], stage: int) -> GateResult | None:
        """Speculation silently off (sglang#24795, "stuck at 1"): a failure by name, baseline or not."""
        cfg = self._parts.suite.servers[name]
        if not cfg.speculative:
            return None
        where = f"accept_length {name} {self._parts.levels.name(level)}"
        handle = self._parts.pool.state(name).handle
        server = handle.effective.speculative_algorithm or (handle.effective.num_draft_tokens and "speculation") \
            if handle is not None else None
        if not accept and server:
            return GateResult(ACCEPT_LENGTH, name, level, FAIL, f"{where}: speculation is not running: the server runs "
                              f"{server} but its requests carry no verify counts and its own counters saw no drafts",
                              stage=stage)
        floor = cfg.accept_length_floor
        median = sorted(accept)[len(accept) // 2] if accept else None
        if median is not None and median <= floor:
            return GateResult(ACCEPT_LENGTH, name, level, FAIL, f"{where}: speculation is not running: accept length "
                              f"{median:.3f} <= min_accept_length {floor:g} (each verify step keeps almost no draft)",
                              current=median, stage=stage)
        return None

    @staticmethod
    def _no_accept_length(category: str) -> str:
        if category:
            return (f"no run has an accept length for prompt category {category!r}: its requests carried no "
                    f"spec_verify_ct (per-category accept lengths need per-request counts: api native or openai)")
        return ("no run has an accept length: the requests carried no spec_verify_ct and the engine's "
                "run-level source (if any) saw no drafts")

    def _drift(self, result: GateResult, name: str, level: int) -> None:
        """Acceptance falling within the session (vllm#41838): the cell's runs in time order."""
        runs = [v for launch in self._parts.cells.launch_values(name, level, ACCEPT_LENGTHS) for v in launch]
        trend = downward_trend(runs) if len(runs) >= 4 else None
        if trend is None or trend.p_value >= DRIFT_P or trend.change >= 0:
            return
        line = (f"accept length fell {trend.change:+.1%} across the cell's {len(runs)} runs in time order "
                f"(trend p = {trend.p_value:.2g} < {DRIFT_P}): acceptance drifts within the session")
        if self._parts.suite.sweep.accept_drift == "fail" and result.verdict not in (FAIL, ERROR):
            result.verdict = FAIL
            result.message = f"accept_length {name} {self._parts.levels.name(level)}: {line} (advanced.accept_drift = \"fail\")"
        else:
            result.message += f"\n  notes: {line}"
