"""Command-line options and the suite file they override.

The suite file is `--suite`, else the ini option `specguard_suite`, else the `suite.toml` beside
the test paths pytest was given (`pytest perf_tests` reads perf_tests/suite.toml). Bad values are
usage errors (exit 4) before anything runs, naming the flag when it came from the command line
and the file's key when it came from the file.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from specguard.config import FAIL_RULES, ConfigError, Suite, load_suite, validate_suite
from specguard.plugin import state
from specguard.server import ServerStartError, check_url
from specguard.session import parse_server_args, parse_server_urls
from specguard.values import ValueTextError, positive_ints

SUITE_FILE_NAME = "suite.toml"

_TOLERANCE_FLAGS = (("--tolerance-throughput", "throughput"), ("--tolerance-step-time", "step_time"),
                    ("--tolerance-accept-length", "accept_length"),
                    ("--prior-between-sd", "prior_between_sd"), ("--family-alpha", "family_alpha"),
                    ("--inconclusive", "inconclusive"), ("--fail-rule", "fail_rule"))


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addini("specguard_suite", "specguard: the suite file (default: suite.toml beside the test paths)")
    g = parser.getgroup("specguard", "speculative-decoding performance gates")
    g.addoption("--suite", default=None,
                help="suite file (TOML); default: ini specguard_suite, else suite.toml beside the test paths")
    g.addoption("--server-url", action="append", default=[], metavar="[NAME=]URL",
                help="attach instead of launching; a bare URL stands for every matching configuration")
    g.addoption("--server-args", action="append", default=[], metavar='NAME="ARGS"',
                help="extra launch flags for one configuration (e.g. an emulator override)")
    g.addoption("--strict-server-args", action="store_true",
                help="attach mode: a server whose arguments differ from the suite file's launch values is an error "
                     "(default: the differences are reported and fingerprinted)")
    g.addoption("--concurrency", default=None, help="comma-separated concurrency levels, e.g. 1,4,16")
    g.addoption("--request-rate", default=None,
                help="comma-separated request rates (req/s, open loop), e.g. 2,8,32: overrides [sweep] request_rate")
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
    g.addoption("--tolerance-step-time", type=float, default=None, help="the smallest step-time increase worth failing for")
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


def debug_wanted(config: pytest.Config) -> bool:
    """Tracebacks for specguard's own failures: --specguard-debug or pytest's --tb=long."""
    return bool(config.getoption("--specguard-debug") or getattr(config.option, "tbstyle", "") == "long")


def test_paths(config: pytest.Config) -> list[Path]:
    """The paths pytest was asked to collect (node ids cut to their file), relative as given."""
    return [Path(str(a).split("::", 1)[0]) for a in config.args if not str(a).startswith("-")]


def suite_path(config: pytest.Config) -> Path | None:
    """The suite file of this run, or None when it has none (`pytest tests` of a project)."""
    if config.getoption("--suite"):
        return Path(str(config.getoption("--suite")))
    if config.getini("specguard_suite"):
        return Path(config.rootpath) / str(config.getini("specguard_suite"))
    found: list[Path] = []
    for p in test_paths(config):
        p = p if p.is_absolute() else Path(config.invocation_params.dir) / p
        candidate = (p if p.is_dir() else p.parent) / SUITE_FILE_NAME
        if candidate.is_file() and candidate.resolve() not in [f.resolve() for f in found]:
            found.append(candidate)
    if len(found) > 1:
        raise pytest.UsageError(f"the test paths hold several suite files ({', '.join(map(str, found))}); "
                                f"choose one with --suite")
    return found[0] if found else None


def baseline_dir(config: pytest.Config, suite: Suite) -> Path:
    """--baseline-dir, else baselines/<suite name>/ under the project's root: pytest's rootdir when
    a pytest config file fixes it, else the directory pytest was started from."""
    opt = config.getoption("--baseline-dir")
    if opt:
        return Path(opt)
    root = config.rootpath if config.inipath is not None else config.invocation_params.dir
    return Path(root) / "baselines" / suite.path.stem


def _levels(flag: str, text: str) -> list[int]:
    try:
        return positive_ints(flag, text, "2,8,32" if flag == "--request-rate" else "1,4,16", where=" (command line)")
    except ValueTextError as exc:
        raise ConfigError(str(exc)) from None


def _overridden(config: pytest.Config, suite: Suite) -> tuple[Suite, dict[str, str]]:
    """The suite with the command line's values, and which keys came from which flag."""
    opt = config.getoption
    sweep, tol = suite.sweep, suite.tolerances
    sources: dict[str, str] = {}
    if opt("--concurrency") and opt("--request-rate"):
        raise ConfigError("--concurrency and --request-rate (command line): a run sweeps either concurrency or "
                          "request-rate levels; give one of them")
    if opt("--concurrency"):
        if sweep.request_rate:
            raise ConfigError(f"--concurrency {opt('--concurrency')} (command line): {suite.path} sweeps request_rate "
                              f"levels {sweep.request_rate}; use --request-rate, or [sweep] max_concurrency for the "
                              f"in-flight cap")
        sweep = replace(sweep, concurrency=_levels("--concurrency", opt("--concurrency")))
        sources["sweep.concurrency"] = "--concurrency"
    if opt("--request-rate"):
        sweep = replace(sweep, request_rate=_levels("--request-rate", opt("--request-rate")))
        sources["sweep.request_rate"] = "--request-rate"
    for flag, attr in (("--repeats", "repeats"), ("--warmup", "warmup")):
        if opt(flag) is not None:
            sweep = replace(sweep, **{attr: opt(flag)})
            sources[f"sweep.{attr}"] = flag
    for flag, attr in _TOLERANCE_FLAGS:
        if opt(flag) is not None:
            tol = replace(tol, **{attr: opt(flag)})
            sources[f"tolerances.{attr}"] = flag
    return replace(suite, sweep=sweep, tolerances=tol), sources


def get_suite(config: pytest.Config) -> Suite:
    """The suite file with command-line overrides applied and validated (once per session).

    The file is validated alone first, then with the overrides, so a bad value names the flag
    when it came from the command line and the file's key when it came from the file.
    """
    if state.SUITE in config.stash:
        return config.stash[state.SUITE]
    path = suite_path(config)
    if path is None:
        raise pytest.UsageError("specguard: no suite file: put suite.toml beside the gate tests, set "
                                "specguard_suite in your pytest ini, or pass --suite FILE (`specguard init` writes one)")
    try:
        suite, sources = _overridden(config, load_suite(path))
        validate_suite(suite, sources)
    except ConfigError as exc:
        raise pytest.UsageError(str(exc)) from None
    config.stash[state.SUITE] = suite
    return suite


def check_run_options(config: pytest.Config, suite: Suite) -> None:
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


def carried_options(config: pytest.Config) -> list[str]:
    """The options that decide what is measured and where baselines live (never the API key)."""
    opt = config.getoption
    out: list[str] = []
    for flag in ("--suite", "--baseline-dir"):
        if opt(flag):
            out += [flag, opt(flag)]
    for flag in ("--server-url", "--server-args"):
        for value in opt(flag):
            out += [flag, value]
    for flag in ("--concurrency", "--request-rate", "--warmup", "--requests", "--repeats"):
        if opt(flag) is not None:
            out += [flag, str(opt(flag))]
    if opt("--strict-server-args"):
        out.append("--strict-server-args")
    return out

