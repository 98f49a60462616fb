"""The pytest plugin: options, parametrisation, ordering, fixtures and the session summary.

Test ids name configuration and concurrency (`test_throughput[eagle3-c10]`), so `-k eagle3`,
`-k c10` and `-k "mtp and not c250"` select what users expect. Tests of one configuration run
together, so one server is up at a time, stopped (whole process group) after its last test.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import pytest

from specguard.config import FAIL_RULES, ConfigError, Suite, load_suite, validate_suite
from specguard.decide.gates import ERROR, FAIL, INCONCLUSIVE, SKIP, GateResult, holm_failures
from specguard.report.progress import SweepProgress
from specguard.report.publish import write_report_dir
from specguard.report.terminal import render_summary
from specguard.report.results import (STATUS_NOT_MEASURED, STATUS_OK, STATUS_REGRESSION, cell_summary, merge_documents,
                               results_document, write_results)
from specguard.session import (ConfigUnavailable, RunOptions, SpecguardSession, api_key_from, parse_server_args,
                               parse_server_urls)
from specguard.measure.sweep import CellMeasurement

ALGORITHM_MARKERS = ("eagle", "eagle3", "nextn", "standalone", "ngram", "draft_model", "no_speculation")
TEST_ORDER = {"test_throughput": 0, "test_accept_length": 1, "test_speculation_beats_baseline": 2}
EXIT_NOT_MEASURED = 3  # some test could not measure (and none found a regression); docs/ci.md
EXIT_STATUS_NAMES = {0: STATUS_OK, 1: STATUS_REGRESSION, 2: "interrupted", EXIT_NOT_MEASURED: STATUS_NOT_MEASURED,
                     4: "usage-error", 5: "no-tests"}
FAILURE_KIND = "specguard_failure"  # user property: why a test failed (regression / not-measured)
WORKER_OUTPUT_KEY = "specguard_results"
_SESSION = pytest.StashKey["SpecguardSession"]()
_SUITE = pytest.StashKey["Suite"]()
_DOC = pytest.StashKey[dict]()
_FAILED = pytest.StashKey["FailureLog"]()
_WORKER_DOCS = pytest.StashKey[list]()
_LIVE = pytest.StashKey["LiveLine"]()
_INTERACTIVE = pytest.StashKey[bool]()


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
    g.addoption("--results-json", default=None, help="write every run's numbers and decisions here (docs/results.md)")
    g.addoption("--report-dir", default=None,
                help="write summary.md, report.html and plots here (and append the markdown to $GITHUB_STEP_SUMMARY)")
    g.addoption("--tolerance-throughput", type=float, default=None)
    g.addoption("--tolerance-accept-length", type=float, default=None)
    g.addoption("--prior-between-sd", type=float, default=None, help="log-scale between-launch tok/s spread prior")
    g.addoption("--family-alpha", type=float, default=None, help="family-wise false-fail rate (Holm)")
    g.addoption("--inconclusive", choices=("pass", "fail"), default=None, help="what an inconclusive cell counts as")
    g.addoption("--fail-rule", choices=FAIL_RULES, default=None,
                help="significant: a significant drop estimated beyond the tolerance fails (default); "
                     "beyond-tolerance: only a drop whose whole interval is beyond the tolerance fails")
    g.addoption("--max-failed-requests", type=int, default=0, help="failed requests tolerated per cell")
    g.addoption("--api-key", default=None, help="server API key (or env SPECGUARD_API_KEY); never printed")
    g.addoption("--server-log-dir", default=".specguard/logs")


@pytest.hookimpl(trylast=True)  # after the terminal reporter exists
def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "specguard(cells): a specguard cell test; cells='all' or 'speculative'")
    for name in ALGORITHM_MARKERS:
        config.addinivalue_line("markers", f"{name}: specguard cells of configurations using {name}")
    # With pytest-benchmark disabled (or under xdist) the suite measures without it; say nothing.
    config.addinivalue_line("filterwarnings", "ignore:Benchmark fixture was not used")
    config.stash[_FAILED] = FailureLog()
    config.pluginmanager.register(config.stash[_FAILED], "specguard-failure-log")
    config.stash[_WORKER_DOCS] = []
    # Decided here, while output capture is suspended, so the real streams are what is checked.
    tw = config.get_terminal_writer() if config.pluginmanager.has_plugin("terminalreporter") else None
    config.stash[_INTERACTIVE] = bool(
        tw is not None and getattr(tw, "hasmarkup", False) and sys.stdout.isatty() and not os.environ.get("CI")
        and not hasattr(config, "workerinput"))


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
                           ("--inconclusive", "inconclusive"), ("--fail-rule", "fail_rule")):
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
        config.stash[_SESSION] = SpecguardSession(suite, options)
    return config.stash[_SESSION]


class LiveLine:
    """The progress line on an interactive terminal (never in CI logs, pipes or xdist workers).

    Written past pytest's output capture, over the current terminal line, which is restored
    when the cell is done so pytest's own progress output stays intact.
    """

    def __init__(self, config: pytest.Config, progress: SweepProgress) -> None:
        self.tw = config.get_terminal_writer()
        self.capman = config.pluginmanager.getplugin("capturemanager")
        self.progress = progress

    def __call__(self, text: str) -> None:
        self.progress.run_started()
        width = max(self.tw.fullwidth - 1, 20)
        self._write("\r" + self.progress.line(text)[:width].ljust(width))

    def clear(self) -> None:
        width = max(self.tw.fullwidth - 1, 20)
        self._write("\r" + " " * width + "\r" + getattr(self.tw, "_current_line", ""))

    def _write(self, text: str) -> None:
        if self.capman is None:
            self.tw.write_raw(text, flush=True)
            return
        with self.capman.global_and_fixture_disabled():
            self.tw.write_raw(text, flush=True)


def pytest_collection_finish(session: pytest.Session) -> None:
    """Start the progress line once the selected cells (and their order) are known."""
    config = session.config
    plan = [(c.config, c.concurrency) for c in map(_cell_of, session.items) if c is not None]
    if not plan or not config.stash.get(_INTERACTIVE, False):
        return
    sweep = get_suite(config).sweep
    live = LiveLine(config, SweepProgress(plan, sweep.warmup + sweep.repeats))
    config.stash[_LIVE] = live
    get_session(config).progress = live


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

    def measure(self, benchmark: Any = None) -> CellMeasurement:
        s, c = self.session, self.cell
        fresh = (c.config, c.concurrency) not in s.cells
        live = self.request.config.stash.get(_LIVE, None) if fresh else None
        if live:
            live.progress.begin_cell(c.config, c.concurrency)
        try:
            driver = _benchmark_driver(benchmark) if benchmark is not None and fresh else None
            m = s.measure(c.config, c.concurrency, **({"driver": driver} if driver else {}))
        except ConfigUnavailable as exc:
            if exc.skip:
                pytest.skip(str(exc))
            self.fail(str(exc), STATUS_NOT_MEASURED)
        finally:
            if live:
                cell = s.cells.get((c.config, c.concurrency))
                live.progress.end_cell(cell.wall_s if cell else 0.0, len(cell.runs) + len(cell.warmup_runs) if cell else 0)
                live.clear()
        if benchmark is not None and m.runs:
            _fill_extra_info(benchmark, m)
        self._record_figures(m)
        if m.error:
            self.fail(f"{c}: could not measure: {m.error}", STATUS_NOT_MEASURED)
        return m

    def fail(self, message: str, kind: str) -> None:
        """Fail the test, saying whether it found a regression or could not measure (exit codes)."""
        self.request.node.user_properties.append((FAILURE_KIND, kind))
        pytest.fail(message, pytrace=False)

    def _record_figures(self, m: CellMeasurement) -> None:
        """The cell's key figures as test properties: they land in --junitxml output."""
        props = self.request.node.user_properties
        props += [("config", self.cell.config), ("concurrency", self.cell.concurrency)]
        summary = cell_summary([asdict(r) for r in m.runs])
        for key, name in (("output_throughput", "tok_s"), ("accept_length", "accept_length"),
                          ("median_ttft_ms", "ttft_p50_ms"), ("p99_ttft_ms", "ttft_p99_ms"),
                          ("median_itl_ms", "itl_p50_ms"), ("p99_itl_ms", "itl_p99_ms")):
            if summary[key] is not None:
                props.append((name, f"{summary[key]:.4g}"))
        props.append(("runs", len(m.runs)))

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
        node.user_properties += [("gate", result.gate), ("verdict", result.verdict)]
        if result.estimate is not None:
            node.user_properties.append(("ratio", f"{result.estimate.ratio:.4f}"))
            node.user_properties.append(("ci_low", f"{result.estimate.low:.4f}"))
            node.user_properties.append(("ci_high", f"{result.estimate.high:.4f}"))
        if result.current is not None:
            node.user_properties.append(("current", f"{result.current:.4f}"))
        if result.reference is not None:
            node.user_properties.append(("reference", f"{result.reference:.4f}"))
        opts = self.session.options
        updating = opts.update_baselines and result.gate in ("throughput", "accept_length")
        if result.verdict == SKIP:
            if opts.require_baselines and not updating:
                self.fail(result.message, STATUS_NOT_MEASURED)
            if updating:
                return  # a first baseline is being written
            pytest.skip(result.message)
        if updating:
            return  # accepting a new baseline: report the change, do not gate on the old one
        if result.verdict == ERROR:
            self.fail(result.message, STATUS_NOT_MEASURED)
        if result.enforced and (result.verdict == FAIL or
                                (result.verdict == INCONCLUSIVE and self.session.suite.tolerances.inconclusive == "fail")):
            self.fail(result.message, STATUS_REGRESSION)


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
class FailureLog:
    """Why each failed test failed: a regression, or a measurement that did not happen.

    The kind travels as a user property of the report, so an xdist controller sees it too.
    Specguard's own failures say their kind; otherwise an assertion or pytest.fail in a test body
    is a regression and any other exception or a setup/teardown error means nothing was measured.
    """

    def __init__(self) -> None:
        self.failed: list[dict[str, str]] = []

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo) -> pytest.TestReport:
        report = yield
        if report.failed and FAILURE_KIND not in dict(report.user_properties):
            asserted = call.when == "call" and call.excinfo is not None and call.excinfo.errisinstance(
                (AssertionError, pytest.fail.Exception))
            kind = STATUS_REGRESSION if asserted else STATUS_NOT_MEASURED
            report.user_properties = [*report.user_properties, (FAILURE_KIND, kind)]
        return report

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if not report.failed:
            return
        kind = dict(report.user_properties).get(FAILURE_KIND, STATUS_NOT_MEASURED)  # e.g. a crashed xdist worker
        crash = getattr(report.longrepr, "reprcrash", None)
        first = crash.message if crash else next((ln for ln in report.longreprtext.splitlines() if ln.strip()), "")
        self.failed.append({"nodeid": report.nodeid, "kind": kind, "message": first.splitlines()[0][:300] if first else ""})


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: Any) -> None:
    """pytest-xdist controller: collect each worker's results document."""
    text = getattr(node, "workeroutput", {}).get(WORKER_OUTPUT_KEY)
    if text:
        node.config.stash[_WORKER_DOCS].append(json.loads(text))


def exit_status(current: int, doc: dict[str, Any], failed: list[dict[str, str]]) -> int:
    """1 when a regression was found, 3 when tests failed only because they could not measure."""
    kinds = {f["kind"] for f in failed}
    if current not in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED):
        return int(current)
    if STATUS_REGRESSION in kinds or doc["holm_failures"]:
        return int(pytest.ExitCode.TESTS_FAILED)
    if STATUS_NOT_MEASURED in kinds:
        return EXIT_NOT_MEASURED
    return int(current)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    config = session.config
    if _SESSION in config.stash:
        sg = config.stash[_SESSION]
        sg.stop_all()
        sg.holm_extra = holm_failures(sg.results, sg.suite.tolerances.family_alpha)
        if not sg.cells and not sg.results and not sg.baseline_updates and not sg.servers:
            return
        doc = results_document(sg)
        if hasattr(config, "workerinput"):  # an xdist worker: the controller merges and reports
            config.workeroutput[WORKER_OUTPUT_KEY] = json.dumps(doc)
            return
    elif config.stash.get(_WORKER_DOCS, None):
        doc = merge_documents(config.stash[_WORKER_DOCS])
    else:
        return
    failed = config.stash[_FAILED].failed
    status = exit_status(session.exitstatus, doc, failed)
    session.exitstatus = status
    doc["outcome"] = {"status": EXIT_STATUS_NAMES.get(status, f"exit-{status}"), "exit_status": status,
                      "failed_tests": failed}
    config.stash[_DOC] = doc
    path = config.getoption("--results-json")
    if path:
        write_results(doc, Path(path))
    report_dir = config.getoption("--report-dir")
    if report_dir:
        write_report_dir(doc, Path(report_dir))


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    doc = config.stash.get(_DOC, None)
    if doc is None or not (doc["cells"] or doc["baseline_updates"] or doc["servers"]):
        return
    terminalreporter.write_sep("=", "specguard summary")
    terminalreporter.write_line(render_summary(doc))
    report_dir = config.getoption("--report-dir")
    if report_dir:
        terminalreporter.write_line(f"specguard report: {Path(report_dir) / 'report.html'}")
