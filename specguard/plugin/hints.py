"""Commands printed as hints ("record it with: pytest ..."): they must work as printed."""

from __future__ import annotations

import os
import shlex

import pytest

from specguard.plugin.options import carried_options, get_suite, test_paths


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


def _paths_shown(config: pytest.Config) -> list[str]:
    """The test paths as the user typed them; else the suite file's directory (from here)."""
    given = [str(p) for p in test_paths(config)]
    if given:
        return given
    return [os.path.relpath(get_suite(config).path.parent)]


def record_command(config: pytest.Config, cells: list[tuple[str, int]] | None = None) -> str:
    """The command that records baselines for these cells (None: exactly this run's selection)."""
    cmd = ["pytest", *_paths_shown(config), *carried_options(config), "--update-baselines"]
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

