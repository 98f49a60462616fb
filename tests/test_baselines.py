"""The baseline store: history, fingerprints, atomic writes and clear errors for bad files."""

import json

import pytest

from specguard.decide.baselines import BaselineError, BaselineStore, Fingerprint, RunSample, Session


def session(sid: str, tok: list[float]) -> Session:
    runs = [RunSample(i, "L1", t, 1000, 1000 / t, 8, 0, 3.0, 333) for i, t in enumerate(tok)]
    return Session(session_id=sid, date="2026-11-29T00:00:00+00:00", provenance={"git_commit": "abc"}, runs=runs)


def test_history_keeps_last_k_sessions(tmp_path):
    store = BaselineStore(tmp_path)
    fp = Fingerprint({"model": "m", "num_draft_tokens": 4})
    for i in range(4):
        store.record_sessions("eagle3", fp, {16: session(f"s{i}", [100.0 + i, 101.0 + i])}, keep=3)
    hist = store.history("eagle3", fp, 16)
    assert [s.session_id for s in hist.sessions] == ["s1", "s2", "s3"]
    assert store.history("eagle3", fp, 4) is None
    assert store.history("eagle3", Fingerprint({"model": "other"}), 16) is None
    assert Fingerprint({"model": "other"}).differences(fp) == [
        "model: stored 'm', now 'other'", "num_draft_tokens: stored 4, now None"]


@pytest.mark.parametrize("content,expected", [
    ("{not json", "not valid JSON"),
    ('{"schema": "specguard-baseline", "schema_version": 1, "configuration": "eagle3", "entr', "not valid JSON"),
    ('{"hello": 1}', "not a specguard baseline"),
    ('{"schema": "specguard-baseline", "schema_version": 99, "configuration": "eagle3", "entries": {}}', "newer"),
    ('{"schema": "specguard-baseline", "schema_version": 1, "configuration": "mtp", "entries": {}}', "belongs to configuration"),
    ('{"schema": "specguard-baseline", "schema_version": 1, "configuration": "eagle3", "entries": {"k": {"fingerprint": {}, "cells": {"c1": {"sessions": [{"runs": []}]}}}}}', "malformed"),
])
def test_damaged_files_are_named_and_never_overwritten(tmp_path, content, expected):
    path = tmp_path / "eagle3.json"
    path.write_text(content)
    store = BaselineStore(tmp_path)
    with pytest.raises(BaselineError) as err:
        store.load_file("eagle3")
    assert expected in str(err.value) and str(path) in str(err.value)
    with pytest.raises(BaselineError):
        store.record_sessions("eagle3", Fingerprint({}), {1: session("s", [1.0, 2.0])}, keep=3)
    assert path.read_text() == content  # untouched
    store.record_sessions("eagle3", Fingerprint({}), {1: session("s", [1.0, 2.0])}, keep=3, replace_damaged=True)
    assert json.loads(path.read_text())["configuration"] == "eagle3"


def test_write_is_atomic_and_leaves_no_temp_files(tmp_path):
    store = BaselineStore(tmp_path)
    store.record_sessions("b", Fingerprint({"x": 1}), {1: session("s", [5.0, 6.0])}, keep=2)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b.json", "b.json.lock"]
    nan = session("n", [5.0, 6.0])
    nan.runs[0].output_throughput = float("nan")
    with pytest.raises(ValueError):
        store.record_sessions("b", Fingerprint({"x": 1}), {1: nan}, keep=2)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b.json", "b.json.lock"]
    assert store.history("b", Fingerprint({"x": 1}), 1).sessions[0].throughputs == [5.0, 6.0]


def test_differences_cut_long_values_but_name_every_field():
    stored = Fingerprint({"decode_cuda_graph_bs": list(range(1, 200)), "model_path": "m"})
    now = Fingerprint({"decode_cuda_graph_bs": [1, 2], "model_path": "n", "tp_size": 2})
    lines = now.differences(stored)
    assert [line.split(":")[0] for line in lines] == ["decode_cuda_graph_bs", "model_path", "tp_size"]
    assert lines[0] == "decode_cuda_graph_bs: stored [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, ... (199 items)], now [1, 2]"
    assert all(len(line) < 130 for line in lines)
