"""Commands printed as hints ("record it with: pytest ..."): they must work as printed."""

from __future__ import annotations

import os

import pytest

from specguard.plugin.options import carried_options, get_suite, test_paths
from specguard.session.hints import exact_k, record_command_line


def _paths_shown(config: pytest.Config) -> list[str]:
    """The test paths as the user typed them; else the suite file's directory (from here)."""
    given = [str(p) for p in test_paths(config)]
    if given:
        return given
    return [os.path.relpath(get_suite(config).path.parent)]


def record_command(config: pytest.Config, cells: list[tuple[str, int]] | None = None) -> str:
    """The command that records baselines for these cells (None: exactly this run's selection)."""
    paths, options = _paths_shown(config), carried_options(config)
    if cells:
        suite = get_suite(config)
        rate = bool(suite.sweep.request_rate)
        all_cells = [(n, c) for n in suite.servers for c in (suite.sweep.request_rate or suite.sweep.concurrency)]
        text = record_command_line(paths, options, exact_k(cells, all_cells, "r" if rate else "c"))
    else:
        text = record_command_line(paths, options, config.option.keyword or None, config.option.markexpr or None)
    if config.getoption("--api-key"):
        text += "  (with your --api-key or SPECGUARD_API_KEY)"
    return text

