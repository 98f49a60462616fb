"""The baseline store: one JSON file per configuration, keyed by an environment fingerprint.

Files hold raw per-run samples of the last K sessions (not just a mean), so the between-session
spread can be estimated. One invocation's writes go together (`record_many`): every file's new
text is written to a temp file first, then all are renamed with SIGINT/SIGTERM deferred, under
per-file locks, so an interrupt leaves every file as it was or every file updated. Files get the
mode the user's umask gives any new file. A damaged, foreign or newer file is reported, never
overwritten unless the caller passes replace_damaged (the user asked to update). Plain JSON only.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import signal
import tempfile
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from types import FrameType
from typing import Any

from specguard.measure.metrics import RunMetrics, RunSeries

SCHEMA = "specguard-baseline"
SCHEMA_VERSION = 1


class BaselineError(RuntimeError):
    """A baseline file that cannot be used; the message names the file and what is wrong."""


@dataclass(frozen=True)
class Fingerprint:
    """Everything that must match for two measurements to be comparable."""

    fields: dict[str, Any]

    @property
    def key(self) -> str:
        return hashlib.sha256(json.dumps(self.fields, sort_keys=True).encode()).hexdigest()[:16]

    def differences(self, other: Fingerprint) -> list[str]:
        """One "field: stored X, now Y" per differing field (`other` is the stored one); long
        values are cut so a message stays readable."""
        keys = sorted(set(self.fields) | set(other.fields))
        return [f"{k}: stored {_short(other.fields.get(k))}, now {_short(self.fields.get(k))}"
                for k in keys if self.fields.get(k) != other.fields.get(k)]


def _short(value: Any, limit: int = 48) -> str:
    """repr(value), cut to about `limit` characters (whole list items, then "...")."""
    text = repr(value)
    if len(text) <= limit:
        return text
    if isinstance(value, (list, tuple)):
        shown: list[str] = []
        for item in value:
            if len(", ".join([*shown, repr(item)])) > limit - 8:
                break
            shown.append(repr(item))
        return "[" + ", ".join(shown) + f", ... ({len(value)} items)]"
    return text[: limit - 3] + "..."


@dataclass
class RunSample:
    """One measured run as stored: enough to recompute every gate."""

    run_index: int
    launch_id: str
    output_throughput: float
    total_output_tokens: int
    duration_s: float
    completed: int
    failed: int
    accept_length: float | None
    total_verify_ct: int
    # Per prompt category (workloads whose prompts carry one): name -> {"accept_length",
    # "output_throughput", "output_tokens", "total_verify_ct"}; the per-category accept-length gates.
    categories: dict[str, dict[str, Any]] = field(default_factory=dict)
    request_goodput: float | None = None  # good requests/s under the suite's [sweep] slo (None: no SLO)
    step_time_ms: float | None = None  # the engine's time per decode step of a request (None: recorded before it was)

    @classmethod
    def from_metrics(cls, m: RunMetrics, run_index: int, launch_id: str) -> RunSample:
        cats = {name: {"accept_length": c.accept_length, "output_throughput": c.output_throughput,
                       "output_tokens": c.output_tokens, "total_verify_ct": c.total_verify_ct}
                for name, c in sorted(m.categories.items())}
        return cls(run_index=run_index, launch_id=launch_id, output_throughput=m.output_throughput,
                   total_output_tokens=m.total_output_tokens, duration_s=m.duration_s, completed=m.completed,
                   failed=m.failed, accept_length=m.accept_length, total_verify_ct=m.total_verify_ct, categories=cats,
                   request_goodput=m.request_goodput, step_time_ms=m.step_time_ms)


@dataclass
class StoredSession(RunSeries):
    """One stored sweep of one cell."""

    session_id: str
    date: str
    provenance: dict[str, Any]
    runs: list[RunSample] = field(default_factory=list)

    def category_accept_lengths(self, category: str) -> list[float]:
        """Per-run accept lengths of one prompt category (runs stored without it are left out)."""
        values = [(r.categories.get(category) or {}).get("accept_length") for r in self.runs]
        return [v for v in values if isinstance(v, (int, float))]


@dataclass
class StagedWrite:
    """Sessions to append to one configuration's file under one fingerprint (not yet written)."""

    config: str
    fingerprint: Fingerprint
    cells: dict[int | str, StoredSession]  # concurrency, or "r8" for a request-rate level (cell_key)


@dataclass
class CellHistory:
    fingerprint: Fingerprint
    sessions: list[StoredSession]


def cell_key(level: int | str) -> str:
    """A cell's key in a file: "c16" for concurrency 16; a request-rate level comes as "r8"."""
    return level if isinstance(level, str) else f"c{level}"


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


class BaselineStore:
    """Reads and writes `<dir>/<configuration>.json`."""

    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)

    def path_for(self, config: str) -> Path:
        return self.directory / f"{config}.json"

    # -- reading ------------------------------------------------------------------------------
    def load_file(self, config: str) -> dict[str, Any] | None:
        """The whole file, validated; None when there is none."""
        path = self.path_for(config)
        if not path.exists():
            return None
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
        except UnicodeDecodeError:
            raise BaselineError(f"baseline file {path} is not UTF-8 text (corrupted?)") from None
        except json.JSONDecodeError as exc:
            raise BaselineError(f"baseline file {path} is not valid JSON (truncated or corrupted?): {exc.msg} "
                                f"at line {exc.lineno}") from None
        return validate_document(doc, path, config)

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

    def other_fingerprints(self, config: str) -> list[Fingerprint]:
        doc = self.load_file(config)
        if doc is None:
            return []
        entries = sorted(doc["entries"].values(), key=lambda e: e.get("updated", ""), reverse=True)
        return [Fingerprint(e["fingerprint"]) for e in entries]

    # -- writing ------------------------------------------------------------------------------
    def record_sessions(self, config: str, fingerprint: Fingerprint, cells: dict[int | str, StoredSession], keep: int,
                        replace_damaged: bool = False) -> Path:
        """Append one session per cell (keeping the newest `keep`), atomically, under a lock."""
        return self.record_many([StagedWrite(config, fingerprint, cells)], keep=keep, replace_damaged=replace_damaged)[0][0]

    def record_many(self, writes: Sequence[StagedWrite], keep: int,
                    replace_damaged: bool = False) -> list[tuple[Path, str | None]]:
        """Apply every write, or none: (path, why a damaged file was replaced or None) per write.

        All new documents are built and written to fsynced temp files first (an error or an
        interrupt there leaves every file untouched); then all are renamed into place with
        SIGINT/SIGTERM deferred, so an interrupt cannot stop the commit half-way.
        """
        by_config: dict[str, list[StagedWrite]] = {}
        for w in writes:
            by_config.setdefault(w.config, []).append(w)
        self.directory.mkdir(parents=True, exist_ok=True)
        with contextlib.ExitStack() as locks:
            for config in sorted(by_config):  # one order for every process: no lock-order deadlock
                locks.enter_context(_locked(self.path_for(config)))
            docs: dict[str, tuple[dict[str, Any], str | None]] = {}
            for config, group in by_config.items():
                replaced = None
                try:
                    doc = self.load_file(config)
                except BaselineError as exc:
                    if not replace_damaged:
                        raise
                    doc, replaced = None, str(exc)
                if doc is None:
                    doc = {"schema": SCHEMA, "schema_version": SCHEMA_VERSION, "configuration": config, "entries": {}}
                for w in group:
                    entry = doc["entries"].setdefault(w.fingerprint.key, {"fingerprint": w.fingerprint.fields, "cells": {}})
                    entry["updated"] = now_iso()
                    for concurrency, session in sorted(w.cells.items(), key=lambda kv: cell_key(kv[0])):
                        cell = entry["cells"].setdefault(cell_key(concurrency), {"sessions": []})
                        cell["sessions"].append(asdict(session))
                        cell["sessions"] = cell["sessions"][-keep:]
                docs[config] = (doc, replaced)
            commit_json({self.path_for(c): d for c, (d, _) in docs.items()})
        return [(self.path_for(w.config), docs[w.config][1]) for w in writes]


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    lock_path = path.with_suffix(path.suffix + ".lock")
    with open(lock_path, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _umask_mode() -> int:
    """The mode a new file gets here: 0o666 less the process umask (read without changing it for long)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return 0o666 & ~mask


def _write_temp(path: Path, doc: Any, mode: int) -> str:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(doc, f, indent=1, sort_keys=True, allow_nan=False)
            f.write("\n")
            f.flush()
            os.fchmod(f.fileno(), mode)
            os.fsync(f.fileno())
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    return tmp


@contextlib.contextmanager
def _signals_deferred() -> Iterator[None]:
    """Hold SIGINT/SIGTERM until the block ends, then deliver them (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    pending: list[tuple[int, FrameType | None]] = []
    old: dict[int, Callable[[int, FrameType | None], Any] | int | signal.Handlers | None] = {}  # getsignal's answers
    for sig in (signal.SIGINT, signal.SIGTERM):
        old[sig] = signal.getsignal(sig)
        signal.signal(sig, lambda signum, frame: pending.append((signum, frame)))
    try:
        yield
    finally:
        for signum, handler in old.items():
            signal.signal(signum, handler)
        for signum, frame in pending[:1]:
            handler = old[signum]
            if callable(handler):
                handler(signum, frame)
            elif handler == signal.SIG_DFL:
                signal.raise_signal(signum)


def commit_json(docs: dict[Path, Any]) -> None:
    """Write several JSON files together: temp files first, then every rename, uninterrupted."""
    mode = _umask_mode()
    temps: list[tuple[str, Path]] = []
    try:
        for path, doc in docs.items():
            path.parent.mkdir(parents=True, exist_ok=True)
            temps.append((_write_temp(path, doc, mode), path))
        with _signals_deferred():
            for tmp, path in temps:
                os.replace(tmp, path)
            temps = []
    finally:
        for tmp, _ in temps:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)


def atomic_write_json(path: Path, doc: Any) -> None:
    """Write one file: temp file in the same directory, fsync, rename over the target."""
    commit_json({path: doc})


def validate_document(doc: object, path: Path, config: str) -> dict[str, Any]:
    """The document itself after shape checks, with errors that say what is wrong and where."""
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        raise BaselineError(f"baseline file {path} is not a specguard baseline (no \"schema\": \"{SCHEMA}\")")
    version = doc.get("schema_version")
    if not isinstance(version, int):
        raise BaselineError(f"baseline file {path}: schema_version is missing or not an integer")
    if version > SCHEMA_VERSION:
        raise BaselineError(f"baseline file {path} has schema_version {version}, newer than this specguard understands "
                            f"({SCHEMA_VERSION}); upgrade specguard")
    if doc.get("configuration") != config:
        raise BaselineError(f"baseline file {path} belongs to configuration {doc.get('configuration')!r}, not {config!r}")
    entries = doc.get("entries")
    if not isinstance(entries, dict):
        raise BaselineError(f"baseline file {path}: \"entries\" must be an object")
    for key, entry in entries.items():
        _validate_entry(entry, f"baseline file {path}: entries.{key}")
    return doc


def _validate_entry(entry: object, where: str) -> None:
    """One fingerprint's entry: its fingerprint, and every stored session of every cell."""
    if not isinstance(entry, dict) or not isinstance(entry.get("fingerprint"), dict) or not isinstance(entry.get("cells"), dict):
        raise BaselineError(f"{where} needs \"fingerprint\" and \"cells\" objects")
    for cname, cell in entry["cells"].items():
        sessions = cell.get("sessions") if isinstance(cell, dict) else None
        if not isinstance(sessions, list):
            raise BaselineError(f"{where}.cells.{cname}.sessions must be a list")
        for i, s in enumerate(sessions):
            try:
                stored_session_from_json(s)
            except (TypeError, KeyError, ValueError) as exc:
                raise BaselineError(f"{where}.cells.{cname}.sessions[{i}] is malformed: {exc}") from None


def stored_session_from_json(s: Any) -> StoredSession:
    if not isinstance(s, dict):
        raise TypeError("a session must be an object")
    runs = [run_sample_from_json(r) for r in s["runs"]]
    if not runs:
        raise ValueError("a session needs at least one run")
    return StoredSession(session_id=str(s["session_id"]), date=str(s["date"]), provenance=dict(s.get("provenance") or {}),
                         runs=runs)


def run_sample_from_json(r: Any) -> RunSample:
    """One stored run; ValueError names the first figure the gates could not use."""
    sample = RunSample(**r)
    if _not_positive(sample.output_throughput):
        raise ValueError(f"output_throughput must be a positive number, got {sample.output_throughput!r}")
    for name, value in (("accept_length", sample.accept_length), ("step_time_ms", sample.step_time_ms)):
        if value is not None and _not_positive(value):
            raise ValueError(f"{name} must be a positive number or null, got {value!r}")
    if not isinstance(sample.categories, dict) or not all(isinstance(v, dict) for v in sample.categories.values()):
        raise ValueError("categories must map a category name to an object")
    return sample


def _not_positive(value: object) -> bool:
    return not isinstance(value, (int, float)) or value <= 0


# -- a session's writes, staged and committed all or nothing --------------------------------------
@dataclass
class BaselineOutcome:
    """What a `--update-baselines` session did: every selected cell written, or nothing and why."""

    requested: bool
    written: bool = False
    paths: list[str] = field(default_factory=list)
    reason: str | None = None  # why nothing was written (one line)
    lines: list[str] = field(default_factory=list)  # for the summary
    write_failed: bool = False  # the store could not be written (a path, permission or disk problem)

    @property
    def failed(self) -> bool:
        """A refresh was asked for and nothing was written: the session did not do its job."""
        return self.requested and not self.written


@dataclass
class BaselineStage:
    """One process's baseline writes, staged (not yet on disk), and whether they are complete."""

    complete: bool
    problems: list[str]  # why not complete; empty when complete
    writes: list[StagedWrite]
    notes: list[str] = field(default_factory=list)  # configurations with nothing to write, and why
    # pytest-xdist: every worker plans the whole selection but measures its share; the commit
    # checks that the workers together covered (measured error-free, or skipped) every planned cell.
    planned: list[tuple[str, int]] = field(default_factory=list)
    covered: list[tuple[str, int]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"complete": self.complete, "problems": self.problems, "notes": self.notes,
                "planned": [list(x) for x in self.planned], "covered": [list(x) for x in self.covered],
                "writes": [{"config": w.config, "fingerprint": w.fingerprint.fields,
                            "cells": {str(c): asdict(s) for c, s in w.cells.items()}} for w in self.writes]}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> BaselineStage:
        writes = [StagedWrite(w["config"], Fingerprint(w["fingerprint"]),
                              {(c if c.startswith("r") else int(c)): stored_session_from_json(s)
                               for c, s in w["cells"].items()})
                  for w in d["writes"]]
        return cls(complete=bool(d["complete"]), problems=list(d["problems"]), writes=writes, notes=list(d.get("notes", [])),
                   planned=[(str(n), int(c)) for n, c in d.get("planned", [])],
                   covered=[(str(n), int(c)) for n, c in d.get("covered", [])])


def write_failure(exc: BaseException, directory: Path) -> str:
    """One line for a baseline directory that cannot be written: the path and the fix."""
    where = getattr(exc, "filename", None) or directory
    if isinstance(exc, (FileExistsError, NotADirectoryError)):
        return (f"cannot write baselines under {where}: a file is in the way of the directory; "
                f"pass --baseline-dir a directory (or move that file)")
    if isinstance(exc, PermissionError):
        return f"cannot write baselines under {where}: permission denied; make it writable or pass --baseline-dir DIR"
    if isinstance(exc, OSError) and exc.errno == errno.ENOSPC:
        return f"cannot write baselines under {where}: the disk is full; free space or pass --baseline-dir on another disk"
    return f"cannot write baselines under {where}: {type(exc).__name__}: {exc}"


def commit_baseline_stages(stages: list[BaselineStage], store: BaselineStore, keep: int,
                           interrupted: bool = False) -> BaselineOutcome:
    """Write every stage's sessions together, or none of them (e.g. from pytest-xdist workers)."""
    problems = stage_problems(stages, interrupted)
    notes = list(dict.fromkeys(n for s in stages for n in s.notes))
    writes = [w for s in stages for w in s.writes]
    if problems:
        shown = "; ".join(problems[:3]) + (f"; and {len(problems) - 3} more" if len(problems) > 3 else "")
        return _nothing_written(f"nothing written (all or nothing): {shown}", notes)
    if not writes:
        return _nothing_written("nothing written: no cell was measured", notes)
    try:
        results = store.record_many(writes, keep=keep, replace_damaged=True)
    except (OSError, ValueError, BaselineError) as exc:
        why = write_failure(exc, store.directory) if isinstance(exc, OSError) else f"{type(exc).__name__}: {exc}"
        return _nothing_written(f"nothing written: {why}", notes, write_failed=True)
    lines = [written_line(w, path, replaced) for w, (path, replaced) in zip(writes, results)]
    return BaselineOutcome(requested=True, written=True, paths=[str(p) for p, _ in results], lines=[*lines, *notes])


def stage_problems(stages: list[BaselineStage], interrupted: bool) -> list[str]:
    """Why the stages together are not a complete refresh: each stage's problems, the interrupt
    first, then every planned cell no stage covered (unless a problem already names it)."""
    problems = [p for s in stages for p in s.problems]
    if interrupted and "the run was interrupted" not in problems:
        problems.insert(0, "the run was interrupted")
    covered = {k for s in stages for k in s.covered}
    missing = [k for k in dict.fromkeys(k for s in stages for k in s.planned) if k not in covered]
    problems += [f"{n} c{c} not measured" for n, c in missing if not any(f"{n} c{c} " in p for p in problems)]
    return problems


def _nothing_written(reason: str, notes: list[str], write_failed: bool = False) -> BaselineOutcome:
    return BaselineOutcome(requested=True, written=False, reason=reason, lines=[reason, *notes], write_failed=write_failed)


def written_line(write: StagedWrite, path: Path, replaced: str | None) -> str:
    """The summary line of one configuration's write, and the unusable file it replaced, if any."""
    line = f"{write.config}: wrote {len(write.cells)} cell(s) to {path}"
    if replaced:
        line += f" (replaced an unusable file: {replaced})"
    return line
