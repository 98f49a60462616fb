"""The fixtures a gate test uses: `specguard` (the session's gates) and `cell` (one cell's test)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict
from typing import Any

import pytest

from specguard.decide.result import GateResult
from specguard.labels import STATUS_NOT_MEASURED, STATUS_REGRESSION, THROUGHPUT, GateLabel, Verdict
from specguard.measure.sweep import CellMeasurement, Driver, plain_driver
from specguard.plugin import state
from specguard.plugin.collection import Cell, gate_of
from specguard.plugin.session import get_session
from specguard.report.schema import SummaryFigure
from specguard.report.summary import cell_summary
from specguard.report.terminal import fmt_num
from specguard.report.verdict_text import message
from specguard.session import ConfigUnavailable, GateSession

FAILURE_KIND = "specguard_failure"  # user property: why a test failed (regression / not-measured)
_FIGURES: tuple[tuple[SummaryFigure, str], ...] = (
    ("output_throughput", "tok_s"), ("accept_length", "accept_length"), ("median_ttft_ms", "ttft_p50_ms"),
    ("p99_ttft_ms", "ttft_p99_ms"), ("median_itl_ms", "itl_p50_ms"), ("p99_itl_ms", "itl_p99_ms"))


class CellTest:
    """What a gate test holds: measure the cell once, then enforce one gate's verdict."""

    def __init__(self, session: GateSession, cell: Cell, request: pytest.FixtureRequest) -> None:
        self.session = session
        self.cell = cell
        self.request = request

    @property
    def _level(self) -> int:
        return self.cell.level.value

    def measure(self) -> CellMeasurement:
        """The cell's measurement (taken once per cell); with --specguard-benchmark, pytest-benchmark
        times it."""
        s, c, config = self.session, self.cell, self.request.config
        fresh = (c.config, self._level) not in s.cells
        live = config.stash.get(state.LIVE, None) if fresh else None
        if live:
            live.progress.begin_cell(c.config, self._level)
        benchmark = self._benchmark(fresh)
        problem: ConfigUnavailable | None = None
        try:
            m = s.measure(c.config, self._level, _benchmark_driver(benchmark) if benchmark else plain_driver)
        except ConfigUnavailable as exc:
            problem = exc
        finally:
            if live:
                cell = s.cells.cell(c.config, self._level)
                live.progress.end_cell(cell.wall_s if cell else 0.0, len(cell.runs) + len(cell.warmup_runs) if cell else 0)
                live.clear()
        if problem is not None:  # raised outside the except block: no chained exception in the report
            if problem.skip:
                pytest.skip(str(problem))
            self.fail(f"{c}: not measured: {problem}", STATUS_NOT_MEASURED)
        if benchmark is not None and m.runs:
            _fill_extra_info(benchmark, m)
        self._record_figures(m)
        if m.error:
            self.fail(f"{c}: could not measure: {m.error}", STATUS_NOT_MEASURED)
        return m

    def _benchmark(self, fresh: bool) -> Any:
        """pytest-benchmark's fixture when --specguard-benchmark asks for it and this throughput test
        measures a fresh cell (pytest-benchmark off, e.g. under xdist: None, the plain loop runs)."""
        config = self.request.config
        if not (fresh and config.getoption("--specguard-benchmark") and gate_of(self.request.node) == THROUGHPUT):
            return None
        benchmark = self.request.getfixturevalue("benchmark")
        return None if getattr(benchmark, "disabled", False) else benchmark

    def fail(self, message: str, kind: str) -> None:
        """Fail the test, saying whether it found a regression or could not measure (exit codes)."""
        self.request.node.user_properties.append((FAILURE_KIND, kind))
        pytest.fail(message, pytrace=False)

    def _record_figures(self, m: CellMeasurement) -> None:
        """The cell's key figures as test properties: they land in --junitxml output."""
        props = self.request.node.user_properties
        summary = cell_summary([asdict(r) for r in m.runs])
        props += [(name, fmt_num(summary[key])) for key, name in _FIGURES if summary[key] is not None]
        props.append(("runs", len(m.runs)))
        category = self.cell.category
        if category:
            cat = summary.get("categories", {}).get(category) or {}
            props.append(("category", category))
            if cat.get("accept_length") is not None:
                props.append(("category_accept_length", fmt_num(cat["accept_length"])))
            if cat.get("output_throughput") is not None:
                props.append(("category_tok_s", fmt_num(cat["output_throughput"])))

    def throughput(self) -> GateResult:
        return self.session.throughput_result(self.cell.config, self._level)

    def step_time(self) -> GateResult:
        return self.session.step_time_result(self.cell.config, self._level)

    def accept_length(self) -> GateResult:
        """The cell's accept length, or its prompt category's when the test is a category's."""
        return self.session.accept_length_result(self.cell.config, self._level, self.cell.category)

    def soak(self) -> GateResult:
        """The configuration under [soak] load for its duration, decided on its windows."""
        return self.session.soak_result(self.cell.config)

    def speculation(self) -> GateResult:
        return self.session.speculation_result(self.cell.config, self._level)

    def enforce(self, result: GateResult) -> None:
        """Turn a gate result into pass / skip / fail, with the one-line verdict as the message."""
        node = self.request.node
        node.user_properties += [("gate", str(result.gate)), ("verdict", result.verdict.value),
                                 ("enforced", result.enforced)]
        if result.estimate is not None:
            node.user_properties += [("ratio", f"{result.estimate.ratio:.4f}"), ("ci_low", f"{result.estimate.low:.4f}"),
                                     ("ci_high", f"{result.estimate.high:.4f}")]
        if result.current is not None:
            node.user_properties.append(("current", f"{result.current:.4f}"))
        if result.reference is not None:
            node.user_properties.append(("reference", f"{result.reference:.4f}"))
        opts = self.session.options
        updating = opts.update_baselines and result.gate.is_history
        if result.verdict == Verdict.SKIP:
            if opts.require_baselines and not updating:
                self.fail(message(result), STATUS_NOT_MEASURED)
            if updating:
                return  # a first baseline is being written
            pytest.skip(message(result))
        if updating:
            return  # accepting a new baseline: report the change, do not gate on the old one
        if result.verdict == Verdict.ERROR:
            self.fail(message(result), STATUS_NOT_MEASURED)
        inconclusive_fails = result.verdict == Verdict.INCONCLUSIVE and self.session.suite.tolerances.inconclusive == "fail"
        if result.enforced and (result.verdict == Verdict.FAIL or inconclusive_fails):
            self.fail(message(result), STATUS_REGRESSION)


def _benchmark_driver(benchmark: Any) -> Driver:
    def driver(run_once: Callable[[], None], warmup: int, repeats: int) -> None:
        benchmark.pedantic(run_once, rounds=repeats, warmup_rounds=warmup, iterations=1)

    return driver


def _fill_extra_info(benchmark: Any, m: CellMeasurement) -> None:
    runs = m.runs
    benchmark.extra_info.update({
        "output_throughput": [r.output_throughput for r in runs],
        "accept_length": [r.accept_length for r in runs],
        "median_ttft_ms": [r.latency_ms.get("median_ttft_ms") for r in runs],
        "p99_itl_ms": [r.latency_ms.get("p99_itl_ms") for r in runs],
        "failed_requests": m.failed_requests,
    })


@pytest.fixture(scope="session")
def specguard(pytestconfig: pytest.Config) -> GateSession:
    return get_session(pytestconfig)


@pytest.fixture
def cell(specguard: GateSession, specguard_cell: Cell, request: pytest.FixtureRequest) -> CellTest:
    gate = gate_of(request.node) or ""
    request.node.user_properties += [("config", specguard_cell.config), ("level", specguard_cell.level.name),
                                     ("gate", str(GateLabel(gate, specguard_cell.category)) if gate else "")]
    return CellTest(specguard, specguard_cell, request)
