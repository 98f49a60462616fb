"""The baseline store (specguard/store/): history, fingerprints, atomic writes and clear errors for bad files."""

import json

import pytest

from specguard.report.verdict_text import difference_text, short
from specguard.store.baseline_file import BaselineError, Fingerprint, RunSample, StoredSession
from specguard.store.baselines import BaselineStore


def session(sid: str, tok: list[float]) -> StoredSession:
    runs = [RunSample(i, "L1", t, 1000, 1000 / t, 8, 0, 3.0, 333) for i, t in enumerate(tok)]
    return StoredSession(session_id=sid, date="2026-11-29T00:00:00+00:00", provenance={"git_commit": "abc"}, runs=runs)


def test_history_keeps_last_k_sessions(tmp_path):
    store = BaselineStore(tmp_path)
    fp = Fingerprint({"model": "m", "num_draft_tokens": 4})
    for i in range(4):
        store.record_sessions("eagle3", fp, {16: session(f"s{i}", [100.0 + i, 101.0 + i])}, keep=3)
    hist = store.history("eagle3", fp, 16)
    assert [s.session_id for s in hist.sessions] == ["s1", "s2", "s3"]
    assert store.history("eagle3", fp, 4) is None
    assert store.history("eagle3", Fingerprint({"model": "other"}), 16) is None
    assert [difference_text(d) for d in Fingerprint({"model": "other"}).differences(fp)] == [
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
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b.json"]  # no temp file, no lock file (locks.py)
    nan = session("n", [5.0, 6.0])
    nan.runs[0].output_throughput = float("nan")
    with pytest.raises(ValueError):
        store.record_sessions("b", Fingerprint({"x": 1}), {1: nan}, keep=2)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b.json"]
    assert store.history("b", Fingerprint({"x": 1}), 1).sessions[0].throughputs == [5.0, 6.0]


def test_differences_cut_long_values_but_name_every_field():
    stored = Fingerprint({"decode_cuda_graph_bs": list(range(1, 200)), "model_path": "m"})
    now = Fingerprint({"decode_cuda_graph_bs": [1, 2], "model_path": "n", "tp_size": 2})
    lines = [difference_text(d) for d in now.differences(stored)]
    assert [line.split(":")[0] for line in lines] == ["decode_cuda_graph_bs", "model_path", "tp_size"]
    assert lines[0] == "decode_cuda_graph_bs: stored [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, ... (199 items)], now [1, 2]"
    assert all(len(line) < 130 for line in lines)


# -- one behaviour per test, exact values (issue 17: each kills a class of mutants) ---------------
import hashlib  # noqa: E402
import os  # noqa: E402
import signal  # noqa: E402
import threading  # noqa: E402
from dataclasses import asdict  # noqa: E402
from datetime import datetime, timezone  # noqa: E402
from pathlib import Path  # noqa: E402

from specguard.measure.metrics import CategorySummary, RunMetrics  # noqa: E402
from specguard.store import atomic  # noqa: E402
from specguard.store import baseline_file as bf  # noqa: E402
from specguard.store.baseline_file import FieldDifference, validate_document  # noqa: E402
from specguard.store.baselines import StagedWrite  # noqa: E402


def _doc(entries, config="eagle3", version=1):
    return {"schema": "specguard-baseline", "schema_version": version, "configuration": config, "entries": entries}


def _run(**over):
    r = {"run_index": 0, "launch_id": "L1", "output_throughput": 100.0, "total_output_tokens": 1000,
         "duration_s": 10.0, "completed": 8, "failed": 0, "accept_length": 3.0, "total_verify_ct": 333}
    r.update(over)
    return r


def _entry(runs, updated=None, fp=None):
    e = {"fingerprint": fp or {}, "cells": {"c1": {"sessions": [{"session_id": "s", "date": "d", "runs": runs}]}}}
    if updated is not None:
        e["updated"] = updated
    return e


def test_fingerprint_key_is_the_sorted_json_sha256_prefix():
    fields = {"b": 1, "a": [2, 3]}
    want = hashlib.sha256(b'{"a": [2, 3], "b": 1}').hexdigest()[:16]
    assert Fingerprint(fields).key == want
    assert Fingerprint({"a": [2, 3], "b": 1}).key == want and len(want) == 16


def test_differences_list_only_differing_fields_in_name_order():
    now = Fingerprint({"z": 1, "a": "x", "same": 5})
    stored = Fingerprint({"same": 5, "a": "y", "m": True})
    assert now.differences(stored) == [FieldDifference("a", "y", "x"), FieldDifference("m", True, None),
                                       FieldDifference("z", None, 1)]
    assert now.differences(now) == []


def test_short_keeps_a_repr_of_exactly_the_limit_and_cuts_one_longer():
    assert short("x" * 46) == "'" + "x" * 46 + "'"  # 48 characters: kept
    assert short("x" * 47) == "'" + "x" * 44 + "..."  # 49: cut to 45 + "..."
    assert short("abcdef", limit=5) == "'a..."


def test_short_lists_keep_whole_items_up_to_forty_characters():
    # 5-character items: six of them join to exactly 40 characters (kept), a seventh would be 47
    assert short([10000] * 20) == "[" + ", ".join(["10000"] * 6) + ", ... (20 items)]"
    assert short(tuple([10000] * 20)) == "[" + ", ".join(["10000"] * 6) + ", ... (20 items)]"
    assert short([1, 2]) == "[1, 2]"


def test_run_sample_from_metrics_copies_every_field():
    m = RunMetrics(concurrency=4, num_requests=10, completed=9, failed=1, duration_s=12.5, total_input_tokens=5,
                   total_output_tokens=1234, output_throughput=98.72, request_throughput=0.72, accept_length=2.5,
                   total_verify_ct=494, request_goodput=0.5)
    assert RunSample.from_metrics(m, 3, "L7") == RunSample(run_index=3, launch_id="L7", output_throughput=98.72,
                                                           total_output_tokens=1234, duration_s=12.5, completed=9,
                                                           failed=1, accept_length=2.5, total_verify_ct=494,
                                                           request_goodput=0.5)
    m.categories = {"code": CategorySummary(requests=3, completed=3, output_tokens=300, output_throughput=24.0,
                                            throughput_share=0.25, accept_length=3.5, total_verify_ct=86),
                    "chat": CategorySummary(requests=6, completed=6, output_tokens=900, output_throughput=72.0,
                                            throughput_share=0.75, accept_length=None, total_verify_ct=0)}
    cats = RunSample.from_metrics(m, 0, "L").categories
    assert cats == {"chat": {"accept_length": None, "output_throughput": 72.0, "output_tokens": 900, "total_verify_ct": 0},
                    "code": {"accept_length": 3.5, "output_throughput": 24.0, "output_tokens": 300, "total_verify_ct": 86}}
    assert list(cats) == ["chat", "code"]


def test_session_lists_throughputs_and_known_accept_lengths():
    s = session("s", [5.0, 6.0, 7.0])
    s.runs[1].accept_length = None
    assert s.throughputs == [5.0, 6.0, 7.0] and s.accept_lengths == [3.0, 3.0]


def test_now_iso_is_utc_to_the_second():
    text = bf.now_iso()
    t = datetime.fromisoformat(text)
    assert t.tzinfo == timezone.utc and t.microsecond == 0 and text.endswith("+00:00") and len(text) == 25


def test_record_sessions_returns_the_file_and_writes_sorted_indented_json(tmp_path):
    store = BaselineStore(tmp_path)
    fp = Fingerprint({"model": "m"})
    path = store.record_sessions("eagle3", fp, {16: session("s2", [7.0]), 4: session("s1", [5.0])}, keep=3)
    assert path == tmp_path / "eagle3.json" == store.path_for("eagle3")
    text = path.read_text(encoding="utf-8")
    doc = json.loads(text)
    assert text == json.dumps(doc, indent=1, sort_keys=True) + "\n"
    assert doc["schema"] == "specguard-baseline" and doc["schema_version"] == 1 and doc["configuration"] == "eagle3"
    entry = doc["entries"][fp.key]
    assert entry["fingerprint"] == {"model": "m"} and sorted(entry["cells"]) == ["c16", "c4"]
    assert datetime.fromisoformat(entry["updated"]).tzinfo == timezone.utc
    stored = entry["cells"]["c4"]["sessions"][0]
    assert stored["session_id"] == "s1" and stored["provenance"] == {"git_commit": "abc"}
    assert stored["runs"] == [asdict(session("s1", [5.0]).runs[0])]  # every field of the run, as it was
    assert stored["runs"][0]["output_throughput"] == 5.0 and stored["runs"][0]["duration_s"] == 200.0


def test_record_many_groups_writes_per_file_and_reports_replacements(tmp_path):
    store = BaselineStore(tmp_path / "deep" / "er")  # created, parents included
    (tmp_path / "deep" / "er").mkdir(parents=True)
    (tmp_path / "deep" / "er" / "mtp.json").write_text("{not json")
    f1, f2 = Fingerprint({"x": 1}), Fingerprint({"x": 2})
    out = store.record_many([StagedWrite("eagle3", f1, {1: session("a", [1.0])}),
                             StagedWrite("mtp", f1, {1: session("b", [2.0])}),
                             StagedWrite("eagle3", f2, {1: session("c", [3.0])})], keep=2, replace_damaged=True)
    d = tmp_path / "deep" / "er"
    assert [w.path for w in out] == [str(d / "eagle3.json"), str(d / "mtp.json"), str(d / "eagle3.json")]
    assert [w.sessions_kept for w in out] == [1, 1, 1] and [str(lv) for w in out for lv in w.levels] == ["c1"] * 3
    assert out[0].replaced is None and out[2].replaced is None
    assert out[1].replaced == f"baseline file {d / 'mtp.json'} is not valid JSON (truncated or corrupted?): Expecting property name enclosed in double quotes at line 1"
    assert [s.session_id for s in store.history("eagle3", f2, 1).sessions] == ["c"]
    assert [s.session_id for s in store.history("eagle3", f1, 1).sessions] == ["a"]
    assert [s.session_id for s in store.history("mtp", f1, 1).sessions] == ["b"]


def test_record_creates_missing_parent_folders(tmp_path):
    store = BaselineStore(tmp_path / "a" / "b")
    assert store.record_sessions("x", Fingerprint({}), {1: session("s", [1.0])}, keep=1) == tmp_path / "a" / "b" / "x.json"
    atomic.atomic_write_json(tmp_path / "c" / "d" / "y.json", {"k": 1})
    assert (tmp_path / "c" / "d" / "y.json").read_text() == '{\n "k": 1\n}\n'


def test_keep_one_keeps_only_the_newest_session(tmp_path):
    store = BaselineStore(tmp_path)
    for sid in ("a", "b", "c"):
        store.record_sessions("e", Fingerprint({}), {2: session(sid, [1.0])}, keep=1)
    assert [s.session_id for s in store.history("e", Fingerprint({}), 2).sessions] == ["c"]


def test_history_reads_the_stored_fingerprint_and_every_run(tmp_path):
    store = BaselineStore(tmp_path)
    fp = Fingerprint({"model": "m", "tp": 2})
    store.record_sessions("e", fp, {8: session("s", [4.0, 8.0])}, keep=2)
    hist = store.history("e", fp, 8)
    assert hist.fingerprint == fp and hist.sessions == [session("s", [4.0, 8.0])]
    assert BaselineStore(tmp_path / "none").history("e", fp, 8) is None


def test_history_of_an_empty_cell_is_none(tmp_path):
    fp = Fingerprint({})
    (tmp_path / "e.json").write_text(json.dumps(_doc({fp.key: {"fingerprint": {}, "cells": {}}}, config="e")))
    assert BaselineStore(tmp_path).history("e", fp, 1) is None


def test_other_fingerprints_newest_first_and_undated_last(tmp_path):
    entries = {"k1": _entry([_run()], "2026-01-01T00:00:00+00:00", {"n": 1}),
               "k2": _entry([_run()], None, {"n": 2}),
               "k3": _entry([_run()], "2026-06-01T00:00:00+00:00", {"n": 3})}
    (tmp_path / "e.json").write_text(json.dumps(_doc(entries, config="e")))
    store = BaselineStore(tmp_path)
    assert store.fingerprints("e") == [Fingerprint({"n": 3}), Fingerprint({"n": 1}), Fingerprint({"n": 2})]
    assert store.fingerprints("missing") == []


def test_new_files_get_the_umask_mode(tmp_path):
    old = os.umask(0o022)
    try:
        p = BaselineStore(tmp_path).record_sessions("e", Fingerprint({}), {1: session("s", [1.0])}, keep=1)
        assert os.stat(p).st_mode & 0o777 == 0o644
        os.umask(0o077)
        atomic.atomic_write_json(tmp_path / "private.json", {})
        assert os.stat(tmp_path / "private.json").st_mode & 0o777 == 0o600
        assert atomic.umask_mode() == 0o600 and os.umask(0o077) == 0o077  # reading it leaves it as it was
    finally:
        os.umask(old)


def test_temp_files_sit_next_to_the_target_with_a_hidden_name(tmp_path, monkeypatch):
    seen = []
    real = os.replace

    def spy(src, dst):
        seen.append((src, dst))
        real(src, dst)

    monkeypatch.setattr(atomic.os, "replace", spy)
    atomic.commit_json({tmp_path / "a.json": {"x": 1}, tmp_path / "b.json": [1]})
    assert [os.path.dirname(s) for s, _ in seen] == [str(tmp_path)] * 2
    assert [os.path.basename(s).startswith(".a.json.") for s, _ in seen] == [True, False]
    assert os.path.basename(seen[1][0]).startswith(".b.json.") and all(s.endswith(".tmp") for s, _ in seen)
    assert [d for _, d in seen] == [tmp_path / "a.json", tmp_path / "b.json"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.json", "b.json"]


def test_a_failed_write_leaves_no_file_of_the_set(tmp_path):
    with pytest.raises(ValueError):
        atomic.commit_json({tmp_path / "a.json": {"x": 1}, tmp_path / "b.json": {"y": float("inf")}})
    assert list(tmp_path.iterdir()) == []


def test_signals_are_deferred_until_the_block_ends_and_delivered_once():
    got = []
    old_int, old_term = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)

    def handler(sig, frame):
        got.append(sig)

    try:
        signal.signal(signal.SIGINT, handler)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        with atomic.signals_deferred():
            signal.raise_signal(signal.SIGINT)
            signal.raise_signal(signal.SIGINT)
            signal.raise_signal(signal.SIGTERM)
            assert got == []
        assert got == [signal.SIGINT]
        assert signal.getsignal(signal.SIGINT) is handler and signal.getsignal(signal.SIGTERM) == signal.SIG_IGN
        with atomic.signals_deferred():
            signal.raise_signal(signal.SIGTERM)  # ignored before: still ignored after
        assert got == [signal.SIGINT]
    finally:
        signal.signal(signal.SIGINT, old_int)
        signal.signal(signal.SIGTERM, old_term)


def test_signals_deferred_is_a_plain_block_off_the_main_thread():
    ran = []

    def work():
        with atomic.signals_deferred():
            ran.append(True)

    t = threading.Thread(target=work)
    t.start()
    t.join(10)
    assert ran == [True]


@pytest.mark.parametrize("doc,message", [
    ([], ' is not a specguard baseline (no "schema": "specguard-baseline")'),
    ({"schema": "other"}, ' is not a specguard baseline (no "schema": "specguard-baseline")'),
    ({"schema": "specguard-baseline", "configuration": "eagle3", "entries": {}},
     ": schema_version is missing or not an integer"),
    (_doc({}, version="1"), ": schema_version is missing or not an integer"),
    (_doc({}, version=2), " has schema_version 2, newer than this specguard understands (1); upgrade specguard"),
    (_doc({}, config="mtp"), " belongs to configuration 'mtp', not 'eagle3'"),
    (_doc([]), ': "entries" must be an object'),
    (_doc({"k": []}), ': entries.k needs "fingerprint" and "cells" objects'),
    (_doc({"k": {"fingerprint": [], "cells": {}}}), ': entries.k needs "fingerprint" and "cells" objects'),
    (_doc({"k": {"fingerprint": {}, "cells": []}}), ': entries.k needs "fingerprint" and "cells" objects'),
    (_doc({"k": {"fingerprint": {}, "cells": {"c1": []}}}), ": entries.k.cells.c1.sessions must be a list"),
    (_doc({"k": {"fingerprint": {}, "cells": {"c1": {"sessions": {}}}}}), ": entries.k.cells.c1.sessions must be a list"),
    (_doc({"k": {"fingerprint": {}, "cells": {"c1": {"sessions": [5]}}}}),
     ": entries.k.cells.c1.sessions[0] is malformed: a session must be an object"),
    (_doc({"k": _entry([])}), ": entries.k.cells.c1.sessions[0] is malformed: a session needs at least one run"),
    (_doc({"k": _entry([_run(output_throughput=0)])}),
     ": entries.k.cells.c1.sessions[0] is malformed: output_throughput must be a positive number, got 0"),
    (_doc({"k": _entry([_run(output_throughput="9")])}),
     ": entries.k.cells.c1.sessions[0] is malformed: output_throughput must be a positive number, got '9'"),
    (_doc({"k": _entry([_run(accept_length=0)])}),
     ": entries.k.cells.c1.sessions[0] is malformed: accept_length must be a positive number or null, got 0"),
    (_doc({"k": _entry([_run(accept_length="x")])}),
     ": entries.k.cells.c1.sessions[0] is malformed: accept_length must be a positive number or null, got 'x'"),
    (_doc({"k": _entry([_run(), _run(accept_length=-1.0)])}),
     ": entries.k.cells.c1.sessions[0] is malformed: accept_length must be a positive number or null, got -1.0"),
    (_doc({"k": _entry([_run(categories=[])])}),
     ": entries.k.cells.c1.sessions[0] is malformed: categories must map a category name to an object"),
    (_doc({"k": _entry([_run(categories={"code": {}, "chat": 2.5})])}),
     ": entries.k.cells.c1.sessions[0] is malformed: categories must map a category name to an object"),
])
def test_validation_messages_name_the_file_and_the_field(tmp_path, doc, message):
    path = tmp_path / "eagle3.json"
    with pytest.raises(BaselineError) as err:
        validate_document(doc, path, "eagle3")
    assert str(err.value) == f"baseline file {path}{message}"


def test_validation_accepts_null_accept_length_and_older_versions(tmp_path):
    doc = _doc({"k": _entry([_run(accept_length=None), _run(accept_length=2)])}, version=0)
    validate_document(doc, tmp_path / "e.json", "eagle3")  # raises nothing
    doc["entries"]["k"]["cells"]["c1"]["sessions"][0].update(session_id=7, provenance=None)
    (tmp_path / "eagle3.json").write_text(json.dumps(doc))
    s = BaselineStore(tmp_path).history("eagle3", Fingerprint({"other": 1}), 1)
    assert s is None
    loaded = bf.stored_session_from_json(doc["entries"]["k"]["cells"]["c1"]["sessions"][0])
    assert loaded.session_id == "7" and loaded.provenance == {} and loaded.date == "d"
    assert [r.accept_length for r in loaded.runs] == [None, 2]


def test_unreadable_files_name_the_problem(tmp_path):
    (tmp_path / "bin.json").write_bytes(b'{"schema": "\xff\xfe"}')
    with pytest.raises(BaselineError) as err:
        BaselineStore(tmp_path).load_file("bin")
    assert str(err.value) == f"baseline file {tmp_path / 'bin.json'} is not UTF-8 text (corrupted?)"
    (tmp_path / "cut.json").write_text('{\n "a": 1,\n')
    with pytest.raises(BaselineError) as err:
        BaselineStore(tmp_path).load_file("cut")
    assert str(err.value) == (f"baseline file {tmp_path / 'cut.json'} is not valid JSON (truncated or corrupted?): "
                              "Expecting property name enclosed in double quotes at line 3")
    assert BaselineStore(tmp_path).load_file("absent") is None


def test_request_rate_levels_are_stored_under_their_own_key(tmp_path):
    assert bf.cell_key(16) == "c16" and bf.cell_key("r8") == "r8"
    store = BaselineStore(tmp_path)
    fp = Fingerprint({})
    store.record_sessions("e", fp, {"r8": session("rate", [3.0])}, keep=2)
    store.record_sessions("e", fp, {8: session("conc", [4.0])}, keep=2)
    assert [s.session_id for s in store.history("e", fp, "r8").sessions] == ["rate"]
    assert [s.session_id for s in store.history("e", fp, 8).sessions] == ["conc"]
    assert sorted(json.loads((tmp_path / "e.json").read_text())["entries"][fp.key]["cells"]) == ["c8", "r8"]


def test_an_accept_length_of_one_is_valid():
    # 1.0 = no draft accepted in any verify step: a real (bad) measurement, not a damaged file
    validate_document(_doc({"k": _entry([_run(accept_length=1.0), _run(accept_length=1)])}), Path("e.json"), "eagle3")


def test_record_many_refuses_a_damaged_file_unless_asked(tmp_path):
    (tmp_path / "e.json").write_text("[]")
    with pytest.raises(BaselineError):
        BaselineStore(tmp_path).record_many([StagedWrite("e", Fingerprint({}), {1: session("s", [1.0])})], keep=1)
    assert (tmp_path / "e.json").read_text() == "[]"


def test_one_write_may_hold_concurrency_and_rate_levels(tmp_path):
    """Cells keyed by concurrency (ints) and by request rate ("r8") sort together in one write."""
    store = BaselineStore(tmp_path)
    s = StoredSession("s1", "2026-11-30T00:00:00+00:00", {}, [RunSample(0, "L0", 100.0, 100, 1.0, 4, 0, None, 0)])
    store.record_sessions("e", Fingerprint({"engine": "emulator"}), {8: s, "r8": s}, keep=2)
    doc = json.loads((tmp_path / "e.json").read_text())
    (entry,) = doc["entries"].values()
    assert set(entry["cells"]) == {"c8", "r8"}


@pytest.mark.parametrize("field,value,message", [
    ("output_throughput", 0, "output_throughput must be a positive number, got 0"),
    ("output_throughput", None, "output_throughput must be a positive number, got None"),
    ("accept_length", -1.0, "accept_length must be a positive number or null, got -1.0"),
    ("step_time_ms", "7", "step_time_ms must be a positive number or null, got '7'"),
    ("categories", {"code": 2.0}, "categories must map a category name to an object"),
])
def test_a_stored_run_names_the_first_figure_the_gates_could_not_use(field, value, message):
    from dataclasses import asdict

    from specguard.store.baseline_file import run_sample_from_json

    good = asdict(session("s", [100.0]).runs[0])
    assert run_sample_from_json({**good, "step_time_ms": 12.5}).step_time_ms == 12.5
    with pytest.raises(ValueError) as err:
        run_sample_from_json({**good, field: value})
    assert str(err.value) == message


def test_a_run_stores_its_correct_drafts_histogram_and_older_files_read_without_it():
    from specguard.store.baseline_file import StoredSession, run_sample_from_json

    old = {"run_index": 0, "launch_id": "L", "output_throughput": 100.0, "total_output_tokens": 100, "duration_s": 1.0,
           "completed": 4, "failed": 0, "accept_length": 3.0, "total_verify_ct": 40}
    assert run_sample_from_json(old).correct_drafts_histogram == []
    new = run_sample_from_json({**old, "correct_drafts_histogram": [10, 10, 20]})
    series = StoredSession(session_id="s", date="d", provenance={}, runs=[new, run_sample_from_json(old)])
    assert series.position_shares(1) == [0.75] and series.position_shares(2) == [0.5]  # >= 1 draft: 30 of 40
    assert series.position_shares(3) == []  # no step accepted 3 drafts: no share to take the log of
    with pytest.raises(ValueError, match="correct_drafts_histogram must be a list of step counts"):
        run_sample_from_json({**old, "correct_drafts_histogram": [1, -2]})
