"""A run's accept length from every source it has, checked against each other.

Engines' own counters have been wrong (vLLM PRs #56137 and #56977 reported accept length 6.0
instead of 3.0 and inflated draft counts), so the gate's figure, the requests' own (their
completion tokens over their spec_verify_ct), is set beside the server's readings of the same run
and the stream's: where one source disagrees and another backs the requests, that source is
named; where the others agree with each other against the requests, the requests are.

The sources and how close each must come (`allowed`, absolute, in tokens per verify step):
- metrics: the server's counters over the run (SGLang: generation tokens / verify calls, deltas
  around the run, engines/sglang.py): the same window, so they agree but for the first token of
  each request, which the prefill produces: n_requests / verify steps + 0.5 %.
- stream: the tokens the client saw per streamed event, where the stream is one event per verify
  step (every request's events after its first = its verify steps): the same slack. A stream that
  merged steps into fewer events (a busy server or client does) cannot speak to the count and is
  not compared; one with *more* events than the requests claim verify steps contradicts them.
- server_info (avg_spec_accept_length since the last flush, advanced every decode-log interval)
  and gauge (sglang:spec_accept_length, the last decode-log window only): other windows, 10 %,
  and only over runs long enough (MIN_VERIFY_STEPS) for the window to be the run's.
- any other source an engine adds: 5 %.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from specguard.measure.client import RequestRecord
from specguard.notes import Figure, Note, NoteKind

SAME_WINDOW_SLACK = 0.005  # relative, beside the prefill tokens' n_requests / verify steps
OTHER_WINDOW_TOLERANCE = {"server_info": 0.10, "gauge": 0.10}
UNKNOWN_SOURCE_TOLERANCE = 0.05
MIN_VERIFY_STEPS = {"server_info": 1000, "gauge": 200}
REQUESTS, STREAM = "requests", "stream"


@dataclass(frozen=True)
class SourceReading:
    """One source's accept length for the run, and how far from the requests' it may be."""

    source: str
    value: float
    allowed: float

    def agrees_with(self, accept_length: float) -> bool:
        return abs(self.value - accept_length) <= self.allowed


@dataclass(frozen=True)
class AcceptCheck:
    """The run's accept length (the requests', or an engine source when no request counted verify
    steps) against every other source: `suspect` names the source that disagrees, REQUESTS when the
    others agree with each other against the requests, None when all agree."""

    accept_length: float
    readings: tuple[SourceReading, ...]
    suspect: str | None
    stream_merged: float | None = None  # share of verify steps the stream merged (not compared then)
    own: str = REQUESTS  # where the run's figure came from: the requests, or an engine source


@dataclass(frozen=True)
class StreamCount:
    """What the stream showed of the requests that report verify steps: events after each
    request's first (one per verify step when the stream is per step) and their tokens."""

    steps: int
    tokens: int  # every completion token of those requests


def stream_count(records: Iterable[RequestRecord]) -> StreamCount | None:
    """The stream's own count over the requests that report verify steps and per-event tokens."""
    steps = tokens = 0
    for r in records:
        if r.spec_verify_ct and not r.tokens_estimated and len(r.event_s) >= 2 and r.completion_tokens:
            steps += len(r.event_s) - 1
            tokens += r.completion_tokens
    return StreamCount(steps, tokens) if steps else None


def _allowed(source: str, accept_length: float, prefill_share: float) -> float:
    if source in OTHER_WINDOW_TOLERANCE:
        return OTHER_WINDOW_TOLERANCE[source] * accept_length
    if source in ("metrics", STREAM):
        return prefill_share + SAME_WINDOW_SLACK * accept_length
    return UNKNOWN_SOURCE_TOLERANCE * accept_length


def _suspect(accept_length: float, readings: list[SourceReading], own: str) -> str | None:
    bad = [r for r in readings if not r.agrees_with(accept_length)]
    if not bad:
        return None
    if len(bad) < len(readings):  # another source backs the requests: the disagreeing ones are suspect
        return ", ".join(r.source for r in bad)
    if len(bad) >= 2 and all(abs(a.value - b.value) <= max(a.allowed, b.allowed) for a in bad for b in bad):
        return own  # every other source agrees with the others, against the run's own figure
    return " or ".join([own, *(r.source for r in bad)])  # two sides, nothing to break the tie


def check_accept_sources(accept_length: float | None, verify_ct: int, requests: int, server: dict[str, float],
                         stream: StreamCount | None, own: str = REQUESTS) -> AcceptCheck | None:
    """Every source that can speak to this run's accept length, judged against `accept_length`.
    `verify_ct` and `requests`: the verify steps and the requests behind it (0 when it came from a
    server source itself, `own`, which is then not compared with itself)."""
    if accept_length is None:
        return None
    prefill_share = requests / verify_ct if verify_ct else 0.0
    readings = []
    for source, value in server.items():
        if value <= 0 or verify_ct < MIN_VERIFY_STEPS.get(source, 0) or value == accept_length and not verify_ct:
            continue  # the source had nothing, its window is not the run's, or it is the run's figure itself
        readings.append(SourceReading(source, value, _allowed(source, accept_length, prefill_share)))
    merged = None
    if stream is not None and verify_ct:
        merged = 1 - stream.steps / verify_ct
        if merged <= SAME_WINDOW_SLACK:  # per step (or more events than verify steps: a contradiction)
            readings.append(SourceReading(STREAM, stream.tokens / stream.steps,
                                          _allowed(STREAM, accept_length, prefill_share)))
            merged = None
    if not readings and merged is None:
        return None
    return AcceptCheck(accept_length, tuple(readings), _suspect(accept_length, readings, own), merged, own)


def disagreement_note(check: AcceptCheck) -> Note | None:
    """The run's note when its sources disagree: every value, its bound, and which one is suspect
    (report.note_text words it)."""
    if check.suspect is None:
        return None
    readings: dict[str, Figure] = {}
    for r in check.readings:
        readings[r.source], readings[f"{r.source}_allowed"] = r.value, r.allowed
    return Note.of(NoteKind.ACCEPT_SOURCES_DISAGREE, own=check.own, accept_length=check.accept_length,
                   suspect=check.suspect, **readings)
