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
    SERVER = "server"  # text: a server check or where a prompt id bound came from (engines/, workload), worded there
    ATTACH_DIFFERENCE = "attach_difference"  # field, suite, server: a suite launch value the attached server does not run
    # Run notes (the session's, under the table): configs is the configurations' names, ", "-joined
    NO_RELAUNCH = "no_relaunch"  # configs: attached without a restart_command, so stage-1 verdicts stand
    ONE_LAUNCH = "one_launch"  # configs, launches: advanced.launches asked for, one measured (attached)
    XDIST_GROUPED = "xdist_grouped"  # dist: pytest-xdist's --dist, overridden to keep a configuration on one worker
    XDIST_SERIALISED = "xdist_serialised"  # groups, workers: launches one at a time (no `gpus` set)
    TEST_RENAMED = "test_renamed"  # files (", "-joined), old, new: a repository imports a test's old name
    TEXT = "text"  # text: a results file of schema 5 or older, its sentence kept as written


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
        """A note that is a sentence already (``SERVER``, ``TEXT``)."""
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


__all__ = ["Figure", "Note", "NoteKind"]
