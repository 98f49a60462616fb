"""One pytest session's state: servers, measured cells, baselines and gate results.

The plugin's hooks and fixtures are thin; this object does the work so it can be read (and
tested) without pytest's machinery. Data flows config -> server -> load -> metrics -> decision.

The plugin talks to it in this order: `plan()` once the selected tests are known (family size,
per-cell alpha, reference cells), `measure()` and the `*_result()` gates per test, `stop_server()`
when a configuration's tests are done, then at the end `stop_all()`, `write_baselines()` (its own
step: every selected cell or nothing) and `final_failures()`. Nothing in here is assigned from
outside. Under the default gate design (relaunch on suspicion) the first test of a launched
configuration measures all its selected cells and decides them in stages (`_sweep_configuration`).
"""

from __future__ import annotations

import fcntl
import os
import shlex
import shutil
import subprocess
import time
import uuid
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import IO, Any, Callable

from specguard import __version__
from specguard.config import ServerConfig, Suite
from specguard.decide.baselines import (BaselineError, BaselineStore, Fingerprint, RunSample, Session, StagedWrite,
                                        _session_from_json, cell_key, now_iso)
from specguard.decide.gates import (ERROR, SKIP, GateResult, design_of, family_alphas, final_failures, final_results,
                                    launch_history_gate, must_win_gate, relaunch_plan, session_spread)
from specguard.engines import ArgCheck, Engine, get_engine
from specguard.measure.metrics import parse_slo, workload_categories
from specguard.measure.sweep import CellMeasurement, Driver, Progress, measure_cell, plain_driver
from specguard.server import ServerHandle, ServerStartError, attach, launch, stop, wait_ready
from specguard.workload import VocabBound, Workload, WorkloadError, build_workload, fit_to_vocab, resolve_vocab_bound

GATES = ("throughput", "accept_length", "speculation")
HISTORY_GATES = ("throughput", "accept_length")  # gated against the stored baseline history
MODE_LAUNCHED, MODE_ATTACHED = "launched", "attached"
CATEGORY_TEST_KINDS = ("categories", "jsonl", "sharegpt")  # workloads whose categories get their own tests


def gate_label(gate: str, category: str = "") -> str:
    """A gate as decisions and reports name it: "accept_length", or "accept_length[code]" for the
    accept-length test of one prompt category (test id `test_accept_length[eagle3-c16-code]`)."""
    return f"{gate}[{category}]" if category else gate


def split_gate(label: str) -> tuple[str, str]:
    """(gate, category) of a gate label; category "" for a whole-run gate."""
    gate, _, rest = label.partition("[")
    return gate, rest[:-1] if rest.endswith("]") else rest


def is_history_gate(label: str) -> bool:
    """Throughput and accept-length gates (per category too): a run recording baselines does not gate them."""
    return split_gate(label)[0] in HISTORY_GATES


def metric_values(measured: Any, metric: str) -> list[float]:
    """A metric's per-run values from a CellMeasurement or a stored baseline Session:
    "throughputs", "accept_lengths", or "accept_lengths[code]" (one prompt category's)."""
    category = split_gate(metric)[1]
    if metric == "request_goodputs":  # [sweep] slo: good requests/s per run (None: no SLO given)
        return [float(r.request_goodput) for r in measured.runs if getattr(r, "request_goodput", None) is not None]
    if not category:
        return list(getattr(measured, metric))
    out = []
    for run in measured.runs:
        cat = (run.categories or {}).get(category)
        value = cat.get("accept_length") if isinstance(cat, dict) else getattr(cat, "accept_length", None)
        if isinstance(value, (int, float)) and value > 0:
            out.append(float(value))
    return out


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
    # Attach mode: the suite's launch values that differ from the server's are errors, not notes.
    strict_server_args: bool = False
    # pytest-xdist: a file every worker of the run can lock; while it is set, a launched server
    # holds it from launch to stop, so launches on one machine are serialised across workers.
    launch_lock: Path | None = None
    # pytest-xdist: a directory unique to the run; each configuration is claimed there by the
    # first worker that starts it, and a second worker refuses (one line) instead of launching it
    # again (a guard: the plugin's scheduler keeps a configuration and its reference on one worker).
    claim_dir: Path | None = None
    worker_id: str = ""
    # Builds the "record it with" command for (configuration, levels); the plugin's version
    # carries the run's --suite, --baseline-dir, --server-url and an exact -k. None: built here.
    rerun_hint: Callable[[str, list[int]], str] | None = None
    # --speculation-must-win-up-to: overrides every configuration's speculation_must_win_up_to.
    speculation_must_win_up_to: int | None = None


class ConfigUnavailable(Exception):
    """This configuration cannot be measured here (skip) or failed to start (error).

    The first line (`line`) says what happened and what to do; context (command, exit code, log
    tail) follows after a newline and is also kept alone in `detail`.
    """

    def __init__(self, message: str, skip: bool, detail: str = "") -> None:
        super().__init__(message + ("\n" + detail if detail else ""))
        self.skip = skip
        self.line = message
        self.detail = detail


@dataclass(frozen=True)
class PlannedTest:
    """One selected specguard test, as the plugin sees it after -k/-m deselection."""

    config: str
    concurrency: int
    gate: str  # one of GATES
    category: str = ""  # accept_length only: the test of one prompt category ("" = the whole run)


@dataclass
class SessionPlan:
    """What the selection implies: the family of gate tests and the reference cells it needs."""

    family_size: int
    alpha_cell: float  # the alpha of a test of weight 1 (a throughput test)
    selected_cells: list[tuple[str, int]]
    reference_cells: dict[tuple[str, int], list[str]]  # (reference, c) -> speculative configs needing it
    selected_tests: list[PlannedTest] = field(default_factory=list)
    planned: bool = True  # False: measure() ran before plan(); the family is what was seen
    # (gate, config, c, category) -> the test's share of the family alpha (gates.family_alphas)
    alphas: dict[tuple[str, str, int, str], float] = field(default_factory=dict)

    def alpha_for(self, gate: str, config: str, concurrency: int, category: str = "") -> float:
        """A test's alpha (before the stage rule); a test outside the plan gets the weight-1 alpha."""
        return self.alphas.get((gate, config, concurrency, category), self.alpha_cell)


@dataclass(frozen=True)
class ServerDifference:
    """Attach mode: a suite launch value the attached server does not run (one line each)."""

    field: str
    suite: Any
    server: Any
    message: str


@dataclass
class ServerState:
    handle: ServerHandle | None = None
    failure: ConfigUnavailable | None = None
    checks: list[ArgCheck] = field(default_factory=list)
    differences: list[ServerDifference] = field(default_factory=list)
    mode: str = ""  # "launched" | "attached" | "" (never started)
    launch_id: str = ""
    stopped: bool = False


@dataclass
class BaselineOutcome:
    """What `write_baselines` did: every selected cell written, or nothing and why."""

    requested: bool
    written: bool = False
    paths: list[str] = field(default_factory=list)
    reason: str | None = None  # why nothing was written (one line)
    lines: list[str] = field(default_factory=list)  # for the summary


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
    def from_json(cls, d: dict[str, Any]) -> "BaselineStage":
        writes = [StagedWrite(w["config"], Fingerprint(w["fingerprint"]),
                              {(c if c.startswith("r") else int(c)): _session_from_json(s) for c, s in w["cells"].items()})
                  for w in d["writes"]]
        return cls(complete=bool(d["complete"]), problems=list(d["problems"]), writes=writes, notes=list(d.get("notes", [])),
                   planned=[(str(n), int(c)) for n, c in d.get("planned", [])],
                   covered=[(str(n), int(c)) for n, c in d.get("covered", [])])


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


# Suite launch values compared with an attached server: (label, ServerConfig attr, EffectiveArgs attr).
_ATTACH_FIELDS = (("model_path", "model_path", "model_path"),
                  ("draft_model_path", "draft_model_path", "draft_model_path"),
                  ("speculative_algorithm", "speculative_algorithm", "speculative_algorithm"),
                  ("num_steps", "num_steps", "num_steps"),
                  ("eagle_topk", "eagle_topk", "eagle_topk"),
                  ("num_draft_tokens", "num_draft_tokens", "num_draft_tokens"),
                  ("max_running_requests", "max_running_requests", "max_running_requests"),
                  ("tp_size", "tp_size", "tp_size"))


def attach_differences(cfg: ServerConfig, eff: Any) -> list[ServerDifference]:
    """The suite's launch values that the attached server does not run (a launch that did not happen)."""
    out = []
    for label, cattr, eattr in _ATTACH_FIELDS:
        want, have = getattr(cfg, cattr, None), getattr(eff, eattr, None)
        if want in (None, "") or have in (None, ""):
            continue
        if isinstance(want, str) and isinstance(have, str) and want.upper() == have.upper() and label == "speculative_algorithm":
            continue
        if want != have:
            out.append(ServerDifference(label, want, have, f"{label}: suite file says {want!r}, server runs {have!r}"))
    return out


class SpecguardSession:
    """The state of one pytest session; the plugin calls its methods, never sets its attributes."""

    def __init__(self, suite: Suite, options: RunOptions) -> None:
        self.suite = suite
        self.options = options
        self.workload: Workload = build_workload(suite.workload)
        self.store = BaselineStore(options.baseline_dir)
        self.servers: dict[str, ServerState] = {}
        self.cells: dict[tuple[str, int], CellMeasurement] = {}
        self.results: list[GateResult] = []
        self.session_id = uuid.uuid4().hex[:12]
        self.reference_roles: dict[tuple[str, int], list[str]] = {}  # cells measured only as a reference
        self.baseline_updates: list[str] = []  # summary lines, filled by write_baselines()
        self.baseline_outcome: BaselineOutcome | None = None
        self.git_commit = _git_commit()
        self.gpu = gpu_fingerprint()
        self.started = time.monotonic()
        self._progress: Progress | None = None
        self._plan: SessionPlan | None = None
        self._seen_tests: set[PlannedTest] = set()
        self._lock_file: IO[str] | None = None
        self._lock_holders: set[str] = set()
        self.design = design_of(suite)
        self.workloads: dict[str, Workload] = {}  # per configuration, ids fitted to its model's vocabulary
        self.vocab_bounds: dict[str, VocabBound] = {}
        self.launch_cells: dict[tuple[str, int], list[tuple[str, CellMeasurement]]] = {}  # (launch id, runs) per launch
        self.stage1_results: list[GateResult] = []
        self.stage2_results: list[GateResult] = []
        self.relaunches: dict[str, list[str]] = {}  # configuration -> why it was launched again
        self._final: dict[tuple[str, str, int], GateResult] = {}  # (gate, config, c) -> verdict decided at sweep
        self._attempted: set[tuple[str, int]] = set()  # cells this process tried to measure

    # -- plan ---------------------------------------------------------------------------------
    def plan(self, selected: list[PlannedTest]) -> SessionPlan:
        """Fix the family (every selected gate test) and the reference cells the selection needs.

        Called once, after -k/-m deselection, with every selected specguard test: the per-cell
        alpha is family_alpha / (number of gate tests), and a selected speculation test needs its
        reference's cell at the same concurrency even when the reference's own tests are deselected.
        """
        tests = list(dict.fromkeys(selected))
        for t in tests:
            if t.config not in self.suite.servers:
                raise ValueError(f"plan: unknown configuration {t.config!r}")
            if t.gate not in GATES:
                raise ValueError(f"plan: unknown gate {t.gate!r}; one of {GATES}")
            if t.category and t.gate != "accept_length":
                raise ValueError(f"plan: only accept_length has per-category tests, not {t.gate!r}")
        self._plan = self._make_plan(tests, planned=True)
        return self._plan

    def _make_plan(self, tests: list[PlannedTest], planned: bool) -> SessionPlan:
        refs: dict[tuple[str, int], list[str]] = {}
        for t in tests:
            ref = self.suite.servers[t.config].reference
            if t.gate == "speculation" and ref:
                specs = refs.setdefault((ref, t.concurrency), [])
                if t.config not in specs:
                    specs.append(t.config)
        family = len(tests)
        fam_alpha = self.suite.tolerances.family_alpha
        shares = family_alphas([(t.gate, self._can_fail(t)) for t in tests], fam_alpha, self.design)
        alphas = {(t.gate, t.config, t.concurrency, t.category): a for t, a in zip(tests, shares)}
        weight1 = next((a for t, a in zip(tests, shares) if t.gate == "throughput"), None)
        return SessionPlan(family_size=family, alpha_cell=weight1 if weight1 is not None else fam_alpha / max(family, 1),
                           selected_cells=list(dict.fromkeys((t.config, t.concurrency) for t in tests)),
                           reference_cells=refs, selected_tests=tests, planned=planned, alphas=alphas)

    def must_win_limit(self, name: str, marker_limit: int | None = None) -> int | None:
        """The highest concurrency where ``name``'s speculation must win: the test's own marker,
        else --speculation-must-win-up-to, else the suite's speculation_must_win_up_to."""
        cfg = self.suite.servers[name]
        return next((x for x in (marker_limit, self.options.speculation_must_win_up_to,
                                 cfg.speculation_must_win_up_to) if x is not None), None)

    def _can_fail(self, t: PlannedTest) -> bool:
        """A speculation test outside its must-win range only reports (weight 0 in the family)."""
        if t.gate != "speculation":
            return True
        limit = self.must_win_limit(t.config)
        return limit is not None and t.concurrency <= limit

    @property
    def plan_info(self) -> SessionPlan:
        """The plan; without plan() it is built from the gates computed so far (a fallback for tools)."""
        if self._plan is not None:
            return self._plan
        return self._make_plan(sorted(self._seen_tests, key=lambda t: (t.config, t.concurrency, t.gate, t.category)),
                               planned=False)

    @property
    def alpha_cell(self) -> float:
        return self.plan_info.alpha_cell

    def set_progress(self, progress: Progress | None) -> None:
        """Where each run's progress text goes (the plugin's live line), or nowhere."""
        self._progress = progress

    # -- servers ------------------------------------------------------------------------------
    @property
    def attach_mode(self) -> bool:
        return bool(self.options.server_urls)

    @property
    def strict_server_args(self) -> bool:
        """Attach mode holds the server to the suite's launch values (flag or suite key)."""
        attach_cfg = getattr(self.suite, "attach", None)
        return self.options.strict_server_args or bool(getattr(attach_cfg, "strict_server_args", False))

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
            try:
                self._claim(name)
                state.handle, state.mode = self._start(name)
                state.stopped = False
                state.launch_id = uuid.uuid4().hex[:8]
                state.checks, state.differences = self._checks(name, state.handle, state.mode)
                self._fit_workload(name, state)
            except ConfigUnavailable as exc:
                state.failure = exc
                self._release_launch_lock(name)
                raise
        blocking = [c.message for c in state.checks if c.blocking]
        if blocking:
            raise ConfigUnavailable(f"configuration {name!r} does not run as configured: " + "; ".join(blocking), skip=False)
        return state.handle

    def _start(self, name: str) -> tuple[ServerHandle, str]:
        cfg = self.server_config(name)
        try:
            engine: Engine = get_engine(cfg.engine)
        except ValueError as exc:
            raise ConfigUnavailable(str(exc), skip=False) from None
        named = self.options.server_urls.get(name)
        url = named or self.options.server_urls.get(None)
        if self.attach_mode and not url:
            given = ", ".join(n for n in self.options.server_urls if n) or "other configurations"
            raise ConfigUnavailable(f"{name}: not attached: --server-url names a server for {given} only; "
                                    f"add --server-url {name}=URL to measure it", skip=True)
        try:
            if url:
                handle = attach(name, url, engine, api_key=self.options.api_key, cfg=cfg)
                reason = engine.matches(cfg, handle.effective)
                if reason:
                    if not named:
                        raise ConfigUnavailable(reason, skip=True)
                    raise ConfigUnavailable(f"--server-url {name}=...: {reason}", skip=False)
                return handle, MODE_ATTACHED
            self._acquire_launch_lock(name)
            return launch(cfg, engine, log_dir=self.options.log_dir, api_key=self.options.api_key), MODE_LAUNCHED
        except ServerStartError as exc:
            first, _, rest = str(exc).partition("\n")
            raise ConfigUnavailable(first, skip=False, detail=rest) from None

    def _fit_workload(self, name: str, state: ServerState) -> None:
        """Bound the workload's ids by the served model's vocabulary (an id beyond it crashes
        SGLang 0.5.23): its config.json when launched from a local directory, else what the server
        tells (workload.resolve_vocab_bound)."""
        handle = state.handle
        if handle is None:
            return
        cfg = self.server_config(name)
        probe = handle.engine.name in ("sglang", "emulator")
        with handle.control_client() as client:
            bound = resolve_vocab_bound(self.suite.workload,
                                        model_path=cfg.model_path if state.mode == MODE_LAUNCHED else None,
                                        client=client, server_info=handle.effective.raw or None, probe_server=probe)
        self.vocab_bounds[name] = bound
        try:
            self.workloads[name] = fit_to_vocab(self.workload, bound.vocab_size)
        except WorkloadError as exc:
            self.stop_server(name)
            raise ConfigUnavailable(f"{name}: {exc} (vocabulary from {bound.source})", skip=False) from None

    def workload_for(self, name: str) -> Workload:
        """The workload sent to a configuration (the suite's, fitted to its model's vocabulary)."""
        return self.workloads.get(name, self.workload)

    def vocab_notes(self) -> list[str]:
        """One line per distinct note on where the id bound came from (for the summary, once)."""
        return list(dict.fromkeys(b.note for b in self.vocab_bounds.values() if b.note))

    def _checks(self, name: str, handle: ServerHandle, mode: str) -> tuple[list[ArgCheck], list[ServerDifference]]:
        """Launch mode: the adapter's silent-rewrite checks as they are (blocking stays blocking).

        Attach mode: the suite's launch values describe a launch that did not happen, so they are
        compared with the server as differences, and the adapter checks only what the server's own
        command line asked for; all of it is reported, and blocking only with strict_server_args.
        """
        cfg = self.server_config(name)
        engine = handle.engine
        top = self.suite.sweep.rate_cap if self.rate_mode else max(self.suite.sweep.concurrency)
        if mode != MODE_ATTACHED:
            return engine.check_args(cfg, handle.effective, top), []
        bare = replace(cfg, num_steps=None, eagle_topk=None, num_draft_tokens=None, max_running_requests=None)
        checks = engine.check_args(bare, handle.effective, top)
        diffs = attach_differences(cfg, handle.effective)
        strict = self.strict_server_args
        checks = [replace(c, blocking=strict and c.blocking) for c in checks]
        if strict:
            checks += [ArgCheck(d.message + " (--strict-server-args)", True) for d in diffs]
        return checks, diffs

    def stop_server(self, name: str) -> None:
        """Stop a configuration's server if this session launched it (attached ones keep running)."""
        state = self.servers.get(name)
        if state is None:
            return
        if state.handle is not None and not state.handle.attached:
            stop(state.handle)
        state.stopped = True
        self._release_launch_lock(name)

    def stop_all(self) -> None:
        """Stop every server this session launched. Writes nothing (see write_baselines)."""
        for name in list(self.servers):
            self.stop_server(name)

    def warnings_for(self, name: str) -> list[str]:
        """Non-blocking notes about a configuration's server (rewrites, attach differences)."""
        state = self.servers.get(name)
        if state is None:
            return []
        notes = [c.message for c in state.checks if not c.blocking]
        if not self.strict_server_args:
            notes += [d.message for d in state.differences]
        return notes

    # -- xdist: one launch per configuration, one launched server at a time ---------------------
    def _claim(self, name: str) -> None:
        """Under pytest-xdist, refuse a configuration another worker of this run already started."""
        d = self.options.claim_dir
        if d is None:
            return
        d.mkdir(parents=True, exist_ok=True)
        path = d / f"{name}.claim"
        me = self.options.worker_id or str(os.getpid())
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            owner = path.read_text(encoding="utf-8").strip() or "another worker"
            if owner == me:
                return
            raise ConfigUnavailable(
                f"configuration {name!r} is already measured by pytest-xdist worker {owner}: each configuration (with "
                f"its reference) must stay on one worker; run with -n N and specguard's own scheduling (no --dist option)",
                skip=False) from None
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(me)

    def _acquire_launch_lock(self, name: str) -> None:
        path = self.options.launch_lock
        if path is None or name in self._lock_holders:
            return
        if self._lock_file is None:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._lock_file = open(path, "a", encoding="utf-8")
            fcntl.flock(self._lock_file, fcntl.LOCK_EX)  # waits while another worker's server is up
        self._lock_holders.add(name)

    def _release_launch_lock(self, name: str) -> None:
        self._lock_holders.discard(name)
        if self._lock_file is not None and not self._lock_holders:
            fcntl.flock(self._lock_file, fcntl.LOCK_UN)
            self._lock_file.close()
            self._lock_file = None

    # -- measurement --------------------------------------------------------------------------
    def measure(self, name: str, concurrency: int, driver: Driver = plain_driver) -> CellMeasurement:
        """The cell's measurement (every launch of it), taken once and shared by its tests.

        Before a speculative configuration's first cell, the reference cells its selected
        speculation tests need are measured (then their server stopped), so only one server runs
        at a time and `-k eagle3` still compares with a reference measured here and now.
        With a planned session whose design launches more than once or relaunches on suspicion
        (launch mode), the first test of a configuration measures all its selected cells, decides
        stage 1, relaunches when `relaunch_plan` says so and decides stage 2: a verdict is only
        final once its configuration's stages are done.
        """
        key = (name, concurrency)
        if key not in self.cells:
            self._measure_references_for(name)
            if self._staged_design(name):
                self._sweep_configuration(name, concurrency, driver)
            else:
                self._measure_launch(name, concurrency, driver)
        return self.cells[key]

    def design_notes(self) -> list[str]:
        """One line each where the suite's gate design could not be followed (for the summary)."""
        notes = []
        if self.attach_mode and self.design.sequential:
            notes.append("attach mode: relaunch not possible, stage-1 verdicts at the whole cell alpha stand")
        if self.attach_mode and self.design.launches > 1:
            notes.append(f"attach mode: sweep.launches = {self.design.launches} not possible, one launch measured")
        return notes

    def _staged_design(self, name: str) -> bool:
        """Launch mode with a plan and a design that needs whole-configuration stages."""
        if self._plan is None or self.attach_mode:
            return False
        return self.design.sequential or self.design.launches > 1

    def _measure_launch(self, name: str, concurrency: int, driver: Driver = plain_driver) -> CellMeasurement:
        """Measure one launch of a cell on the configuration's current server; merge it into the cell."""
        key = (name, concurrency)
        self._attempted.add(key)
        elapsed = time.monotonic() - self.started
        if elapsed > self.suite.sweep.session_timeout_s:
            raise ConfigUnavailable(f"session deadline of {self.suite.sweep.session_timeout_s:g}s reached "
                                    f"({elapsed:.0f}s elapsed); {name} c{concurrency} not measured", skip=False)
        handle = self.server(name)
        cfg = self.server_config(name)
        sweep = self._sweep_at(concurrency)
        try:
            load = self.load_settings_at(concurrency)
            cell = measure_cell(
                handle, self.workload_for(name), sweep, load.pop("concurrency"), api=handle.engine.choose_api(sweep.api),
                extra_body=handle.engine.request_extra_body(cfg), max_failed=self.options.max_failed_requests,
                driver=driver, progress=self._progress, **load,
            )
            cell.concurrency = concurrency  # the level (a rate in rate mode; the cap is in each run's load_model)
        except Exception as exc:  # a bug in specguard: the cell is not measured, never a regression
            cell = CellMeasurement(config=name, concurrency=concurrency,
                                   error=f"internal error while measuring (a specguard bug): {type(exc).__name__}: {exc}")
        self.launch_cells.setdefault(key, []).append((self.servers[name].launch_id, cell))
        self.cells[key] = _merged(name, concurrency, [m for _, m in self.launch_cells[key]])
        if cell.error:
            self._check_still_serving(name, handle)
        return self.cells[key]

    def _sweep_at(self, concurrency: int):
        """The sweep settings of one level (--requests replaces requests_per_worker)."""
        sweep = self.suite.sweep
        if self.options.requests_per_run:
            sweep = replace(sweep, requests_per_worker=max(1, self.options.requests_per_run // concurrency),
                            min_requests_per_run=0)
        return sweep

    def categories_at(self, concurrency: int) -> list[str]:
        """The prompt categories a run at this level sends, sorted; [] when its prompts carry fewer
        than two (one category is the whole run: its test would repeat the overall one). The
        plugin makes one accept-length test per category from it, before anything runs. Kind
        "text" (the 30 shipped coding/reasoning/chat prompts) reports its categories but has no
        per-category tests: suites recorded before them keep their tests and baselines."""
        if self.suite.workload.kind not in CATEGORY_TEST_KINDS:
            return []
        n = self._sweep_at(concurrency).num_requests(concurrency)
        found = sorted({c for c in workload_categories(self.workload, n) if c})
        return found if len(found) >= 2 else []

    @property
    def rate_mode(self) -> bool:
        """The sweep's levels are request rates (open loop, `[sweep] request_rate`), not concurrencies."""
        return bool(getattr(self.suite.sweep, "request_rate", None))

    @property
    def levels(self) -> list[int]:
        """The sweep's levels: request rates (req/s) in rate mode, else concurrencies."""
        return list(self.suite.sweep.request_rate) if self.rate_mode else list(self.suite.sweep.concurrency)

    def store_level(self, level: int) -> int | str:
        """A level as baseline files key it (baselines.cell_key): 16 -> "c16", in rate mode "r8"."""
        return f"r{level}" if self.rate_mode else level

    def level_name(self, level: int) -> str:
        """"c16" (closed loop, 16 clients) or "r8" (open loop, 8 req/s): test ids and messages."""
        return f"{'r' if self.rate_mode else 'c'}{level}"

    def load_settings_at(self, level: int) -> dict[str, Any]:
        """measure_cell's load arguments for one level: the level is the concurrency, or in rate
        mode the Poisson rate with `max_concurrency` as the in-flight cap; the SLOs when set."""
        sweep = self.suite.sweep
        slo = getattr(sweep, "slo", None)
        out: dict[str, Any] = {"concurrency": level, "slo_ms": parse_slo(slo, "sweep.slo") if slo else None}
        if self.rate_mode:
            out.update(concurrency=sweep.rate_cap, request_rate=float(level), burstiness=sweep.burstiness,
                       num_requests=self._sweep_at(level).num_requests(level))
        return out

    def _add_launch(self, name: str, levels: list[int], driver: Driver = plain_driver) -> str | None:
        """A new server launch of `name` (stopping the current one) measuring `levels`; the
        reason it could not, or None."""
        self.stop_server(name)  # server() starts a new process for a stopped configuration
        for c in levels:
            try:
                m = self._measure_launch(name, c, driver)
            except ConfigUnavailable as exc:
                return exc.line
            if m.error and self.servers[name].failure is not None:
                return self.servers[name].failure.line
        return None

    def _launches(self, name: str, concurrency: int) -> int:
        return len(self.launch_cells.get((name, concurrency), []))

    def _sweep_configuration(self, name: str, concurrency: int, driver: Driver) -> None:
        """Stage 1 (every selected cell, `design.launches` launches), its decisions, and when
        `relaunch_plan` asks, one more launch and the stage-2 decisions."""
        plan = self.plan_info
        levels = sorted({c for n, c in plan.selected_cells if n == name} | {concurrency})
        failure: ConfigUnavailable | None = None
        for launch_no in range(self.design.launches):
            todo = [c for c in levels if self._launches(name, c) == launch_no and not self._cell_error(name, c)]
            if not todo:
                continue
            if launch_no > 0:
                self.stop_server(name)
            for c in todo:
                try:
                    self._measure_launch(name, c, driver if c == concurrency else plain_driver)
                except ConfigUnavailable as exc:
                    failure = exc
                    break
            if failure is not None:
                break
        if (name, concurrency) not in self.cells:
            raise failure or ConfigUnavailable(f"{name} c{concurrency} not measured", skip=False)
        results = self._decide(name, stage=1)
        if not self.design.sequential or self.servers[name].mode != MODE_LAUNCHED:
            return
        refs = {n: cfg.reference for n, cfg in self.suite.servers.items()}
        ref = self.suite.servers[name].reference
        stage = 1
        while True:  # one more launch while a cell stays suspicious (gates.GateDesign, "screen")
            launched = max((self._launches(name, c) for c in levels), default=0)
            if launched >= self.design.max_launches:
                return
            # name, and its reference where a speculation cell was suspicious or leans to a loss
            wanted = relaunch_plan(results, refs, self.design.suspicion_p, self.design.reference_losing_p)
            if name not in wanted:
                return
            stage += 1
            ref_levels = sorted({r.concurrency for r in results if r.gate == "speculation"})
            if ref and ref in wanted and ref_levels and self.servers.get(ref) is not None \
                    and self.servers[ref].mode == MODE_LAUNCHED and self.servers[ref].failure is None \
                    and all(self._launches(ref, c) <= launched for c in ref_levels):
                self.stop_server(name)
                why = self._add_launch(ref, ref_levels)
                self.stop_server(ref)
                self._note_relaunch(ref, stage, wanted[ref], why)
            if name in wanted or ref in wanted:
                why = self._add_launch(name, [c for c in levels if not self._cell_error(name, c)], plain_driver)
                self._note_relaunch(name, stage, wanted.get(name, []), why)
                if why:
                    self._decide(name, stage=stage)
                    return
            results = self._decide(name, stage=stage)

    def _note_relaunch(self, name: str, stage: int, reasons: list[str], failed: str | None) -> None:
        """Why a configuration was launched again (the summary's "relaunched" line), per stage."""
        label = f"launch {stage}: " if stage > 2 else ""
        self.relaunches.setdefault(name, []).extend(
            [label + r for r in reasons] + ([f"relaunch failed: {failed}"] if failed else []))

    def _cell_error(self, name: str, c: int) -> bool:
        cell = self.cells.get((name, c))
        return bool(cell and cell.error)

    def _measure_references_for(self, name: str) -> None:
        needed = sorted(c for (ref, c), specs in self.plan_info.reference_cells.items()
                        if name in specs and (ref, c) not in self.cells)
        ref = self.suite.servers[name].reference
        if not ref or not needed:
            return
        selected = set(self.plan_info.selected_cells)
        launches = self.design.launches if self._staged_design(ref) else 1
        stop = False
        for launch_no in range(launches):
            if launch_no > 0:
                self.stop_server(ref)
            for c in needed:
                if self._launches(ref, c) != launch_no or self._cell_error(ref, c):
                    continue
                try:
                    self._measure_launch(ref, c)
                except ConfigUnavailable:
                    stop = True  # remembered in servers[ref].failure; the speculation gate says why
                    break
                if (ref, c) not in selected:
                    self.reference_roles[(ref, c)] = list(self.plan_info.reference_cells[(ref, c)])
            if stop:
                break
        self.stop_server(ref)

    def measured_as_reference(self, name: str, concurrency: int) -> list[str]:
        """The speculative configurations this cell was measured for when its own tests were deselected."""
        return list(self.reference_roles.get((name, concurrency), []))

    def reference_only(self) -> dict[str, list[str]]:
        """Reference configurations measured only because a selected speculative test needed
        them (their own tests deselected) -> the speculative configurations they served."""
        out: dict[str, list[str]] = {}
        for (ref, _c), specs in sorted(self.reference_roles.items()):
            served = out.setdefault(ref, [])
            served += [s for s in specs if s not in served]
        return out

    def _check_still_serving(self, name: str, handle: ServerHandle) -> None:
        """After a failed cell: if the server is gone, its remaining cells fail at once."""
        reason = detail = None
        if handle.alive():
            try:
                wait_ready(handle, timeout_s=5.0)
            except ServerStartError:
                # a server that is aborting (e.g. writing a core) stops answering before it exits:
                # give it a moment, so that its exit code is what the summary reports
                if handle.process is not None:
                    try:
                        handle.process.wait(timeout=5.0)
                    except subprocess.TimeoutExpired:
                        pass
                if handle.alive():
                    reason = f"server {name!r} stopped answering {handle.engine.readiness_path} during the sweep"
        if not handle.alive():
            code = handle.process.returncode if handle.process else None
            reason, detail = f"server {name!r} exited (code {code}) during the sweep", f"log tail:\n{handle.log_tail()}"
        if reason:
            self.servers[name].failure = ConfigUnavailable(reason, skip=False, detail=detail or "")

    # -- baselines: reading -------------------------------------------------------------------
    def _session_fields(self, cfg: ServerConfig) -> dict[str, Any]:
        sweep = self.suite.sweep
        return {
            "engine": cfg.engine,
            "gpu": self.gpu if cfg.engine == "sglang" else "n/a",
            "workload": self.workload_for(cfg.name).digest(),
            "input_len": self.suite.workload.input_len,
            "output_len": self.suite.workload.output_len,
            "api": sweep.api,
            "requests_per_worker": sweep.requests_per_worker if not self.options.requests_per_run else f"{self.options.requests_per_run} per run",
            "warmup": sweep.warmup,
            # only when set (suites without a floor keep their fingerprints); --requests replaces it
            **({"min_requests_per_run": sweep.min_requests_per_run}
               if sweep.min_requests_per_run and not self.options.requests_per_run else {}),
            # open loop only (suites without request_rate keep their fingerprints): the arrival process
            **({"load": f"poisson levels, burstiness {sweep.burstiness:g}, cap {sweep.rate_cap}"} if self.rate_mode else {}),
        }

    def fingerprint(self, name: str) -> Fingerprint:
        """What must match for a stored baseline to be compared: this run's setup and the server's
        effective arguments (read from the server, so an attached server's own values count)."""
        state = self.servers.get(name)
        if state is None or state.handle is None:
            raise ConfigUnavailable(f"{name}: no server was started, so its environment is unknown", skip=False)
        cfg = self.server_config(name)
        return Fingerprint({"engine": cfg.engine, **state.handle.effective.fingerprint_fields(), **self._session_fields(cfg)})

    def baseline_history(self, name: str, concurrency: int, metric: str) -> tuple[list[list[float]] | None, str, bool]:
        """Stored per-session samples of a cell's metric, or None with the reason.

        The third value is True when the reason is an error (a damaged, unreadable or foreign
        file): that is "not measured", never a skip.
        """
        fp = self.fingerprint(name)
        try:
            hist = self.store.history(name, fp, self.store_level(concurrency))
            if hist is not None:
                samples = [s for s in (metric_values(x, metric) for x in hist.sessions) if s]
                if samples:
                    return samples, "", False
            others = self.store.other_fingerprints(name)
        except BaselineError as exc:
            return None, str(exc), True
        create = self._record_hint(name, concurrency)
        category = split_gate(metric)[1]
        if hist is not None and hist.sessions and category:
            return None, (f"the baseline for {name} c{concurrency} in {self.store.path_for(name)} has no accept lengths "
                          f"for prompt category {category!r} (recorded before per-category figures were stored, or "
                          f"its runs had no such prompts); {create}"), False
        if others:
            diffs = fp.differences(others[0])
            return None, (f"baseline for {name} c{concurrency} was recorded with another environment; "
                          f"differing fields: {'; '.join(diffs)}. Not compared. To accept this environment, {create}"), False
        return None, f"no baseline for {name} c{concurrency} in {self.store.path_for(name)}; {create}", False

    def _record_hint(self, name: str, concurrency: int) -> str:
        """A command that records exactly this cell, with this run's suite, directory and servers."""
        if self.options.rerun_hint is not None:
            return "create one with: " + self.options.rerun_hint(name, [concurrency])
        parts = ["pytest perf_tests", "--update-baselines", f"-k {shlex.quote(f'[{name}-{self.level_name(concurrency)}]')}",
                 f"--suite {shlex.quote(str(self.suite.path))}", f"--baseline-dir {shlex.quote(str(self.store.directory))}"]
        for n, url in self.options.server_urls.items():
            parts.append(f"--server-url {shlex.quote(f'{n}={url}' if n else url)}")
        return "create one with: " + " ".join(parts)

    def _expected_reference_fields(self, spec_name: str, ref: str) -> dict[str, Any]:
        """The environment a stored reference must come from: this run's (workload, engine version,
        GPU, the server's effective arguments), minus the speculation and the capacity SGLang
        derives from it (cap, CUDA-graph sizes)."""
        spec = self.fingerprint(spec_name).fields
        ref_cfg = self.server_config(ref)
        out = {k: v for k, v in spec.items() if not _reference_free(k)}
        out.update(self._session_fields(ref_cfg))
        out["workload"] = spec["workload"]  # same model, same vocabulary: the ids the reference gets
        return out

    def _reference_history(self, spec_name: str, ref: str, concurrency: int,
                           metric: str = "throughputs") -> tuple[list[list[float]] | None, str, bool]:
        """Every stored session of the reference at this concurrency whose fingerprint matches this
        run's environment (all non-speculative fields: workload, engine version, GPU, effective
        arguments); None with the reason otherwise. Other environments are never used. The third
        value is True when the reason is an error (damaged file)."""
        expected = self._expected_reference_fields(spec_name, ref)
        path = self.store.path_for(ref)
        try:
            doc = self.store.load_file(ref)
        except BaselineError as exc:
            return None, str(exc), True
        if doc is None:
            return None, f"no stored reference ({path} does not exist)", False
        entries = sorted(doc["entries"].values(), key=lambda e: e.get("updated", ""), reverse=True)
        mismatches: list[str] = []
        for entry in entries:
            stored = {k: v for k, v in entry["fingerprint"].items() if not _reference_free(k)}
            diffs = Fingerprint(expected).differences(Fingerprint(stored))
            if diffs:
                mismatches.append("; ".join(diffs))
                continue
            cell = entry["cells"].get(cell_key(self.store_level(concurrency)))
            sessions = [metric_values(_session_from_json(s), metric) for s in cell["sessions"]] if cell else []
            sessions = [s for s in sessions if s]
            if sessions:
                return sessions, "", False
            return None, f"{path} has this environment but no c{concurrency} cell", False
        if mismatches:
            return None, (f"{path} was recorded in another environment, not used; differing fields: {mismatches[0]}"), False
        return None, f"{path} has no entries", False

    # -- gates --------------------------------------------------------------------------------
    # A test asks for its gate's verdict; with a staged design it was decided when the
    # configuration was swept (stage 2 where it was relaunched), else it is decided now (stage 1).
    def throughput_result(self, name: str, concurrency: int) -> GateResult:
        return self._result("throughput", name, concurrency)

    def accept_length_result(self, name: str, concurrency: int, category: str = "") -> GateResult:
        """The whole run's accept length, or with `category` that prompt category's alone."""
        return self._result("accept_length", name, concurrency, category=category)

    def speculation_result(self, name: str, concurrency: int, must_win_up_to: int | None) -> GateResult:
        return self._result("speculation", name, concurrency, must_win_up_to)

    def _result(self, gate: str, name: str, concurrency: int, must_win_up_to: int | None = None,
                category: str = "") -> GateResult:
        self._seen_tests.add(PlannedTest(name, concurrency, gate, category))
        decided = self._final.get((gate_label(gate, category), name, concurrency))
        if decided is not None and must_win_up_to in (None, self.options.speculation_must_win_up_to):
            return self._record(decided)
        result = self._guarded(gate, name, concurrency, 1, must_win_up_to, category)
        self.stage1_results.append(result)
        return self._record(result)

    def _decide(self, name: str, stage: int) -> list[GateResult]:
        """Decide every planned gate test of a configuration whose cell was measured error-free."""
        out = []
        for t in self.plan_info.selected_tests:
            if t.config != name or self._cell_error(name, t.concurrency) or (name, t.concurrency) not in self.cells:
                continue
            result = self._guarded(t.gate, name, t.concurrency, stage, None, t.category)
            (self.stage1_results if stage == 1 else self.stage2_results).append(result)
            self._final[(gate_label(t.gate, t.category), name, t.concurrency)] = result
            out.append(result)
        return out

    def _guarded(self, gate: str, name: str, concurrency: int, stage: int, must_win_up_to: int | None,
                 category: str = "") -> GateResult:
        """Decide one gate; an unexpected exception is an internal error (not measured), never a regression."""
        label = gate_label(gate, category)
        try:
            if gate == "speculation":
                return self._speculation(name, concurrency, must_win_up_to, stage)
            return self._history_result(gate, name, concurrency, stage, category)
        except ConfigUnavailable as exc:
            return GateResult(label, name, concurrency, SKIP if exc.skip else ERROR, exc.line, stage=stage)
        except Exception as exc:  # noqa: BLE001 - reported as one line, the test is "not measured"
            return GateResult(label, name, concurrency, ERROR,
                              f"{label} {name} c{concurrency}: internal error (a specguard bug): {type(exc).__name__}: {exc}",
                              stage=stage)

    def _launch_values(self, name: str, concurrency: int, metric: str) -> list[list[float]]:
        """One list of the metric's run values per launch of the cell."""
        launches = [m for _, m in self.launch_cells.get((name, concurrency), [])]
        if not launches and (name, concurrency) in self.cells:  # measured without launch records
            launches = [self.cells[(name, concurrency)]]
        return [v for v in (metric_values(m, metric) for m in launches) if v]

    def _stored(self, name: str, concurrency: int, metric: str) -> list[list[float]]:
        """A started configuration's stored sessions of a metric at a level ([] when none or unknown)."""
        state = self.servers.get(name)
        if state is None or state.handle is None:
            return []
        hist, _, _ = self.baseline_history(name, concurrency, metric)
        return hist or []

    def _spread(self, metric: str):
        """The metric's between-session spread pooled over the selected cells whose stored history
        is known by now (configurations already started: their fingerprints are known)."""
        histories = {}
        for name, c in self.plan_info.selected_cells:
            state = self.servers.get(name)
            if state is None or state.handle is None:
                continue
            hist, _, _ = self.baseline_history(name, c, metric)
            if hist:
                histories[(name, c)] = hist
        return session_spread(histories) if histories else None

    def _history_result(self, gate: str, name: str, concurrency: int, stage: int, category: str = "") -> GateResult:
        tol = self.suite.tolerances
        label = gate_label(gate, category)
        metric = "throughputs" if gate == "throughput" else gate_label("accept_lengths", category)
        launches = self._launch_values(name, concurrency, metric)
        current = [v for l in launches for v in l]
        if gate == "accept_length" and not current:
            why = (f"no run has an accept length for prompt category {category!r}: its requests carried no "
                   f"spec_verify_ct (per-category accept lengths need per-request counts: api native or openai)"
                   if category else
                   "no run has an accept length: the requests carried no spec_verify_ct and the engine's "
                   "run-level source (if any) saw no drafts")
            return GateResult(label, name, concurrency, ERROR, f"{label} {name} c{concurrency}: {why}", stage=stage)
        history, reason, is_error = self.baseline_history(name, concurrency, metric)
        if history is None:
            return GateResult(label, name, concurrency, ERROR if is_error else SKIP, reason, current=_mean(current),
                              stage=stage)
        if gate == "throughput":
            extra = dict(tolerance=tol.throughput, prior_between_sd=tol.prior_between_sd)
        else:
            extra = dict(tolerance=tol.accept_length, prior_between_sd=tol.prior_between_sd_accept, prior_day_sd=0.0)
        alpha = self.plan_info.alpha_for(gate, name, concurrency, category)
        return launch_history_gate(label, name, concurrency, launches, history,
                                   alpha_cell=self.design.stage_alpha(alpha), rule=tol.fail_rule,
                                   design=self.design, spread=self._spread(metric), stage=stage, **extra)

    def _speculation(self, name: str, concurrency: int, must_win_up_to: int | None, stage: int) -> GateResult:
        cfg = self.suite.servers[name]
        ref = cfg.reference
        where = f"speculation {name} c{concurrency}"
        if ref is None:
            return GateResult("speculation", name, concurrency, ERROR,
                              f"{where}: configuration has no reference in {self.suite.path}", stage=stage)
        metric = "request_goodputs" if self.suite.tolerances.speculation_metric == "goodput" else "throughputs"
        spec = self._launch_values(name, concurrency, metric)
        if metric == "request_goodputs" and any(v <= 0 for l in spec for v in l):
            return GateResult("speculation", name, concurrency, ERROR,
                              f"{where}: goodput 0 in a run: no request met sweep.slo = {self.suite.sweep.slo!r}, so the "
                              f"goodput ratio is undefined; loosen the SLOs or lower the level", stage=stage)
        limit = self.must_win_limit(name, must_win_up_to)
        must_win = limit is not None and concurrency <= limit
        alpha = self.plan_info.alpha_for("speculation", name, concurrency)
        common = dict(must_win=must_win, tol=self.suite.tolerances, alpha_cell=self.design.stage_alpha(alpha),
                      design=self.design, spread=self._spread(metric), stage=stage,
                      pair_histories=(self._stored(name, concurrency, metric), self._stored(ref, concurrency, metric)))
        ref_cell = self.cells.get((ref, concurrency))
        if ref_cell is not None:
            if ref_cell.error:
                return GateResult("speculation", name, concurrency, ERROR,
                                  f"{where}: reference {ref} c{concurrency} could not be measured: {ref_cell.error.splitlines()[0]}",
                                  stage=stage)
            label = f"{ref} (this session{', measured as reference' if (ref, concurrency) in self.reference_roles else ''})"
            ref_values = self._launch_values(ref, concurrency, metric)
            if metric == "request_goodputs" and any(v <= 0 for l in ref_values for v in l):
                return GateResult("speculation", name, concurrency, ERROR,
                                  f"{where}: reference {ref} had goodput 0 in a run (no request met sweep.slo = "
                                  f"{self.suite.sweep.slo!r}); the goodput ratio is undefined", stage=stage)
            return _on_goodput(must_win_gate(name, concurrency, spec, ref_values, label, **common), metric)
        failure = self.servers.get(ref, ServerState()).failure
        if failure is not None and not failure.skip:
            return GateResult("speculation", name, concurrency, ERROR,
                              f"{where}: reference {ref!r} could not be measured: {failure.line}", stage=stage)
        why = f"reference {ref!r} cannot be measured here ({failure.line})" if failure else f"reference {ref!r} was not measured"
        history, reason, is_error = self._reference_history(name, ref, concurrency, metric)
        if history is None:
            return GateResult("speculation", name, concurrency, ERROR if is_error else SKIP,
                              f"{where}: {why} and has no usable stored baseline: {reason}", stage=stage)
        label = f"{ref} (stored, {len(history)} session{'s' if len(history) != 1 else ''}, same environment)"
        return _on_goodput(must_win_gate(name, concurrency, spec, None, label, reference_history=history, **common), metric)

    def _record(self, result: GateResult) -> GateResult:
        if self.rate_mode:  # the gates write "eagle3 c8"; at a rate level it is "eagle3 r8"
            result.message = result.message.replace(f" {result.config} c{result.concurrency}",
                                                    f" {result.config} r{result.concurrency}")
        notes = self.warnings_for(result.config)
        cell = self.cells.get((result.config, result.concurrency))
        if cell:
            notes = notes + cell.warnings
        if notes and "\n  notes: " not in result.message:
            result.message += "\n  notes: " + "\n  notes: ".join(dict.fromkeys(notes))
        self.results.append(result)
        return result

    def final_results(self) -> list[GateResult]:
        """Each gate test's final decision, the one its test reports: stage 2 where the
        configuration was relaunched, else stage 1 (gates.final_results)."""
        return final_results(self.stage1_results, self.stage2_results)

    def final_failures(self) -> list[GateResult]:
        """Every enforced failure of the session: per-cell verdicts and Holm, both over each test's
        final decision, so the family test and the cells say the same thing (gates.final_failures)."""
        return final_failures(self.stage1_results, self.stage2_results, self.suite.tolerances, self.design)

    # -- baselines: writing (its own step, all or nothing) ----------------------------------------
    def stage_baselines(self, interrupted: bool = False) -> BaselineStage:
        """This process's baseline writes, in memory, and whether every planned cell was measured
        error-free (selected cells, and references they needed). Nothing is written here."""
        problems: list[str] = []
        notes: list[str] = []
        if interrupted:
            problems.append("the run was interrupted")
        plan = self.plan_info
        selected = plan.selected_cells if plan.planned else sorted(self.cells)
        planned = list(dict.fromkeys([*selected, *plan.reference_cells]))
        # An xdist worker answers for the cells it tried; the commit checks the workers' union.
        needed = sorted(self._attempted | set(self.cells)) if self.options.worker_id else planned
        skipped: set[str] = set()
        for name, c in needed:
            state = self.servers.get(name)
            cell = self.cells.get((name, c))
            if cell is None:
                if state is not None and state.failure is not None and state.failure.skip:
                    skipped.add(name)
                    continue
                if state is not None and state.failure is not None:
                    problems.append(f"{name} c{c} not measured ({str(state.failure).splitlines()[0]})")
                else:
                    problems.append(f"{name} c{c} not measured")
            elif cell.error:
                problems.append(f"{name} c{c} had errors ({cell.error.splitlines()[0]})")
        for name in sorted(skipped):
            notes.append(f"{name}: nothing to write (skipped: {str(self.servers[name].failure).splitlines()[0]})")
        writes: list[StagedWrite] = []
        by_config: dict[str, list[int]] = {}
        for name, c in selected:
            if (name, c) in self.cells and not self.cells[(name, c)].error:
                by_config.setdefault(name, []).append(c)
        for name, levels in by_config.items():
            state = self.servers[name]
            if state.handle is None:
                continue
            provenance = {"suite": str(self.suite.path), "suite_version": __version__, "git_commit": self.git_commit,
                          "server_command": state.handle.command, "server_args": state.handle.effective.raw,
                          "mode": state.mode}
            sessions = {self.store_level(c): Session(session_id=self.session_id, date=now_iso(), provenance=provenance,
                                   runs=self._run_samples(name, c))
                        for c in sorted(levels)}
            writes.append(StagedWrite(name, self.fingerprint(name), sessions))
        covered = [k for k in planned if (k in self.cells and not self.cells[k].error) or k[0] in skipped]
        return BaselineStage(complete=not problems, problems=problems, writes=writes, notes=notes,
                             planned=planned, covered=covered)

    def _run_samples(self, name: str, concurrency: int) -> list[RunSample]:
        """The cell's runs as stored, each with the id of the server launch that ran it."""
        tagged = [(lid, r) for lid, m in self.launch_cells.get((name, concurrency), []) for r in m.runs]
        if not tagged:  # measured without launch records (e.g. built by hand)
            tagged = [(self.servers[name].launch_id, r) for r in self.cells[(name, concurrency)].runs]
        return [RunSample.from_metrics(r, i, lid) for i, (lid, r) in enumerate(tagged)]

    def write_baselines(self, interrupted: bool = False) -> BaselineOutcome:
        """With --update-baselines: write every selected cell's session, or nothing (and say why).

        Nothing is written when the run was interrupted or any planned cell (selected, or a
        reference a selected speculation test needed) was not measured error-free.
        """
        if not self.options.update_baselines:
            outcome = BaselineOutcome(requested=False)
        elif self.baseline_outcome is not None:
            return self.baseline_outcome
        else:
            outcome = commit_baseline_stages([self.stage_baselines(interrupted)], self.store,
                                             keep=self.suite.tolerances.history_sessions)
        self.baseline_outcome = outcome
        self.baseline_updates = list(outcome.lines)
        return outcome


def commit_baseline_stages(stages: list[BaselineStage], store: BaselineStore | Path, keep: int,
                           interrupted: bool = False) -> BaselineOutcome:
    """Write every stage's sessions together, or none of them (e.g. from pytest-xdist workers)."""
    store = store if isinstance(store, BaselineStore) else BaselineStore(Path(store))
    problems = [p for s in stages for p in s.problems]
    if interrupted and "the run was interrupted" not in problems:
        problems.insert(0, "the run was interrupted")
    notes = list(dict.fromkeys(n for s in stages for n in s.notes))
    writes = [w for s in stages for w in s.writes]
    covered = {k for s in stages for k in s.covered}
    missing = [k for k in dict.fromkeys(k for s in stages for k in s.planned) if k not in covered]
    problems += [f"{n} c{c} not measured" for n, c in missing if not any(f"{n} c{c} " in p for p in problems)]
    if problems:
        shown = "; ".join(problems[:3]) + (f"; and {len(problems) - 3} more" if len(problems) > 3 else "")
        reason = f"nothing written (all or nothing): {shown}"
        return BaselineOutcome(requested=True, written=False, reason=reason, lines=[reason, *notes])
    if not writes:
        reason = "nothing written: no cell was measured"
        return BaselineOutcome(requested=True, written=False, reason=reason, lines=[reason, *notes])
    try:
        results = store.record_many(writes, keep=keep, replace_damaged=True)
    except (OSError, ValueError, BaselineError) as exc:
        reason = f"nothing written: {type(exc).__name__}: {exc}"
        return BaselineOutcome(requested=True, written=False, reason=reason, lines=[reason, *notes])
    lines = []
    for w, (path, replaced) in zip(writes, results):
        line = f"{w.config}: wrote {len(w.cells)} cell(s) to {path}"
        if replaced:
            line += f" (replaced an unusable file: {replaced})"
        lines.append(line)
    return BaselineOutcome(requested=True, written=True, paths=[str(p) for p, _ in results], lines=[*lines, *notes])


def _merged(name: str, concurrency: int, launches: list[CellMeasurement]) -> CellMeasurement:
    """A cell's launches as one measurement (runs in launch order; the first error wins)."""
    errors = [f"launch {i + 1}: {m.error}" if len(launches) > 1 else m.error for i, m in enumerate(launches) if m.error]
    if len(launches) == 1:
        return launches[0]
    return CellMeasurement(config=name, concurrency=concurrency, runs=[r for m in launches for r in m.runs],
                           warmup_runs=[r for m in launches for r in m.warmup_runs], error=errors[0] if errors else None,
                           server_busy=any(m.server_busy for m in launches),
                           warnings=[w for m in launches for w in m.warnings], wall_s=sum(m.wall_s for m in launches))


def _on_goodput(result: GateResult, metric: str) -> GateResult:
    """The speculation gate decided on goodput ([tolerances] speculation_metric = "goodput") says so."""
    if metric == "request_goodputs":
        result.message = result.message.replace(" tok/s", " good req/s").replace(
            f"speculation {result.config} c{result.concurrency}:", f"speculation (goodput) {result.config} c{result.concurrency}:")
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


__all__ = ["BaselineOutcome", "BaselineStage", "ConfigUnavailable", "PlannedTest", "RunOptions", "ServerDifference",
           "ServerState", "SessionPlan", "SpecguardSession", "api_key_from", "attach_differences",
           "commit_baseline_stages", "gate_label", "is_history_gate", "is_speculative_field", "metric_values",
           "parse_server_args", "parse_server_urls", "split_gate"]
