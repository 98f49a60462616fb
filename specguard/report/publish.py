"""Writes the report directory (summary.md, report.html, one PNG per figure) and appends the
markdown to the GitHub job summary when running in GitHub Actions."""

from __future__ import annotations

import os
from pathlib import Path

from specguard.report import plots
from specguard.report.html_page import render_html
from specguard.report.markdown import render_markdown
from specguard.report.schema import ResultsDoc

NO_PLOTS = "Plots need matplotlib: pip install 'specguard[plots]'. The tables and decisions are complete without them."


def write_report_dir(doc: ResultsDoc, directory: Path) -> list[Path]:
    """Write the report files; returns their paths."""
    directory.mkdir(parents=True, exist_ok=True)
    images = plots.render_all(doc)
    written = []
    for name, png in images.items():
        path = directory / f"{name}.png"
        path.write_bytes(png)
        written.append(path)
    markdown = render_markdown(doc)
    (directory / "summary.md").write_text(markdown, encoding="utf-8")
    (directory / "report.html").write_text(render_html(doc, images, None if plots.available() else NO_PLOTS),
                                           encoding="utf-8")
    written += [directory / "summary.md", directory / "report.html"]
    step_summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if step_summary:
        with open(step_summary, "a", encoding="utf-8") as f:
            f.write(markdown + "\n")
    return written
