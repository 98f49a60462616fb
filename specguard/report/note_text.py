"""A note's sentence (``specguard.notes``): measure/, engines/, the session and the plugin record
what they saw as data, and this is the one place that words it."""

from __future__ import annotations

from collections.abc import Callable

from specguard.measure.accept_sources import REQUESTS
from specguard.notes import Note, NoteKind

# ACCEPT_SOURCES_DISAGREE: the figures that are not a source's reading
_CHECK_FIELDS = ("own", "accept_length", "suspect")


def _accept_sources(n: Note) -> str:
    sources = [name for name, _ in n.figures if name not in _CHECK_FIELDS and not name.endswith("_allowed")]
    parts = [f"{s} {float(n[s]):.3f} (allowed +-{float(n[s + '_allowed']):.3f})" for s in sources]
    suspect = str(n["suspect"])
    one = suspect != REQUESTS and " or " not in suspect and "," not in suspect
    named = "the requests' own verify counts" if suspect == REQUESTS else suspect
    return (f"accept length sources disagree: {n['own']} {float(n['accept_length']):.3f}; {'; '.join(parts)}: "
            f"{named} disagree{'s' if one else ''} with the others")


_WORDING: dict[NoteKind, Callable[[Note], str]] = {
    NoteKind.STEP_TIME_UNMEASURED: lambda n: (
        "step time unmeasured: every request's tokens arrived in one read, so no decode time was seen "
        "(a longer output_len gives the stream time to show its steps)"),
    NoteKind.ACCEPT_SOURCES_DISAGREE: _accept_sources,
    NoteKind.CLIENT_BUSY: lambda n: (
        f"the load generator was busy {float(n['fraction']):.0%} of the run: it may be part of what was measured "
        f"(more client processes: {n['workers_env']}, or fewer concurrent streams per machine)"),
    NoteKind.SERVER_BUSY: lambda n: (
        f"the server already has {n['running']} running and {n['waiting']} waiting requests that specguard did not "
        f"send (/metrics); each run waits for idle before it starts"),
    NoteKind.COUNTERS_IDLE: lambda n: (
        f"{n['engine']}'s speculative counters did not move over this run ({n['counter']} unchanged): its step time "
        f"and accept length are unmeasured (a longer run gives the counters time to publish)"),
    NoteKind.TOKEN_COUNTS_DISAGREE: lambda n: (
        f"token counts disagree: responses reported {n['client_tokens']} completion tokens, server counter "
        f"{n['counter']} rose by {float(n['server_tokens']):g}"),
    NoteKind.OUTLIER_RUN: lambda n: f"run {n['run']} tok/s {float(n['tok_s']):.1f} is > 5 MADs from the median (kept)",
    NoteKind.ATTACH_DIFFERENCE: lambda n: f"{n['field']}: suite file says {n['suite']!r}, server runs {n['server']!r}",
    NoteKind.NO_RELAUNCH: lambda n: (
        f"attach mode: {n['configs']} cannot be relaunched (no restart_command): stage-1 verdicts at the "
        f"whole cell alpha stand"),
    NoteKind.ONE_LAUNCH: lambda n: (
        f"attach mode: advanced.launches = {n['launches']} not possible for {n['configs']}, one launch measured"),
    NoteKind.XDIST_GROUPED: lambda n: (
        f"xdist: --dist {n['dist']}: specguard places each configuration with its reference on one worker, so every "
        f"server is launched once and every cell measured once"),
    NoteKind.XDIST_SERIALISED: lambda n: (
        f"xdist: {n['groups']} configuration groups on {n['workers']} workers and no `gpus` set: launches are "
        f"serialised (one launched server at a time on this machine), since servers sharing CPU/GPU would lower "
        f"and blur each other's tok/s"),
    NoteKind.TEST_RENAMED: lambda n: (
        f"{n['files']}: {n['old']} is now named {n['new']} (the same test); import {n['new']} from "
        f"specguard.plugin.gate_tests, the old name will go in a later release"),
    NoteKind.SERVER: lambda n: str(n["text"]),  # a sentence already
    NoteKind.TEXT: lambda n: str(n["text"]),
}


def note_line(n: Note) -> str:
    """One line for the note, as the test report, the summary and `specguard bench` print it."""
    return _WORDING[n.kind](n)


__all__ = ["note_line"]
