"""The stored history a session compares with: what must match (the fingerprint) and the stored
sessions of a cell, or of a reference standing in for one measured here."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import replace
from functools import partial
from typing import Any

from specguard.config import ServerConfig, Suite
from specguard.decide.gates import session_spread
from specguard.decide.prior import SpreadEstimate
from specguard.decide.result import Why
from specguard.decide.stats import SessionRuns
from specguard.labels import GateLabel
from specguard.notes import Note, NoteKind
from specguard.session.cells import metric_values
from specguard.session.hints import exact_k, record_command_line
from specguard.session.levels import SweepLevels
from specguard.session.options import ConfigUnavailable, RunOptions
from specguard.session.servers import ServerPool
from specguard.store.baseline_file import (
    BaselineError,
    FieldDifference,
    Fingerprint,
    StoredSession,
    cell_key,
    entries_newest_first,
    stored_session_from_json,
)
from specguard.store.baselines import BaselineStore
from specguard.store.gaps import GapKind, HistoryGap

# Per-launch samples of each stored session, or None with why not (the gap, and its kind: an
# unreadable file is an error, every other gap a skip). cell_gates.py and speculation_gate.py
# hand the gap to the gate's Problem as its detail; report/verdict_text.py words it.
History = tuple[list[list[float]] | None, HistoryGap | str, Why | None]

_WHY = {GapKind.UNREADABLE: Why.HISTORY_UNREADABLE, GapKind.OTHER_ENVIRONMENT: Why.OTHER_ENVIRONMENT,
        GapKind.NO_CATEGORY: Why.NO_CATEGORY_HISTORY}  # every other gap: Why.NO_BASELINE

_SPECULATIVE_FIELDS = {"speculative_algorithm", "draft_model_path", "num_steps", "eagle_topk", "num_draft_tokens"}
# Server capacity that SGLang derives differently with and without speculation (the 48-request
# default cap, CUDA-graph batch sizes): a reference server legitimately differs from the
# speculative one there, so these are not compared when a stored reference is matched.
_SPECULATION_DERIVED_FIELDS = {"max_running_requests", "max_running_requests_per_rank", "decode_cuda_graph_bs",
                               "cuda_graph_bs", "cuda_graph_max_bs"}


def is_speculative_field(key: str) -> bool:
    """Fingerprint fields that describe the speculation itself (a reference runs without it)."""
    k = key.lower()
    return k in _SPECULATIVE_FIELDS or "specul" in k or k.startswith("spec_") or "adaptive" in k or "ngram" in k


def _reference_free(key: str) -> bool:
    """Fields a stored reference need not share with the speculative server it stands in for."""
    return is_speculative_field(key) or key in _SPECULATION_DERIVED_FIELDS


def git_commit() -> str:
    if shutil.which("git") is None:
        return ""
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return out.stdout.strip() if out.returncode == 0 else ""


def gpu_fingerprint() -> str:
    """GPU model, count and driver when nvidia-smi is there; 'none' otherwise."""
    if shutil.which("nvidia-smi") is None:
        return "none"
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    rows = [r.strip() for r in out.stdout.splitlines() if r.strip()]
    return f"{len(rows)}x {rows[0]}" if rows else "unknown"


def _by_launch(session: StoredSession, metric: str) -> SessionRuns:
    """A stored session's values of a metric, grouped by the server launch that ran each run
    (its ``launch_id``, in order of first appearance): a relaunched session is read as a
    session of L launches, as the gates treat this session's own, not as one flat sample."""
    order = list(dict.fromkeys(r.launch_id for r in session.runs))
    return SessionRuns([metric_values(replace(session, runs=[r for r in session.runs if r.launch_id == lid]), metric)
                        for lid in order])


class Histories:
    """Reads the baseline store for one session (fingerprints from the servers it started)."""

    def __init__(self, suite: Suite, options: RunOptions, pool: ServerPool, levels: SweepLevels, gpu: str) -> None:
        self._suite = suite
        self._options = options
        self._pool = pool
        self._levels = levels
        self.gpu = gpu
        self.store = BaselineStore(options.baseline_dir)
        self._checks: dict[tuple[str, tuple[str, ...]], SpreadEstimate | None] = {}

    def _session_fields(self, cfg: ServerConfig) -> dict[str, Any]:
        sweep, opts = self._suite.sweep, self._options
        return {
            "engine": cfg.engine,
            "gpu": self.gpu if cfg.engine == "sglang" else "n/a",
            "workload": self._pool.workload_for(cfg.name).digest(),
            "input_len": self._suite.workload.input_len,
            "output_len": self._suite.workload.output_len,
            "api": sweep.api,
            "requests_per_worker": sweep.requests_per_worker if not opts.requests_per_run else f"{opts.requests_per_run} per run",
            "warmup": sweep.warmup,
            # only when set (suites without a floor keep their fingerprints); --requests replaces it
            **({"min_requests_per_run": sweep.min_requests_per_run}
               if sweep.min_requests_per_run and not opts.requests_per_run else {}),
            # open loop only (suites without request_rate keep their fingerprints): the arrival process
            **({"load": f"poisson levels, burstiness {sweep.burstiness:g}, cap {sweep.rate_cap}"} if self._levels.rate else {}),
            # forced acceptance only (other suites keep their fingerprints): the engine measured alone
            **({"simulate_accept": {k: v for k, v in cfg.launch_env.items() if k.startswith("SGLANG_SIMULATE_ACC")}}
               if cfg.forced_acceptance else {}),
        }

    def fingerprint(self, name: str) -> Fingerprint:
        """What must match for a stored baseline to be compared: this run's setup and the server's
        effective arguments (read from the server, so an attached server's own values count)."""
        state = self._pool.state(name)
        if state.handle is None:
            raise ConfigUnavailable(Note.of(NoteKind.NO_SERVER, config=name), skip=False)
        cfg = self._pool.config(name)
        return Fingerprint({"engine": cfg.engine, **state.handle.effective.fingerprint_fields(), **self._session_fields(cfg)})

    def cell(self, name: str, level: int, metric: str) -> History:
        """Stored per-session samples of a cell's metric, or None with the gap. A damaged,
        unreadable or foreign file is an error ("not measured"), never a skip."""
        fp = self.fingerprint(name)
        try:
            hist = self.store.history(name, fp, self._levels.store_key(level))
            if hist is not None:
                samples: list[list[float]] = [s for s in (_by_launch(x, metric) for x in hist.sessions) if s]
                if samples:
                    return samples, "", None
            recorded = self.store.fingerprints(name)
        except BaselineError as exc:
            return self._gap(GapKind.UNREADABLE, name, level, detail=str(exc))
        gap = partial(self._gap, name=name, level=level, record_command=self.record_hint(name, level))
        if fp.key not in {f.key for f in recorded}:  # no file, a file without entries, other environments only
            if recorded:
                return gap(GapKind.OTHER_ENVIRONMENT, differing=tuple(fp.differences(recorded[0])))
            return gap(GapKind.NO_ENTRIES if self.store.path_for(name).exists() else GapKind.NO_FILE)
        if hist is None or not hist.sessions:
            return gap(GapKind.NO_CELL)
        category = GateLabel.parse(metric).category
        return gap(GapKind.NO_CATEGORY, category=category) if category else gap(GapKind.NO_FIGURES, metric=metric)

    def _gap(self, kind: GapKind, name: str, level: int, **more: Any) -> History:
        found = HistoryGap(kind, name, str(self.store.path_for(name)), self._levels.level(level), **more)
        return None, found, _WHY.get(kind, Why.NO_BASELINE)

    def record_hint(self, name: str, level: int) -> str:
        """A command that records exactly this cell, with this run's suite, directory and servers."""
        if self._options.rerun_hint is not None:
            return self._options.rerun_hint(name, [level])
        options = ["--suite", str(self._suite.path), "--baseline-dir", str(self.store.directory)]
        for n, url in self._options.server_urls.items():
            options += ["--server-url", f"{n}={url}" if n else url]
        cells = [(n, level) for n in self._suite.servers for level in self._levels.values]
        keyword = exact_k([(name, level)], cells, "r" if self._levels.rate else "c")
        return record_command_line([str(self._suite.path.parent)], options, keyword)

    def _expected_reference_fields(self, spec_name: str, ref: str) -> dict[str, Any]:
        """The environment a stored reference must come from: this run's (workload, engine version,
        GPU, the server's effective arguments), minus the speculation and the capacity SGLang
        derives from it (cap, CUDA-graph sizes)."""
        spec = self.fingerprint(spec_name).fields
        out = {k: v for k, v in spec.items() if not _reference_free(k)}
        out.update(self._session_fields(self._pool.config(ref)))
        out["workload"] = spec["workload"]  # same model, same vocabulary: the ids the reference gets
        return out

    def reference(self, spec_name: str, ref: str, level: int, metric: str) -> History:
        """Every stored session of the reference at this level whose fingerprint matches this run's
        environment (all non-speculative fields); None with the gap otherwise. Other
        environments are never used."""
        expected = Fingerprint(self._expected_reference_fields(spec_name, ref))
        try:
            doc = self.store.load_file(ref)
        except BaselineError as exc:
            return self._gap(GapKind.UNREADABLE, ref, level, detail=str(exc))
        if doc is None:
            return self._gap(GapKind.NO_FILE, ref, level)
        mismatches: list[list[FieldDifference]] = []
        for entry in entries_newest_first(doc):
            stored = Fingerprint({k: v for k, v in entry["fingerprint"].items() if not _reference_free(k)})
            diffs = expected.differences(stored)
            if diffs:
                mismatches.append(diffs)
                continue
            sessions = self._entry_sessions(entry, level, metric)
            if sessions:
                return sessions, "", None
            return self._gap(GapKind.NO_CELL, ref, level)
        if mismatches:
            return self._gap(GapKind.OTHER_ENVIRONMENT, ref, level, differing=tuple(mismatches[0]))
        return self._gap(GapKind.NO_ENTRIES, ref, level)

    def stored(self, name: str, level: int, metric: str) -> list[list[float]]:
        """A started configuration's stored sessions of a metric at a level ([] when none or unknown)."""
        if self._pool.state(name).handle is None:
            return []
        hist, _, _ = self.cell(name, level, metric)
        return hist or []

    def spread(self, metric: str, cells: list[tuple[str, int]]) -> SpreadEstimate | None:
        """The metric's between-session spread pooled over these cells whose stored history is
        known by now (configurations already started: their fingerprints are known)."""
        histories: dict[tuple[str, int], Sequence[Sequence[float]]] = {}
        for name, level in cells:
            if self._pool.state(name).handle is None:
                continue
            hist, _, _ = self.cell(name, level, metric)
            if hist:
                histories[(name, level)] = hist
        return session_spread(histories) if histories else None

    def check_spread(self, metric: str) -> SpreadEstimate | None:
        """The metric's between-session spread over every configuration of the suite, every level
        (``session_spread``), the second check of a prior (``prior.checking_history``): a started
        configuration's stored sessions of its fingerprint, another's newest entry from this engine
        and GPU (its fingerprint is read from its server once started). None without two stored
        sessions anywhere; an unreadable file counts as none here (its own cells say it)."""
        started = tuple(n for n in self._suite.servers if self._pool.state(n).handle is not None)
        key = (metric, started)
        if key not in self._checks:
            histories: dict[tuple[str, int], Sequence[Sequence[float]]] = {}
            for name in self._suite.servers:
                for level in self._levels.values:
                    hist = self.stored(name, level, metric) if name in started else self._newest(name, level, metric)
                    if hist:
                        histories[(name, level)] = hist
            self._checks[key] = session_spread(histories) if histories else None
        return self._checks[key]

    def _newest(self, name: str, level: int, metric: str) -> list[list[float]]:
        """A configuration not started yet: its newest stored entry's sessions of a metric at a level
        from this session's engine and GPU ([] when none)."""
        cfg = self._pool.config(name)
        try:
            doc = self.store.load_file(name)
        except BaselineError:
            return []
        gpu = self.gpu if cfg.engine == "sglang" else "n/a"
        for entry in entries_newest_first(doc) if doc is not None else []:
            if entry["fingerprint"].get("engine") != cfg.engine or entry["fingerprint"].get("gpu") != gpu:
                continue
            return self._entry_sessions(entry, level, metric)
        return []

    def _entry_sessions(self, entry: dict[str, Any], level: int, metric: str) -> list[list[float]]:
        """One stored entry's sessions of a metric at a level, per launch ([] when it has none)."""
        cell = entry["cells"].get(cell_key(self._levels.store_key(level)))
        sessions = [_by_launch(stored_session_from_json(s), metric) for s in cell["sessions"]] if cell else []
        return [s for s in sessions if s]
