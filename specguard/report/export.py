"""`specguard export`: a results document in formats other tools read.

- `bencher`: Bencher Metric Format (BMF) JSON, `{benchmark: {measure: {value, lower_value,
  upper_value}}}` (bencher.dev/docs/reference/bencher-metric-format), for `bencher run --adapter
  json --file F`. A benchmark is a cell named as the test ids name it (`eagle3-c16`); a measure
  that does not exist yet is created by Bencher under the key's name.
- `github-check`: the `output` object of a GitHub check run (`title`, `summary`, `text`; the
  Checks API takes Markdown of up to 65535 characters in each), the text being the markdown
  summary (report/markdown.py) that the job summary shows.

Reads the results document only (docs/results.md).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Protocol

from specguard.labels import ExitCode
from specguard.report.markdown import STATUS_TEXT, headline, render_markdown
from specguard.report.results import ResultsError, load
from specguard.report.schema import CellDoc, DecisionDoc, ResultsDoc, SummaryFigure
from specguard.report.terminal import outcome_line
from specguard.store.atomic import atomic_write_json

FORMATS = ("bencher", "github-check")
CHECK_TEXT_LIMIT = 65535  # the Checks API's maximum for output.summary and output.text

# BMF measure -> the runs[] figure (value: median over the measured runs, as the summary table;
# lower/upper: the runs' min and max). Bencher's thresholds are set per measure: tok/s and accept
# length regress downwards, step time and TTFT upwards.
RUN_MEASURES: dict[str, SummaryFigure] = {
    "output-tok-s": "output_throughput", "accept-length": "accept_length", "step-time-ms": "step_time_ms"}
TTFT_MEASURE = "ttft-p50-ms"  # each run's median TTFT
SPEEDUP_MEASURE = "speculation-speedup"  # spec / reference tok/s with the speculation gate's interval


class SubParsers(Protocol):
    def add_parser(self, name: str, **kwargs: Any) -> argparse.ArgumentParser: ...


Metric = dict[str, float]


def _spread(values: list[Any], middle: float | None) -> Metric | None:
    xs = sorted(float(v) for v in values if isinstance(v, (int, float)))
    if middle is None or not xs:
        return None
    return {"value": middle, "lower_value": xs[0], "upper_value": xs[-1]}


def _cell_measures(cell: CellDoc, speedup: DecisionDoc | None) -> dict[str, Metric]:
    summary, runs = cell["summary"], cell["runs"]
    out = {}
    for measure, key in RUN_MEASURES.items():  # the summary keeps each figure's median under the runs' key
        metric = _spread([r.get(key) for r in runs], summary.get(key))
        if metric:
            out[measure] = metric
    ttft = _spread([(r.get("latency_ms") or {}).get("median_ttft_ms") for r in runs], summary.get("median_ttft_ms"))
    if ttft:
        out[TTFT_MEASURE] = ttft
    estimate = speedup.get("estimate") if speedup else None
    if estimate:
        out[SPEEDUP_MEASURE] = {"value": estimate["ratio"], "lower_value": estimate["low"], "upper_value": estimate["high"]}
    return out


def to_bencher(doc: ResultsDoc) -> dict[str, dict[str, Metric]]:
    """Every measured cell as a BMF benchmark (cells that errored have no numbers and are left out)."""
    speedups = {(d["config"], d["level"]): d for d in doc["decisions"] if d["gate"] == "speculation"}
    out = {}
    for cell in doc["cells"]:
        if cell["error"] or not cell["runs"]:
            continue
        measures = _cell_measures(cell, speedups.get((cell["config"], cell["level"])))
        if measures:
            out[f"{cell['config']}-{cell['level']}"] = measures
    return out


def _fit(text: str, limit: int = CHECK_TEXT_LIMIT) -> str:
    note = "\n\n(cut to the Checks API's 65535 characters: the full summary is in the job's report)\n"
    return text if len(text) <= limit else text[: limit - len(note)] + note


def to_github_check(doc: ResultsDoc) -> dict[str, str]:
    """A check run's `output`: title (status and counts), summary (the headline and the outcome
    line), text (the markdown summary)."""
    status = doc["outcome"]["status"]
    failed = len(doc["outcome"]["failed_tests"])
    title = f"specguard: {STATUS_TEXT.get(status, status)}" + (f" ({failed} failed test(s))" if failed else "")
    summary = f"{headline(doc)}\n\n`{outcome_line(doc)}`\n"
    return {"title": title, "summary": _fit(summary), "text": _fit(render_markdown(doc, html_name=None))}


def add_parser(subparsers: SubParsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser("export", help="a results file as Bencher's BMF JSON or a GitHub check run's output")
    p.add_argument("results", help="results file (--results-json)")
    p.add_argument("--format", required=True, choices=FORMATS)
    p.add_argument("--output", type=Path, help="write here instead of standard output")
    return p


def run(args: argparse.Namespace) -> int:
    try:
        doc = load(args.results)
    except ResultsError as exc:
        print(f"specguard export: {str(exc).splitlines()[0]}", file=sys.stderr)
        return ExitCode.USAGE
    exported = to_bencher(doc) if args.format == "bencher" else to_github_check(doc)
    if args.output:
        atomic_write_json(args.output, exported)
    else:
        sys.stdout.write(json.dumps(exported, indent=2, ensure_ascii=False) + "\n")
    return ExitCode.OK
