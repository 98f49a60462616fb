"""Parametrisation and ordering: one test per gate, configuration and level.

Test ids name configuration and level (`test_throughput[eagle3-c16]`, `eagle3-r8` at a request
rate, `eagle3-c16-code` for a prompt category), so `-k eagle3`, `-k c16` and `-k "mtp and not
c64"` select what users expect. Tests of one configuration run together, references first, so
one server is up at a time, stopped (whole process group) after its last test.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from specguard.config import SOAK_PASSIVE, Suite
from specguard.labels import ACCEPT_LENGTH, SOAK, SPECULATION, STEP_TIME, THROUGHPUT, Level
from specguard.notes import Note, NoteKind
from specguard.plugin import state
from specguard.plugin.live import LiveLine
from specguard.plugin.options import get_suite
from specguard.plugin.scheduling import group_of
from specguard.plugin.session import get_session
from specguard.report.progress import SweepProgress
from specguard.session import PlannedTest
from specguard.workload import WorkloadError

# One marker, `algorithm(name=...)`, rather than one per algorithm: -k matches marker names as
# keywords, so a marker `standalone` made `-k standalone` select every STANDALONE configuration
# whatever its name, and `no_speculation` made `-k speculation` select the reference's tests.
ALGORITHM_MARKER = "algorithm"
# Tests renamed since a release: old name -> new (plugin/gate_tests.py keeps the old importable)
DEPRECATED_NAMES = {"test_speculation_beats_baseline": "test_speculation_beats_reference"}
GATE_OF_TEST = {"test_throughput": THROUGHPUT, "test_step_time": STEP_TIME, "test_accept_length": ACCEPT_LENGTH,
                "test_speculation_beats_reference": SPECULATION, "test_soak": SOAK}
GATE_OF_TEST.update({old: GATE_OF_TEST[new] for old, new in DEPRECATED_NAMES.items()})
TEST_ORDER = {name: i for i, name in enumerate(GATE_OF_TEST)}


@dataclass(frozen=True)
class Cell:
    """What one gate test measures: a configuration at a level (and one prompt category's runs)."""

    config: str
    level: Level
    category: str = ""  # a per-category accept-length test: one prompt category of the cell's runs

    def __str__(self) -> str:
        return f"{self.config}-{self.level}" + (f"-{self.category}" if self.category else "")


def gate_of(item: pytest.Item) -> str | None:
    return GATE_OF_TEST.get(getattr(item, "originalname", item.name))


def cell_of(item: pytest.Item | None) -> Cell | None:
    callspec = getattr(item, "callspec", None)
    cell = callspec.params.get("specguard_cell") if callspec else None
    return cell if isinstance(cell, Cell) else None  # pytest's NOTSET for an empty parameter set


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
        if (kind == "speculative" and not cfg.speculative) or (kind == "soak" and name not in suite.soaked):
            continue
        algo = cfg.algorithm_label.lower() if cfg.speculative else "none"
        marks = [pytest.mark.xdist_group(group_of(suite, name)),  # with its reference: measured once
                 getattr(pytest.mark, ALGORITHM_MARKER)(name=algo)]
        cells = [_soak_cell(suite, name)] if kind == "soak" else _sweep_cells(suite, name, categories)
        params += [pytest.param(cell, id=shown, marks=marks) for cell, shown in cells]
    metafunc.parametrize("specguard_cell", params)


def _soak_cell(suite: Suite, name: str) -> tuple[Cell, str]:
    """One soak test per configuration, at the soak's concurrency (passive: none sent)."""
    shown = "passive" if suite.soak.mode == SOAK_PASSIVE else f"c{suite.soak.concurrency}"
    return Cell(name, Level(suite.soak.concurrency)), f"{name}-{shown}"


def _sweep_cells(suite: Suite, name: str, categories: dict[int, list[str]]) -> list[tuple[Cell, str]]:
    """A configuration's cells: every level, and next to each overall cell one per prompt category."""
    rate = bool(suite.sweep.request_rate)
    cells = [Cell(name, Level(value, rate), category)
             for value in suite.sweep.request_rate or suite.sweep.concurrency
             for category in ["", *categories.get(value, [])]]
    return [(cell, str(cell)) for cell in cells]


def _categories_by_level(config: pytest.Config, suite: Suite) -> dict[int, list[str]]:
    """Level -> the prompt categories its runs send (none when the workload has fewer than two)."""
    try:
        sg = get_session(config)
    except WorkloadError as exc:
        raise pytest.UsageError(f"{suite.path}: [workload]: {exc}") from None
    return {value: sg.categories_at(value) for value in sg.levels.values}


def _is_empty_placeholder(item: pytest.Item) -> bool:
    """pytest's one "empty parameter set" item for a test with no cells (a suite without a
    speculative configuration has no speculation cells): nothing to measure, so not a test."""
    callspec = getattr(item, "callspec", None)
    return callspec is not None and "specguard_cell" in callspec.params and cell_of(item) is None


def _note_deprecated_names(config: pytest.Config, items: list[pytest.Item]) -> None:
    """One summary line per old test name a repository still imports (once per run)."""
    for old, new in DEPRECATED_NAMES.items():
        files = sorted({str(item.path.relative_to(config.rootpath)) if item.path.is_relative_to(config.rootpath)
                        else str(item.path) for item in items if getattr(item, "originalname", item.name) == old})
        if files:
            config.stash[state.RUN_NOTES].append(Note.of(NoteKind.TEST_RENAMED, files=", ".join(files), old=old, new=new))


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    """Group a configuration's tests (references first) so one server runs at a time."""
    empty = [item for item in items if _is_empty_placeholder(item)]
    if empty:
        config.hook.pytest_deselected(items=empty)
        items[:] = [item for item in items if not _is_empty_placeholder(item)]
    cells = [(i, cell_of(item)) for i, item in enumerate(items)]
    if not any(c for _, c in cells):
        return
    _note_deprecated_names(config, items)
    suite = get_suite(config)
    names = list(suite.servers)
    rank = {n: (0 if not suite.servers[n].speculative else 1, names.index(n)) for n in names}

    def key(pair: tuple[int, Cell | None]) -> tuple[int, ...]:
        i, cell = pair
        if cell is None:
            return (0, i)
        name = getattr(items[i], "originalname", items[i].name)
        return (1, *rank[cell.config], cell.level.value, TEST_ORDER.get(name, 9), i)

    items[:] = [items[i] for i, _ in sorted(cells, key=key)]


def pytest_collection_finish(session: pytest.Session) -> None:
    """The selected tests (after -k/-m) are known: they are the family Holm and the per-cell
    alpha count, and the plan from which the session measures references; then the progress line."""
    config = session.config
    # a soak test is decided on its own windows, outside the family (its [soak] alpha per metric)
    selected = [(c, gate) for item in session.items
                if (c := cell_of(item)) is not None and (gate := gate_of(item)) != SOAK]
    if not selected:
        return
    sg = get_session(config)
    sg.plan([PlannedTest(c.config, c.level.value, gate or THROUGHPUT, c.category) for c, gate in selected])
    if not config.stash.get(state.INTERACTIVE, False):
        return
    sweep = get_suite(config).sweep
    cells = list(dict.fromkeys((c.config, c.level.value) for c, _ in selected))
    live = LiveLine(config, SweepProgress(cells, sweep.warmup + sweep.repeats))
    config.stash[state.LIVE] = live
    sg.set_progress(live)


def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    cell = cell_of(item)
    if cell is None or state.SESSION not in item.config.stash:
        return
    nxt = cell_of(nextitem)
    if nxt is None or nxt.config != cell.config:
        item.config.stash[state.SESSION].stop_server(cell.config)
