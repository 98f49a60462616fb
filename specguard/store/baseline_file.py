"""One configuration's baseline file: its JSON format, what it stores, and its validation.

A file holds, per environment fingerprint, the raw per-run samples of the last K sessions of
each cell (not just a mean), so the between-session spread can be estimated. Format (schema
`specguard-baseline` version 1, unchanged since specguard's first baselines):
`{"schema", "schema_version", "configuration", "entries": {fingerprint key: {"fingerprint",
"updated", "cells": {"c16" | "r8": {"sessions": [StoredSession as JSON]}}}}}`. A damaged,
foreign or newer file raises BaselineError naming the file and what is wrong.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from specguard.measure.metrics import RunMetrics, RunSeries

SCHEMA = "specguard-baseline"
SCHEMA_VERSION = 1


class BaselineError(RuntimeError):
    """A baseline file that cannot be used; the message names the file and what is wrong."""


@dataclass(frozen=True)
class FieldDifference:
    """One fingerprint field whose stored value differs from this run's (None: absent there)."""

    field: str
    stored: Any  # a JSON value
    now: Any


@dataclass(frozen=True)
class Fingerprint:
    """Everything that must match for two measurements to be comparable."""

    fields: dict[str, Any]

    @property
    def key(self) -> str:
        return hashlib.sha256(json.dumps(self.fields, sort_keys=True).encode()).hexdigest()[:16]

    def differences(self, other: Fingerprint) -> list[FieldDifference]:
        """Every field that differs from `other` (the stored one), in name order."""
        keys = sorted(set(self.fields) | set(other.fields))
        return [FieldDifference(k, other.fields.get(k), self.fields.get(k))
                for k in keys if self.fields.get(k) != other.fields.get(k)]


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
    # [k]: verify steps that accepted exactly k drafts (SGLang's spec_correct_drafts_histogram summed over
    # the run's requests): acceptance by draft position ([] : recorded before it was, or no such counts)
    correct_drafts_histogram: list[int] = field(default_factory=list)

    @classmethod
    def from_metrics(cls, m: RunMetrics, run_index: int, launch_id: str) -> RunSample:
        cats = {name: {"accept_length": c.accept_length, "output_throughput": c.output_throughput,
                       "output_tokens": c.output_tokens, "total_verify_ct": c.total_verify_ct}
                for name, c in sorted(m.categories.items())}
        return cls(run_index=run_index, launch_id=launch_id, output_throughput=m.output_throughput,
                   total_output_tokens=m.total_output_tokens, duration_s=m.duration_s, completed=m.completed,
                   failed=m.failed, accept_length=m.accept_length, total_verify_ct=m.total_verify_ct, categories=cats,
                   request_goodput=m.request_goodput, step_time_ms=m.step_time_ms,
                   correct_drafts_histogram=list(m.correct_drafts_histogram))


@dataclass
class StoredSession(RunSeries):
    """One stored sweep of one cell."""

    session_id: str
    date: str
    provenance: dict[str, Any]
    runs: list[RunSample] = field(default_factory=list)


def cell_key(level: int | str) -> str:
    """A cell's key in a file: "c16" for concurrency 16; a request-rate level comes as "r8"."""
    return level if isinstance(level, str) else f"c{level}"


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def new_document(config: str) -> dict[str, Any]:
    return {"schema": SCHEMA, "schema_version": SCHEMA_VERSION, "configuration": config, "entries": {}}


def read_document(path: Path, config: str) -> dict[str, Any] | None:
    """The whole file, validated; None when there is none."""
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


def entries_newest_first(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """A validated document's entries, the most recently updated first (undated ones last)."""
    return sorted(doc["entries"].values(), key=lambda e: e.get("updated", ""), reverse=True)


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
    hist = sample.correct_drafts_histogram
    if not isinstance(hist, list) or not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in hist):
        raise ValueError(f"correct_drafts_histogram must be a list of step counts, got {hist!r}")
    return sample


def _not_positive(value: object) -> bool:
    return not isinstance(value, (int, float)) or value <= 0
