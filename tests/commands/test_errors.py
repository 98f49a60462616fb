"""Every problem a user can cause or meet: one line saying what happened and what to do, the
documented exit code (docs/ci.md: 0 ok, 1 regression, 2 interrupted, 3 could not measure, 4 usage
or configuration), and never a Python traceback or chained-exception noise.

Each case runs the real command in a subprocess (pytest perf_tests or the specguard CLI) against
real sockets on 127.0.0.1: a closed port, an unresolvable name, a plain HTTP server that is not
SGLang, and the emulator started with --api-key. Nothing is mocked.
"""

from __future__ import annotations

import dataclasses
import http.server
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
from emulator_suite import emulator_suite_toml

from specguard.config import ADVANCED_KEYS, SweepConfig
from specguard.server import free_port

pytestmark = pytest.mark.e2e
REPO = Path(__file__).resolve().parents[2]
EXIT_NOT_MEASURED, EXIT_USAGE = 3, 4
NOISE = ("Traceback (most recent call last)", "During handling of the above exception", "pluggy", "_pytest/")


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("errors")
    (d / "suite.toml").write_text(emulator_suite_toml(concurrency=(1,), output_len=16, cap=16, must_win_up_to=None))
    (d / "typo.toml").write_text(emulator_suite_toml(concurrency=(1,)).replace("repeats = 3", "repeat = 3"))
    (d / "one-repeat.toml").write_text(emulator_suite_toml(concurrency=(1,)).replace("repeats = 3", "repeats = 1"))
    (d / "broken.toml").write_text("[sweep\n")
    (d / "not-results.json").write_text(json.dumps({"hello": 1}))
    (d / "not-json.json").write_text("{")
    return d


@pytest.fixture(scope="module")
def not_sglang() -> str:
    """A real HTTP server that is not SGLang: every GET answers 404 with an HTML page."""
    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), lambda *a: Quiet(*a, directory="/nonexistent"))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def keyed_emulator(tmp_path_factory) -> str:
    """The emulator started with --api-key (SGLang answers 401 to requests without the key)."""
    port = free_port()
    log = tmp_path_factory.mktemp("emu") / "emulator.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "specguard.emulator.launch_server", "--model-path",
                                 "/models/specguard-fast", "--port", str(port), "--api-key", "s3cret",
                                 "--emulator-profile", "fast"], stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                httpx.get(url + "/health", timeout=1)
                break
            except httpx.HTTPError:
                time.sleep(0.2)
        yield url
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=20)


def closed_port() -> int:
    return free_port()  # free now, nobody listens: connection refused


def run(args: list[str], cwd: Path = REPO, timeout: float = 120) -> tuple[int, str, float]:
    start = time.monotonic()
    proc = subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "CI": "1", "SPECGUARD_API_KEY": ""})
    return proc.returncode, proc.stdout + proc.stderr, time.monotonic() - start


def pytest_cmd(work: Path, *args: str, suite: str = "suite.toml") -> list[str]:
    return [sys.executable, "-m", "pytest", str(REPO / "perf_tests"), "-p", "no:cacheprovider", "-q",
            "--suite", str(work / suite), "--baseline-dir", str(work / "baselines"),
            "--server-log-dir", str(work / "logs"), *args]


def cli_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "specguard.cli", *args]


def first_problem_line(out: str) -> str:
    """The first line a user reads about the problem: pytest's `ERROR: ...` usage line, the first
    failed or skipped test's message, or the CLI's stderr line."""
    lines = out.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("ERROR: "):
            return line
        if line.startswith("_") and " test_" in line and line.rstrip().endswith("_"):
            return lines[i + 1]
        if line.startswith("SKIPPED ["):
            return line.split(": ", 1)[1] if ": " in line else line
    return next((ln for ln in lines if ln.startswith("specguard")), lines[0] if lines else "")


def assert_clean(out: str) -> None:
    for noise in NOISE:
        assert noise not in out, f"{noise!r} printed:\n{out}"


# (id, command builder, expected exit code, expected first line builder)
CASES = [
    ("repeats-flag", lambda w, u: pytest_cmd(w, "--repeats", "1"), EXIT_USAGE,
     lambda w, u: "ERROR: --repeats 1 (command line): the gates need at least 2 runs per cell to estimate noise; "
                  "set repeats >= 2"),
    ("repeats-file", lambda w, u: pytest_cmd(w, suite="one-repeat.toml"), EXIT_USAGE,
     lambda w, u: f"ERROR: {w / 'one-repeat.toml'}: sweep.repeats = 1: the gates need at least 2 runs per cell to "
                  f"estimate noise; set repeats >= 2"),
    ("concurrency-flag", lambda w, u: pytest_cmd(w, "--concurrency", "1,x"), EXIT_USAGE,
     lambda w, u: "ERROR: --concurrency 1,x (command line): use comma-separated positive integers, e.g. 1,4,16"),
    ("family-alpha-flag", lambda w, u: pytest_cmd(w, "--family-alpha", "0.7"), EXIT_USAGE,
     lambda w, u: "ERROR: --family-alpha 0.7 (command line): must be in (0, 0.5), e.g. 0.01"),
    ("suite-typo", lambda w, u: pytest_cmd(w, suite="typo.toml"), EXIT_USAGE,
     lambda w, u: f"ERROR: {w / 'typo.toml'}: unknown key sweep.repeat; known keys: "
                  f"{', '.join(f.name for f in dataclasses.fields(SweepConfig) if ADVANCED_KEYS.get(f.name) != 'sweep')}"),
    ("suite-missing", lambda w, u: pytest_cmd(w, suite="nope.toml"), EXIT_USAGE,
     lambda w, u: f"ERROR: suite file {w / 'nope.toml'} does not exist (set --suite)"),
    ("suite-not-toml", lambda w, u: pytest_cmd(w, suite="broken.toml"), EXIT_USAGE,
     lambda w, u: f"ERROR: {w / 'broken.toml'}: not valid TOML: Expected ']' at the end of a table declaration "
                  f"(at line 1, column 7)"),
    ("url-without-scheme", lambda w, u: pytest_cmd(w, "--server-url", "127.0.0.1:30000"), EXIT_USAGE,
     lambda w, u: "ERROR: --server-url '127.0.0.1:30000' is not an http(s) URL; write the scheme, e.g. http://127.0.0.1:30000"),
    ("url-unknown-config", lambda w, u: pytest_cmd(w, "--server-url", "mtp=http://127.0.0.1:1"), EXIT_USAGE,
     lambda w, u: f"ERROR: --server-args/--server-url name unknown configuration(s) mtp; "
                  f"{w / 'suite.toml'} has baseline, eagle3"),
    ("server-args-form", lambda w, u: pytest_cmd(w, "--server-args", "fast"), EXIT_USAGE,
     lambda w, u: "ERROR: --server-args takes NAME=\"ARGS\", got 'fast'"),
    ("requests-flag", lambda w, u: pytest_cmd(w, "--requests", "0"), EXIT_USAGE,
     lambda w, u: "ERROR: --requests 0 (command line): must be >= 1"),
    ("benchmark-without-plugin", lambda w, u: pytest_cmd(w, "-p", "no:benchmark", "--specguard-benchmark"), EXIT_USAGE,
     lambda w, u: "ERROR: --specguard-benchmark needs pytest-benchmark: pip install pytest-benchmark (and drop "
                  "-p no:benchmark), or leave the option out"),
    ("connection-refused", lambda w, u: pytest_cmd(w, "-k", "eagle3 and throughput", "--server-url", u["refused"]),
     EXIT_NOT_MEASURED,
     lambda w, u: f"eagle3-c1: not measured: {u['refused']}: connection refused (no server listens there); "
                  f"start the server or fix --server-url"),
    ("name-not-resolved", lambda w, u: pytest_cmd(w, "-k", "eagle3 and throughput", "--server-url",
                                                  "http://no-such-host.invalid:30000"), EXIT_NOT_MEASURED,
     lambda w, u: "eagle3-c1: not measured: http://no-such-host.invalid:30000: host name 'no-such-host.invalid' could "
                  "not be resolved; check --server-url"),
    ("not-sglang", lambda w, u: pytest_cmd(w, "-k", "eagle3 and throughput", "--server-url", u["not_sglang"]),
     EXIT_NOT_MEASURED,
     lambda w, u: f"eagle3-c1: not measured: {u['not_sglang']} is not an SGLang server: GET /health_generate answered "
                  f"404; point --server-url at SGLang's HTTP port"),
    ("missing-api-key", lambda w, u: pytest_cmd(w, "-k", "eagle3 and throughput", "--server-url", u["keyed"]),
     EXIT_NOT_MEASURED,
     lambda w, u: f"eagle3-c1: not measured: {u['keyed']}/server_info answered 401 Unauthorized: the server wants "
                  f"an API key; pass --api-key KEY or set SPECGUARD_API_KEY"),
    # the specguard command: the same codes
    ("bench-url-without-scheme", lambda w, u: cli_cmd("bench", "--url", "127.0.0.1:1"), EXIT_USAGE,
     lambda w, u: "specguard bench: --url '127.0.0.1:1' is not an http(s) URL; write the scheme, e.g. http://127.0.0.1:1"),
    ("bench-refused", lambda w, u: cli_cmd("bench", "--url", u["refused"]), EXIT_NOT_MEASURED,
     lambda w, u: f"specguard bench: {u['refused']}: connection refused (no server listens there); start the server "
                  f"or fix --url"),
    ("bench-missing-api-key", lambda w, u: cli_cmd("bench", "--url", u["keyed"]), EXIT_NOT_MEASURED,
     lambda w, u: f"specguard bench: {u['keyed']}/server_info answered 401 Unauthorized: the server wants an API "
                  f"key; pass --api-key KEY or set SPECGUARD_API_KEY"),
    ("compare-missing-file", lambda w, u: cli_cmd("compare", str(w / "a.json"), str(w / "b.json")), EXIT_USAGE,
     lambda w, u: f"specguard compare: {w / 'a.json'}: no such file"),
    ("recommend-not-results", lambda w, u: cli_cmd("recommend", str(w / "not-results.json")), EXIT_USAGE,
     lambda w, u: f"specguard recommend: {w / 'not-results.json'} is not a specguard results file (schema None, "
                  f"expected 'specguard-results'); write one with: pytest perf_tests --results-json FILE"),
    ("report-not-json", lambda w, u: cli_cmd("report", str(w / "not-json.json"), "--report-dir", str(w / "r")), EXIT_USAGE,
     lambda w, u: f"specguard report: {w / 'not-json.json'} is not JSON (Expecting property name enclosed in double "
                  f"quotes: line 1 column 2 (char 1)); expected a results file: write one with: pytest perf_tests "
                  f"--results-json FILE"),
    ("recommend-confidence", lambda w, u: cli_cmd("recommend", str(w / "x.json"), "--confidence", "2"), EXIT_USAGE,
     lambda w, u: "specguard recommend: --confidence 2.0 must be in (0, 1), e.g. 0.95"),
    ("study-missing-suite", lambda w, u: [sys.executable, "-m", "research.study", "--suite", str(w / "nope.toml")],
     EXIT_USAGE, lambda w, u: f"python -m research.study: suite file {w / 'nope.toml'} does not exist (set --suite)"),
    ("unknown-command", lambda w, u: cli_cmd("benchmark"), EXIT_USAGE,
     lambda w, u: "specguard: error: argument command: invalid choice: 'benchmark' (choose from ..."),
]


@pytest.fixture(scope="module")
def urls(not_sglang, keyed_emulator) -> dict[str, str]:
    return {"refused": f"http://127.0.0.1:{closed_port()}", "not_sglang": not_sglang, "keyed": keyed_emulator}


@pytest.mark.parametrize("make_cmd, code, first_line", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_one_line_and_exit_code(work, urls, make_cmd, code, first_line):
    got, out, seconds = run(make_cmd(work, urls))
    assert got == code, out
    expected = first_line(work, urls)
    if expected.endswith("..."):  # the rest lists what exists, which grows
        assert first_problem_line(out).startswith(expected[:-3]), out
    else:
        assert first_problem_line(out) == expected, out
    assert_clean(out)
    assert seconds < 60, f"took {seconds:.0f}s: attach problems must fail in seconds"


def test_cases_cover_at_least_fifteen_problems():
    assert len(CASES) >= 15 and len({c[0] for c in CASES}) == len(CASES)


def test_unreachable_attach_fails_in_seconds(work, urls):
    """Not after the launch timeout (600 s) or the attach readiness timeout (30 s). pytest's own
    session time is checked (the interpreter's start-up on a loaded 2-core machine is not ours)."""
    got, out, _ = run(pytest_cmd(work, "-k", "eagle3 and throughput", "--server-url", urls["refused"]))
    session_s = float(re.search(r" in ([0-9.]+)s", out).group(1))
    assert got == EXIT_NOT_MEASURED and session_s < 20, (session_s, out)
