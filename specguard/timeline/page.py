"""`specguard history --html DIR`: one self-contained page, DIR/index.html (docs/history.md).

At the top the regressions (worse change points), engine (step time) and drafter (accept length)
apart from throughput (tok/s, speculation ratio), each with its file, commit range and engine
version; below, a small chart per cell and metric (tok/s, accept length, step time) over the files
in time order, with the segment means, the change points marked (red worse, green better), the
files left out (runs that disagreed) and the newest window shaded. Charts are inline SVG drawn
here and the history's data is inline JSON (the --json document): no script, stylesheet, font or
image is fetched, so the file can be opened from disk, mailed or kept as a CI artefact.
"""

from __future__ import annotations

import html
import json
import math
import statistics
from dataclasses import dataclass
from pathlib import Path

from specguard.timeline.detect import SeriesChange
from specguard.timeline.findings import History, to_json
from specguard.timeline.series import METRICS, Metric, Series

PAGE_METRICS = ("tok_s", "accept_length", "step_time_ms")
# regression groups: (title, metric keys)
GROUPS = (("Engine: step time", ("step_time_ms",)), ("Drafter: accept length", ("accept_length",)),
          ("Throughput: tok/s and speculation ratio", ("tok_s", "spec_ratio")))
WIDTH, HEIGHT = 300, 112
LEFT, RIGHT, TOP, BOTTOM = 46, 8, 8, 18
WORSE, BETTER, LINE, MEAN = "#d62728", "#2ca02c", "#1f77b4", "#555555"
PLOT_FILL, WINDOW_FILL = "#f4f6f9", "#fde3c0"  # tests/commands/test_history_page.py finds charts by these

STYLE = f"""
body {{ font: 13px/1.4 system-ui, sans-serif; margin: 16px; color: #222; }}
h1 {{ font-size: 18px; margin: 0 0 4px; }} h2 {{ font-size: 15px; margin: 16px 0 6px; }}
h3 {{ font-size: 13px; margin: 10px 0 4px; }}
.verdict {{ font-weight: 600; }} .alarm {{ color: {WORSE}; }}
ul.regressions {{ margin: 0 0 6px; padding-left: 20px; }} li.in-window {{ font-weight: 600; }}
table.grid {{ border-collapse: collapse; }} table.grid td, table.grid th {{ padding: 2px 6px; vertical-align: top; }}
table.grid th {{ text-align: left; font-weight: 600; white-space: nowrap; }}
.none {{ width: {WIDTH}px; height: {HEIGHT}px; color: #888; display: flex; align-items: center; justify-content: center; }}
svg.chart text {{ font-size: 10px; fill: #444; }}
"""


def write_page(history: History, directory: Path) -> Path:
    """DIR/index.html, written whole (a temporary file renamed over it)."""
    directory.mkdir(parents=True, exist_ok=True)
    path, tmp = directory / "index.html", directory / ".index.html.tmp"
    tmp.write_text(render_page(history), encoding="utf-8")
    tmp.replace(path)
    return path


def render_page(history: History) -> str:
    files = history.files
    n, window = len(files), min(history.window, len(files))
    alarm = bool(history.alarms)
    verdict = (f"newest {window} files ({n - window + 1}-{n}): "
               + ("a change in the worse direction -> exit 1" if alarm else "no change in the worse direction -> exit 0"))
    data = json.dumps(to_json(history)).replace("</", "<\\/")
    return "\n".join([
        "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">', "<title>specguard history</title>",
        f"<style>{STYLE}</style></head><body>",
        "<h1>specguard history</h1>",
        f"<p>{n} results files, {_e(files[0].date)} .. {_e(files[-1].date)} UTC; {len(history.series)} series. "
        f'<span class="verdict{" alarm" if alarm else ""}" id="verdict">{_e(verdict)}</span></p>',
        _regressions(history), _grid(history),
        f'<script type="application/json" id="history-data">{data}</script>', "</body></html>", ""])


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def _regressions(history: History) -> str:
    """The worse change points by group, one line per configuration, metric and first file (its
    levels side by side: one commit range and engine version each)."""
    worse = [p for p in history.points if p.worse]
    out = [f'<h2 id="regressions">Regressions: {len(worse)} change points in the worse direction '
           f"(bold: in the newest {history.window} files; intervals at {1 - history.max_pvalue:.1%})</h2>"]
    for title, keys in GROUPS:
        clusters = _clusters([p for p in worse if p.series.metric.key in keys])
        out.append(f"<h3>{_e(title)}</h3>")
        if not clusters:
            out.append(f'<p class="regressions-none" data-group="{keys[0]}">none</p>')
            continue
        out.append(f'<ul class="regressions" data-group="{keys[0]}">')
        out += [_cluster_item(history, points, worse) for points in clusters]
        out.append("</ul>")
    return "\n".join(out)


def _clusters(points: list[SeriesChange]) -> list[list[SeriesChange]]:
    """One configuration's metric moving at one time: its points at every level, each within one
    file of the earliest (the levels of a launch can place one shift a file apart)."""
    out: list[list[SeriesChange]] = []
    order = {name: i for i, name in enumerate(dict.fromkeys(p.series.config for p in points))}
    for p in sorted(points, key=lambda p: (order[p.series.config], p.series.metric.key, p.position)):
        last = out[-1][0] if out else None
        if last and (last.series.config, last.series.metric.key) == (p.series.config, p.series.metric.key) \
                and p.position - last.position <= 1:
            out[-1].append(p)
        else:
            out.append([p])
    return out


def _cluster_item(history: History, points: list[SeriesChange], worse: list[SeriesChange]) -> str:
    first = points[0]
    f = history.files[first.position]
    cls = ' class="in-window"' if history.in_window(first) else ""
    order = {id(s): i for i, s in enumerate(history.series)}  # c1 before c4: the charts' order
    levels = ", ".join(_level_span(p, p.position != first.position) for p in sorted(points, key=lambda p: order[id(p.series)]))
    return (f"<li{cls}>{_e(first.series.config)} {_e(first.series.metric.label)}{_e(_attribution(first, worse))} "
            f"from file {first.position + 1}/{len(history.files)} {_e(f.path.name)} ({_e(f.date)}), "
            f"commit <code>{_e(history.commit_range(first))}</code>, engine {_e(history.engine(first))}: {levels}</li>")


def _level_span(p: SeriesChange, say_file: bool) -> str:
    low, high = (x - 1 for x in p.point.interval)
    unit = f" {p.series.metric.unit}" if p.series.metric.unit else ""
    return (f'<span class="regression" data-config="{_e(p.series.config)}" data-level="{_e(p.series.level)}" '
            f'data-metric="{p.series.metric.key}" data-position="{p.position + 1}" '
            f'title="{p.mean_before:.4g} -> {p.mean_after:.4g}{_e(unit)}, p={p.p_value:.2g}">'
            f"{_e(p.series.level)} {p.change:+.1%} [{low:+.1%}, {high:+.1%}]"
            f"{f' (from file {p.position + 1})' if say_file else ''}</span>")


def _attribution(p: SeriesChange, worse: list[SeriesChange]) -> str:
    """For a throughput change: which part moved with it (a worse step time or accept length of the
    same configuration starting within one file)."""
    if p.series.metric.key not in ("tok_s", "spec_ratio"):
        return ""
    parts = [part for key, part in (("step_time_ms", "engine"), ("accept_length", "drafter"))
             if any(q.series.config == p.series.config and q.series.metric.key == key
                    and abs(q.position - p.position) <= 1 for q in worse)]
    return f" (with the {' and '.join(parts)})" if parts else " (neither step time nor accept length moved with it)"


def _grid(history: History) -> str:
    cells: dict[tuple[str, str], dict[str, Series]] = {}
    for s in history.series:
        cells.setdefault((s.config, s.level), {})[s.metric.key] = s
    metrics = [METRICS[k] for k in PAGE_METRICS if any(m.key == k for m in history.metrics)]
    head = "".join(f"<th>{_e(m.label)}{f' ({_e(m.unit)})' if m.unit and m.unit != m.label else ''}</th>" for m in metrics)
    rows = [f'<h2 id="charts">Per cell</h2><table class="grid"><tr><th></th>{head}</tr>']
    for (config, level), by_metric in cells.items():
        charts = "".join(f"<td>{_cell_chart(history, by_metric.get(m.key), m)}</td>" for m in metrics)
        rows.append(f"<tr><th>{_e(config)} {_e(level)}</th>{charts}</tr>")
    rows.append("</table>")
    return "\n".join(rows)


def _cell_chart(history: History, series: Series | None, metric: Metric) -> str:
    if series is None:
        return f'<div class="none">no {_e(metric.label)}</div>'
    if not series.values:
        return f'<div class="none">no {_e(metric.label)}: every file\'s runs disagree</div>'
    return _chart(history, series)


@dataclass(frozen=True)
class _Frame:
    """A chart's coordinates: file edges (file i, 0-based, spans [i, i + 1)) and values to pixels."""

    n_files: int
    lo: float
    hi: float
    plot_w: int = WIDTH - LEFT - RIGHT
    plot_h: int = HEIGHT - TOP - BOTTOM

    @classmethod
    def of(cls, series: Series, n_files: int) -> _Frame:
        lo, hi = min(series.values), max(series.values)
        pad = (hi - lo) * 0.08 or abs(hi) * 0.01 or 1.0
        return cls(n_files, lo - pad, hi + pad)

    def x(self, edge: float) -> float:
        return round(LEFT + edge / self.n_files * self.plot_w, 1)

    def y(self, value: float) -> float:
        return round(TOP + (self.hi - value) / (self.hi - self.lo) * self.plot_h, 1)


def _chart(history: History, series: Series) -> str:
    """One series as an SVG: file 1 at the left, the newest at the right."""
    n = len(history.files)
    f = _Frame.of(series, n)
    marks = [p for p in history.points if p.series is series]
    window = min(history.window, n)
    parts = [f'<svg class="chart" xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
             f'viewBox="0 0 {WIDTH} {HEIGHT}" data-config="{_e(series.config)}" data-level="{_e(series.level)}" '
             f'data-metric="{series.metric.key}" role="img" aria-label="{_e(series.name)}">',
             f'<rect class="plot" x="{LEFT}" y="{TOP}" width="{f.plot_w}" height="{f.plot_h}" fill="{PLOT_FILL}"/>',
             f'<rect class="window" x="{f.x(n - window)}" y="{TOP}" width="{round(f.x(n) - f.x(n - window), 1)}" '
             f'height="{f.plot_h}" fill="{WINDOW_FILL}"><title>newest {window} files</title></rect>',
             *_segment_lines(series, marks, f), *_data(series, f), *_marks(marks, f),
             f'<text x="{LEFT - 3}" y="{TOP + 8}" text-anchor="end">{max(series.values):.4g}</text>',
             f'<text x="{LEFT - 3}" y="{TOP + f.plot_h}" text-anchor="end">{min(series.values):.4g}</text>',
             f'<text x="{LEFT}" y="{HEIGHT - 4}">1</text>',
             f'<text x="{LEFT + f.plot_w}" y="{HEIGHT - 4}" text-anchor="end">{n}</text>', "</svg>"]
    return "".join(parts)


def _data(series: Series, f: _Frame) -> list[str]:
    """The values (line and points, each with its file and value as a tooltip) and the files left out."""
    pairs = list(zip(series.positions, series.values))
    line = " ".join(f"{f.x(p + 0.5)},{f.y(v)}" for p, v in pairs)
    return [f'<polyline class="series" points="{line}" fill="none" stroke="{LINE}" stroke-width="1.2"/>',
            *(f'<circle class="pt" cx="{f.x(p + 0.5)}" cy="{f.y(v)}" r="2" fill="{LINE}">'
              f"<title>file {p + 1}: {v:.4g}</title></circle>" for p, v in pairs),
            *(f'<text class="left-out" x="{f.x(p + 0.5)}" y="{TOP + f.plot_h - 2}" text-anchor="middle" fill="#999">x'
              f"<title>file {p + 1} left out: its runs disagree</title></text>" for p in series.left_out)]


def _marks(marks: list[SeriesChange], f: _Frame) -> list[str]:
    """A dashed line where each change starts: between its first file and the one before."""
    return [f'<line class="cp {"worse" if m.worse else "better"}" data-position="{m.position + 1}" '
            f'x1="{f.x(m.position)}" x2="{f.x(m.position)}" y1="{TOP}" y2="{TOP + f.plot_h}" '
            f'stroke="{WORSE if m.worse else BETTER}" stroke-width="2" stroke-dasharray="4 2">'
            f"<title>from file {m.position + 1}: {m.change:+.1%}</title></line>" for m in marks]


def _segment_lines(series: Series, marks: list[SeriesChange], f: _Frame) -> list[str]:
    """The (geometric) mean of each stretch between change points, as the detector measured it."""
    n_end = series.positions[-1] + 1
    if not marks:
        stretches = [(series.positions[0], n_end, math.exp(statistics.fmean(math.log(v) for v in series.values)))]
    else:
        starts = [series.positions[0], *(m.position for m in marks)]
        stops = [*(m.position for m in marks), n_end]
        means = [marks[0].mean_before, *(m.mean_after for m in marks)]
        stretches = list(zip(starts, stops, means))
    return [f'<line class="mean" x1="{f.x(a)}" x2="{f.x(b)}" y1="{f.y(v)}" y2="{f.y(v)}" stroke="{MEAN}" stroke-width="1"/>'
            for a, b, v in stretches]
