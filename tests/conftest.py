import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from specguard.server import free_port

CAPTURES = Path(__file__).parent / "fixtures" / "captures"


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
