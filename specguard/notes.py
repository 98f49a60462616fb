"""What a measurement or a server says about a cell beside its figures, as data: a kind and the
figures it was read from. measure/ and engines/ make them, the results document stores them
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
