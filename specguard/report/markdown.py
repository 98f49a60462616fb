"""The markdown summary: what a pull request comment or a GitHub job summary shows."""

from __future__ import annotations

from specguard.labels import STATUS_NOT_MEASURED, STATUS_OK, STATUS_REGRESSION
from specguard.report.schema import ResultsDoc
from specguard.report.terminal import COLUMNS, first_run_line, notes, outcome_line, summary_rows

STATUS_TEXT = {STATUS_OK: "no regression", STATUS_REGRESSION: "regression found", STATUS_NOT_MEASURED: "could not measure"}
STATUS_EMOJI = {STATUS_OK: "✅", STATUS_REGRESSION: "❌", STATUS_NOT_MEASURED: "⚠️"}


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def headline(doc: ResultsDoc, code: str = "`", emoji: bool = True) -> str:
    """Status, exit code and where the numbers come from; `code` quotes names (markdown backticks).
    `emoji=False` for pages that may lack an emoji font (headless Chromium draws a box)."""
    o = doc["outcome"]
    text = STATUS_TEXT.get(o["status"], o["status"])
    badge = f"{STATUS_EMOJI[o['status']]} {text}" if emoji and o["status"] in STATUS_EMOJI else text
    env = doc["environment"]
    commit = (env.get("git_commit") or "")[:10] or "unknown commit"
    return (f"specguard: {badge} (exit {o['exit_status']}) — suite {code}{doc['suite']}{code}, {commit}, "
            f"GPU {env.get('gpu') or 'none'}, session {code}{doc['session_id']}{code}")


def render_markdown(doc: ResultsDoc, html_name: str | None = "report.html") -> str:
    """Headline, the summary table, notes, and the failed tests folded away."""
    lines = [f"### {headline(doc)}", ""]
    rows = summary_rows(doc)
    if rows:
        lines.append("| " + " | ".join(title for title, _, _ in COLUMNS) + " |")
        lines.append("|" + "|".join("---:" if align.startswith(">") else "---" for _, _, align in COLUMNS) + "|")
        lines += ["| " + " | ".join(_cell(row[key]) for _, key, _ in COLUMNS) + " |" for row in rows]
        lines.append("")
    extra = notes(doc)
    if extra:
        lines += [f"- {_cell(n)}" for n in extra] + [""]
    failed = doc["outcome"]["failed_tests"]
    if failed:
        lines += [f"<details><summary>{len(failed)} failed test(s)</summary>", ""]
        lines += [f"- `{f['nodeid'].split('::')[-1]}` ({f['kind']}): {_cell(f['message'])}" for f in failed]
        lines += ["", "</details>", ""]
    lines.append(f"`{outcome_line(doc)}`")
    first_run = first_run_line(doc)
    if first_run:
        lines += ["", f"`{first_run}`"]
    if html_name:
        lines += ["", f"Plots and every decision: `{html_name}` in the uploaded report."]
    return "\n".join(lines) + "\n"
