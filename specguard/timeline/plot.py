"""A PNG per cell: each metric over the history's files, the segment means between change points,
and each change point marked where its shift starts (red: worse, green: better). matplotlib is the
optional `plots` extra, imported only when a figure is drawn (report/plots.py does the same)."""

from __future__ import annotations

import io
import re
from pathlib import Path

from specguard.timeline.detect import SeriesChange
from specguard.timeline.series import Series

PANEL_SIZE = (7.2, 2.3)
DPI = 110


def available() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def cell_png(cell: list[Series], points: list[SeriesChange], n_files: int) -> bytes:
    """One panel per metric of the cell, sharing the file axis (file 1 = the oldest)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(PANEL_SIZE[0], PANEL_SIZE[1] * len(cell) + 0.6), dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(len(cell), 1, sharex=True, squeeze=False)[:, 0]
    for ax, series in zip(axes, cell):
        marks = [p for p in points if p.series is series]
        ax.plot([p + 1 for p in series.positions], series.values, "o-", color="#1f77b4", ms=3, lw=0.8)
        for (start, stop), mean in _segments(series, marks):  # positions are 0-based, file numbers 1-based
            ax.hlines(mean, start + 0.6, stop + 0.4, color="#555555", lw=1.2)
        for mark in marks:
            ax.axvline(mark.position + 0.5, color="#d62728" if mark.worse else "#2ca02c", ls="--", lw=1.2)
            ax.annotate(f"{mark.change:+.1%}", (mark.position + 0.6, 1), xycoords=("data", "axes fraction"),
                        va="top", fontsize=8)
        unit = f" ({series.metric.unit})" if series.metric.unit not in ("", series.metric.label) else ""
        ax.set_ylabel(series.metric.label + unit, fontsize=8)
        ax.grid(alpha=0.3)
    axes[-1].set_xlabel(f"results file (1 = oldest of {n_files})")
    axes[-1].set_xlim(0.5, n_files + 0.5)
    fig.suptitle(f"{cell[0].config} {cell[0].level}: change points", fontsize=10)
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()


def _segments(series: Series, marks: list[SeriesChange]) -> list[tuple[tuple[int, int], float]]:
    """[start, stop) file positions and mean of each stretch between change points."""
    if not series.positions:  # every file's runs disagreed: nothing to average
        return []
    bounds = [series.positions[0], *sorted(m.position for m in marks), series.positions[-1] + 1]
    out = []
    for start, stop in zip(bounds, bounds[1:]):
        values = [v for p, v in zip(series.positions, series.values) if start <= p < stop]
        if values:
            out.append(((start, stop), sum(values) / len(values)))
    return out


def write_plots(series: list[Series], points: list[SeriesChange], n_files: int, directory: Path) -> list[Path]:
    """history-<config>-<level>.png per cell in `directory`."""
    directory.mkdir(parents=True, exist_ok=True)
    cells: dict[tuple[str, str], list[Series]] = {}
    for s in series:
        cells.setdefault((s.config, s.level), []).append(s)
    written = []
    for (config, level), cell in cells.items():
        path = directory / f"history-{re.sub(r'[^A-Za-z0-9_.-]+', '_', config)}-{level}.png"
        path.write_bytes(cell_png(cell, points, n_files))
        written.append(path)
    return written
