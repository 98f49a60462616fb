"""`--update-baselines`: one invocation's writes, staged per process and committed all or
nothing, and what the refresh did, as data (report/baseline_text.py words it).

A process stages its writes (`BaselineStage`: the sessions, and why they are not a complete
refresh); the process that commits (the session, or the pytest-xdist controller for all its
workers) writes every stage's sessions together or none of them (`commit_baseline_stages`).
"""

from __future__ import annotations

import errno
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from specguard.labels import Level, TextEnum
from specguard.store.baseline_file import BaselineError, Fingerprint, stored_session_from_json
from specguard.store.baselines import BaselineStore, BaselineWrite, StagedWrite
from specguard.store.locks import LockError


class ProblemKind(TextEnum):
    """Why a refresh is not complete."""

    INTERRUPTED = "interrupted"  # the run was interrupted
    NOT_MEASURED = "not-measured"  # a planned cell was not measured (detail: its configuration's failure, if any)
    HAD_ERRORS = "had-errors"  # a planned cell was measured with errors (detail: the cell's error)


@dataclass(frozen=True)
class BaselineProblem:
    kind: ProblemKind
    config: str = ""
    level: Level | None = None
    detail: str = ""  # the first line of the failure or error it is about

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind.value, "config": self.config, "level": self.level.name if self.level else None,
                "detail": self.detail}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> BaselineProblem:
        return cls(ProblemKind(d["kind"]), d["config"], Level.parse(d["level"]) if d["level"] else None, d["detail"])


@dataclass(frozen=True)
class SkippedConfig:
    """A selected configuration with nothing to write: it was skipped here (not an error)."""

    config: str
    detail: str  # the first line of why it was skipped


class WriteFailureKind(TextEnum):
    IN_THE_WAY = "in-the-way"  # a file where a directory must go
    PERMISSION = "permission"
    DISK_FULL = "disk-full"
    OS_ERROR = "os-error"  # any other OSError
    LOCK_DIR = "lock-dir"  # the lock directory cannot be used (error: locks.LockError's line)
    UNWRITABLE = "unwritable"  # a document JSON cannot hold (NaN), or a file refused


@dataclass(frozen=True)
class WriteFailure:
    """Why the store could not be written: a path, permission or disk problem, or bad data."""

    kind: WriteFailureKind
    where: str  # the path the error names, else the baselines directory
    error: str  # "TypeName: message" (LOCK_DIR: the message)


def write_failure(exc: BaseException, directory: Path) -> WriteFailure:
    where = str(getattr(exc, "filename", None) or directory)
    error = f"{type(exc).__name__}: {exc}"
    if isinstance(exc, LockError):
        return WriteFailure(WriteFailureKind.LOCK_DIR, where, str(exc))
    if isinstance(exc, (FileExistsError, NotADirectoryError)):
        kind = WriteFailureKind.IN_THE_WAY
    elif isinstance(exc, PermissionError):
        kind = WriteFailureKind.PERMISSION
    elif isinstance(exc, OSError):
        kind = WriteFailureKind.DISK_FULL if exc.errno == errno.ENOSPC else WriteFailureKind.OS_ERROR
    else:
        kind = WriteFailureKind.UNWRITABLE
    return WriteFailure(kind, where, error)


class Refresh(TextEnum):
    """What a session's `--update-baselines` did."""

    NOT_REQUESTED = "not-requested"
    WRITTEN = "written"  # every selected cell
    INCOMPLETE = "incomplete"  # nothing written: problems (all or nothing)
    NOTHING_MEASURED = "nothing-measured"  # nothing written: no cell was measured
    WRITE_FAILED = "write-failed"  # nothing written: the store could not be written (failure)


@dataclass(frozen=True)
class BaselineOutcome:
    """What a `--update-baselines` session did: every selected cell written, or nothing and why."""

    result: Refresh
    writes: tuple[BaselineWrite, ...] = ()
    problems: tuple[BaselineProblem, ...] = ()
    skipped: tuple[SkippedConfig, ...] = ()
    failure: WriteFailure | None = None

    @property
    def requested(self) -> bool:
        return self.result != Refresh.NOT_REQUESTED

    @property
    def written(self) -> bool:
        return self.result == Refresh.WRITTEN

    @property
    def write_failed(self) -> bool:
        """The store could not be written (a path, permission or disk problem): exit 3."""
        return self.result == Refresh.WRITE_FAILED

    @property
    def failed(self) -> bool:
        """A refresh was asked for and nothing was written: the session did not do its job."""
        return self.requested and not self.written

    @property
    def paths(self) -> list[str]:
        return [w.path for w in self.writes]

    def to_json(self) -> dict[str, Any]:
        """As the results document stores it (report/schema.py `BaselineOutcomeDoc`)."""
        return {"result": self.result.value,
                "writes": [{**asdict(w), "levels": [lv.name for lv in w.levels]} for w in self.writes],
                "problems": [p.to_json() for p in self.problems], "skipped": [asdict(s) for s in self.skipped],
                "failure": {**asdict(self.failure), "kind": self.failure.kind.value} if self.failure else None}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> BaselineOutcome:
        f = d.get("failure")
        return cls(Refresh(d["result"]),
                   tuple(BaselineWrite(w["config"], w["path"], tuple(Level.parse(lv) for lv in w["levels"]),
                                       w["sessions_kept"], w["replaced"]) for w in d["writes"]),
                   tuple(BaselineProblem.from_json(p) for p in d["problems"]),
                   tuple(SkippedConfig(s["config"], s["detail"]) for s in d["skipped"]),
                   WriteFailure(WriteFailureKind(f["kind"]), f["where"], f["error"]) if f else None)


@dataclass
class BaselineStage:
    """One process's baseline writes, staged (not yet on disk), and whether they are complete."""

    complete: bool
    problems: list[BaselineProblem]  # why not complete; empty when complete
    writes: list[StagedWrite]
    skipped: list[SkippedConfig] = field(default_factory=list)  # configurations with nothing to write
    # pytest-xdist: every worker plans the whole selection but measures its share; the commit
    # checks that the workers together covered (measured error-free, or skipped) every planned cell.
    planned: list[tuple[str, Level]] = field(default_factory=list)
    covered: list[tuple[str, Level]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        """For the pytest-xdist controller (one run's processes, one version of this code)."""
        return {"complete": self.complete, "problems": [p.to_json() for p in self.problems],
                "skipped": [asdict(s) for s in self.skipped],
                "planned": [[n, lv.name] for n, lv in self.planned], "covered": [[n, lv.name] for n, lv in self.covered],
                "writes": [{"config": w.config, "fingerprint": w.fingerprint.fields,
                            "cells": {str(c): asdict(s) for c, s in w.cells.items()}} for w in self.writes]}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> BaselineStage:
        writes = [StagedWrite(w["config"], Fingerprint(w["fingerprint"]),
                              {(c if c.startswith("r") else int(c)): stored_session_from_json(s)
                               for c, s in w["cells"].items()})
                  for w in d["writes"]]
        return cls(complete=bool(d["complete"]), problems=[BaselineProblem.from_json(p) for p in d["problems"]],
                   writes=writes, skipped=[SkippedConfig(s["config"], s["detail"]) for s in d["skipped"]],
                   planned=[(str(n), Level.parse(lv)) for n, lv in d["planned"]],
                   covered=[(str(n), Level.parse(lv)) for n, lv in d["covered"]])


def commit_baseline_stages(stages: list[BaselineStage], store: BaselineStore, keep: int,
                           interrupted: bool = False) -> BaselineOutcome:
    """Write every stage's sessions together, or none of them (e.g. from pytest-xdist workers)."""
    problems = stage_problems(stages, interrupted)
    skipped = tuple(dict.fromkeys(s for stage in stages for s in stage.skipped))
    writes = [w for s in stages for w in s.writes]
    if problems:
        return BaselineOutcome(Refresh.INCOMPLETE, problems=tuple(problems), skipped=skipped)
    if not writes:
        return BaselineOutcome(Refresh.NOTHING_MEASURED, skipped=skipped)
    try:
        done = store.record_many(writes, keep=keep, replace_damaged=True)
    except (OSError, ValueError, BaselineError) as exc:
        return BaselineOutcome(Refresh.WRITE_FAILED, skipped=skipped, failure=write_failure(exc, store.directory))
    return BaselineOutcome(Refresh.WRITTEN, writes=tuple(done), skipped=skipped)


def stage_problems(stages: list[BaselineStage], interrupted: bool) -> list[BaselineProblem]:
    """Why the stages together are not a complete refresh: each distinct problem, interrupts
    first, then every planned cell no stage covered and no problem is about already."""
    found = [p for s in stages for p in s.problems]
    if interrupted:
        found.insert(0, BaselineProblem(ProblemKind.INTERRUPTED))
    problems = sorted(dict.fromkeys(found), key=lambda p: p.kind != ProblemKind.INTERRUPTED)  # stable
    named = {(p.config, p.level) for p in problems}
    covered = {k for s in stages for k in s.covered}
    missing = [k for k in dict.fromkeys(k for s in stages for k in s.planned) if k not in covered and k not in named]
    return problems + [BaselineProblem(ProblemKind.NOT_MEASURED, name, level) for name, level in missing]
