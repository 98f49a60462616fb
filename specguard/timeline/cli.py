"""The `specguard history` command: results files in time order -> change points per cell and
metric, each attributed to the first file of its shift (commit, engine version, date), plots, and
an exit code for a nightly job (docs/history.md)."""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from specguard.labels import ExitCode
from specguard.store.atomic import atomic_write_json
from specguard.timeline import plot
from specguard.timeline.detect import (
    DEFAULT_MAX_PVALUE,
    DEFAULT_MIN_CHANGE,
    ChangePoint,
    OtavaMissing,
    change_points,
    otava_analysis,
)
from specguard.timeline.files import HistoryError, ResultsFile, collect_paths, load_files, newest, parse_since
from specguard.timeline.series import METRICS, Metric, Series, build_series

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
    p.add_argument("--json", dest="json_path", type=Path, help="write the files and change points as JSON here")
    return p


@dataclass
class History:
    files: list[ResultsFile]
    metrics: list[Metric]
    series: list[Series]
    points: list[ChangePoint]
    window: int

    def in_window(self, point: ChangePoint) -> bool:
        return point.position >= len(self.files) - self.window

    @property
    def alarms(self) -> list[ChangePoint]:
        """Change points in the worse direction that start in the newest `window` files."""
        return [p for p in self.points if p.worse and self.in_window(p)]


def run(args: argparse.Namespace) -> int:
    try:
        _check_flags(args)
        since = parse_since(args.since) if args.since else None
        files = newest(load_files(collect_paths(args.paths)), since)
        if not files:
            raise HistoryError(f"--since {args.since}: no results file was created since then")
        analysis = otava_analysis()
    except (HistoryError, OtavaMissing) as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return ExitCode.USAGE
    metrics = [METRICS[k] for k in dict.fromkeys(args.metric or list(METRICS))]
    series = build_series(files, metrics)
    if not series:
        names = ", ".join(m.key for m in metrics)
        print(f"{PROG}: no results file among the {len(files)} has {names} for any measured cell", file=sys.stderr)
        return ExitCode.NOT_MEASURED
    points = [p for s in series for p in change_points(s, args.max_pvalue, args.min_change, analysis)]
    history = History(files, metrics, series, points, args.window)
    print(render_text(history, args.max_pvalue, args.min_change))
    if args.plot_dir:
        _plots(history, args.plot_dir)
    if args.json_path:
        atomic_write_json(args.json_path, to_json(history))
    return ExitCode.REGRESSION if history.alarms else ExitCode.OK


def _check_flags(args: argparse.Namespace) -> None:
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


def render_text(history: History, max_pvalue: float, min_change: float) -> str:
    files = history.files
    cells = {(s.config, s.level) for s in history.series}
    lines = [f"{PROG}: {len(files)} results files, {files[0].date} .. {files[-1].date} UTC; "
             f"{len(history.series)} series ({len(cells)} cells)"]
    present = {s.metric.key for s in history.series}
    lines += [f"  no file has {m.label} ({m.key})" for m in history.metrics if m.key not in present]
    lines.append(f"change points (apache-otava E-divisive, t-test merge at p < {max_pvalue:g}, changes of "
                 f"{min_change:.0%} or more):" if history.points else
                 f"no change point at p < {max_pvalue:g} (changes of {min_change:.0%} or more)")
    lines += ["  " + point_line(p, files) for p in history.points]
    quiet = len(history.series) - len({id(p.series) for p in history.points})
    if history.points and quiet:
        lines.append(f"no change point in the other {quiet} series")
    lines.append(verdict_line(history))
    return "\n".join(lines)


def point_line(point: ChangePoint, files: list[ResultsFile]) -> str:
    """Where the shift starts (file, its date, commit and engine, with the file before's when they
    differ: the range to look in), its size and its p-value."""
    f = files[point.position]
    before = files[point.position - 1] if point.position else None
    commit = f.commit or "?"
    if before is not None and before.commit and before.commit != f.commit:
        commit = f"{before.commit}..{commit}"
    engine = f.engine_version(point.series.config) or "?"
    old_engine = before.engine_version(point.series.config) if before is not None else ""
    if old_engine and old_engine != engine:
        engine = f"{old_engine} -> {engine}"
    unit = f" {point.series.metric.unit}" if point.series.metric.unit else ""
    mark = "worse" if point.worse else "better"
    return (f"{point.series.name}: from file {point.position + 1}/{len(files)} {f.path.name} ({f.date}, commit {commit}, "
            f"engine {engine}): {point.mean_before:.4g} -> {point.mean_after:.4g}{unit} ({point.change:+.1%}), "
            f"p={point.p_value:.2g}, {mark}")


def verdict_line(history: History) -> str:
    n = len(history.files)
    first = max(1, n - history.window + 1)
    alarms = history.alarms
    if not alarms:
        return f"newest {min(history.window, n)} files ({first}-{n}): no change in the worse direction -> exit 0"
    what = "; ".join(f"{p.series.name} {p.change:+.1%} from file {p.position + 1}" for p in alarms)
    return f"newest {min(history.window, n)} files ({first}-{n}): {what} -> exit 1"


def to_json(history: History) -> dict[str, Any]:
    """The files in time order and every change point (docs/history.md)."""
    files = history.files
    return {
        "schema": "specguard-history", "schema_version": 1,
        "files": [{"path": str(f.path), "created": f.created.isoformat(), "git_commit": f.commit,
                   "session_id": f.doc["session_id"]} for f in files],
        "series": [{"config": s.config, "level": s.level, "metric": s.metric.key, "files": len(s.values)}
                   for s in history.series],
        "change_points": [{"config": p.series.config, "level": p.series.level, "metric": p.series.metric.key,
                           "file": str(files[p.position].path), "position": p.position + 1,
                           "created": files[p.position].created.isoformat(), "git_commit": files[p.position].commit,
                           "engine_version": files[p.position].engine_version(p.series.config),
                           "mean_before": p.mean_before, "mean_after": p.mean_after, "change": p.change,
                           "p_value": p.p_value, "worse": p.worse, "in_window": history.in_window(p)}
                          for p in history.points],
        "window": history.window,
        "exit_status": int(ExitCode.REGRESSION if history.alarms else ExitCode.OK),
    }
