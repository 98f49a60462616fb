"""What a measurement or a server says about a cell beside its figures, as data: a kind and the
figures it was read from (or why a configuration could not be measured: the session's
reasons). measure/, engines/ and session/ make them, the results document stores them
(``{"kind": ..., **figures}``) and report/ renders each kind's sentence (``report.note_text``).

It sits at the bottom of the layers (no specguard import) because engines/, measure/, decide/
and report/ all carry notes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from specguard.labels import TextEnum

Figure = float | int | str


class NoteKind(TextEnum):
    """What a note says; its figures, by name, in the comment."""

    STEP_TIME_UNMEASURED = "step_time_unmeasured"  # (none): every request's tokens arrived in one read
    # own, accept_length, suspect (the source(s) that disagree, or "requests"), then per other
    # source read: <source> (its accept length) and <source>_allowed (its bound)
    ACCEPT_SOURCES_DISAGREE = "accept_sources_disagree"
    CLIENT_BUSY = "client_busy"  # fraction (client CPU over the run), workers_env (the variable that adds processes)
    SERVER_BUSY = "server_busy"  # running, waiting: requests on the server before specguard sent any
    COUNTERS_IDLE = "counters_idle"  # engine, counter: speculative counters that did not move over a run
    TOKEN_COUNTS_DISAGREE = "token_counts_disagree"  # client_tokens, counter, server_tokens
    OUTLIER_RUN = "outlier_run"  # run (1-based), tok_s: a run > 5 MADs from the cell's median, kept
    # A server's arguments against the configuration (engines/ check_args; blocking ones fail the configuration)
    # setting, asked, runs, cause (a RewriteCause)
    ARG_REWRITTEN = "arg_rewritten"
    NGRAM_DEFAULTS = "ngram_defaults"  # steps, topk, draft (the server's), expected ("steps/topk/draft")
    # steps, topk, draft: what the server chose; architecture ("" unreported); table: the version's
    # "steps/topk/draft" for it where the server chose otherwise, else ""
    DEFAULT_STEPS = "default_steps"
    UNMODELLED_ALGORITHM = "unmodelled_algorithm"  # algorithm, config: steps/topk/draft tokens not checked
    RANK_CAPS_DIFFER = "rank_caps_differ"  # caps: the per-rank request caps, as a list's text
    RANK_CAP_LOW = "rank_cap_low"  # cap, expected: max_running_requests // attn_dp_size
    # capacity, max_concurrency; per_rank and ranks (0 for one rank); default_cap (0 unless SGLang's
    # speculative default cap applies)
    SWEEP_QUEUES = "sweep_queues"
    ADAPTIVE_ON = "adaptive_on"  # table: the adaptive config file, or "the default table"
    ADAPTIVE_OFF = "adaptive_off"  # steps (the static steps run), reason ("" when the server log must say)
    # runs, needs (what the server speculates with, and what the configuration needs: "no speculation"
    # for none), config, source ("" or where `runs` was read): an attached server cannot stand for it
    ATTACH_MISMATCH = "attach_mismatch"
    # vocab_size (the bound used), why ("" or why the server could not tell), default (1: the suite's default)
    VOCAB_UNREAD = "vocab_unread"
    ATTACH_DIFFERENCE = "attach_difference"  # field, suite, server: a suite launch value the attached server does not run
    # Run notes (the session's, under the table): configs is the configurations' names, ", "-joined
    NO_RELAUNCH = "no_relaunch"  # configs: attached without a restart_command, so stage-1 verdicts stand
    ONE_LAUNCH = "one_launch"  # configs, launches: advanced.launches asked for, one measured (attached)
    XDIST_GROUPED = "xdist_grouped"  # dist: pytest-xdist's --dist, overridden to keep a configuration on one worker
    XDIST_SERIALISED = "xdist_serialised"  # groups, workers: launches one at a time (no `gpus` set)
    TEST_RENAMED = "test_renamed"  # files (", "-joined), old, new: a repository imports a test's old name
    # Why a configuration is not measured (session.ConfigUnavailable's reason; a decision's problem)
    DEADLINE_REACHED = "deadline_reached"  # config, level, deadline_s, elapsed_s: sweep.session_timeout_s passed
    NOT_MEASURED = "not_measured"  # config, level: no launch measured the cell
    NO_SERVER = "no_server"  # config: asked for its environment before any server was started
    NOT_ATTACHED = "not_attached"  # config, attached (", "-joined: the names --server-url gives)
    NOT_AS_CONFIGURED = "not_as_configured"  # config, checks (their lines, "; "-joined): blocking server checks
    ATTACH_REFUSED = "attach_refused"  # named (the --server-url NAME, "" for all), mismatch: the ATTACH_MISMATCH line
    START_FAILED = "start_failed"  # error: the server layer's first line (the rest is the exception's detail)
    UNKNOWN_ENGINE = "unknown_engine"  # error: the engine registry's line
    VOCAB_UNFIT = "vocab_unfit"  # config, error (the workload's line), source: where the vocabulary came from
    NO_RESTART_COMMAND = "no_restart_command"  # config: attached, and a relaunch was needed
    RESTART_TIMEOUT = "restart_timeout"  # config, timeout_s
    RESTART_EXITED = "restart_exited"  # config, code, output: its last line of output (200 characters at most)
    RESTART_NOT_READY = "restart_not_ready"  # config, error: the readiness check's first line
    SERVER_UNRESPONSIVE = "server_unresponsive"  # config, path: the readiness path it stopped answering
    SERVER_EXITED = "server_exited"  # config, code ("": unknown); the log tail is the exception's detail
    CLAIMED = "claimed"  # config, worker: the pytest-xdist worker that measures it
    SOAK_WINDOW_FAILED = "soak_window_failed"  # config, window (0-based), error ("": no run completed)
    SOAK_NO_METRICS = "soak_no_metrics"  # config, error: a passive soak could not read the server's counters
    # config, windows (that saw traffic), planned, idle, needed (warm-up windows + the fewest a decision takes)
    SOAK_TOO_QUIET = "soak_too_quiet"
    TEXT = "text"  # text: an older results file's sentence kept as written (report/upgrade.py)


class RewriteCause(TextEnum):
    """Why a server runs a value other than the one asked for (ARG_REWRITTEN's ``cause``)."""

    UNSAID = ""  # the server gives no reason
    TOPK1 = "topk1"  # topk=1 forces num_steps + 1 draft tokens
    ADAPTIVE = "adaptive"  # adaptive speculation sets num_steps + 1 draft tokens
    NGRAM_BREADTH = "ngram_breadth"  # NGRAM's topk is its BFS breadth
    COUNTED_POSITIONS = "counted_positions"  # vLLM's /metrics counts acceptance at `runs` positions


@dataclass(frozen=True)
class Note:
    """One note: its kind and figures (sorted by name, so that equal notes compare equal)."""

    kind: NoteKind
    figures: tuple[tuple[str, Figure], ...] = ()

    @classmethod
    def of(cls, kind: NoteKind, **figures: Figure) -> Note:
        return cls(kind, tuple(sorted(figures.items())))

    @classmethod
    def text(cls, kind: NoteKind, text: str) -> Note:
        """A note that is a sentence already (``TEXT``)."""
        return cls.of(kind, text=text)

    def __getitem__(self, name: str) -> Figure:
        return dict(self.figures)[name]

    def get(self, name: str) -> Figure | None:
        return dict(self.figures).get(name)

    def to_json(self) -> dict[str, Figure]:
        return {"kind": self.kind.value, **dict(self.figures)}

    @classmethod
    def from_json(cls, doc: Mapping[str, Any] | str) -> Note:
        """A stored note; a bare string (an older file's sentence) is a ``TEXT`` note."""
        if isinstance(doc, str):
            return cls.text(NoteKind.TEXT, doc)
        figures = {k: v for k, v in doc.items() if k != "kind"}
        return cls.of(NoteKind(doc["kind"]), **figures)


__all__ = ["Figure", "Note", "NoteKind", "RewriteCause"]
