"""What a session measured: each cell (configuration x level) per server launch, and merged."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from specguard.labels import GateLabel
from specguard.measure.sweep import CellMeasurement

# A metric a gate compares, by the per-run series it reads (runs of a cell or of a stored session).
THROUGHPUTS, ACCEPT_LENGTHS, REQUEST_GOODPUTS = "throughputs", "accept_lengths", "request_goodputs"
STEP_RATES = "step_rates"  # decode steps per second of a request: the step-time gate's series
STEPS_PER_S = "steps_per_s"  # the server's decode steps per second: what tok/s's stalls are judged on
POSITION_SHARES = "position_shares@"  # + k: per run, the share of verify steps accepting >= k drafts


def position_metric(k: int) -> str:
    """The metric of acceptance at draft position k (RunSeries.position_shares)."""
    return f"{POSITION_SHARES}{k}"


def metric_values(measured: Any, metric: str) -> list[float]:
    """A metric's per-run values from a CellMeasurement or a StoredSession: "throughputs",
    "accept_lengths", "accept_lengths[code]" (one prompt category's) or "request_goodputs"."""
    if metric.startswith(POSITION_SHARES):
        return list(measured.position_shares(int(metric.removeprefix(POSITION_SHARES))))
    category = GateLabel.parse(metric).category
    if metric == REQUEST_GOODPUTS:  # [sweep] slo: good requests/s per run (None: no SLO given)
        return [float(r.request_goodput) for r in measured.runs if getattr(r, "request_goodput", None) is not None]
    if not category:
        return list(getattr(measured, metric))
    out = []
    for run in measured.runs:
        cat = (run.categories or {}).get(category)
        value = cat.get("accept_length") if isinstance(cat, dict) else getattr(cat, "accept_length", None)
        if isinstance(value, (int, float)) and value > 0:
            out.append(float(value))
    return out


def merged(name: str, level: int, launches: list[CellMeasurement]) -> CellMeasurement:
    """A cell's launches as one measurement (runs in launch order; the first error wins)."""
    if len(launches) == 1:
        return launches[0]
    errors = [f"launch {i + 1}: {m.error}" for i, m in enumerate(launches) if m.error]
    return CellMeasurement(config=name, concurrency=level, runs=[r for m in launches for r in m.runs],
                           warmup_runs=[r for m in launches for r in m.warmup_runs], error=errors[0] if errors else None,
                           server_busy=any(m.server_busy for m in launches),
                           notes=[n for m in launches for n in m.notes], wall_s=sum(m.wall_s for m in launches))


class CellStore(Mapping[tuple[str, int], CellMeasurement]):
    """Every measured cell, per launch (the launch id of the server that ran it) and merged; as a
    mapping, (configuration, level) -> the cell merged over its launches."""

    def __init__(self) -> None:
        self.cells: dict[tuple[str, int], CellMeasurement] = {}  # merged over launches
        self.launch_cells: dict[tuple[str, int], list[tuple[str, CellMeasurement]]] = {}
        self.attempted: set[tuple[str, int]] = set()  # cells this process tried to measure
        self.reference_roles: dict[tuple[str, int], list[str]] = {}  # cells measured only as a reference

    def add(self, name: str, level: int, launch_id: str, cell: CellMeasurement) -> CellMeasurement:
        key = (name, level)
        self.launch_cells.setdefault(key, []).append((launch_id, cell))
        self.cells[key] = merged(name, level, [m for _, m in self.launch_cells[key]])
        return self.cells[key]

    def __getitem__(self, key: tuple[str, int]) -> CellMeasurement:
        return self.cells[key]

    def __iter__(self) -> Iterator[tuple[str, int]]:
        return iter(self.cells)

    def __len__(self) -> int:
        return len(self.cells)

    def cell(self, name: str, level: int) -> CellMeasurement | None:
        return self.cells.get((name, level))

    def launches(self, name: str, level: int) -> int:
        return len(self.launch_cells.get((name, level), []))

    def error(self, name: str, level: int) -> bool:
        cell = self.cells.get((name, level))
        return bool(cell and cell.error)

    def launch_values(self, name: str, level: int, metric: str) -> list[list[float]]:
        """One list of the metric's run values per launch of the cell."""
        launches = [m for _, m in self.launch_cells.get((name, level), [])]
        if not launches and (name, level) in self.cells:  # measured without launch records
            launches = [self.cells[(name, level)]]
        return [v for v in (metric_values(m, metric) for m in launches) if v]

    def tagged_runs(self, name: str, level: int, fallback_launch_id: str) -> list[tuple[str, Any]]:
        """The cell's runs, each with the id of the server launch that ran it."""
        tagged = [(lid, r) for lid, m in self.launch_cells.get((name, level), []) for r in m.runs]
        if not tagged:  # measured without launch records (e.g. built by hand)
            tagged = [(fallback_launch_id, r) for r in self.cells[(name, level)].runs]
        return tagged

    def note_reference_role(self, name: str, level: int, users: list[str]) -> None:
        self.reference_roles[(name, level)] = list(users)

    def reference_only(self) -> dict[str, list[str]]:
        """Reference configurations measured only because a selected speculative test needed
        them (their own tests deselected) -> the speculative configurations they served."""
        out: dict[str, list[str]] = {}
        for (ref, _level), specs in sorted(self.reference_roles.items()):
            served = out.setdefault(ref, [])
            served += [s for s in specs if s not in served]
        return out
