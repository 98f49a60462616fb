"""The `specguard history` command: results files in time order -> change points per cell and
metric, each attributed to the first file of its shift (commit, engine version, date), plots, and
an exit code for a nightly job (docs/history.md)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, Protocol

from specguard.labels import ExitCode
from specguard.timeline import page, plot
from specguard.timeline.detect import DEFAULT_MAX_PVALUE, DEFAULT_MIN_CHANGE, DETECTOR, SeriesChange, change_points
from specguard.timeline.files import HistoryError, collect_paths, load_files, newest, parse_since
from specguard.timeline.findings import HISTORY, History, to_json
from specguard.timeline.series import METRICS, SPEC_RATIO, build_series

DEFAULT_WINDOW = 5
PROG = "specguard history"


class SubParsers(Protocol):
    """What add_parser needs of ArgumentParser.add_subparsers()."""

    def add_parser(self, name: str, **kwargs: Any) -> argparse.ArgumentParser: ...


def add_parser(subparsers: SubParsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser("history", help="change points per cell and metric across results files in time order")
    p.add_argument("paths", nargs="+", metavar="PATH",
                   help="results files (--results-json), directories of them (their *.json), or globs")
    p.add_argument("--metric", action="append", choices=list(METRICS),
                   help="a metric to follow (repeatable; default: all of " + ", ".join(METRICS) + ")")
    p.add_argument("--since", metavar="DATE|N", help="only files created on or after DATE, or the newest N files")
    p.add_argument("--window", type=int, default=DEFAULT_WINDOW,
                   help=f"exit 1 when a worse-direction change point starts in the newest N files (default {DEFAULT_WINDOW})")
    p.add_argument("--max-pvalue", type=float, default=DEFAULT_MAX_PVALUE,
                   help=f"significance a change point needs (default {DEFAULT_MAX_PVALUE})")
    p.add_argument("--min-change", type=float, default=DEFAULT_MIN_CHANGE,
                   help=f"smallest relative change reported (default {DEFAULT_MIN_CHANGE}, i.e. 1%%)")
    p.add_argument("--plot-dir", type=Path, help="write history-<config>-<level>.png per cell here (matplotlib)")
    p.add_argument("--html", dest="html_dir", type=Path,
                   help="write one self-contained page, DIR/index.html: the regressions and a chart per cell and metric")
    p.add_argument("--json", dest="json_path", type=Path, help="write the files and change points as JSON here")
    return p


def run(args: argparse.Namespace) -> int:
    try:
        _check_flags(args)
        since = parse_since(args.since) if args.since else None
        files = newest(load_files(collect_paths(args.paths)), since)
        if not files:
            raise HistoryError(f"--since {args.since}: no results file was created since then")
    except HistoryError as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return ExitCode.USAGE
    metrics = [METRICS[k] for k in dict.fromkeys(args.metric or list(METRICS))]
    series = build_series(files, metrics)
    if not series:
        names = ", ".join(m.key for m in metrics)
        print(f"{PROG}: no results file among the {len(files)} has {names} for any measured cell", file=sys.stderr)
        return ExitCode.NOT_MEASURED
    points = [p for s in series for p in change_points(s, args.max_pvalue, args.min_change)]
    history = History(files, metrics, series, points, args.window, args.max_pvalue, args.min_change)
    print(render_text(history))
    if args.plot_dir:
        _plots(history, args.plot_dir)
    if args.html_dir:
        print(f"wrote {page.write_page(history, args.html_dir)}")
    if args.json_path:
        HISTORY.save(to_json(history), args.json_path)
    return history.exit_status


def _check_flags(args: argparse.Namespace) -> None:
    for flag, directory in (("--html", args.html_dir), ("--plot-dir", args.plot_dir)):
        if directory is not None and directory.exists() and not directory.is_dir():
            raise HistoryError(f"{flag} {directory}: exists and is not a directory")
    if args.window < 1:
        raise HistoryError(f"--window {args.window}: must be at least 1 file")
    if not 0 < args.max_pvalue < 1:
        raise HistoryError(f"--max-pvalue {args.max_pvalue}: must be in (0, 1), e.g. 0.001")
    if not 0 <= args.min_change < 1:
        raise HistoryError(f"--min-change {args.min_change}: must be a fraction in [0, 1), e.g. 0.01")


def _plots(history: History, directory: Path) -> None:
    if not plot.available():
        print(f"{PROG}: no plots: matplotlib is not installed (pip install 'specguard[plots]')", file=sys.stderr)
        return
    for path in plot.write_plots(history.series, history.points, len(history.files), directory):
        print(f"wrote {path}")


def render_text(history: History) -> str:
    files = history.files
    cells = {(s.config, s.level) for s in history.series}
    lines = [f"{PROG}: {len(files)} results files, {files[0].date} .. {files[-1].date} UTC; "
             f"{len(history.series)} series ({len(cells)} cells)"]
    present = {s.metric.key for s in history.series}
    lines += [f"  no file has {m.label} ({m.key})" for m in history.metrics if m.key not in present]
    lines += [line for line in [left_out_line(history)] if line]
    alpha, floor = history.max_pvalue, history.min_change
    lines.append(f"change points ({DETECTOR} at p < {alpha:g}, changes of {floor:.0%} or more; "
                 f"intervals at {1 - alpha:.1%}):" if history.points else
                 f"no change point at p < {alpha:g} (changes of {floor:.0%} or more)")
    lines += ["  " + point_line(p, history) for p in history.points]
    quiet = len(history.series) - len({id(p.series) for p in history.points})
    if history.points and quiet:
        lines.append(f"no change point in the other {quiet} series")
    lines.append(verdict_line(history))
    return "\n".join(lines)


def point_line(point: SeriesChange, history: History) -> str:
    """Where the shift starts (file, its date, commit range and engine), its size and its p-value."""
    files = history.files
    f = files[point.position]
    unit = f" {point.series.metric.unit}" if point.series.metric.unit else ""
    mark = "worse" if point.worse else "better"
    low, high = point.point.interval
    return (f"{point.series.name}: from file {point.position + 1}/{len(files)} {f.path.name} ({f.date}, commit "
            f"{history.commit_range(point)}, engine {history.engine(point)}): {point.mean_before:.4g} -> "
            f"{point.mean_after:.4g}{unit} ({point.change:+.1%} [{low - 1:+.1%}, {high - 1:+.1%}]), "
            f"p={point.p_value:.2g}, {mark}")


def left_out_line(history: History) -> str:
    """The files a cell has no point for because its runs disagreed there (a stall), per cell."""
    cells: dict[str, set[int]] = {}
    for s in history.series:
        if s.metric.key != SPEC_RATIO:  # the ratio also loses its reference's files: said under the reference
            cells.setdefault(f"{s.config} {s.level}", set()).update(s.left_out)
    which = "; ".join(f"{cell} {', '.join(str(p + 1) for p in sorted(files))}" for cell, files in cells.items() if files)
    return f"runs disagree (too few near the fastest run: stalls?), files left out: {which}" if which else ""


def verdict_line(history: History) -> str:
    n = len(history.files)
    first = max(1, n - history.window + 1)
    alarms = history.alarms
    if not alarms:
        return f"newest {min(history.window, n)} files ({first}-{n}): no change in the worse direction -> exit 0"
    what = "; ".join(f"{p.series.name} {p.change:+.1%} from file {p.position + 1}" for p in alarms)
    return f"newest {min(history.window, n)} files ({first}-{n}): {what} -> exit 1"
