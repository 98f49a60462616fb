"""The servers of a session: launched or attached on first use, checked, stopped.

One `ServerPool` per session. It launches a configuration (`python -m sglang.launch_server ...`,
its own process group) or attaches to `--server-url`, checks what the server really runs against
the suite, fits the workload's token ids to the served model's vocabulary, and under pytest-xdist
claims each configuration for one worker and serialises launches on the machine.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import uuid
from dataclasses import dataclass, field, replace
from typing import IO, Any

from specguard.config import ServerConfig, Suite
from specguard.engines import ArgCheck, Engine, get_engine
from specguard.notes import Note, NoteKind
from specguard.report.note_text import attach_refused, unrunnable
from specguard.server import ServerHandle, ServerStartError, attach, launch, stop, wait_ready
from specguard.session.options import ConfigUnavailable, RunOptions
from specguard.workload import VocabBound, Workload, WorkloadError, fit_to_vocab, resolve_vocab_bound

MODE_LAUNCHED, MODE_ATTACHED = "launched", "attached"


@dataclass(frozen=True)
class ServerDifference:
    """Attach mode: a suite launch value the attached server does not run."""

    field: str
    suite: Any
    server: Any

    def note(self) -> Note:
        return Note.of(NoteKind.ATTACH_DIFFERENCE, field=self.field, suite=self.suite, server=self.server)


@dataclass
class ServerState:
    """One configuration's server as the pool knows it (the pool alone writes it)."""

    handle: ServerHandle | None = None
    failure: ConfigUnavailable | None = None
    checks: list[ArgCheck] = field(default_factory=list)
    differences: list[ServerDifference] = field(default_factory=list)
    mode: str = ""  # MODE_LAUNCHED | MODE_ATTACHED | "" (never started)
    launch_id: str = ""
    stopped: bool = False


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
        if label == "speculative_algorithm" and isinstance(want, str) and isinstance(have, str) \
                and want.upper() == have.upper():
            continue
        if want != have:
            out.append(ServerDifference(label, want, have))
    return out


class ServerPool:
    """Every configuration's server for one session; the session calls it, never sets its state."""

    def __init__(self, suite: Suite, options: RunOptions, workload: Workload) -> None:
        self._suite = suite
        self._options = options
        self._workload = workload
        self.states: dict[str, ServerState] = {}
        self.workloads: dict[str, Workload] = {}  # per configuration, ids fitted to its model's vocabulary
        self.vocab_bounds: dict[str, VocabBound] = {}
        self._lock_file: IO[str] | None = None
        self._lock_holders: set[str] = set()

    @property
    def strict_server_args(self) -> bool:
        """Attach mode holds the server to the suite's launch values (flag or suite key)."""
        return self._options.strict_server_args or self._suite.attach.strict_server_args

    def config(self, name: str) -> ServerConfig:
        """A configuration with this run's --server-args appended."""
        cfg = self._suite.servers[name]
        extra = self._options.server_args.get(name)
        return replace(cfg, args=[*cfg.args, *extra]) if extra else cfg

    def state(self, name: str) -> ServerState:
        """The configuration's state (an empty one when it was never started)."""
        return self.states.get(name, ServerState())

    def get(self, name: str) -> ServerHandle:
        """The running server of a configuration, started (or attached) on first use."""
        state = self.states.setdefault(name, ServerState())
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
        blocking = [c for c in state.checks if c.blocking]
        if blocking:
            raise ConfigUnavailable(unrunnable(name, blocking), skip=False)
        return state.handle

    def _start(self, name: str) -> tuple[ServerHandle, str]:
        cfg = self.config(name)
        try:
            engine: Engine = get_engine(cfg.engine)
        except ValueError as exc:
            raise ConfigUnavailable(Note.of(NoteKind.UNKNOWN_ENGINE, error=str(exc)), skip=False) from None
        urls = self._options.server_urls
        named = urls.get(name)
        url = named or urls.get(None)
        if self._options.attach_mode and not url:
            given = ", ".join(n for n in urls if n)
            raise ConfigUnavailable(Note.of(NoteKind.NOT_ATTACHED, config=name, attached=given), skip=True)
        try:
            if url:
                handle = attach(name, url, engine, api_key=self._options.api_key, cfg=cfg)
                mismatch = engine.matches(cfg, handle.effective)
                if mismatch is not None:
                    raise ConfigUnavailable(attach_refused(mismatch, name if named else None), skip=not named)
                return handle, MODE_ATTACHED
            self._acquire_launch_lock(name)
            return launch(cfg, engine, log_dir=self._options.log_dir, api_key=self._options.api_key), MODE_LAUNCHED
        except ServerStartError as exc:
            first, _, rest = str(exc).partition("\n")
            raise ConfigUnavailable(Note.of(NoteKind.START_FAILED, error=first), skip=False, detail=rest) from None

    def _fit_workload(self, name: str, state: ServerState) -> None:
        """Bound the workload's ids by the served model's vocabulary (an id beyond it crashes
        SGLang 0.5.23): its config.json when launched from a local directory, else what the server
        tells (workload.resolve_vocab_bound)."""
        handle = state.handle
        if handle is None:
            return
        cfg = self.config(name)
        probe = handle.engine.name in ("sglang", "emulator")
        with handle.control_client() as client:
            bound = resolve_vocab_bound(self._suite.workload,
                                        model_path=cfg.model_path if state.mode == MODE_LAUNCHED else None,
                                        client=client, server_info=handle.effective.raw or None, probe_server=probe)
        self.vocab_bounds[name] = bound
        try:
            self.workloads[name] = fit_to_vocab(self._workload, bound.vocab_size)
        except WorkloadError as exc:
            self.stop(name)
            raise ConfigUnavailable(Note.of(NoteKind.VOCAB_UNFIT, config=name, error=str(exc), source=bound.source),
                                    skip=False) from None

    def workload_for(self, name: str) -> Workload:
        """The workload sent to a configuration (the suite's, fitted to its model's vocabulary)."""
        return self.workloads.get(name, self._workload)

    def _checks(self, name: str, handle: ServerHandle, mode: str) -> tuple[list[ArgCheck], list[ServerDifference]]:
        """Launch mode: the adapter's silent-rewrite checks as they are (blocking stays blocking).

        Attach mode: the suite's launch values describe a launch that did not happen, so they are
        compared with the server as differences, and the adapter checks only what the server's own
        command line asked for; all of it is reported, and blocking only with strict_server_args.
        """
        cfg = self.config(name)
        sweep = self._suite.sweep
        top = sweep.rate_cap if sweep.request_rate else max(sweep.concurrency)
        if mode != MODE_ATTACHED:
            return handle.engine.check_args(cfg, handle.effective, top), []
        bare = replace(cfg, num_steps=None, eagle_topk=None, num_draft_tokens=None, max_running_requests=None)
        checks = handle.engine.check_args(bare, handle.effective, top)
        diffs = attach_differences(cfg, handle.effective)
        strict = self.strict_server_args
        checks = [replace(c, blocking=strict and c.blocking) for c in checks]
        if strict:
            checks += [ArgCheck(d.note(), True, strict=True) for d in diffs]
        return checks, diffs

    def relaunch(self, name: str) -> None:
        """End this launch of a configuration so the next get() measures a new one: a launched
        server is stopped (get() launches another); an attached one is restarted by its
        restart_command and attached to again."""
        state = self.states.get(name)
        if state is not None and state.mode == MODE_ATTACHED:
            self._restart(name)
        self.stop(name)

    def can_relaunch(self, name: str) -> bool:
        """Launched here, or attached with a restart_command."""
        return not self._options.attach_mode or bool(self._suite.servers[name].restart_command)

    def _restart(self, name: str) -> None:
        cfg = self.config(name)
        if not cfg.restart_command:
            raise ConfigUnavailable(Note.of(NoteKind.NO_RESTART_COMMAND, config=name), skip=False)
        try:
            done = subprocess.run(cfg.restart_command, shell=True, capture_output=True, text=True,
                                  timeout=cfg.startup_timeout_s)
        except subprocess.TimeoutExpired:
            raise ConfigUnavailable(Note.of(NoteKind.RESTART_TIMEOUT, config=name, timeout_s=cfg.startup_timeout_s),
                                    skip=False) from None
        if done.returncode != 0:
            tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or [""]
            raise ConfigUnavailable(Note.of(NoteKind.RESTART_EXITED, config=name, code=done.returncode, output=tail[0][:200]),
                                    skip=False)
        handle = self.states[name].handle
        if handle is not None:
            try:
                wait_ready(handle, timeout_s=cfg.startup_timeout_s)
            except ServerStartError as exc:
                raise ConfigUnavailable(Note.of(NoteKind.RESTART_NOT_READY, config=name, error=str(exc).splitlines()[0]),
                                        skip=False) from None

    def stop(self, name: str) -> None:
        """Stop a configuration's server if this session launched it (attached ones keep running)."""
        state = self.states.get(name)
        if state is None:
            return
        if state.handle is not None and not state.handle.attached:
            stop(state.handle)
        state.stopped = True
        self._release_launch_lock(name)

    def stop_all(self) -> None:
        for name in list(self.states):
            self.stop(name)

    def notes_for(self, name: str) -> list[Note]:
        """Non-blocking notes about a configuration's server (rewrites, attach differences, where
        its prompts' id bound came from when the model's vocabulary could not be read)."""
        state = self.states.get(name)
        if state is None:
            return []
        notes = [c.note for c in state.checks if not c.blocking]
        bound = self.vocab_bounds.get(name)
        if bound is not None and bound.note is not None:
            notes.append(bound.note)
        if not self.strict_server_args:
            notes += [d.note() for d in state.differences]
        return notes

    def check_still_serving(self, name: str) -> None:
        """After a failed cell: if the server is gone, its remaining cells fail at once."""
        state = self.states[name]
        handle = state.handle
        if handle is None:
            return
        reason: Note | None = None
        detail = ""
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
                    reason = Note.of(NoteKind.SERVER_UNRESPONSIVE, config=name, path=handle.engine.readiness_path)
        if not handle.alive():
            code = handle.process.returncode if handle.process and handle.process.returncode is not None else ""
            reason, detail = Note.of(NoteKind.SERVER_EXITED, config=name, code=code), f"log tail:\n{handle.log_tail()}"
        if reason:
            state.failure = ConfigUnavailable(reason, skip=False, detail=detail)

    # -- pytest-xdist: one launch per configuration, one launched server at a time ----------------
    def _claim(self, name: str) -> None:
        """Under pytest-xdist, refuse a configuration another worker of this run already started."""
        d = self._options.claim_dir
        if d is None:
            return
        d.mkdir(parents=True, exist_ok=True)
        path = d / f"{name}.claim"
        me = self._options.worker_id or str(os.getpid())
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            owner = path.read_text(encoding="utf-8").strip() or "another worker"
            if owner == me:
                return
            raise ConfigUnavailable(Note.of(NoteKind.CLAIMED, config=name, worker=owner), skip=False) from None
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(me)

    def _acquire_launch_lock(self, name: str) -> None:
        path = self._options.launch_lock
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
