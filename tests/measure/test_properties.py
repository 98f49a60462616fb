"""Property-based tests: arbitrary input to the parsers and loaders gives clear errors only."""

from __future__ import annotations

import json
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specguard.config import ConfigError, parse_suite
from specguard.measure.sse import StreamParser, StreamProtocolError
from specguard.store.baseline_file import BaselineError
from specguard.store.baselines import BaselineStore

FAST = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4),
    max_leaves=20,
)


@FAST
@given(st.binary(max_size=2000), st.lists(st.integers(1, 50), max_size=20), st.sampled_from(["native", "openai"]))
def test_sse_parser_on_arbitrary_bytes_only_raises_protocol_errors(data, cuts, api):
    """Any bytes, cut anywhere: a protocol error or a consistent parse, and the same parse as when
    the bytes arrive in one piece (TCP may split a stream at any byte)."""

    def parse(pieces: list[bytes]):
        parser = StreamParser(api)
        try:
            for i, piece in enumerate(pieces):
                parser.feed(piece, float(i))
            summary = parser.close()
        except StreamProtocolError:
            return None
        assert len(parser.event_s) == len(parser.event_tokens)
        assert all(n > 0 for n in parser.event_tokens)
        assert sum(parser.event_tokens) == parser.streamed_tokens
        return list(parser.event_tokens), parser.streamed_tokens, summary

    pieces, pos = [], 0
    for n in cuts:
        pieces.append(data[pos:pos + n])
        pos += n
    pieces.append(data[pos:])
    assert parse(pieces) == parse([data])


@FAST
@given(st.lists(json_values, max_size=6), st.sampled_from(["native", "openai"]))
def test_sse_parser_on_arbitrary_json_events(events, api):
    data = b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events) + b"data: [DONE]\n\n"
    parser = StreamParser(api)
    try:
        parser.feed(data, 0.0)
        summary = parser.close()
    except StreamProtocolError:
        return
    assert summary.done


suite_tables = st.dictionaries(
    st.sampled_from(["servers", "sweep", "workload", "tolerances", "extra"]),
    st.dictionaries(st.text(max_size=12), json_values, max_size=4),
    max_size=4,
)


@FAST
@given(suite_tables)
def test_suite_loader_on_arbitrary_tables_only_raises_config_errors(raw):
    try:
        parse_suite(raw, Path("fuzz.toml"))
    except ConfigError as exc:
        assert "fuzz.toml" in str(exc)


@FAST
@given(st.dictionaries(st.text(max_size=12), json_values, max_size=6) | json_values)
def test_baseline_loader_on_arbitrary_json_only_raises_baseline_errors(tmp_path_factory, doc):
    directory = tmp_path_factory.mktemp("b")
    (directory / "cfg.json").write_text(json.dumps(doc))
    try:
        BaselineStore(directory).load_file("cfg")
    except BaselineError as exc:
        assert "cfg.json" in str(exc)


@FAST
@given(st.binary(max_size=300))
def test_baseline_loader_on_arbitrary_bytes(tmp_path_factory, data):
    directory = tmp_path_factory.mktemp("b")
    (directory / "cfg.json").write_bytes(data)
    try:
        BaselineStore(directory).load_file("cfg")
    except BaselineError as exc:
        assert "cfg.json" in str(exc)


@FAST
@given(st.fixed_dictionaries({
    "schema": st.just("specguard-baseline"), "schema_version": st.just(1), "configuration": st.just("cfg"),
    "entries": st.dictionaries(st.text(max_size=5), st.fixed_dictionaries({
        "fingerprint": st.dictionaries(st.text(max_size=5), json_values, max_size=3),
        "cells": st.dictionaries(st.text(max_size=4), st.fixed_dictionaries({
            "sessions": st.lists(st.dictionaries(st.sampled_from(["session_id", "date", "runs", "provenance"]),
                                                 json_values, max_size=4), max_size=2)}), max_size=2)}), max_size=2),
}))
def test_baseline_loader_on_near_valid_documents(tmp_path_factory, doc):
    directory = tmp_path_factory.mktemp("b")
    (directory / "cfg.json").write_text(json.dumps(doc))
    try:
        BaselineStore(directory).load_file("cfg")
    except BaselineError as exc:
        assert "cfg.json" in str(exc)


def _native_stream(steps: list[int], incremental: bool, crlf: bool) -> bytes:
    """A SGLang 0.5.23 native /generate stream (tokenizer_manager.py _handle_batch_output): output_ids
    cumulative, or the delta since the previous event with --incremental-streaming-output;
    meta_info.completion_tokens cumulative in both."""
    out, total = [], 0
    for i, n in enumerate(steps):
        ids = list(range(total, total + n)) if incremental else list(range(total + n))
        total += n
        meta = {"id": "r", "finish_reason": {"type": "length", "length": total} if i == len(steps) - 1 else None,
                "prompt_tokens": 4, "completion_tokens": total, "cached_tokens": 0}
        out.append(b"data: " + json.dumps({"text": "t" * len(ids), "output_ids": ids, "meta_info": meta}).encode())
    sep = b"\r\n\r\n" if crlf else b"\n\n"
    return sep.join(out + [b"data: [DONE]"]) + sep


@FAST
@given(st.lists(st.integers(1, 9), min_size=1, max_size=12), st.booleans(), st.booleans(),
       st.lists(st.integers(1, 40), max_size=30))
def test_native_streams_parse_the_same_whatever_the_cuts(steps, incremental, crlf, cuts):
    """Both output modes, either line ending, any TCP segmentation: one event per step with its new
    tokens, and the server's total (the audit's `ids != total` mutant breaks every incremental case)."""
    data = _native_stream(steps, incremental, crlf)
    parser = StreamParser("native")
    pos = 0
    for n in cuts:
        parser.feed(data[pos:pos + n], float(pos))
        pos += n
    parser.feed(data[pos:], float(len(data)))
    summary = parser.close()
    assert summary.error is None and summary.done
    assert summary.completion_tokens == sum(steps) == parser.streamed_tokens
    assert list(parser.event_tokens) == steps  # a read holding several events: still one entry each
