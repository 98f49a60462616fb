"""The baseline store of one directory: `<dir>/<configuration>.json` (baseline_file.py's format).

One invocation's writes go together (`record_many`): every file's new text is written to a temp
file first, then all are renamed with SIGINT/SIGTERM deferred (atomic.py), under per-file locks
kept outside the directory (locks.py), so an interrupt leaves every file as it was or every file
updated, and two processes writing one file never lose each other's sessions. A damaged, foreign
or newer file is reported, never overwritten unless the caller passes replace_damaged (the user
asked to update). Plain JSON only.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from specguard.labels import Level
from specguard.store.atomic import commit_json
from specguard.store.baseline_file import (
    BaselineError,
    Fingerprint,
    StoredSession,
    cell_key,
    entries_newest_first,
    new_document,
    now_iso,
    read_document,
    stored_session_from_json,
)
from specguard.store.locks import locked


@dataclass
class StagedWrite:
    """Sessions to append to one configuration's file under one fingerprint (not yet written)."""

    config: str
    fingerprint: Fingerprint
    cells: dict[int | str, StoredSession]  # concurrency, or "r8" for a request-rate level (cell_key)


@dataclass(frozen=True)
class BaselineWrite:
    """What one staged write did to its file."""

    config: str
    path: str
    levels: tuple[Level, ...]  # the cells written
    sessions_kept: int  # sessions the written cells hold now (the fewest of them), at most `keep`
    replaced: str | None = None  # the unusable file it replaced: why it was unusable (the loader's line)


@dataclass
class CellHistory:
    fingerprint: Fingerprint
    sessions: list[StoredSession]


class BaselineStore:
    """Reads and writes `<dir>/<configuration>.json`."""

    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)

    def path_for(self, config: str) -> Path:
        return self.directory / f"{config}.json"

    # -- reading ------------------------------------------------------------------------------
    def load_file(self, config: str) -> dict[str, Any] | None:
        """The whole file, validated; None when there is none."""
        return read_document(self.path_for(config), config)

    def history(self, config: str, fingerprint: Fingerprint, level: int | str) -> CellHistory | None:
        """Stored sessions of this cell with this exact fingerprint, or None."""
        doc = self.load_file(config)
        if doc is None:
            return None
        entry = doc["entries"].get(fingerprint.key)
        if entry is None:
            return None
        cell = entry["cells"].get(cell_key(level))
        if not cell:
            return None
        sessions = [stored_session_from_json(s) for s in cell["sessions"]]
        return CellHistory(fingerprint=Fingerprint(entry["fingerprint"]), sessions=sessions)

    def fingerprints(self, config: str) -> list[Fingerprint]:
        """Every fingerprint the file holds, the most recently updated first."""
        doc = self.load_file(config)
        return [Fingerprint(e["fingerprint"]) for e in entries_newest_first(doc)] if doc is not None else []

    # -- writing ------------------------------------------------------------------------------
    def record_sessions(self, config: str, fingerprint: Fingerprint, cells: dict[int | str, StoredSession], keep: int,
                        replace_damaged: bool = False) -> Path:
        """Append one session per cell (keeping the newest `keep`), atomically, under a lock."""
        written = self.record_many([StagedWrite(config, fingerprint, cells)], keep=keep, replace_damaged=replace_damaged)
        return Path(written[0].path)

    def record_many(self, writes: Sequence[StagedWrite], keep: int, replace_damaged: bool = False) -> list[BaselineWrite]:
        """Apply every write, or none: what each write did, in the order given.

        All new documents are built and written to fsynced temp files first (an error or an
        interrupt there leaves every file untouched); then all are renamed into place with
        SIGINT/SIGTERM deferred, so an interrupt cannot stop the commit half-way.
        """
        by_config: dict[str, list[StagedWrite]] = {}
        for w in writes:
            by_config.setdefault(w.config, []).append(w)
        self.directory.mkdir(parents=True, exist_ok=True)
        with locked(self.path_for(c) for c in by_config):
            docs: dict[str, dict[str, Any]] = {}
            replaced: dict[str, str] = {}
            kept: dict[int, int] = {}
            for config, group in by_config.items():
                try:
                    doc = self.load_file(config)
                except BaselineError as exc:
                    if not replace_damaged:
                        raise
                    doc, replaced[config] = None, str(exc)
                docs[config] = doc = doc if doc is not None else new_document(config)
                for w in group:
                    kept[id(w)] = _append(doc, w, keep)
            commit_json({self.path_for(c): d for c, d in docs.items()})
        return [BaselineWrite(w.config, str(self.path_for(w.config)),
                              tuple(Level.parse(cell_key(k)) for k in sorted(w.cells, key=cell_key)),
                              kept[id(w)], replaced.get(w.config)) for w in writes]


def _append(doc: dict[str, Any], write: StagedWrite, keep: int) -> int:
    """Add one write's sessions to a document (the newest `keep` per cell stay); the fewest
    sessions a written cell holds now."""
    entry = doc["entries"].setdefault(write.fingerprint.key, {"fingerprint": write.fingerprint.fields, "cells": {}})
    entry["updated"] = now_iso()
    held = []
    for level, session in sorted(write.cells.items(), key=lambda kv: cell_key(kv[0])):
        cell = entry["cells"].setdefault(cell_key(level), {"sessions": []})
        cell["sessions"] = [*cell["sessions"], asdict(session)][-keep:]
        held.append(len(cell["sessions"]))
    return min(held, default=0)
