"""Baseline files are locked outside the baselines directory (store/locks.py): nothing but
baselines appears in the directory a user commits, concurrent writers never lose each other's
sessions, and a lock file is never deleted by specguard."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from pathlib import Path

import pytest

from specguard.report.baseline_text import outcome_lines
from specguard.store import locks
from specguard.store.baseline_file import Fingerprint, RunSample, StoredSession
from specguard.store.baselines import BaselineStore, StagedWrite
from specguard.store.refresh import BaselineStage, Refresh, WriteFailureKind, commit_baseline_stages

ROOT = Path(__file__).resolve().parents[2]


def session(sid: str) -> StoredSession:
    return StoredSession(sid, "2026-12-01T00:00:00+00:00", {}, [RunSample(0, "L1", 100.0, 1000, 10.0, 8, 0, None, 0)])


@pytest.fixture
def temp_dir(tmp_path, monkeypatch) -> Path:
    """The system temp dir, as tempfile sees it, moved into the test's own directory."""
    d = tmp_path / "tmp"
    d.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(d))
    return d


def test_no_lock_file_appears_beside_the_baselines(tmp_path, temp_dir):
    store = BaselineStore(tmp_path / "baselines" / "suite")
    store.record_sessions("eagle3", Fingerprint({}), {1: session("s")}, keep=3)
    assert sorted(p.name for p in store.directory.iterdir()) == ["eagle3.json"]
    lock_dir = temp_dir / f"specguard-locks-{os.getuid()}"
    assert [p.name for p in lock_dir.iterdir()] == [locks.lock_path(store.path_for("eagle3")).name]
    assert oct(lock_dir.stat().st_mode & 0o777) == oct(0o700)


def test_one_file_has_one_lock_whatever_path_names_it(tmp_path, temp_dir):
    real = tmp_path / "baselines"
    real.mkdir()
    (tmp_path / "link").symlink_to(real)
    os.chdir(tmp_path)
    assert locks.lock_path(real / "e.json") == locks.lock_path(tmp_path / "link" / "e.json") == locks.lock_path(
        Path("baselines/e.json"))
    assert locks.lock_path(real / "e.json") != locks.lock_path(real / "f.json")


def test_lock_files_an_older_specguard_left_are_neither_read_nor_deleted(tmp_path, temp_dir):
    d = tmp_path / "baselines"
    d.mkdir()
    old = d / "eagle3.json.lock"
    old.write_text("")
    os.utime(old, (1_000_000, 1_000_000))
    BaselineStore(d).record_sessions("eagle3", Fingerprint({}), {1: session("s")}, keep=3)
    assert sorted(p.name for p in d.iterdir()) == ["eagle3.json", "eagle3.json.lock"]
    assert old.stat().st_mtime == 1_000_000 and old.read_text() == ""


def test_a_held_lock_makes_a_second_writer_wait(tmp_path, temp_dir):
    store = BaselineStore(tmp_path)
    done = threading.Event()

    def write() -> None:
        store.record_sessions("e", Fingerprint({}), {1: session("second")}, keep=3)
        done.set()

    with locks.locked([store.path_for("e")]):
        writer = threading.Thread(target=write)
        writer.start()
        assert not done.wait(0.5)  # blocked while the lock is held
        assert not store.path_for("e").exists()
    assert done.wait(10)
    writer.join(10)
    assert [s.session_id for s in store.history("e", Fingerprint({}), 1).sessions] == ["second"]


def test_a_waiter_whose_lock_file_was_removed_locks_the_new_one(tmp_path, temp_dir):
    """Someone removes a lock file while it is held and waited for (temp-dir cleaning): the
    waiter must not enter beside a newcomer that locked the new file of the same name."""
    target = tmp_path / "e.json"
    inside: list[str] = []
    b_in, c_locked, c_release = threading.Event(), threading.Event(), threading.Event()

    def b() -> None:
        with locks.locked([target]):
            inside.append("b")
            b_in.set()

    def c() -> None:
        with locks.locked([target]):
            inside.append("c")
            c_locked.set()
            c_release.wait(10)
            inside.append("c out")

    with locks.locked([target]):  # A
        waiter = threading.Thread(target=b)
        waiter.start()
        time.sleep(0.3)  # B opens the lock file and waits on it
        locks.lock_path(target).unlink()
        newcomer = threading.Thread(target=c)
        newcomer.start()
        assert c_locked.wait(10)  # C locked the new file at once (A holds the removed one)
    assert not b_in.wait(0.5)  # A released: B got the removed file, saw it gone, and waits for C
    c_release.set()
    assert b_in.wait(10)
    waiter.join(10)
    newcomer.join(10)
    assert inside == ["c", "c out", "b"]


def test_a_lock_directory_that_is_not_this_users_own_is_refused_in_one_line(tmp_path, temp_dir):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (temp_dir / f"specguard-locks-{os.getuid()}").symlink_to(elsewhere)
    with pytest.raises(locks.LockError) as err:
        locks.lock_dir()
    assert str(err.value) == (f"cannot lock baseline files: {temp_dir / f'specguard-locks-{os.getuid()}'} is not a "
                              f"directory of this user (uid {os.getuid()}); remove it or set TMPDIR to another directory")
    stage = BaselineStage(complete=True, problems=[], writes=[StagedWrite("e", Fingerprint({}), {1: session("s")})])
    out = commit_baseline_stages([stage], BaselineStore(tmp_path / "b"), keep=3)
    assert out.result == Refresh.WRITE_FAILED and out.failure is not None and out.failure.kind == WriteFailureKind.LOCK_DIR
    assert outcome_lines(out) == [f"nothing written: {err.value}"]
    assert list(elsewhere.iterdir()) == []


_WRITER = textwrap.dedent('''
    import sys, time
    from pathlib import Path
    from specguard.store.baseline_file import Fingerprint, RunSample, StoredSession
    from specguard.store.baselines import BaselineStore, StagedWrite

    directory, me, other, commits = Path(sys.argv[1]), sys.argv[2], sys.argv[3], int(sys.argv[4])
    (directory.parent / f"ready-{me}").touch()
    deadline = time.monotonic() + 60
    while not (directory.parent / f"ready-{other}").exists():  # start together
        assert time.monotonic() < deadline, "the other writer never started"
        time.sleep(0.001)
    store = BaselineStore(directory)
    run = [RunSample(0, "L1", 100.0, 1000, 10.0, 8, 0, None, 0)]
    for i in range(commits):
        s = StoredSession(f"{me}-{i}", "2026-12-01T00:00:00+00:00", {}, run)
        store.record_many([StagedWrite(n, Fingerprint({"x": 1}), {1: s, "r8": s}) for n in ("baseline", "eagle3")],
                          keep=10_000)
''')


@pytest.mark.e2e
def test_two_processes_writing_the_same_files_lose_nothing_and_stay_all_or_nothing(tmp_path):
    """Two sessions committing to one baselines directory at once: every commit of either lands
    in both files (no lost update, no half commit), and the directory holds only the baselines."""
    directory, commits = tmp_path / "baselines", 15
    env = {**os.environ, "TMPDIR": str(tmp_path / "tmp"), "PYTHONPATH": str(ROOT)}
    (tmp_path / "tmp").mkdir()
    procs = [subprocess.Popen([sys.executable, "-c", _WRITER, str(directory), me, other, str(commits)], env=env,
                              stderr=subprocess.PIPE, text=True)
             for me, other in (("p", "q"), ("q", "p"))]
    try:
        for p in procs:
            _, err = p.communicate(timeout=120)
            assert p.returncode == 0, err
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait(10)
    want = sorted(f"{me}-{i}" for me in "pq" for i in range(commits))
    for name in ("baseline", "eagle3"):
        doc = json.loads((directory / f"{name}.json").read_text())
        (entry,) = doc["entries"].values()
        for cell in ("c1", "r8"):
            assert sorted(s["session_id"] for s in entry["cells"][cell]["sessions"]) == want, (name, cell)
    assert sorted(p.name for p in directory.iterdir()) == ["baseline.json", "eagle3.json"]  # no lock, no temp file
    assert len(list((tmp_path / "tmp" / f"specguard-locks-{os.getuid()}").iterdir())) == 2
