"""The pytest plugin (entry point `pytest11: specguard`): a thin layer over the gate session.

Each module holds one part; this one registers their hooks and fixtures with pytest:
options (command line, suite file), collection (parametrisation, ordering), session (the run's
GateSession), fixtures (`specguard`, `cell`), scheduling (pytest-xdist), outcomes (the test log,
Holm's session-level test, exit codes, results and reports), hints (commands printed as advice).
The gate tests themselves are in gate_tests.py. Nothing here acts unless gate tests are collected.
"""

from __future__ import annotations

import os
import sys

import pytest

from specguard.plugin import state
from specguard.plugin.collection import (
    ALGORITHM_MARKER,
    pytest_collection_finish,
    pytest_collection_modifyitems,
    pytest_generate_tests,
    pytest_runtest_teardown,
)
from specguard.plugin.fixtures import cell, specguard
from specguard.plugin.options import check_run_options, debug_wanted, get_suite, pytest_addoption, suite_path
from specguard.plugin.outcomes import LOG, TestLog, pytest_sessionfinish, pytest_terminal_summary
from specguard.plugin.scheduling import pytest_configure_node, pytest_testnodedown, pytest_xdist_make_scheduler, run_notes

__all__ = ["cell", "pytest_addoption", "pytest_collection_finish", "pytest_collection_modifyitems",
           "pytest_configure", "pytest_configure_node", "pytest_generate_tests", "pytest_runtest_teardown",
           "pytest_sessionfinish", "pytest_terminal_summary", "pytest_testnodedown", "pytest_xdist_make_scheduler",
           "specguard"]


@pytest.hookimpl(trylast=True)  # after the terminal reporter exists
def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "specguard(cells, per_category): a specguard cell test; cells='all' or 'speculative'; "
                                       "per_category=True adds one test per prompt category (accept length)")
    config.addinivalue_line("markers", f"{ALGORITHM_MARKER}(name): specguard cells of configurations whose speculative "
                                       f"algorithm is name (eagle3, nextn, ngram, ..., or none): "
                                       f"-m \"{ALGORITHM_MARKER}(name='eagle3')\"")
    # pytest-benchmark is opt-in (--specguard-benchmark); an unused fixture is not worth a warning.
    config.addinivalue_line("filterwarnings", "ignore:Benchmark fixture was not used")
    config.stash[LOG] = TestLog(debug_wanted(config))
    config.pluginmanager.register(config.stash[LOG], "specguard-test-log")
    config.stash[state.WORKER_DOCS] = []
    config.stash[state.WORKER_STAGES] = []
    # Decided here, while output capture is suspended, so the real streams are what is checked.
    tw = config.get_terminal_writer() if config.pluginmanager.has_plugin("terminalreporter") else None
    config.stash[state.INTERACTIVE] = bool(
        tw is not None and getattr(tw, "hasmarkup", False) and sys.stdout.isatty() and not os.environ.get("CI")
        and not hasattr(config, "workerinput"))
    if config.getoption("--specguard-benchmark") and not config.pluginmanager.has_plugin("benchmark"):
        raise pytest.UsageError("--specguard-benchmark needs pytest-benchmark: pip install pytest-benchmark "
                                "(and drop -p no:benchmark), or leave the option out")
    # A bad suite file or option is a usage error (exit 4) before anything runs; a run without a
    # suite file (a project's own tests) is left alone.
    config.stash[state.RUN_NOTES] = []
    if suite_path(config) is not None:
        suite = get_suite(config)
        check_run_options(config, suite)
        config.stash[state.RUN_NOTES] = run_notes(config, suite)
