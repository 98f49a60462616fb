"""The performance gates. Each test measures its cell (once, shared) and enforces one verdict.

Ids name configuration and concurrency: test_throughput[eagle3-c16], so -k eagle3 or -k c16
select what you expect (and a prompt category, test_accept_length[eagle3-c16-code], -k code). The suite file (perf_tests/suite.toml by default) says what runs.
"""

import pytest


@pytest.mark.specguard(cells="all")
def test_throughput(cell):
    """Output tok/s is not confidently below (1 - tolerance) x the stored baseline.
    (--specguard-benchmark also times the cell with pytest-benchmark; it is optional.)"""
    cell.measure()
    cell.enforce(cell.throughput())


@pytest.mark.specguard(cells="speculative", per_category=True)
def test_accept_length(cell):
    """Accept length (tokens per verify step over the run's own requests) holds its baseline.
    When the workload's prompts carry categories, each category has its own test next to the
    overall one (test_accept_length[eagle3-c16-code]): a drop on code prompts alone fails by name."""
    cell.measure()
    cell.enforce(cell.accept_length())


@pytest.mark.specguard(cells="speculative")
def test_speculation_beats_baseline(cell):
    """Speculation is not confidently slower than its reference where it must win."""
    cell.measure()
    cell.enforce(cell.speculation())
