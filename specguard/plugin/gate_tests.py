"""The gate tests. A repository's perf_tests/ imports them (`specguard init` writes that file):

    from specguard.plugin.gate_tests import (test_accept_length, test_speculation_beats_reference, test_step_time,
                                             test_throughput)

Each test measures its cell (once, shared by the cell's tests) and enforces one verdict. Ids name
configuration and level: test_throughput[eagle3-c16], so -k eagle3 or -k c16 select what you
expect (and a prompt category, test_accept_length[eagle3-c16-code], -k code). The suite file
beside the tests (or --suite) says what runs.

`test_speculation_beats_baseline`, the speculation test's name until 0.1.0 (it compares with the
configuration's reference, which need not be the one named baseline), is still importable: the
same test, and the summary says once per run to import the new name.
"""

from typing import Any

import pytest

from specguard.plugin.collection import DEPRECATED_NAMES
from specguard.plugin.fixtures import CellTest


@pytest.mark.specguard(cells="all")
def test_throughput(cell: CellTest) -> None:
    """Output tok/s is not confidently below (1 - tolerance) x the stored baseline."""
    cell.measure()
    cell.enforce(cell.throughput())


@pytest.mark.specguard(cells="all")
def test_step_time(cell: CellTest) -> None:
    """The engine's time per decode step of one request (per verify step with speculation) is not
    confidently above (1 + tolerance) x the stored baseline: the engine's half of tok/s, apart
    from the drafter's (accept length)."""
    cell.measure()
    cell.enforce(cell.step_time())


@pytest.mark.specguard(cells="speculative", per_category=True)
def test_accept_length(cell: CellTest) -> None:
    """Accept length (tokens per verify step over the run's own requests) holds its baseline.
    When the workload's prompts carry categories, each category has its own test next to the
    overall one (test_accept_length[eagle3-c16-code]): a drop on code prompts alone fails by name."""
    cell.measure()
    cell.enforce(cell.accept_length())


@pytest.mark.specguard(cells="speculative")
def test_speculation_beats_reference(cell: CellTest) -> None:
    """Speculation is not confidently slower than its reference where it must win."""
    cell.measure()
    cell.enforce(cell.speculation())


@pytest.mark.specguard(cells="soak")
def test_soak(cell: CellTest) -> None:
    """Under steady load for `[soak] duration_s`, no window's accept length, step time or tok/s
    starts a lasting slide (a change point the worse way after the warm-up windows): acceptance
    that decays in a long-running server (sglang#37326) fails by name, with the window it began."""
    cell.enforce(cell.soak())


def __getattr__(name: str) -> Any:
    """A renamed test imported by its old name (PEP 562): the same function, so a repository's
    perf_tests/ written by an older `specguard init` keeps its tests and their ids."""
    if name in DEPRECATED_NAMES:
        return globals()[DEPRECATED_NAMES[name]]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
