"""Property-based tests: arbitrary input to the parsers and loaders gives clear errors only."""

from __future__ import annotations

import json
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specguard.decide.baselines import BaselineError, BaselineStore
from specguard.config import ConfigError, parse_suite
from specguard.measure.sse import StreamParser, StreamProtocolError

FAST = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4),
    max_leaves=20,
)


@FAST
@given(st.binary(max_size=2000), st.lists(st.integers(1, 50), max_size=20), st.sampled_from(["native", "openai"]))
def test_sse_parser_on_arbitrary_bytes_only_raises_protocol_errors(data, cuts, api):
    parser = StreamParser(api)
    try:
        pos = 0
        for n in cuts:
            parser.feed(data[pos:pos + n], float(pos))
            pos += n
        parser.feed(data[pos:], float(pos))
        parser.close()
    except StreamProtocolError:
        pass


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
