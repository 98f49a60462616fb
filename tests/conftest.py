import os
import platform
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from specguard.server import free_port

CAPTURES = Path(__file__).parent / "fixtures" / "captures"
# A test that starts a process carries one of these markers, so the fast tier (`pytest tests -m
# "not e2e and not real_sglang and not real_engine"`) starts none: _processes_only_where_marked.
PROCESS_MARKERS = ("e2e", "real_sglang", "real_engine", "soak")
platform.processor()  # `uname -p`, run once and cached by the platform module: read here, before any test
try:  # matplotlib builds its font cache on its first import on a machine (running fc-list): here, before any test
    import matplotlib.font_manager  # noqa: F401
except ImportError:  # the plots extra is not installed: the tests that draw are skipped
    pass


@pytest.fixture(autouse=True)
def _processes_only_where_marked(request, monkeypatch):
    """Fails an unmarked test at the first process it starts (subprocess, asyncio's subprocesses
    and a fork), naming the marker it needs."""
    if any(request.node.get_closest_marker(m) for m in PROCESS_MARKERS):
        return

    def refuse(what: object) -> None:
        pytest.fail(f"{request.node.nodeid} starts a process ({what!r}) but is not marked "
                    f"{' / '.join(PROCESS_MARKERS)}: mark it (the fast tier runs no process)", pytrace=False)

    # The session reads the checkout's commit with `git rev-parse` (session/history.git_commit);
    # unit tests run sessions in-process and read none; e2e tests read the real one.
    monkeypatch.setattr("specguard.session.gate_session.git_commit", lambda: "")
    monkeypatch.setattr(subprocess.Popen, "__init__", lambda self, args, *a, **k: refuse(args))
    monkeypatch.setattr(os, "fork", lambda: refuse("os.fork"))
    monkeypatch.setattr(os, "posix_spawn", lambda path, *a, **k: refuse(path))


@pytest.fixture
def captures() -> Path:
    return CAPTURES


@pytest.fixture
def emulator(tmp_path):
    """Emulators started by hand (as a user starts SGLang) on 127.0.0.1, each in its own process
    group; ``start(*flags)`` returns its URL once /health_generate answers 200. Stopped by the test."""
    procs = []

    def start(*flags: str) -> str:
        port = free_port()
        log = open(tmp_path / f"emulator-{port}.log", "wb")
        proc = subprocess.Popen([sys.executable, "-m", "specguard.emulator.launch_server", "--port", str(port),
                                 "--model-path", "/models/specguard-fast", "--emulator-profile", "fast", *flags],
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        procs.append(proc)
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if httpx.get(url + "/health_generate", timeout=2).status_code == 200:
                    return url
            except httpx.HTTPError:
                pass
            assert proc.poll() is None, (tmp_path / f"emulator-{port}.log").read_text()
            time.sleep(0.2)
        raise AssertionError("emulator did not become ready")

    yield start
    for proc in procs:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=15)
