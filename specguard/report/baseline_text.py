"""What `--update-baselines` did, in words: the summary's `baselines:` lines and the results
document's `baseline_updates`, all rendered from a `store.refresh.BaselineOutcome`."""

from __future__ import annotations

from typing import Any, cast

from specguard.report.schema import ResultsDoc
from specguard.store.baselines import BaselineWrite
from specguard.store.refresh import (
    BaselineOutcome,
    BaselineProblem,
    ProblemKind,
    Refresh,
    SkippedConfig,
    WriteFailure,
    WriteFailureKind,
)

SHOWN_PROBLEMS = 3  # a refresh with more problems names the first three and counts the rest


def document_lines(doc: ResultsDoc) -> list[str]:
    """A results document's baseline lines: rendered from `baseline_outcome` (the data), or in a
    file written before it, its `baseline_updates` as that specguard worded them."""
    outcome = doc.get("baseline_outcome")
    return outcome_lines(BaselineOutcome.from_json(cast(dict[str, Any], outcome))) if outcome else list(doc["baseline_updates"])


def outcome_lines(o: BaselineOutcome) -> list[str]:
    """One line per configuration written, or the one line saying why nothing was; then one per
    configuration that had nothing to write."""
    skipped = [skipped_line(s) for s in o.skipped]
    if o.result == Refresh.NOT_REQUESTED:
        return []
    if o.result == Refresh.WRITTEN:
        return [*(written_line(w) for w in o.writes), *skipped]
    return [nothing_written(o), *skipped]


def nothing_written(o: BaselineOutcome) -> str:
    """"nothing written (all or nothing): eagle3 c4 not measured", or why else nothing was."""
    if o.result == Refresh.INCOMPLETE:
        shown = "; ".join(problem_text(p) for p in o.problems[:SHOWN_PROBLEMS])
        more = len(o.problems) - SHOWN_PROBLEMS
        return f"nothing written (all or nothing): {shown}" + (f"; and {more} more" if more > 0 else "")
    if o.result == Refresh.WRITE_FAILED and o.failure is not None:
        return f"nothing written: {write_failure_text(o.failure)}"
    return "nothing written: no cell was measured"


def problem_text(p: BaselineProblem) -> str:
    """Why one planned cell blocks the refresh: "eagle3 r8 had errors (only 1 of 2 runs completed)"."""
    if p.kind == ProblemKind.INTERRUPTED:
        return "the run was interrupted"
    cell = f"{p.config} {p.level}"
    if p.kind == ProblemKind.HAD_ERRORS:
        return f"{cell} had errors ({p.detail})"
    return f"{cell} not measured" + (f" ({p.detail})" if p.detail else "")


def skipped_line(s: SkippedConfig) -> str:
    return f"{s.config}: nothing to write (skipped: {s.detail})"


def written_line(w: BaselineWrite) -> str:
    """The line of one configuration's write, and the unusable file it replaced, if any."""
    line = f"{w.config}: wrote {len(w.levels)} cell(s) to {w.path}"
    return line + (f" (replaced an unusable file: {w.replaced})" if w.replaced else "")


def write_failure_text(f: WriteFailure) -> str:
    """A baseline directory that cannot be written, in one line: the path and the fix."""
    at = f"cannot write baselines under {f.where}"
    if f.kind == WriteFailureKind.IN_THE_WAY:
        return f"{at}: a file is in the way of the directory; pass --baseline-dir a directory (or move that file)"
    if f.kind == WriteFailureKind.PERMISSION:
        return f"{at}: permission denied; make it writable or pass --baseline-dir DIR"
    if f.kind == WriteFailureKind.DISK_FULL:
        return f"{at}: the disk is full; free space or pass --baseline-dir on another disk"
    if f.kind == WriteFailureKind.OS_ERROR:
        return f"{at}: {f.error}"
    return f.error  # the lock directory's own line, or a document JSON cannot hold
