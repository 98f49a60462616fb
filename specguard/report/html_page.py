"""One static, self-contained HTML page: the summary table, plots embedded as base64 PNG, every
decision's message and the environment. No scripts, no external files: it opens from a CI
artifact as it is."""

from __future__ import annotations

import base64
import html

from specguard.report.markdown import headline
from specguard.report.results import decision_text
from specguard.report.schema import ResultsDoc
from specguard.report.terminal import COLUMNS, first_run_line, notes, outcome_line, summary_rows

CSS = """
body{font:14px/1.45 system-ui,sans-serif;margin:2em auto;max-width:1100px;color:#222;padding:0 1em}
table{border-collapse:collapse;margin:1em 0;font-size:13px}th,td{border:1px solid #ccc;padding:3px 7px}
th{background:#f3f3f3}td.num{text-align:right;font-variant-numeric:tabular-nums}
.fail{background:#fde2e2}.error{background:#fff0d0}.pass{background:#e6f4e6}
img{max-width:100%;border:1px solid #ddd;margin:.5em 0}pre{white-space:pre-wrap;font-size:12px;background:#f7f7f7;padding:.5em}
"""
TITLES = {"throughput": "Throughput", "speculation_ratio": "Speculation vs reference", "accept_length": "Accept length",
          "latency": "Latency"}


def _verdict_class(text: str) -> str:
    """The table row's colour, from its verdict text."""
    if "FAIL" in text:
        return "fail"
    if text.startswith("skip"):
        return ""
    if "ERROR" in text:
        return "error"
    return "pass" if text == "pass" else ""


def render_html(doc: ResultsDoc, images: dict[str, bytes], plot_note: str | None = None) -> str:
    """The page; `plot_note` says why there are no plots when `images` is empty."""
    e = html.escape
    out = [f"<!doctype html><html><head><meta charset='utf-8'><title>specguard {e(doc['session_id'])}</title>",
           f"<style>{CSS}</style></head><body>", f"<h2>{e(headline(doc, code='', emoji=False))}</h2>"]
    out += _summary_table(doc)
    out += ["<ul>"] + [f"<li>{e(n)}</li>" for n in notes(doc)] + ["</ul>"]
    out.append(f"<p><code>{e(outcome_line(doc))}</code></p>")
    first_run = first_run_line(doc)
    if first_run:
        out.append(f"<p><code>{e(first_run)}</code></p>")
    if plot_note:
        out.append(f"<p><em>{e(plot_note)}</em></p>")
    out += _figures(images) + _failed_tests(doc) + _decisions(doc) + _environment(doc)
    out.append("</body></html>")
    return "\n".join(out)


def _summary_table(doc: ResultsDoc) -> list[str]:
    """The terminal's table: figures right-aligned, the verdict coloured."""
    e = html.escape
    out = ["<table><tr>" + "".join(f"<th>{e(t)}</th>" for t, _, _ in COLUMNS) + "</tr>"]
    for row in summary_rows(doc):
        cells = []
        for _, key, align in COLUMNS:
            cls = "num" if align.startswith(">") else _verdict_class(row[key]) if key == "verdict" else ""
            cells.append(f"<td class='{cls}'>{e(row[key])}</td>")
        out.append("<tr>" + "".join(cells) + "</tr>")
    out.append("</table>")
    return out


def _figures(images: dict[str, bytes]) -> list[str]:
    """Each plot under its title, embedded as base64 PNG."""
    e = html.escape
    out = []
    for name, png in images.items():
        out.append(f"<h3>{e(TITLES.get(name, name))}</h3>")
        out.append(f"<img alt='{e(name)}' src='data:image/png;base64,{base64.b64encode(png).decode('ascii')}'>")
    return out


def _failed_tests(doc: ResultsDoc) -> list[str]:
    e = html.escape
    failed = doc["outcome"]["failed_tests"]
    if not failed:
        return []
    return (["<h3>Failed tests</h3><ul>"]
            + [f"<li><code>{e(f['nodeid'])}</code> ({e(f['kind'])}): {e(f['message'])}</li>" for f in failed]
            + ["</ul>"])


def _decisions(doc: ResultsDoc) -> list[str]:
    """Every decision's message, coloured when it is an enforced pass, fail or error."""
    out = ["<h3>Decisions</h3>"]
    for d in doc["decisions"]:
        cls = d["verdict"] if d["enforced"] and d["verdict"] in ("pass", "fail", "error") else ""
        out.append(f"<pre class='{cls}'>{html.escape(decision_text(d))}</pre>")
    return out


def _environment(doc: ResultsDoc) -> list[str]:
    """Where it ran, and each configuration's launch command."""
    e = html.escape
    out = ["<h3>Environment</h3><pre>" + e("\n".join(f"{k}: {v}" for k, v in doc["environment"].items())) + "</pre>"]
    out += [f"<p><b>{e(name)}</b>: <code>{e(' '.join(server['command']))}</code></p>" for name, server in doc["servers"].items()]
    return out
