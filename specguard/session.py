"""One pytest session's state: servers, measured cells, baselines and gate results.

The plugin's hooks and fixtures are thin; this object does the work so it can be read (and
tested) without pytest's machinery. Data flows config -> server -> load -> metrics -> decision.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import time
import uuid
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable

from specguard import __version__
from specguard.decide.baselines import BaselineError, BaselineStore, Fingerprint, RunSample, Session, now_iso
from specguard.config import ServerConfig, Suite
from specguard.engines import ArgCheck, Engine, get_engine
from specguard.decide.gates import SKIP, GateResult, history_gate, speculation_gate
from specguard.server import ServerHandle, ServerStartError, attach, launch, stop, wait_ready
from specguard.measure.sweep import CellMeasurement, Driver, Progress, measure_cell, plain_driver
from specguard.workload import Workload, build_workload


@dataclass
class RunOptions:
    """Command-line choices that are not in the suite file."""

    server_urls: dict[str | None, str] = field(default_factory=dict)  # None = one URL for all
    server_args: dict[str, list[str]] = field(default_factory=dict)
    baseline_dir: Path = Path("baselines")
    update_baselines: bool = False
    require_baselines: bool = False
    api_key: str | None = None
    log_dir: Path = Path(".specguard/logs")
    max_failed_requests: int = 0
    requests_per_run: int | None = None


class ConfigUnavailable(Exception):
    """This configuration cannot be measured here (skip) or failed to start (error)."""

    def __init__(self, message: str, skip: bool) -> None:
        super().__init__(message)
        self.skip = skip


@dataclass
class ServerState:
    handle: ServerHandle | None = None
    failure: ConfigUnavailable | None = None
    checks: list[ArgCheck] = field(default_factory=list)
    launch_id: str = ""
    stopped: bool = False
    baselines_written: bool = False


def _git_commit() -> str:
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


class SpecguardSession:
    def __init__(self, suite: Suite, options: RunOptions) -> None:
        self.suite = suite
        self.options = options
        self.workload: Workload = build_workload(suite.workload)
        self.store = BaselineStore(options.baseline_dir)
        self.servers: dict[str, ServerState] = {}
        self.cells: dict[tuple[str, int], CellMeasurement] = {}
        self.results: list[GateResult] = []
        self.session_id = uuid.uuid4().hex[:12]
        self.alpha_cell = suite.tolerances.family_alpha  # set from the number of gate tests
        self.baseline_updates: list[str] = []
        self.holm_extra: list[GateResult] = []
        self.git_commit = _git_commit()
        self.gpu = gpu_fingerprint()
        self.progress: Progress | None = None
        self.started = time.monotonic()

    # -- servers ------------------------------------------------------------------------------
    def server_config(self, name: str) -> ServerConfig:
        cfg = self.suite.servers[name]
        extra = self.options.server_args.get(name)
        return replace(cfg, args=[*cfg.args, *extra]) if extra else cfg

    def server(self, name: str) -> ServerHandle:
        """The running server of a configuration, started (or attached) on first use."""
        state = self.servers.setdefault(name, ServerState())
        if state.failure:
            raise state.failure
        if state.handle is None or state.stopped:
            state.stopped = False
            try:
                state.handle, state.checks = self._start(name)
                state.launch_id = uuid.uuid4().hex[:8]
            except ConfigUnavailable as exc:
                state.failure = exc
                raise
        blocking = [c.message for c in state.checks if c.blocking]
        if blocking:
            raise ConfigUnavailable(f"configuration {name!r} does not run as configured: " + "; ".join(blocking), skip=False)
        return state.handle

    def _start(self, name: str) -> tuple[ServerHandle, list[ArgCheck]]:
        cfg = self.server_config(name)
        engine: Engine = get_engine(cfg.engine)
        url = self.options.server_urls.get(name) or self.options.server_urls.get(None)
        try:
            if url:
                handle = attach(name, url, engine, api_key=self.options.api_key, cfg=cfg)
                reason = engine.matches(cfg, handle.effective)
                if reason and name not in self.options.server_urls:
                    raise ConfigUnavailable(reason, skip=True)
            else:
                handle = launch(cfg, engine, log_dir=self.options.log_dir, api_key=self.options.api_key)
        except ServerStartError as exc:
            raise ConfigUnavailable(str(exc), skip=False) from None
        checks = engine.check_args(cfg, handle.effective, max(self.suite.sweep.concurrency))
        return handle, checks

    def stop_server(self, name: str) -> None:
        """Stop a configuration's server (if we launched it) and, when updating, store its sweep."""
        state = self.servers.get(name)
        if state is None:
            return
        if state.handle is not None and not state.handle.attached:
            stop(state.handle)
        state.stopped = True
        self._write_baselines_if_updating(name)

    def stop_all(self) -> None:
        for name in list(self.servers):
            self.stop_server(name)

    def warnings_for(self, name: str) -> list[str]:
        state = self.servers.get(name)
        return [c.message for c in state.checks if not c.blocking] if state else []

    # -- measurement --------------------------------------------------------------------------
    def measure(self, name: str, concurrency: int, driver: Driver = plain_driver) -> CellMeasurement:
        """The cell's measurement, taken once and shared by every test of the cell."""
        key = (name, concurrency)
        if key not in self.cells:
            elapsed = time.monotonic() - self.started
            if elapsed > self.suite.sweep.session_timeout_s:
                raise ConfigUnavailable(f"session deadline of {self.suite.sweep.session_timeout_s:g}s reached "
                                        f"({elapsed:.0f}s elapsed); {name} c{concurrency} not measured", skip=False)
            handle = self.server(name)
            cfg = self.server_config(name)
            sweep = self.suite.sweep
            if self.options.requests_per_run:
                sweep = replace(sweep, requests_per_worker=max(1, self.options.requests_per_run // concurrency))
            cell = measure_cell(
                handle, self.workload, sweep, concurrency, api=handle.engine.choose_api(sweep.api),
                extra_body=handle.engine.request_extra_body(cfg), max_failed=self.options.max_failed_requests,
                driver=driver, progress=self.progress,
            )
            self.cells[key] = cell
            if cell.error:
                self._check_still_serving(name, handle)
        return self.cells[key]

    def _check_still_serving(self, name: str, handle: ServerHandle) -> None:
        """After a failed cell: if the server is gone, its remaining cells fail at once."""
        reason = None
        if not handle.alive():
            reason = f"server {name!r} exited (code {handle.process.returncode}) during the sweep; log tail:\n{handle.log_tail()}"
        else:
            try:
                wait_ready(handle, timeout_s=5.0)
            except ServerStartError:
                reason = f"server {name!r} stopped answering {handle.engine.readiness_path} during the sweep"
        if reason:
            self.servers[name].failure = ConfigUnavailable(reason, skip=False)

    # -- baselines ----------------------------------------------------------------------------
    def fingerprint(self, name: str) -> Fingerprint:
        state = self.servers[name]
        assert state.handle is not None
        cfg = self.server_config(name)
        sweep = self.suite.sweep
        return Fingerprint({
            "engine": cfg.engine,
            **state.handle.effective.fingerprint_fields(),
            "gpu": self.gpu if cfg.engine == "sglang" else "n/a",
            "workload": self.workload.digest(),
            "input_len": self.suite.workload.input_len,
            "output_len": self.suite.workload.output_len,
            "api": sweep.api,
            "requests_per_worker": sweep.requests_per_worker if not self.options.requests_per_run else f"{self.options.requests_per_run} per run",
            "warmup": sweep.warmup,
        })

    def baseline_history(self, name: str, concurrency: int, metric: str) -> tuple[list[list[float]] | None, str]:
        """Stored per-session samples of a cell's metric, or None with the reason."""
        fp = self.fingerprint(name)
        try:
            hist = self.store.history(name, fp, concurrency)
        except BaselineError as exc:
            return None, str(exc)
        if hist is not None:
            samples = [getattr(s, metric) for s in hist.sessions]
            samples = [s for s in samples if s]
            if samples:
                return samples, ""
        others = self.store.other_fingerprints(name)
        create = (f"create one with: pytest perf_tests --update-baselines -k \"{name} and c{concurrency}\" "
                  f"(baseline dir {self.store.directory})")
        if others:
            diffs = fp.differences(others[0])
            return None, (f"baseline for {name} c{concurrency} was recorded with another environment; "
                          f"differing fields: {'; '.join(diffs)}. Not compared. To accept this environment, {create}")
        return None, f"no baseline for {name} c{concurrency} in {self.store.path_for(name)}; {create}"

    def _write_baselines_if_updating(self, name: str) -> None:
        """Write only after a complete, error-free sweep of the configuration; say what happened."""
        if not self.options.update_baselines:
            return
        state = self.servers[name]
        cells = {c: m for (n, c), m in self.cells.items() if n == name}
        if not cells or state.handle is None or state.baselines_written:
            return
        state.baselines_written = True
        bad = [f"c{c}: {m.error.splitlines()[0]}" for c, m in sorted(cells.items()) if m.error]
        if bad:
            self.baseline_updates.append(f"{name}: NOT written, the sweep had errors ({'; '.join(bad)})")
            return
        provenance = {
            "suite": str(self.suite.path), "suite_version": __version__, "git_commit": self.git_commit,
            "server_command": state.handle.command, "server_args": state.handle.effective.raw,
        }
        sessions = {
            c: Session(session_id=self.session_id, date=now_iso(), provenance=provenance,
                       runs=[RunSample.from_metrics(r, i, state.launch_id) for i, r in enumerate(m.runs)])
            for c, m in cells.items()
        }
        path = self.store.record_sessions(name, self.fingerprint(name), sessions,
                                          keep=self.suite.tolerances.history_sessions, replace_damaged=True)
        self.baseline_updates.append(f"{name}: wrote {len(sessions)} cell(s) to {path}")

    # -- gates --------------------------------------------------------------------------------
    def throughput_result(self, name: str, concurrency: int) -> GateResult:
        return self._history_result("throughput", "throughputs", name, concurrency,
                                    self.suite.tolerances.throughput, self.suite.tolerances.prior_between_sd)

    def accept_length_result(self, name: str, concurrency: int) -> GateResult:
        cell = self.cells[(name, concurrency)]
        if not cell.accept_lengths:
            return self._record(GateResult("accept_length", name, concurrency, "error",
                                           f"accept_length {name} c{concurrency}: no run has an accept length: the requests "
                                           f"carried no spec_verify_ct and the engine's run-level source (if any) saw no drafts"))
        return self._history_result("accept_length", "accept_lengths", name, concurrency,
                                    self.suite.tolerances.accept_length, self.suite.tolerances.prior_between_sd_accept)

    def _history_result(self, gate: str, metric: str, name: str, concurrency: int, tolerance: float,
                        prior_sd: float) -> GateResult:
        cell = self.cells[(name, concurrency)]
        current = getattr(cell, metric)
        history, reason = self.baseline_history(name, concurrency, metric)
        if history is None:
            return self._record(GateResult(gate, name, concurrency, SKIP, reason, current=_mean(current)))
        return self._record(history_gate(gate, name, concurrency, current, history, tolerance=tolerance,
                                         prior_between_sd=prior_sd, alpha_cell=self.alpha_cell,
                                         rule=self.suite.tolerances.fail_rule))

    def speculation_result(self, name: str, concurrency: int, must_win_up_to: int | None) -> GateResult:
        cfg = self.suite.servers[name]
        ref = cfg.reference
        assert ref is not None
        spec = self.cells[(name, concurrency)].throughputs
        ref_cell = self.cells.get((ref, concurrency))
        if ref_cell is not None and not ref_cell.error:
            reference, ref_name = ref_cell.throughputs, f"{ref} (this session)"
        else:
            hist, reason = self._reference_history(ref, concurrency)
            if hist is None:
                return self._record(GateResult("speculation", name, concurrency, SKIP,
                                               f"speculation {name} c{concurrency}: reference {ref!r} was not measured in this session "
                                               f"and has no usable stored baseline: {reason}"))
            reference, ref_name = hist, f"{ref} (stored baseline)"
        limit = must_win_up_to if must_win_up_to is not None else cfg.speculation_must_win_up_to
        must_win = limit is not None and concurrency <= limit
        return self._record(speculation_gate(name, concurrency, spec, reference, ref_name, must_win=must_win,
                                             tol=self.suite.tolerances, alpha_cell=self.alpha_cell))

    def _reference_history(self, ref: str, concurrency: int) -> tuple[list[float] | None, str]:
        """The reference's newest stored session at this concurrency (any fingerprint of the
        reference's own configuration is shown, never silently mixed)."""
        try:
            doc = self.store.load_file(ref)
        except BaselineError as exc:
            return None, str(exc)
        if doc is None:
            return None, f"no file {self.store.path_for(ref)}"
        entries = sorted(doc["entries"].values(), key=lambda e: e.get("updated", ""), reverse=True)
        for entry in entries:
            cell = entry["cells"].get(f"c{concurrency}")
            if cell and cell["sessions"]:
                return [r["output_throughput"] for r in cell["sessions"][-1]["runs"]], ""
        return None, f"no c{concurrency} cell in {self.store.path_for(ref)}"

    def _record(self, result: GateResult) -> GateResult:
        warnings = self.warnings_for(result.config)
        cell = self.cells.get((result.config, result.concurrency))
        if cell:
            warnings = warnings + cell.warnings
        if warnings:
            result.message += "\n  notes: " + "\n  notes: ".join(dict.fromkeys(warnings))
        self.results.append(result)
        return result


def _mean(xs: list[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


def parse_server_urls(values: list[str]) -> dict[str | None, str]:
    out: dict[str | None, str] = {}
    for v in values:
        name, sep, url = v.partition("=")
        if sep and not name.startswith(("http://", "https://")):
            out[name] = url
        else:
            out[None] = v
    return out


def parse_server_args(values: list[str]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for v in values:
        name, sep, args = v.partition("=")
        if not sep or not name:
            raise ValueError(f"--server-args takes NAME=\"ARGS\", got {v!r}")
        out.setdefault(name, []).extend(shlex.split(args))
    return out


def api_key_from(option: str | None) -> str | None:
    return option or os.environ.get("SPECGUARD_API_KEY") or None


ProgressFactory = Callable[[], Progress]
