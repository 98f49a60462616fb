"""The gates of one cell against its stored history: tok/s, accept length (and each prompt
category's), and the engine's step time; for a speculative configuration also whether speculation
runs at all, whether its acceptance drifts within the session, and which half a tok/s change
comes from (the engine's step time or the drafter's accept length)."""

from __future__ import annotations

from dataclasses import replace

from specguard.decide.gates import (
    ATTRIBUTION_CONFIDENCE,
    CellRuns,
    GateTest,
    attribution,
    launch_history_gate,
    step_time_gate,
)
from specguard.decide.result import Attribution, Drift, GateResult, Half, PositionShare, Problem, Why
from specguard.decide.stats import RatioEstimate, Rule, downward_trend
from specguard.labels import ACCEPT_LENGTH, STEP_TIME, THROUGHPUT, GateLabel, Verdict
from specguard.session.cells import ACCEPT_LENGTHS, STEP_RATES, THROUGHPUTS, position_metric
from specguard.session.parts import SessionParts

DRIFT_P = 0.01  # one-sided p below which a cell's falling accept length is reported
FORCED_SLACK = 0.01  # tokens per verify step a forced run may sit outside what its request lengths allow
MAX_POSITIONS = 16  # draft positions looked at (SGLang's --speculative-num-draft-tokens tops out near here)


def _mean(xs: list[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


class CellGates:
    """Decides a cell's history gates on the session's cells and the stored sessions."""

    def __init__(self, parts: SessionParts) -> None:
        self._parts = parts

    def _test(self, gate: str, name: str, level: int, stage: int, category: str = "") -> GateTest:
        alpha = self._parts.planner.current.alpha_for(gate, name, level, category)
        return GateTest(GateLabel(gate, category), name, self._parts.levels.level(level), alpha, stage=stage)

    def decide(self, gate: str, name: str, level: int, stage: int, category: str = "") -> GateResult:
        test = self._test(gate, name, level, stage, category)
        metric = {THROUGHPUT: THROUGHPUTS, STEP_TIME: STEP_RATES}.get(gate, str(GateLabel(ACCEPT_LENGTHS, category)))
        launches = self._parts.cells.launch_values(name, level, metric)
        current = [v for launch in launches for v in launch]
        early = self._before_history(test, current)
        if early is not None and early.problem is not None and early.problem.why == Why.ACCEPT_AT_FLOOR:
            return self._positions(early, test)  # where the drafts stopped agreeing, against the baseline
        if early is not None:
            return early
        history, reason, missing = self._parts.histories.cell(name, level, metric)
        if history is None:
            missing = missing or Why.NO_BASELINE
            verdict = Verdict.ERROR if missing == Why.HISTORY_UNREADABLE else Verdict.SKIP
            result = test.problem(verdict, Problem(missing, reason), current=_mean(current))
        else:
            stalls = self._parts.stall_basis(name, level) if metric == THROUGHPUTS else None
            result = self._against_history(test, CellRuns(launches, history, stalls))
        if gate == ACCEPT_LENGTH and not category:
            result = self._drift(self._positions(result, test), name, level)
        return result

    def runs_disagree(self, name: str, level: int) -> bool:
        """The cell's last measurement (launch) of tok/s or step rate has runs that disagree, judged
        as the gate judges them (its stall basis, the limit pooled with its stored sessions)."""
        for metric in (THROUGHPUTS, STEP_RATES):
            launches = self._parts.cells.launch_values(name, level, metric)
            if not launches:
                continue
            history = self._parts.histories.cell(name, level, metric)[0] or []
            cell = CellRuns(launches, history, self._parts.stall_basis(name, level) if metric == THROUGHPUTS else None)
            if any(a.launch == len(launches) for a in cell.consistent()[1]):
                return True
        return False

    def _forced(self, test: GateTest) -> GateResult:
        """Acceptance forced to N tokens per verify step (SGLANG_SIMULATE_ACC_LEN, SGLang 0.5.23
        srt/speculative/spec_utils.py generate_simulated_accept_index): the forced value is the
        reference, no baseline needed. A run of n requests and T completion tokens counts the
        prefill token of each request outside any verify step, and a request's last step keeps
        what max_tokens leaves (1..N), so its verify steps v lie in [(T - n) / N, (T - n) / N + n)
        and its accept length T / v between T / upper and T / lower; a run outside by more than
        FORCED_SLACK fails (the server does not apply the forced acceptance)."""
        n_forced = self._parts.suite.servers[test.config].simulate_accept_length
        assert n_forced is not None
        cell = self._parts.cells.cell(test.config, test.level.value)
        runs = [(r.accept_length, r) for r in (cell.runs if cell else [])
                if r.accept_length is not None and r.total_verify_ct]
        if not runs:
            return test.problem(Verdict.ERROR, Problem(Why.NO_ACCEPT_LENGTH))
        misses = []
        for accept, r in runs:
            steps_low = (r.total_output_tokens - r.completed) / n_forced
            high, low = r.total_output_tokens / max(steps_low, 1e-9), r.total_output_tokens / (steps_low + r.completed)
            misses.append((max(low - accept, accept - high, 0.0), accept))
        worst = max(misses)[1]
        outside = sum(1 for miss, _ in misses if miss > FORCED_SLACK)
        median = sorted(a for a, _ in runs)[len(runs) // 2]
        return test.result(Verdict.FAIL if outside else Verdict.PASS, current=median, reference=float(n_forced),
                           tolerance=FORCED_SLACK, problem=Problem(Why.FORCED_ACCEPT, value=worst,
                                                                   limit=float(n_forced), count=outside))

    def _positions(self, result: GateResult, test: GateTest) -> GateResult:
        """Acceptance per draft position against the stored sessions (the correct-drafts
        histogram): a drafter whose later positions stopped accepting can hold a mean accept
        length within tolerance while one position collapses (seed 001's mis-wired head). The
        accept-length test's alpha is split over the positions the stored sessions reached
        (Bonferroni): the positions together spend at most the test's alpha again, so its false-fail
        rate is at most twice what the plan gave it (not yet in the gate study). A position
        this session never reached while the stored sessions did fails outright.

        Position k's tolerance compounds the accept-length tolerance: 1 - (1 - tol)^k. The share
        of steps reaching position k is a product of k conditional acceptances, so a drafter that
        is uniformly a little worse (every position's acceptance down by tol: the mean's own
        tolerance) moves position k by about 1 - (1 - tol)^k; only a drop out of proportion at some
        position (one position collapsing) fails here before the mean does. (The plain tolerance
        failed a code-only drop diluted to -5.9 % overall at position 3's -13 %.)"""
        cells, histories = self._parts.cells, self._parts.histories
        name, level = test.config, test.level.value
        found = []
        for k in range(1, MAX_POSITIONS + 1):
            history, _, _ = histories.cell(name, level, position_metric(k))
            if not history:
                break
            found.append((k, cells.launch_values(name, level, position_metric(k)), history))
        cell = cells.cell(name, level)
        if not found or cell is None or not any(r.correct_drafts_histogram for r in cell.runs):
            return result  # no stored histogram, or none measured: nothing to compare
        tol, design = self._parts.suite.tolerances, self._parts.design
        prior, rule = design.prior(tol.prior_between_sd_accept, day_sd=0.0), design.rule(tol.fail_rule)
        alpha = test.alpha / len(found)
        shares = []
        for k, launches, history in found:
            reference = _mean([v for session in history for v in session])
            if not any(launches):
                shares.append(PositionShare(k, Verdict.FAIL, None, 0.0, reference))
                continue
            at = GateTest(test.gate, name, test.level, alpha, stage=test.stage)
            r = launch_history_gate(at, CellRuns(launches, history), 1 - (1 - tol.accept_length) ** k, prior, rule)
            shares.append(PositionShare(k, r.verdict, r.estimate, r.current, r.reference))
        result = replace(result, positions=tuple(shares))
        dropped = next((s.position for s in shares if s.verdict == Verdict.FAIL), None)
        if dropped is not None and result.verdict not in (Verdict.FAIL, Verdict.ERROR):
            return replace(result, verdict=Verdict.FAIL, problem=Problem(Why.POSITION_DROP, count=dropped))
        return result

    def _before_history(self, test: GateTest, current: list[float]) -> GateResult | None:
        """What decides a cell before its history is read: forced acceptance, speculation that
        stopped, nothing measured."""
        gate, category = test.gate.gate, test.gate.category
        if gate == ACCEPT_LENGTH and not category and self._parts.suite.servers[test.config].forced_acceptance:
            return self._forced(test)
        if gate == ACCEPT_LENGTH:
            stopped = self._not_running(test, current) if not category else None
            if stopped is not None:
                return stopped
            if not current:
                return test.problem(Verdict.ERROR, Problem(Why.NO_ACCEPT_LENGTH))
        if gate == STEP_TIME and not current:
            return test.problem(Verdict.ERROR, Problem(Why.NO_STEP_TIME))
        return None

    def _against_history(self, test: GateTest, cell: CellRuns) -> GateResult:
        tol, design = self._parts.suite.tolerances, self._parts.design
        rule = design.rule(tol.fail_rule)
        if test.gate.gate == STEP_TIME:  # its prior checked by every configuration's step rates, as tok/s's
            prior = replace(design.prior(tol.prior_between_sd), session=self._parts.histories.check_spread(STEP_RATES))
            return step_time_gate(test, cell, tol.step_time, prior, rule)
        if test.gate.gate == ACCEPT_LENGTH:
            return launch_history_gate(test, cell, tol.accept_length,
                                       design.prior(tol.prior_between_sd_accept, day_sd=0.0), rule)
        prior = replace(design.prior(tol.prior_between_sd), session=self._parts.histories.check_spread(THROUGHPUTS))
        result = launch_history_gate(test, cell, tol.throughput, prior, rule)
        if self._parts.suite.servers[test.config].speculative and result.estimate is not None:
            return self._attribute(result, test, rule)
        return result

    def _attribute(self, result: GateResult, test: GateTest, rule: Rule) -> GateResult:
        """Which half of a speculative cell's tok/s change moved, with intervals."""
        step = self._estimate(STEP_TIME, test, rule)
        if self._parts.suite.servers[test.config].forced_acceptance:  # the drafter cannot move
            return replace(result, attribution=Attribution(Half.ENGINE_ONLY, step, None))
        accept = self._estimate(ACCEPT_LENGTH, test, rule)
        if step is None and accept is None:
            return result
        return replace(result, attribution=attribution(step, accept, result.estimate))

    def _estimate(self, gate: str, test: GateTest, rule: Rule) -> RatioEstimate | None:
        """A gate's estimate at the attribution's confidence (not a decision: nothing is recorded)."""
        metric = STEP_RATES if gate == STEP_TIME else ACCEPT_LENGTHS
        name, level = test.config, test.level.value
        launches = self._parts.cells.launch_values(name, level, metric)
        history, _, _ = self._parts.histories.cell(name, level, metric)
        if not history or sum(len(launch) for launch in launches) < 2:
            return None
        tol, design = self._parts.suite.tolerances, self._parts.design
        prior = (design.prior(tol.prior_between_sd_accept, day_sd=0.0) if gate == ACCEPT_LENGTH
                 else design.prior(tol.prior_between_sd))
        at = GateTest(GateLabel(gate), name, test.level, alpha=(1 - ATTRIBUTION_CONFIDENCE) / 2)
        return launch_history_gate(at, CellRuns(launches, history), 0.0, prior, rule).estimate

    def _not_running(self, test: GateTest, accept: list[float]) -> GateResult | None:
        """Speculation silently off (sglang#24795, "stuck at 1"): a failure by name, baseline or not."""
        cfg = self._parts.suite.servers[test.config]
        if not cfg.speculative:
            return None
        handle = self._parts.pool.state(test.config).handle
        server = handle.effective.speculative_algorithm or (handle.effective.num_draft_tokens and "speculation") \
            if handle is not None else None
        if not accept and server:
            return test.problem(Verdict.FAIL, Problem(Why.NOT_RUNNING, str(server)))
        floor = cfg.accept_length_floor
        median = sorted(accept)[len(accept) // 2] if accept else None
        if median is not None and median <= floor:
            return test.problem(Verdict.FAIL, Problem(Why.ACCEPT_AT_FLOOR, value=median, limit=floor), current=median)
        return None

    def _drift(self, result: GateResult, name: str, level: int) -> GateResult:
        """Acceptance falling within the session (vllm#41838): the cell's runs in time order."""
        runs = [v for launch in self._parts.cells.launch_values(name, level, ACCEPT_LENGTHS) for v in launch]
        trend = downward_trend(runs) if len(runs) >= 4 else None
        if trend is None or trend.p_value >= DRIFT_P or trend.change >= 0:
            return result
        drift = Drift(trend.change, len(runs), trend.p_value, DRIFT_P)
        if self._parts.suite.sweep.accept_drift == "fail" and result.verdict not in (Verdict.FAIL, Verdict.ERROR):
            return replace(result, verdict=Verdict.FAIL, problem=Problem(Why.ACCEPT_DRIFT), drift=drift)
        return replace(result, drift=drift)
