"""The bench file as a document (report/bench_doc.py): checked before it is written and on load,
each mistake one line naming the file and the field."""

from __future__ import annotations

import json

import pytest

from specguard.report.bench_doc import BENCH
from specguard.store.documents import DocumentError

LEVEL = {"concurrency": 4, "request_rate": None, "load_model": "closed-loop c=4", "error": None, "runs": [{}]}
DOC = {"schema": "specguard-bench", "schema_version": 1, "server": {"engine": "sglang"}, "levels": [LEVEL]}


def test_a_bench_file_round_trips(tmp_path):
    BENCH.save(DOC, tmp_path / "bench.json")
    assert BENCH.load(tmp_path / "bench.json") == DOC


def test_a_bad_bench_document_is_refused_before_it_is_written(tmp_path):
    bad = {**DOC, "levels": [{**LEVEL, "concurrency": "4"}]}
    with pytest.raises(DocumentError, match=r"levels\[0\]\.concurrency") as err:
        BENCH.save(bad, tmp_path / "bench.json")
    assert "\n" not in str(err.value) and not (tmp_path / "bench.json").exists()


def test_another_file_is_named_with_how_to_make_a_bench_file(tmp_path):
    path = tmp_path / "results.json"
    path.write_text(json.dumps({"schema": "specguard-results", "schema_version": 3}))
    with pytest.raises(DocumentError) as err:
        BENCH.load(path)
    assert str(err.value) == (f"{path} is not a specguard bench file (schema 'specguard-results', expected "
                              f"'specguard-bench'); write one with: specguard bench --url URL --json FILE")
