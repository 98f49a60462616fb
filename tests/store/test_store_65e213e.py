"""Baseline files specguard wrote at 65e213e (tests/fixtures/repo-65e213e) load through the store
unchanged, are written back byte for byte in the same format, and take new sessions beside the
old ones; the empty `.json.lock` files that version left beside them stay as they are."""

from __future__ import annotations

import shutil
from pathlib import Path

from specguard.store.atomic import dump_json
from specguard.store.baseline_file import Fingerprint, RunSample, StoredSession
from specguard.store.baselines import BaselineStore

SUITE = Path(__file__).resolve().parents[1] / "fixtures" / "repo-65e213e" / "repo" / "baselines" / "suite"
CONFIGS = ("baseline", "eagle3")


def test_the_files_load_and_every_stored_session_reads_back():
    store = BaselineStore(SUITE)
    for name in CONFIGS:
        doc = store.load_file(name)  # validated: raises BaselineError on anything the store cannot use
        assert doc is not None and doc["configuration"] == name
        (fingerprint,) = store.fingerprints(name)
        for level in (1, 4):
            hist = store.history(name, fingerprint, level)
            assert hist is not None and hist.fingerprint == fingerprint and len(hist.sessions) == 3
            assert all(r.step_time_ms and r.output_throughput > 0 for s in hist.sessions for r in s.runs)
            assert all(len(s.runs) % 3 == 0 for s in hist.sessions)  # the suite's 3 repeats per launch


def test_the_store_writes_the_format_it_read_byte_for_byte():
    for name in CONFIGS:
        path = SUITE / f"{name}.json"
        assert dump_json(BaselineStore(SUITE).load_file(name)) == path.read_text(encoding="utf-8")


def test_a_new_session_joins_the_old_ones_and_the_old_lock_files_stay(tmp_path):
    suite = tmp_path / "suite"
    shutil.copytree(SUITE, suite)
    before = {p.name: p.read_bytes() for p in suite.iterdir()}
    store = BaselineStore(suite)
    (fingerprint,) = store.fingerprints("eagle3")
    new = StoredSession("new", "2026-12-03T00:00:00+00:00", {}, [RunSample(0, "L1", 500.0, 2000, 4.0, 4, 0, 2.9, 690)])
    store.record_sessions("eagle3", fingerprint, {1: new}, keep=5)
    assert sorted(p.name for p in suite.iterdir()) == sorted(before)  # no file added: the locks are elsewhere
    assert {n: (suite / n).read_bytes() for n in before if n != "eagle3.json"} == {
        n: b for n, b in before.items() if n != "eagle3.json"}  # baseline.json and both old .lock files untouched
    old = BaselineStore(SUITE).load_file("eagle3")
    now = store.load_file("eagle3")
    (key,) = now["entries"]
    assert now["entries"][key]["cells"]["c4"] == old["entries"][key]["cells"]["c4"]
    assert now["entries"][key]["cells"]["c1"]["sessions"][:3] == old["entries"][key]["cells"]["c1"]["sessions"]
    assert [s.session_id for s in store.history("eagle3", fingerprint, 1).sessions][-1] == "new"
    assert Fingerprint(now["entries"][key]["fingerprint"]) == fingerprint
