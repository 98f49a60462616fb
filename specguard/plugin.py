"""The pytest plugin: options, parametrisation, ordering, fixtures and the session summary.

Test ids name configuration and concurrency (`test_throughput[eagle3-c10]`), so `-k eagle3`,
`-k c10` and `-k "mtp and not c250"` select what users expect. Tests of one configuration run
together, so one server is up at a time, stopped (whole process group) after its last test.

One source of truth for outcomes: every output (pytest's counts, the summary line, the table,
JSON, markdown, HTML, JUnit) is derived from the test reports this plugin records. Holm's
family-wise correction is its own session-level test, `specguard::family_holm`, reported like a
test (pass/fail) at the end of the session; it never changes the exit code on its own.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shlex
import signal
import shutil
import sys
import threading
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import pytest

from specguard.config import FAIL_RULES, ConfigError, Suite, load_suite, validate_suite
from specguard.decide.gates import ERROR, FAIL, INCONCLUSIVE, SKIP, GateResult
from specguard.measure.sweep import CellMeasurement
from specguard.report.progress import SweepProgress
from specguard.report.publish import write_report_dir
from specguard.report.results import (STATUS_NOT_MEASURED, STATUS_OK, STATUS_REGRESSION, cell_summary, family_holm,
                                      merge_documents, results_document, write_results)
from specguard.report.terminal import fmt_num, render_summary
from specguard.server import ServerStartError, check_url
from specguard.session import (ConfigUnavailable, PlannedTest, RunOptions, SpecguardSession, api_key_from, gate_label,
                               is_history_gate, parse_server_args, parse_server_urls)
from specguard.workload import WorkloadError

ALGORITHM_MARKERS = ("eagle", "eagle3", "nextn", "standalone", "ngram", "draft_model", "no_speculation")
GATE_OF_TEST = {"test_throughput": "throughput", "test_accept_length": "accept_length",
                "test_speculation_beats_baseline": "speculation"}
TEST_ORDER = {name: i for i, name in enumerate(GATE_OF_TEST)}
HOLM_NODEID = "specguard::family_holm"
EXIT_NOT_MEASURED = 3  # some test could not measure (and none found a regression); docs/ci.md
EXIT_STATUS_NAMES = {0: STATUS_OK, 1: STATUS_REGRESSION, 2: "interrupted", EXIT_NOT_MEASURED: STATUS_NOT_MEASURED,
                     4: "usage-error", 5: "no-tests"}
FAILURE_KIND = "specguard_failure"  # user property: why a test failed (regression / not-measured)
WORKER_OUTPUT_KEY = "specguard_results"
WORKER_STAGE_KEY = "specguard_baseline_stage"
_SESSION = pytest.StashKey["SpecguardSession"]()
_SUITE = pytest.StashKey["Suite"]()
_DOC = pytest.StashKey[dict]()
_LOG = pytest.StashKey["TestLog"]()
_WORKER_DOCS = pytest.StashKey[list]()
_WORKER_STAGES = pytest.StashKey[list]()
_LIVE = pytest.StashKey["LiveLine"]()
_INTERACTIVE = pytest.StashKey[bool]()
_RUN_NOTES = pytest.StashKey[list]()
_TESTRUN = pytest.StashKey[str]()


def pytest_addoption(parser: pytest.Parser) -> None:
    g = parser.getgroup("specguard", "speculative-decoding performance gates")
    g.addoption("--suite", default=None, help="suite file (TOML); default perf_tests/suite.toml")
    g.addoption("--server-url", action="append", default=[], metavar="[NAME=]URL",
                help="attach instead of launching; a bare URL stands for every matching configuration")
    g.addoption("--server-args", action="append", default=[], metavar='NAME="ARGS"',
                help="extra launch flags for one configuration (e.g. an emulator override)")
    g.addoption("--strict-server-args", action="store_true",
                help="attach mode: a server whose arguments differ from the suite file's launch values is an error "
                     "(default: the differences are reported and fingerprinted)")
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
    g.addoption("--specguard-debug", action="store_true",
                help="show Python tracebacks for specguard's own failures (default: one line per cause)")
    g.addoption("--specguard-benchmark", action="store_true",
                help="also time each cell with pytest-benchmark and print its table (off: the summary has the figures)")


# Flags that override a suite-file key: blamed by name when their value is wrong.
OVERRIDE_FLAGS = {"sweep.concurrency": "--concurrency", "sweep.repeats": "--repeats", "sweep.warmup": "--warmup",
                  "tolerances.throughput": "--tolerance-throughput",
                  "tolerances.accept_length": "--tolerance-accept-length",
                  "tolerances.prior_between_sd": "--prior-between-sd", "tolerances.family_alpha": "--family-alpha",
                  "tolerances.inconclusive": "--inconclusive", "tolerances.fail_rule": "--fail-rule"}


@pytest.hookimpl(trylast=True)  # after the terminal reporter exists
def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "specguard(cells, per_category): a specguard cell test; cells='all' or 'speculative'; "
                                       "per_category=True adds one test per prompt category (accept length)")
    for name in ALGORITHM_MARKERS:
        config.addinivalue_line("markers", f"{name}: specguard cells of configurations using {name}")
    # pytest-benchmark is opt-in (--specguard-benchmark); an unused fixture is not worth a warning.
    config.addinivalue_line("filterwarnings", "ignore:Benchmark fixture was not used")
    config.stash[_LOG] = TestLog(debug_wanted(config))
    config.pluginmanager.register(config.stash[_LOG], "specguard-test-log")
    config.stash[_WORKER_DOCS] = []
    config.stash[_WORKER_STAGES] = []
    config.stash[_RUN_NOTES] = []
    _stop_servers_on_sigterm(config)
    # Decided here, while output capture is suspended, so the real streams are what is checked.
    tw = config.get_terminal_writer() if config.pluginmanager.has_plugin("terminalreporter") else None
    config.stash[_INTERACTIVE] = bool(
        tw is not None and getattr(tw, "hasmarkup", False) and sys.stdout.isatty() and not os.environ.get("CI")
        and not hasattr(config, "workerinput"))
    if config.getoption("--specguard-benchmark") and not config.pluginmanager.has_plugin("benchmark"):
        raise pytest.UsageError("--specguard-benchmark needs pytest-benchmark: pip install pytest-benchmark "
                                "(and drop -p no:benchmark), or leave the option out")
    # Bad suite files and options are usage errors (exit 4) before anything runs; a suite that
    # does not exist is only an error when its tests are collected (pytest tests needs none).
    if config.getoption("--suite") or _default_suite_path(config).exists():
        suite = get_suite(config)
        _check_run_options(config, suite)
        _xdist_layout(config, suite)


def _on_sigterm(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt("SIGTERM")


def _stop_servers_on_sigterm(config: pytest.Config) -> None:
    """A CI timeout or `timeout` sends SIGTERM, which would end pytest without its teardown and
    orphan the servers it launched (each in its own process group). Treated as Ctrl-C instead:
    the session stops its servers and writes no baseline."""
    if threading.current_thread() is not threading.main_thread():
        return
    previous = signal.getsignal(signal.SIGTERM)
    if previous not in (signal.SIG_DFL, None):
        return  # someone else (a runner, a test) handles it: leave theirs
    signal.signal(signal.SIGTERM, _on_sigterm)
    config.add_cleanup(lambda: signal.signal(signal.SIGTERM, previous))


def debug_wanted(config: pytest.Config) -> bool:
    """Tracebacks for specguard's own failures: --specguard-debug or pytest's --tb=long."""
    return bool(config.getoption("--specguard-debug") or getattr(config.option, "tbstyle", "") == "long")


# -- suite --------------------------------------------------------------------------------------
def _default_suite_path(config: pytest.Config) -> Path:
    return Path(config.rootpath) / "perf_tests" / "suite.toml"


def get_suite(config: pytest.Config) -> Suite:
    """The suite file with command-line overrides applied and validated (once per session).

    The file is validated alone first, then with the overrides, so a bad value names the flag
    when it came from the command line and the file's key when it came from the file.
    """
    if _SUITE in config.stash:
        return config.stash[_SUITE]
    opt = config.getoption
    path = Path(opt("--suite")) if opt("--suite") else _default_suite_path(config)
    try:
        suite = load_suite(path)
        sweep, tol = suite.sweep, suite.tolerances
        sources: dict[str, str] = {}
        if opt("--concurrency"):
            try:
                levels = [int(x) for x in opt("--concurrency").split(",") if x.strip()]
            except ValueError:
                raise ConfigError(f"--concurrency {opt('--concurrency')} (command line): use comma-separated integers, "
                                  f"e.g. 1,4,16") from None
            if sweep.request_rate:
                raise ConfigError(f"--concurrency {opt('--concurrency')} (command line): {path} sweeps request_rate "
                                  f"levels {sweep.request_rate}; set its [sweep] max_concurrency for the in-flight cap")
            sweep = replace(sweep, concurrency=levels)
            sources["sweep.concurrency"] = "--concurrency"
        for flag, attr in (("--repeats", "repeats"), ("--warmup", "warmup")):
            if opt(flag) is not None:
                sweep = replace(sweep, **{attr: opt(flag)})
                sources[f"sweep.{attr}"] = flag
        for flag, attr in (("--tolerance-throughput", "throughput"), ("--tolerance-accept-length", "accept_length"),
                           ("--prior-between-sd", "prior_between_sd"), ("--family-alpha", "family_alpha"),
                           ("--inconclusive", "inconclusive"), ("--fail-rule", "fail_rule")):
            if opt(flag) is not None:
                tol = replace(tol, **{attr: opt(flag)})
                sources[f"tolerances.{attr}"] = flag
        suite = replace(suite, sweep=sweep, tolerances=tol)
        validate_suite(suite, sources)
    except ConfigError as exc:
        raise pytest.UsageError(str(exc)) from None
    config.stash[_SUITE] = suite
    return suite


def _check_run_options(config: pytest.Config, suite: Suite) -> None:
    """Command-line values that are not suite keys: one line naming the flag, exit 4."""
    opt = config.getoption
    try:
        server_args = parse_server_args(opt("--server-args"))
    except ValueError as exc:
        raise pytest.UsageError(str(exc)) from None
    urls = parse_server_urls(opt("--server-url"))
    unknown = [n for n in server_args if n not in suite.servers] + [n for n in urls if n is not None and n not in suite.servers]
    if unknown:
        raise pytest.UsageError(f"--server-args/--server-url name unknown configuration(s) {', '.join(unknown)}; "
                                f"{suite.path} has {', '.join(suite.servers)}")
    for url in urls.values():
        try:
            check_url(url)
        except ServerStartError as exc:
            raise pytest.UsageError(str(exc)) from None
    for flag, low in (("--requests", 1), ("--max-failed-requests", 0), ("--speculation-must-win-up-to", 1)):
        value = opt(flag)
        if value is not None and value < low:
            raise pytest.UsageError(f"{flag} {value} (command line): must be >= {low}")


def _xdist_layout(config: pytest.Config, suite: Suite) -> None:
    """Under pytest-xdist: each configuration shares its reference's group (one launch each), so
    --dist load/worksteal become loadgroup; the run says how servers share the machine."""
    if hasattr(config, "workerinput") or not getattr(config.option, "numprocesses", None):
        return
    notes = config.stash[_RUN_NOTES]
    dist = getattr(config.option, "dist", "no")
    if dist in ("load", "loadgroup", "worksteal"):
        notes.append(f"xdist: --dist {dist}: specguard places each configuration with its reference on one worker, "
                     f"so every server is launched once and every cell measured once")
    groups = {_group_of(suite, n) for n in suite.servers}
    if len(groups) > 1 and any(s.gpus is None for s in suite.servers.values()):
        notes.append(f"xdist: {len(groups)} configuration groups on {config.option.numprocesses} workers and no `gpus` "
                     f"set: launches are serialised (one launched server at a time on this machine), since servers "
                     f"sharing CPU/GPU would lower and blur each other's tok/s")


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """pytest-xdist controller: remember the run id, whose claim directory is removed at the end."""
    node.config.stash[_TESTRUN] = node.workerinput.get("testrunuid", "")


_CELL_ID = re.compile(r"\[(.+)\]$")


def _config_of_id(nodeid: str, suite: Suite) -> str | None:
    """The configuration a cell test id names: `[eagle3-c16]`, `[eagle3-c16-code]` (a category)."""
    m = _CELL_ID.search(nodeid)
    if not m:
        return None
    found = [n for n in suite.servers if re.fullmatch(re.escape(n) + r"-[cr]\d+(-.+)?", m.group(1))]
    return max(found, key=len) if found else None


@pytest.hookimpl(optionalhook=True, tryfirst=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """pytest-xdist controller: send every test of a configuration group (a speculative
    configuration and its reference) to one worker, so each server is launched once and a
    reference is measured once. xdist's own loadgroup cannot be relied on (with pytest 9 its
    group tag on node ids has no effect), so the grouping is done here, from the test ids."""
    if _SUITE not in config.stash or getattr(config.option, "dist", "no") not in ("load", "loadgroup", "worksteal"):
        return None
    from xdist.scheduler import LoadScopeScheduling

    suite = config.stash[_SUITE]

    class ConfigurationGroups(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            name = _config_of_id(nodeid, suite)
            if name is not None:
                return "specguard:" + _group_of(suite, name)
            return nodeid  # other tests: one scope each, as --dist load

    return ConfigurationGroups(config, log)


def _group_of(suite: Suite, name: str) -> str:
    return suite.servers[name].reference or name


def _worker_options(config: pytest.Config, suite: Suite) -> dict[str, Any]:
    """RunOptions fields for pytest-xdist workers (claims and the launch lock), when supported."""
    wi = getattr(config, "workerinput", None)
    if not wi:
        return {}
    claim_dir = Path(config.rootpath) / ".specguard" / f"xdist-{wi.get('testrunuid', 'run')}"
    out: dict[str, Any] = {"claim_dir": claim_dir, "worker_id": wi.get("workerid", "")}
    if any(s.gpus is None for s in suite.servers.values()):
        out["launch_lock"] = claim_dir / "launch.lock"
    return out


def get_session(config: pytest.Config) -> SpecguardSession:
    if _SESSION not in config.stash:
        suite = get_suite(config)
        _check_run_options(config, suite)
        opt = config.getoption
        baseline_dir = Path(opt("--baseline-dir")) if opt("--baseline-dir") else Path(config.rootpath) / "baselines" / suite.path.stem
        wanted: dict[str, Any] = dict(
            server_urls=parse_server_urls(opt("--server-url")),
            server_args=parse_server_args(opt("--server-args")),
            baseline_dir=baseline_dir,
            update_baselines=opt("--update-baselines"),
            require_baselines=opt("--require-baselines"),
            api_key=api_key_from(opt("--api-key")),
            log_dir=Path(opt("--server-log-dir")),
            max_failed_requests=opt("--max-failed-requests"),
            requests_per_run=opt("--requests"),
            strict_server_args=bool(opt("--strict-server-args") or suite.attach.strict_server_args),
            speculation_must_win_up_to=opt("--speculation-must-win-up-to"),
            rerun_hint=lambda name, levels: record_command(config, [(name, c) for c in levels]),
            **_worker_options(config, suite),
        )
        known = {f.name for f in dataclasses.fields(RunOptions)}
        config.stash[_SESSION] = SpecguardSession(suite, RunOptions(**{k: v for k, v in wanted.items() if k in known}))
    return config.stash[_SESSION]


# -- commands printed as hints: they must work as printed ------------------------------------------
def exact_k(cells: list[tuple[str, int]], all_cells: list[tuple[str, int]], prefix: str = "c") -> str:
    """A -k expression that selects exactly these cells' tests among all_cells (substring matching:
    "c1" also matches "c16", "eagle3" also matches "eagle3x", so those are excluded by name).
    `prefix`: "c" for concurrency levels, "r" for request-rate levels (ids `eagle3-r8`)."""
    p = prefix
    parts = []
    for name, c in cells:
        terms = [name, f"{p}{c}"]
        for other, oc in all_cells:
            if (other, oc) == (name, c):
                continue
            oid = f"{other}-{p}{oc}"
            if name in oid and f"{p}{c}" in f"{p}{oc}" and f"-{p}{c}" in oid:
                excl = f"{p}{oc}" if other == name else other
                if excl not in f"{name}-{p}{c}":
                    terms.append(f"not {excl}")
            elif name in other and other != name and f"{p}{c}" in f"{p}{oc}":
                terms.append(f"not {other}")
        parts.append(" and ".join(dict.fromkeys(terms)))
    return parts[0] if len(parts) == 1 else " or ".join(f"({p})" for p in parts)


def _carried_options(config: pytest.Config) -> list[str]:
    """The options that decide what is measured and where baselines live (never the API key)."""
    opt = config.getoption
    out: list[str] = []
    if opt("--suite"):
        out += ["--suite", opt("--suite")]
    if opt("--baseline-dir"):
        out += ["--baseline-dir", opt("--baseline-dir")]
    for url in opt("--server-url"):
        out += ["--server-url", url]
    for args in opt("--server-args"):
        out += ["--server-args", args]
    for flag in ("--concurrency", "--warmup", "--requests", "--repeats"):
        if opt(flag) is not None:
            out += [flag, str(opt(flag))]
    if opt("--strict-server-args"):
        out.append("--strict-server-args")
    return out


def _test_paths(config: pytest.Config) -> list[str]:
    return [a for a in config.args if not a.startswith("-")] or ["perf_tests"]


def record_command(config: pytest.Config, cells: list[tuple[str, int]] | None = None) -> str:
    """The command that records baselines for these cells (None: exactly this run's selection)."""
    cmd = ["pytest", *_test_paths(config), *_carried_options(config), "--update-baselines"]
    if cells:
        suite = get_suite(config)
        rate = bool(suite.sweep.request_rate)
        all_cells = [(n, c) for n in suite.servers for c in (suite.sweep.request_rate or suite.sweep.concurrency)]
        cmd += ["-k", exact_k(cells, all_cells, "r" if rate else "c")]
    else:
        if config.option.keyword:
            cmd += ["-k", config.option.keyword]
        if config.option.markexpr:
            cmd += ["-m", config.option.markexpr]
    text = shlex.join(cmd)
    if config.getoption("--api-key"):
        text += "  (with your --api-key or SPECGUARD_API_KEY)"
    return text


_OLD_HINT = re.compile(r"pytest perf_tests --update-baselines -k \"([^\"]+?) and c(\d+)\"")


def _rewrite_hint(config: pytest.Config, message: str) -> str:
    """Older session texts carry a bare hint; replace it with the run's own command."""
    return _OLD_HINT.sub(lambda m: record_command(config, [(m.group(1), int(m.group(2)))]), message)


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


def _gate_of(item: pytest.Item) -> str | None:
    return GATE_OF_TEST.get(getattr(item, "originalname", item.name))


def pytest_collection_finish(session: pytest.Session) -> None:
    """The selected tests (after -k/-m) are known: they are the family Holm and the per-cell
    alpha count, and the plan from which the session measures references; then the progress line."""
    config = session.config
    selected = [(c, _gate_of(item)) for item in session.items if (c := _cell_of(item)) is not None]
    if not selected:
        return
    sg = get_session(config)
    sg.plan([PlannedTest(c.config, c.concurrency, gate or "throughput", c.category) for c, gate in selected])
    if not config.stash.get(_INTERACTIVE, False):
        return
    sweep = get_suite(config).sweep
    cells = list(dict.fromkeys((c.config, c.concurrency) for c, _ in selected))
    live = LiveLine(config, SweepProgress(cells, sweep.warmup + sweep.repeats))
    config.stash[_LIVE] = live
    sg.set_progress(live)


# -- parametrisation and ordering ----------------------------------------------------------------
@dataclass(frozen=True)
class Cell:
    config: str
    concurrency: int  # the level: clients, or requests/s when `rate`
    category: str = ""  # a per-category accept-length test: one prompt category of the cell's runs
    rate: bool = False  # a request-rate level ([sweep] request_rate): id eagle3-r8

    def __str__(self) -> str:
        level = f"{'r' if self.rate else 'c'}{self.concurrency}"
        return f"{self.config}-{level}" + (f"-{self.category}" if self.category else "")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "specguard_cell" not in metafunc.fixturenames:
        return
    marker = metafunc.definition.get_closest_marker("specguard")
    kind = marker.kwargs.get("cells", "all") if marker else "all"
    per_category = bool(marker.kwargs.get("per_category", False)) if marker else False
    suite = get_suite(metafunc.config)
    categories = _categories_by_level(metafunc.config, suite) if per_category else {}
    params = []
    for name, cfg in suite.servers.items():
        if kind == "speculative" and not cfg.speculative:
            continue
        algo = cfg.algorithm_label.lower() if cfg.speculative else "no_speculation"
        marks = [pytest.mark.xdist_group(_group_of(suite, name))]  # with its reference: measured once
        if algo in ALGORITHM_MARKERS:
            marks.append(getattr(pytest.mark, algo))
        rate = bool(suite.sweep.request_rate)
        for c in suite.sweep.request_rate or suite.sweep.concurrency:
            cell = Cell(name, c, rate=rate)
            params.append(pytest.param(cell, id=str(cell), marks=marks))
            for category in categories.get(c, []):  # next to the overall test, one per prompt category
                cell = Cell(name, c, category, rate=rate)
                params.append(pytest.param(cell, id=str(cell), marks=marks))
    metafunc.parametrize("specguard_cell", params)


def _categories_by_level(config: pytest.Config, suite: Suite) -> dict[int, list[str]]:
    """Level -> the prompt categories its runs send (none when the workload has fewer than two)."""
    try:
        sg = get_session(config)
    except WorkloadError as exc:
        raise pytest.UsageError(f"{suite.path}: [workload]: {exc}") from None
    return {c: sg.categories_at(c) for c in sg.levels}


def _cell_of(item: pytest.Item) -> Cell | None:
    callspec = getattr(item, "callspec", None)
    cell = callspec.params.get("specguard_cell") if callspec else None
    return cell if isinstance(cell, Cell) else None  # pytest's NOTSET for an empty parameter set


def _is_empty_placeholder(item: pytest.Item) -> bool:
    """pytest's one "empty parameter set" item for a test with no cells (a suite without a
    speculative configuration has no speculation cells): nothing to measure, so not a test."""
    callspec = getattr(item, "callspec", None)
    return callspec is not None and "specguard_cell" in callspec.params and _cell_of(item) is None


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    """Group a configuration's tests (references first) so one server runs at a time."""
    empty = [item for item in items if _is_empty_placeholder(item)]
    if empty:
        config.hook.pytest_deselected(items=empty)
        items[:] = [item for item in items if not _is_empty_placeholder(item)]
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
        """The cell's measurement (taken once per cell). pytest-benchmark times it only with
        --specguard-benchmark; the argument is accepted for test files written before that."""
        s, c = self.session, self.cell
        config = self.request.config
        fresh = (c.config, c.concurrency) not in s.cells
        live = config.stash.get(_LIVE, None) if fresh else None
        if live:
            live.progress.begin_cell(c.config, c.concurrency)
        if fresh and config.getoption("--specguard-benchmark") and _gate_of(self.request.node) == "throughput":
            benchmark = self.request.getfixturevalue("benchmark")
        elif not config.getoption("--specguard-benchmark"):
            benchmark = None
        problem: ConfigUnavailable | None = None
        try:
            driver = _benchmark_driver(benchmark) if benchmark is not None and fresh else None
            m = s.measure(c.config, c.concurrency, **({"driver": driver} if driver else {}))
        except ConfigUnavailable as exc:
            problem = exc
        finally:
            if live:
                cell = s.cells.get((c.config, c.concurrency))
                live.progress.end_cell(cell.wall_s if cell else 0.0, len(cell.runs) + len(cell.warmup_runs) if cell else 0)
                live.clear()
        if problem is not None:  # raised outside the except block: no chained exception in the report
            if problem.skip:
                pytest.skip(_rewrite_hint(config, str(problem)))
            self.fail(f"{c}: not measured: {_rewrite_hint(config, str(problem))}", STATUS_NOT_MEASURED)
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
        summary = cell_summary([asdict(r) for r in m.runs])
        for key, name in (("output_throughput", "tok_s"), ("accept_length", "accept_length"),
                          ("median_ttft_ms", "ttft_p50_ms"), ("p99_ttft_ms", "ttft_p99_ms"),
                          ("median_itl_ms", "itl_p50_ms"), ("p99_itl_ms", "itl_p99_ms")):
            if summary[key] is not None:
                props.append((name, fmt_num(summary[key])))
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
        return self.session.throughput_result(self.cell.config, self.cell.concurrency)

    def accept_length(self) -> GateResult:
        """The cell's accept length, or its prompt category's when the test is a category's."""
        return self.session.accept_length_result(self.cell.config, self.cell.concurrency, self.cell.category)

    def speculation(self) -> GateResult:
        limit = self.request.config.getoption("--speculation-must-win-up-to")
        return self.session.speculation_result(self.cell.config, self.cell.concurrency, limit)

    def enforce(self, result: GateResult) -> None:
        """Turn a gate result into pass / skip / fail, with the one-line verdict as the message."""
        node = self.request.node
        node.user_properties += [("gate", result.gate), ("verdict", result.verdict), ("enforced", result.enforced)]
        if result.estimate is not None:
            node.user_properties.append(("ratio", f"{result.estimate.ratio:.4f}"))
            node.user_properties.append(("ci_low", f"{result.estimate.low:.4f}"))
            node.user_properties.append(("ci_high", f"{result.estimate.high:.4f}"))
        if result.current is not None:
            node.user_properties.append(("current", f"{result.current:.4f}"))
        if result.reference is not None:
            node.user_properties.append(("reference", f"{result.reference:.4f}"))
        message = _rewrite_hint(self.request.config, result.message)
        opts = self.session.options
        updating = opts.update_baselines and is_history_gate(result.gate)
        if result.verdict == SKIP:
            if opts.require_baselines and not updating:
                self.fail(message, STATUS_NOT_MEASURED)
            if updating:
                return  # a first baseline is being written
            pytest.skip(message)
        if updating:
            return  # accepting a new baseline: report the change, do not gate on the old one
        if result.verdict == ERROR:
            self.fail(message, STATUS_NOT_MEASURED)
        if result.enforced and (result.verdict == FAIL or
                                (result.verdict == INCONCLUSIVE and self.session.suite.tolerances.inconclusive == "fail")):
            self.fail(message, STATUS_REGRESSION)


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
    gate = _gate_of(request.node) or ""
    request.node.user_properties += [("config", specguard_cell.config), ("concurrency", specguard_cell.concurrency),
                                     ("gate", gate_label(gate, specguard_cell.category) if gate else "")]
    return CellTest(specguard, specguard_cell, request)


# -- outcomes: the one record every output is rendered from ---------------------------------------
def _raised_in_specguard(excinfo: pytest.ExceptionInfo) -> bool:
    """Whether the exception's innermost frame is specguard's own code (not a test file's)."""
    tb = excinfo.tb
    while tb.tb_next is not None:
        tb = tb.tb_next
    path = Path(tb.tb_frame.f_code.co_filename).resolve()
    return Path(__file__).resolve().parent in path.parents


class TestLog:
    """Every specguard test's outcome and why failed tests failed (a regression, or a measurement
    that did not happen). The kind travels as a user property of the report, so an xdist
    controller sees it too. Specguard's own verdicts say their kind; an `assert` in a test file
    is a regression; anything raised inside specguard (an internal error, an internal assert)
    or in setup/teardown means nothing was measured. Failure reports are cut to their message
    (no traceback, no chained exceptions) unless --specguard-debug or --tb=long asks for more."""

    __test__ = False  # not a test class, whatever its name

    def __init__(self, debug: bool) -> None:
        self.debug = debug
        self.tests: dict[str, dict[str, Any]] = {}

    @property
    def failed(self) -> list[dict[str, str]]:
        return [{"nodeid": t["nodeid"], "kind": t["kind"], "message": t["message"]}
                for t in self.tests.values() if t["outcome"] == "failed"]

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo) -> pytest.TestReport:
        report = yield
        if not report.failed or call.excinfo is None:
            return report
        ours = _cell_of(item) is not None
        exc = call.excinfo.value
        if FAILURE_KIND in dict(report.user_properties):
            if not self.debug and isinstance(exc, pytest.fail.Exception):
                report.longrepr = exc.msg
            return report
        user_assert = (call.when == "call" and call.excinfo.errisinstance((AssertionError, pytest.fail.Exception))
                       and not _raised_in_specguard(call.excinfo))
        kind = STATUS_REGRESSION if user_assert else STATUS_NOT_MEASURED
        report.user_properties = [*report.user_properties, (FAILURE_KIND, kind)]
        item.user_properties.append((FAILURE_KIND, kind))  # JUnit reads the properties of the last report
        if ours and not user_assert and not self.debug:
            first = (str(exc).strip().splitlines() or [""])[0]
            report.longrepr = (f"specguard internal error during {call.when}: {type(exc).__name__}: {first}; "
                               f"counted as not measured; rerun with --specguard-debug for the traceback")
        return report

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        props = dict(report.user_properties)
        ours = "gate" in props or report.nodeid == HOLM_NODEID
        if not ours and not report.failed:
            return
        if report.when == "call" or report.failed or report.skipped:
            entry = self.tests.get(report.nodeid)
            if entry is not None and entry["outcome"] == "failed" and not report.failed:
                return  # a passing teardown does not undo a failed call
            self.tests[report.nodeid] = self._entry(report, props)

    @staticmethod
    def _entry(report: pytest.TestReport, props: dict[str, Any]) -> dict[str, Any]:
        outcome = "failed" if report.failed else "skipped" if report.skipped else "passed"
        if report.skipped and isinstance(report.longrepr, tuple):
            message = str(report.longrepr[2])
        else:
            crash = getattr(report.longrepr, "reprcrash", None)
            message = crash.message if crash else report.longreprtext if report.longrepr else ""
        first = next((ln for ln in message.splitlines() if ln.strip()), "")
        if first.startswith("Skipped: "):
            first = first[len("Skipped: "):]
        return {"nodeid": report.nodeid, "config": props.get("config"), "concurrency": props.get("concurrency"),
                "gate": props.get("gate") or ("family_holm" if report.nodeid == HOLM_NODEID else None),
                "category": props.get("category") or None,
                "outcome": outcome, "verdict": props.get("verdict"), "enforced": props.get("enforced", True),
                "kind": props.get(FAILURE_KIND, STATUS_NOT_MEASURED) if outcome == "failed" else None,
                "message": first[:300]}


def _emit_holm_test(config: pytest.Config, holm: dict[str, Any]) -> None:
    """Report Holm's family-wise decision as the session-level test specguard::family_holm."""
    from _pytest.reports import TestReport

    failed = holm["outcome"] == "failed"
    props = [("gate", "family_holm"), ("verdict", "fail" if failed else "pass")]
    if failed:
        props.append((FAILURE_KIND, STATUS_REGRESSION))
    location = ("specguard", None, "family_holm")
    for when, outcome, longrepr in (("setup", "passed", None), ("call", "failed" if failed else "passed",
                                    holm["message"] if failed else None), ("teardown", "passed", None)):
        report = TestReport(HOLM_NODEID, location, {"family_holm": 1}, outcome, longrepr, when,
                            user_properties=list(props))
        # Every plugin sees it (JUnit, this log, xdist); the terminal reporter only counts it, so
        # its progress line stays at 100% and `N passed/failed` includes it.
        terminal = config.pluginmanager.get_plugin("terminalreporter")
        hook = config.pluginmanager.subset_hook_caller("pytest_runtest_logreport", [terminal] if terminal else [])
        hook(report=report)
        if terminal is not None and when == "call":
            category = config.hook.pytest_report_teststatus(report=report, config=config)[0]
            terminal.stats.setdefault(category, []).append(report)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: Any) -> None:
    """pytest-xdist controller: collect each worker's results document and baseline stage."""
    output = getattr(node, "workeroutput", {})
    if output.get(WORKER_OUTPUT_KEY):
        node.config.stash[_WORKER_DOCS].append(json.loads(output[WORKER_OUTPUT_KEY]))
    if output.get(WORKER_STAGE_KEY):
        node.config.stash[_WORKER_STAGES].append(json.loads(output[WORKER_STAGE_KEY]))


def exit_status(current: int, failed: list[dict[str, str]]) -> int:
    """1 when a test found a regression (Holm's family test included), 3 when tests failed only
    because they could not measure; pytest's other codes (2 interrupted, 4 usage, 5 no tests) stay."""
    kinds = {f["kind"] for f in failed}
    if current not in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED):
        return int(current)
    if STATUS_REGRESSION in kinds:
        return int(pytest.ExitCode.TESTS_FAILED)
    if STATUS_NOT_MEASURED in kinds:
        return EXIT_NOT_MEASURED
    return int(current)


def _interrupted(session: pytest.Session, exitstatus: int) -> bool:
    return exitstatus == pytest.ExitCode.INTERRUPTED or bool(session.shouldstop) or bool(session.shouldfail)


def _commit_worker_stages(config: pytest.Config, interrupted: bool) -> list[str]:
    """xdist controller: write the workers' staged baselines, all or nothing."""
    stages = config.stash[_WORKER_STAGES]
    if not stages:
        return []
    from specguard import session as session_module

    commit = getattr(session_module, "commit_baseline_stages", None)
    stage_cls = getattr(session_module, "BaselineStage", None)
    if commit is None or stage_cls is None:
        return []
    suite = get_suite(config)
    opt = config.getoption
    baseline_dir = Path(opt("--baseline-dir")) if opt("--baseline-dir") else Path(config.rootpath) / "baselines" / suite.path.stem
    outcome = commit([stage_cls.from_json(s) for s in stages], baseline_dir, suite.tolerances.history_sessions,
                     interrupted=interrupted)
    return list(getattr(outcome, "lines", []) or ([outcome.reason] if getattr(outcome, "reason", None) else []))


@pytest.hookimpl(tryfirst=True)  # before junitxml writes its file: the Holm test must be in it
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    config = session.config
    interrupted = _interrupted(session, exitstatus)
    worker = hasattr(config, "workerinput")
    if _SESSION in config.stash:
        sg = config.stash[_SESSION]
        sg.stop_all()
        stage = None
        if worker and hasattr(sg, "stage_baselines"):
            stage = sg.stage_baselines(interrupted=interrupted)
        elif hasattr(sg, "write_baselines"):
            sg.write_baselines(interrupted=interrupted)
        if not sg.cells and not sg.results and not sg.baseline_updates and not sg.servers:
            return
        doc = results_document(sg)
        if worker:  # the controller merges, reports and commits baselines
            config.workeroutput[WORKER_OUTPUT_KEY] = json.dumps(doc)
            if stage is not None:
                config.workeroutput[WORKER_STAGE_KEY] = json.dumps(stage.to_json())
            return
    elif config.stash.get(_WORKER_DOCS, None):
        doc = merge_documents(config.stash[_WORKER_DOCS])
        doc["baseline_updates"] = [*doc["baseline_updates"], *_commit_worker_stages(config, interrupted)]
        if config.stash.get(_TESTRUN, ""):  # the workers' claims and launch lock are this run's only
            shutil.rmtree(Path(config.rootpath) / ".specguard" / f"xdist-{config.stash[_TESTRUN]}", ignore_errors=True)
    else:
        return
    holm = family_holm(doc)
    if holm is not None and not interrupted:
        _emit_holm_test(config, holm)
    log = config.stash[_LOG]
    status = exit_status(session.exitstatus, log.failed)
    session.exitstatus = status
    doc["tests"] = sorted(log.tests.values(), key=lambda t: t["nodeid"])
    doc["outcome"] = {"status": EXIT_STATUS_NAMES.get(status, f"exit-{status}"), "exit_status": status,
                      "failed_tests": log.failed, "counts": _counts(log.tests.values())}
    doc["run_notes"] = [*config.stash[_RUN_NOTES], *doc.get("run_notes", [])]
    if _first_run(doc):
        doc["hints"] = {"record": record_command(config)}
    config.stash[_DOC] = doc
    path = config.getoption("--results-json")
    if path:
        write_results(doc, Path(path))
    report_dir = config.getoption("--report-dir")
    if report_dir:
        write_report_dir(doc, Path(report_dir))


def _counts(tests) -> dict[str, int]:
    out = {"passed": 0, "failed": 0, "skipped": 0}
    for t in tests:
        out[t["outcome"]] += 1
    return out


def _first_run(doc: dict[str, Any]) -> bool:
    """No stored baseline for any gated cell of this run (and not recording one now)."""
    if doc["options"].get("update_baselines"):
        return False
    hist = [d for d in doc["decisions"] if is_history_gate(d["gate"])]
    return bool(hist) and all(d["verdict"] == SKIP and "no baseline" in d["message"] for d in hist)


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    doc = config.stash.get(_DOC, None)
    if doc is None or not (doc["cells"] or doc["baseline_updates"] or doc["servers"]):
        return
    terminalreporter.write_sep("=", "specguard summary")
    terminalreporter.write_line(render_summary(doc))
    report_dir = config.getoption("--report-dir")
    if report_dir:
        terminalreporter.write_line(f"specguard report: {Path(report_dir) / 'report.html'}")
