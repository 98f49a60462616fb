"""A note's sentence (``specguard.notes``): measure/ and engines/ record what they saw as data,
and this is the one place that words it."""

from __future__ import annotations

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


def note_line(n: Note) -> str:
    """One line for the note, as the test report, the summary and `specguard bench` print it."""
    kind = n.kind
    if kind == NoteKind.STEP_TIME_UNMEASURED:
        return ("step time unmeasured: every request's tokens arrived in one read, so no decode time was seen "
                "(a longer output_len gives the stream time to show its steps)")
    if kind == NoteKind.ACCEPT_SOURCES_DISAGREE:
        return _accept_sources(n)
    if kind == NoteKind.CLIENT_BUSY:
        return (f"the load generator was busy {float(n['fraction']):.0%} of the run: it may be part of what was "
                f"measured (more client processes: {n['workers_env']}, or fewer concurrent streams per machine)")
    if kind == NoteKind.SERVER_BUSY:
        return (f"the server already has {n['running']} running and {n['waiting']} waiting requests that specguard "
                f"did not send (/metrics); each run waits for idle before it starts")
    if kind == NoteKind.COUNTERS_IDLE:
        return (f"{n['engine']}'s speculative counters did not move over this run ({n['counter']} unchanged): its "
                f"step time and accept length are unmeasured (a longer run gives the counters time to publish)")
    if kind == NoteKind.TOKEN_COUNTS_DISAGREE:
        return (f"token counts disagree: responses reported {n['client_tokens']} completion tokens, "
                f"server counter {n['counter']} rose by {float(n['server_tokens']):g}")
    if kind == NoteKind.ATTACH_DIFFERENCE:
        return f"{n['field']}: suite file says {n['suite']!r}, server runs {n['server']!r}"
    if kind == NoteKind.OUTLIER_RUN:
        return f"run {n['run']} tok/s {float(n['tok_s']):.1f} is > 5 MADs from the median (kept)"
    return _run_note(n)


def _run_note(n: Note) -> str:
    kind = n.kind
    if kind == NoteKind.NO_RELAUNCH:
        return (f"attach mode: {n['configs']} cannot be relaunched (no restart_command): their stage-1 verdicts at "
                f"the whole cell alpha stand")
    if kind == NoteKind.ONE_LAUNCH:
        return f"attach mode: advanced.launches = {n['launches']} not possible for {n['configs']}, one launch measured"
    if kind == NoteKind.XDIST_GROUPED:
        return (f"xdist: --dist {n['dist']}: specguard places each configuration with its reference on one worker, "
                f"so every server is launched once and every cell measured once")
    if kind == NoteKind.XDIST_SERIALISED:
        return (f"xdist: {n['groups']} configuration groups on {n['workers']} workers and no `gpus` set: launches are "
                f"serialised (one launched server at a time on this machine), since servers sharing CPU/GPU would "
                f"lower and blur each other's tok/s")
    if kind == NoteKind.TEST_RENAMED:
        return (f"{n['files']}: {n['old']} is now named {n['new']} (the same test); import {n['new']} from "
                f"specguard.plugin.gate_tests, the old name will go in a later release")
    return str(n["text"])  # SERVER, TEXT: a sentence already


__all__ = ["note_line"]
