"""The pytest plugin: options, parametrisation, ordering, fixtures and the session summary.

Test ids name configuration and concurrency (`test_throughput[eagle3-c10]`), so `-k eagle3`,
`-k c10` and `-k "mtp and not c250"` select what users expect. Tests of one configuration run
together, so one server is up at a time, stopped (whole process group) after its last test.
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest

from specguard.config import ConfigError, Suite, load_suite, validate_suite
from specguard.gates import ERROR, FAIL, INCONCLUSIVE, SKIP, GateResult, holm_failures
from specguard.report import render_summary, write_results
from specguard.session import (ConfigUnavailable, RunOptions, SpecguardSession, api_key_from, parse_server_args,
                               parse_server_urls)

ALGORITHM_MARKERS = ("eagle", "eagle3", "nextn", "standalone", "ngram", "draft_model", "no_speculation")
TEST_ORDER = {"test_throughput": 0, "test_accept_length": 1, "test_speculation_beats_baseline": 2}
_SESSION = pytest.StashKey["SpecguardSession"]()
_SUITE = pytest.StashKey["Suite"]()


def pytest_addoption(parser: pytest.Parser) -> None:
    g = parser.getgroup("specguard", "speculative-decoding performance gates")
    g.addoption("--suite", default=None, help="suite file (TOML); default perf_tests/suite.toml")
    g.addoption("--server-url", action="append", default=[], metavar="[NAME=]URL",
                help="attach instead of launching; a bare URL stands for every matching configuration")
    g.addoption("--server-args", action="append", default=[], metavar='NAME="ARGS"',
                help="extra launch flags for one configuration (e.g. an emulator override)")
    g.addoption("--concurrency", default=None, help="comma-separated concurrency levels, e.g. 1,4,16")
    g.addoption("--repeats", type=int, default=None, help="measured runs per cell")
    g.addoption("--warmup", type=int, default=None, help="discarded warmup runs per cell")
    g.addoption("--requests", type=int, default=None, help="requests per run (default: 4 x concurrency)")
    g.addoption("--baseline-dir", default=None, help="baseline directory (default baselines/<suite name>)")
    g.addoption("--update-baselines", action="store_true", help="store this session's sweep as the new baseline")
    g.addoption("--require-baselines", action="store_true", help="a missing baseline fails (CI gate mode)")
    g.addoption("--speculation-must-win-up-to", type=int, default=None, metavar="C",
                help="speculation must beat its reference at every concurrency <= C")
    g.addoption("--results-json", default=None, help="write every run's numbers and decisions here")
    g.addoption("--tolerance-throughput", type=float, default=None)
    g.addoption("--tolerance-accept-length", type=float, default=None)
    g.addoption("--prior-between-sd", type=float, default=None, help="log-scale between-launch tok/s spread prior")
    g.addoption("--family-alpha", type=float, default=None, help="family-wise false-fail rate (Holm)")
    g.addoption("--inconclusive", choices=("pass", "fail"), default=None, help="what an inconclusive cell counts as")
    g.addoption("--max-failed-requests", type=int, default=0, help="failed requests tolerated per cell")
    g.addoption("--api-key", default=None, help="server API key (or env SPECGUARD_API_KEY); never printed")
    g.addoption("--server-log-dir", default=".specguard/logs")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "specguard(cells): a specguard cell test; cells='all' or 'speculative'")
    for name in ALGORITHM_MARKERS:
        config.addinivalue_line("markers", f"{name}: specguard cells of configurations using {name}")
    # With pytest-benchmark disabled (or under xdist) the suite measures without it; say nothing.
    config.addinivalue_line("filterwarnings", "ignore:Benchmark fixture was not used")


# -- suite --------------------------------------------------------------------------------------
def _default_suite_path(config: pytest.Config) -> Path:
    return Path(config.rootpath) / "perf_tests" / "suite.toml"


def get_suite(config: pytest.Config) -> Suite:
    """The suite file with command-line overrides applied and validated (once per session)."""
    if _SUITE in config.stash:
        return config.stash[_SUITE]
    opt = config.getoption
    path = Path(opt("--suite")) if opt("--suite") else _default_suite_path(config)
    try:
        suite = load_suite(path)
        sweep, tol = suite.sweep, suite.tolerances
        if opt("--concurrency"):
            try:
                levels = [int(x) for x in opt("--concurrency").split(",") if x.strip()]
            except ValueError:
                raise ConfigError(f"--concurrency {opt('--concurrency')!r}: use comma-separated integers, e.g. 1,4,16") from None
            sweep = replace(sweep, concurrency=levels)
        if opt("--repeats") is not None:
            sweep = replace(sweep, repeats=opt("--repeats"))
        if opt("--warmup") is not None:
            sweep = replace(sweep, warmup=opt("--warmup"))
        for flag, attr in (("--tolerance-throughput", "throughput"), ("--tolerance-accept-length", "accept_length"),
                           ("--prior-between-sd", "prior_between_sd"), ("--family-alpha", "family_alpha"),
                           ("--inconclusive", "inconclusive")):
            if opt(flag) is not None:
                tol = replace(tol, **{attr: opt(flag)})
        suite = replace(suite, sweep=sweep, tolerances=tol)
        validate_suite(suite)
    except ConfigError as exc:
        raise pytest.UsageError(str(exc)) from None
    config.stash[_SUITE] = suite
    return suite


def get_session(config: pytest.Config) -> SpecguardSession:
    if _SESSION not in config.stash:
        suite = get_suite(config)
        opt = config.getoption
        try:
            server_args = parse_server_args(opt("--server-args"))
        except ValueError as exc:
            raise pytest.UsageError(str(exc)) from None
        unknown = [n for n in server_args if n not in suite.servers]
        unknown += [n for n in parse_server_urls(opt("--server-url")) if n is not None and n not in suite.servers]
        if unknown:
            raise pytest.UsageError(f"--server-args/--server-url name unknown configuration(s) {unknown}; "
                                    f"{suite.path} has {', '.join(suite.servers)}")
        baseline_dir = Path(opt("--baseline-dir")) if opt("--baseline-dir") else Path(config.rootpath) / "baselines" / suite.path.stem
        options = RunOptions(
            server_urls=parse_server_urls(opt("--server-url")),
            server_args=server_args,
            baseline_dir=baseline_dir,
            update_baselines=opt("--update-baselines"),
            require_baselines=opt("--require-baselines"),
            api_key=api_key_from(opt("--api-key")),
            log_dir=Path(opt("--server-log-dir")),
            max_failed_requests=opt("--max-failed-requests"),
            requests_per_run=opt("--requests"),
        )
        session = SpecguardSession(suite, options)
        session.progress = _progress_writer(config)
        config.stash[_SESSION] = session
    return config.stash[_SESSION]


def _progress_writer(config: pytest.Config):
    """A live progress line on an interactive terminal; silent in CI logs and pipes."""
    tw = config.get_terminal_writer()
    if os.environ.get("CI") or not sys.stderr.isatty() or not getattr(tw, "hasmarkup", False):
        return None
    started = time.monotonic()

    def write(text: str) -> None:
        tw.write(f"\r  [specguard {time.monotonic() - started:6.0f}s] {text:<60}")
        tw.flush()

    return write


# -- parametrisation and ordering ----------------------------------------------------------------
@dataclass(frozen=True)
class Cell:
    config: str
    concurrency: int

    def __str__(self) -> str:
        return f"{self.config}-c{self.concurrency}"


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "specguard_cell" not in metafunc.fixturenames:
        return
    marker = metafunc.definition.get_closest_marker("specguard")
    kind = marker.kwargs.get("cells", "all") if marker else "all"
    suite = get_suite(metafunc.config)
    params = []
    for name, cfg in suite.servers.items():
        if kind == "speculative" and not cfg.speculative:
            continue
        algo = cfg.algorithm_label.lower() if cfg.speculative else "no_speculation"
        marks = [pytest.mark.xdist_group(name)]
        if algo in ALGORITHM_MARKERS:
            marks.append(getattr(pytest.mark, algo))
        for c in suite.sweep.concurrency:
            cell = Cell(name, c)
            params.append(pytest.param(cell, id=str(cell), marks=marks))
    metafunc.parametrize("specguard_cell", params)


def _cell_of(item: pytest.Item) -> Cell | None:
    callspec = getattr(item, "callspec", None)
    return callspec.params.get("specguard_cell") if callspec else None


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    """Group a configuration's tests (references first) so one server runs at a time."""
    cells = [(i, _cell_of(item)) for i, item in enumerate(items)]
    if not any(c for _, c in cells):
        return
    suite = get_suite(config)
    names = list(suite.servers)
    rank = {n: (0 if not suite.servers[n].speculative else 1, names.index(n)) for n in names}

    def key(pair: tuple[int, Cell | None]) -> tuple:
        i, cell = pair
        if cell is None:
            return (0, i)
        name = getattr(items[i], "originalname", items[i].name)
        return (1, rank[cell.config], cell.concurrency, TEST_ORDER.get(name, 9), i)

    items[:] = [items[i] for i, _ in sorted(cells, key=key)]
    gate_tests = sum(1 for item in items if _cell_of(item) is not None)
    get_session(config).alpha_cell = get_suite(config).tolerances.family_alpha / max(gate_tests, 1)


def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    cell = _cell_of(item)
    if cell is None or _SESSION not in item.config.stash:
        return
    nxt = _cell_of(nextitem) if nextitem is not None else None
    if nxt is None or nxt.config != cell.config:
        item.config.stash[_SESSION].stop_server(cell.config)


# -- fixtures -------------------------------------------------------------------------------------
class CellTest:
    """What a perf test holds: measure the cell once, then enforce one gate's verdict."""

    def __init__(self, session: SpecguardSession, cell: Cell, request: pytest.FixtureRequest) -> None:
        self.session = session
        self.cell = cell
        self.request = request

    def measure(self, benchmark: Any = None):
        s, c = self.session, self.cell
        try:
            driver = _benchmark_driver(benchmark) if benchmark is not None and (c.config, c.concurrency) not in s.cells else None
            m = s.measure(c.config, c.concurrency, **({"driver": driver} if driver else {}))
        except ConfigUnavailable as exc:
            (pytest.skip if exc.skip else pytest.fail)(str(exc))
        if benchmark is not None and m.runs:
            _fill_extra_info(benchmark, m)
        if m.error:
            pytest.fail(f"{c}: could not measure: {m.error}", pytrace=False)
        return m

    def throughput(self) -> GateResult:
        return self.session.throughput_result(self.cell.config, self.cell.concurrency)

    def accept_length(self) -> GateResult:
        return self.session.accept_length_result(self.cell.config, self.cell.concurrency)

    def speculation(self) -> GateResult:
        limit = self.request.config.getoption("--speculation-must-win-up-to")
        return self.session.speculation_result(self.cell.config, self.cell.concurrency, limit)

    def enforce(self, result: GateResult) -> None:
        """Turn a gate result into pass / skip / fail, with the one-line verdict as the message."""
        node = self.request.node
        node.user_properties.append(("verdict", result.verdict))
        if result.estimate is not None:
            node.user_properties.append(("ratio", f"{result.estimate.ratio:.4f}"))
            node.user_properties.append(("ci_low", f"{result.estimate.low:.4f}"))
            node.user_properties.append(("ci_high", f"{result.estimate.high:.4f}"))
        if result.current is not None:
            node.user_properties.append(("current", f"{result.current:.4f}"))
        opts = self.session.options
        updating = opts.update_baselines and result.gate in ("throughput", "accept_length")
        if result.verdict == SKIP:
            if opts.require_baselines and not updating:
                pytest.fail(result.message, pytrace=False)
            if updating:
                return  # a first baseline is being written
            pytest.skip(result.message)
        if updating:
            return  # accepting a new baseline: report the change, do not gate on the old one
        if result.verdict == ERROR:
            pytest.fail(result.message, pytrace=False)
        if result.enforced and (result.verdict == FAIL or
                                (result.verdict == INCONCLUSIVE and self.session.suite.tolerances.inconclusive == "fail")):
            pytest.fail(result.message, pytrace=False)


def _benchmark_driver(benchmark: Any):
    if getattr(benchmark, "disabled", False):
        return None  # pytest-benchmark off (e.g. under xdist): the plain loop runs every round

    def driver(run_once, warmup: int, repeats: int) -> None:
        benchmark.pedantic(run_once, rounds=repeats, warmup_rounds=warmup, iterations=1)

    return driver


def _fill_extra_info(benchmark: Any, m) -> None:
    runs = m.runs
    benchmark.extra_info.update({
        "output_throughput": [r.output_throughput for r in runs],
        "accept_length": [r.accept_length for r in runs],
        "median_ttft_ms": [r.latency_ms.get("median_ttft_ms") for r in runs],
        "p99_itl_ms": [r.latency_ms.get("p99_itl_ms") for r in runs],
        "failed_requests": m.failed_requests,
    })


@pytest.fixture(scope="session")
def specguard(pytestconfig: pytest.Config) -> SpecguardSession:
    return get_session(pytestconfig)


@pytest.fixture
def cell(specguard: SpecguardSession, specguard_cell: Cell, request: pytest.FixtureRequest) -> CellTest:
    return CellTest(specguard, specguard_cell, request)


# -- end of session ----------------------------------------------------------------------------
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    config = session.config
    if _SESSION not in config.stash:
        return
    sg = config.stash[_SESSION]
    sg.stop_all()
    extra = holm_failures(sg.results, sg.suite.tolerances.family_alpha)
    sg.holm_extra = extra
    if extra and session.exitstatus == 0:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    path = config.getoption("--results-json")
    if path:
        write_results(sg, Path(path))


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    if _SESSION not in config.stash:
        return
    sg = config.stash[_SESSION]
    if not sg.cells and not sg.baseline_updates:
        return
    terminalreporter.write_sep("=", "specguard summary")
    terminalreporter.write_line(render_summary(sg))
