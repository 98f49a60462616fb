"""The results files of a history: found from directories, files and globs, validated, put in time
order (their `created` stamps), and cut to the newest ones by `--since`.

A file that is not a results document is an error naming it, never skipped: a history with a
silent gap would place a change point at the wrong file.
"""

from __future__ import annotations

import glob
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from specguard.report.results import ResultsError, load
from specguard.report.schema import ResultsDoc


class HistoryError(ValueError):
    """Bad input (a file, a directory or a flag): one line that names it."""


@dataclass(frozen=True)
class ResultsFile:
    """One results document of the history and what a change point is attributed to."""

    path: Path
    created: datetime
    doc: ResultsDoc

    @property
    def commit(self) -> str:
        return (self.doc["environment"].get("git_commit") or "")[:10]

    def engine_version(self, config: str) -> str:
        """What the configuration's server reported (servers.NAME.effective_args.engine_version)."""
        server = self.doc["servers"].get(config)
        effective = (server.get("effective_args") if server else None) or {}
        return str(effective.get("engine_version") or "")

    @property
    def date(self) -> str:
        return self.created.strftime("%Y-%m-%d %H:%M")


def collect_paths(items: list[str]) -> list[Path]:
    """Every results file named on the command line: a directory gives its *.json files (not its
    subdirectories'), a file itself, anything else is a glob that must match a file."""
    found: dict[Path, Path] = {}
    for item in items:
        path = Path(item)
        if path.is_dir():
            matches = sorted(p for p in path.glob("*.json") if p.is_file())
            if not matches:
                raise HistoryError(f"{item}: a directory with no .json results files")
        elif path.is_file():
            matches = [path]
        else:
            matches = sorted(Path(m) for m in glob.glob(item) if Path(m).is_file())
            if not matches:
                raise HistoryError(f"{item}: no such file, directory or matching glob")
        for match in matches:
            found.setdefault(match.resolve(), match)
    return list(found.values())


def parse_created(text: object, source: Path) -> datetime:
    """A document's `created` stamp (ISO 8601; a stamp without a zone is taken as UTC)."""
    try:
        stamp = datetime.fromisoformat(str(text).replace("Z", "+00:00"))
    except ValueError:
        raise HistoryError(f"{source}: 'created' is {text!r}, not an ISO 8601 time") from None
    return stamp if stamp.tzinfo else stamp.replace(tzinfo=timezone.utc)


def load_files(paths: list[Path]) -> list[ResultsFile]:
    """The documents, oldest first (ties by path); ResultsError's message names a bad file."""
    out = []
    for path in paths:
        try:
            doc = load(path)
        except ResultsError as exc:
            raise HistoryError(str(exc).splitlines()[0]) from None
        out.append(ResultsFile(path, parse_created(doc["created"], path), doc))
    return sorted(out, key=lambda f: (f.created, str(f.path)))


def parse_since(text: str) -> int | datetime:
    """`--since N` (the newest N files) or `--since DATE` (files created on or after it, UTC)."""
    if text.isdigit():
        if int(text) < 1:
            raise HistoryError(f"--since {text}: a count of files must be at least 1")
        return int(text)
    try:
        stamp = datetime.fromisoformat(text)
    except ValueError:
        raise HistoryError(f"--since {text!r}: use a number of files (e.g. 30) or a date (e.g. 2026-05-01)") from None
    return stamp if stamp.tzinfo else stamp.replace(tzinfo=timezone.utc)


def newest(files: list[ResultsFile], since: int | datetime | None) -> list[ResultsFile]:
    """The files `--since` keeps (files are in time order)."""
    if since is None:
        return files
    if isinstance(since, int):
        return files[-since:]
    return [f for f in files if f.created >= since]
