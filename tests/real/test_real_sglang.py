"""Real SGLang 0.5.23 on the CPU, through the suite's own SGLang engine: plain decoding, and
speculative decoding through SGLang's own CPU speculation path.

What runs, in this order (module scope; .ci/run_real_sglang.sh prints the artifacts):
1. the sglang-cpu suite (perf_tests/suites/sglang-cpu.toml) launches `python -m sglang.launch_server`
   for `baseline` and records baselines in a temp dir; an unchanged rerun gated on them passes; a
   rerun with the CPU loaded on purpose fails exactly its throughput cells; after each run no
   process of the server's group is left (the scheduler and detokenizer included);
2. a server that dies during start-up (a bad flag) fails the session clearly: exit code, command,
   log tail;
3. a server started by hand: the suite attaches to it and measures; /flush_cache answers 400
   while another client's request runs; the id bound is read from the server (the model's
   512-token vocabulary) and a request set built for it runs without crashing the server; the live
   contract check against the emulator launched with the same flags (shapes only: one line per
   difference); idle CPU; teardown leaves no process of its group;
4. idle CPU with `--sleep-on-idle`: the four speculative servers started by hand, idle together;
5. speculation (SPECGUARD_SGL_CPU_SPEC=1: intel_amx through SGLang's override_platform and the
   PyTorch sgl_kernel CPU ops of tools/sgl_kernel_standin/; docs/research/sglang-cpu.md section 7): the
   sglang-cpu-spec suite launched (update, unchanged, a perturbed draft whose accept-length gate
   fails); four servers started by hand (reference, standalone, ngram, eagle3 adaptive): greedy
   token identity against the reference on every prompt, accept length on /generate, chat sglext
   and sglang:spec_accept_length, attach with the steps in use per run, the speculative contract
   against the emulator, the op-call log;
6. the sgl_kernel stand-in's log: symbols were resolved (so the log works) and none was CALLED;
7. a soak of standalone at c2 (SPECGUARD_REAL_SOAK_S s: 300 by default, 80 in CI; 20-second windows): passes, its windows reported;
8. `specguard ab` between two builds (the venv's python, and a wrapper of it whose verify op is
   slower): standalone "different (worse)", its reference never "different";
9. MTP as NEXTN (tools/build_tiny_models.py mimo-mtp) at C = 1, 16, 64 against its reference: the
   cap of 48 read back and named, the scheduler's log at <= 48 running, the crossover and recommend.

Skipped unless SPECGUARD_SGLANG_PYTHON names the SGLang venv's python (.ci/setup_sglang.sh makes
it); once it is set, a missing interpreter or model is a failure, never a skip.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import httpx
import pytest
import real_suite_runs
from real_suite_runs import engine_python, tiny_models

from specguard.ab.report import AB

pytestmark = [pytest.mark.real_sglang, pytest.mark.real_engine]
REPO = Path(__file__).resolve().parents[2]
SUITE = REPO / "perf_tests" / "suites" / "sglang-cpu.toml"
SPEC_SUITE = REPO / "perf_tests" / "suites" / "sglang-cpu-spec.toml"
RUN_TIMEOUT_S = 600
STARTUP_TIMEOUT_S = 300
sys.path.insert(0, str(REPO / "tools"))
import contract_shapes  # noqa: E402

# The baseline configuration's flags (the suite file's), for the servers started by hand here.
SERVER_FLAGS = ["--device", "cpu", "--attention-backend", "torch_native", "--disable-cuda-graph", "--enable-metrics",
                "--max-running-requests", "8", "--mem-fraction-static", "0.05", "--max-total-tokens", "65536"]
SERVER_ENV = {"SGLANG_USE_CPU_ENGINE": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
JOB_TAG_VAR = "SPECGUARD_SGLANG_JOB_TAG"  # set in every server's environment: finds survivors


# ------------------------------------------------------------------------------ environment

def sglang_env() -> dict[str, str]:
    """The environment the job needs; a set-but-broken one fails (only an unset one skips)."""
    python = engine_python("SPECGUARD_SGLANG_PYTHON", ".ci/setup_sglang.sh", ".ci/run_real_sglang.sh")
    models = tiny_models("SPECGUARD_SGLANG_MODELS", "~/.cache/specguard/tiny-models-sglang",
                         ("target", "draft-same", "draft-70", "draft-20", "draft-under-test", "eagle3-target",
                          "eagle3-head", "eagle3-miswired", "eagle3-under-test"), python)
    env = {**os.environ, "SPECGUARD_SGLANG_PYTHON": python, "SPECGUARD_SGLANG_MODELS": str(models)}
    env.setdefault("SPECGUARD_SGL_KERNEL_LOG", str(Path(os.environ.get("SPECGUARD_REAL_SGLANG_ARTIFACTS", "/tmp"))
                                                   / "sgl_kernel_standin.log"))
    return env


@pytest.fixture(scope="module")
def env() -> dict[str, str]:
    e = sglang_env()
    os.environ.setdefault("SPECGUARD_SGL_KERNEL_LOG", e["SPECGUARD_SGL_KERNEL_LOG"])
    return e


@pytest.fixture(scope="module")
def work_dir(tmp_path_factory) -> Path:
    where = os.environ.get("SPECGUARD_REAL_SGLANG_ARTIFACTS")
    path = Path(where) if where else tmp_path_factory.mktemp("real-sglang")
    path.mkdir(parents=True, exist_ok=True)
    return path


def figure(work: Path, line: str) -> None:
    """A measured figure, kept for docs/research/sglang-cpu.md (the job prints figures.txt)."""
    with open(work / "figures.txt", "a") as f:
        f.write(line + "\n")


# ------------------------------------------------------------------------------ processes

def processes_with_tag(tag: str) -> list[str]:
    """Live processes whose environment carries JOB_TAG_VAR=tag (children inherit it)."""
    needle = f"{JOB_TAG_VAR}={tag}".encode()
    found = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            if needle in (d / "environ").read_bytes().split(b"\0"):
                state = (d / "stat").read_text().rsplit(")", 1)[1].split()[0]
                if state != "Z":
                    found.append(f"{d.name} {(d / 'cmdline').read_bytes()[:120]!r}")
        except OSError:
            continue
    return found


def kill_tagged(tag: str | None) -> None:
    """SIGKILL the process group of every live process carrying this job's tag (only ours)."""
    if not tag:
        return
    for entry in processes_with_tag(tag):
        pid = int(entry.split()[0])
        try:
            os.killpg(os.getpgid(pid), signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def group_members(pgid: int) -> list[int]:
    members = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            fields = (d / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            members.append(int(d.name))
    return members


def group_cpu_seconds(pgid: int) -> float:
    ticks = 0
    for pid in group_members(pgid):
        try:
            fields = (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()
            ticks += int(fields[11]) + int(fields[12])
        except (OSError, IndexError, ValueError):
            continue
    return ticks / os.sysconf("SC_CLK_TCK")


class HandServer:
    """`python -m sglang.launch_server` started by hand (not by the suite), in its own group."""

    def __init__(self, env: dict[str, str], work: Path, name: str, extra: list[str] = (),
                 flags: list[str] = SERVER_FLAGS, extra_env: dict[str, str] | None = None, wait: bool = True,
                 model: str = "target") -> None:
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.tag = uuid.uuid4().hex[:12]
        self.log = work / f"hand-{name}-{self.port}.log"
        self.cmd = [env["SPECGUARD_SGLANG_PYTHON"], "-m", "sglang.launch_server",
                    "--model-path", str(Path(env["SPECGUARD_SGLANG_MODELS"]) / model),
                    "--host", "127.0.0.1", "--port", str(self.port), *flags, *extra]
        self.started = time.monotonic()
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(self.cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         env={**env, **SERVER_ENV, **(extra_env or {}), JOB_TAG_VAR: self.tag},
                                         start_new_session=True)
        if wait:
            self.wait_ready()

    def wait_ready(self) -> None:
        deadline = self.started + STARTUP_TIMEOUT_S
        while True:
            if self.proc.poll() is not None:
                raise AssertionError(f"hand-started server exited ({self.proc.returncode}); log tail:\n{self.tail()}")
            try:
                if httpx.get(self.url + "/health_generate", timeout=10).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise AssertionError(f"hand-started server not ready after {STARTUP_TIMEOUT_S}s:\n{self.tail()}")
            time.sleep(0.5)
        self.startup_s = time.monotonic() - self.started

    def tail(self, n: int = 30) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-n:])

    def stop(self) -> None:
        """SIGTERM the group, wait, SIGKILL what is left: only the group started here."""
        if self.proc.poll() is None or group_members(self.proc.pid):
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                pass
            deadline = time.monotonic() + 10
            while group_members(self.proc.pid) and time.monotonic() < deadline:
                time.sleep(0.2)
            if group_members(self.proc.pid):
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def idle_cpu_percent(pgid: int, seconds: float = 5.0) -> float:
    a = group_cpu_seconds(pgid)
    time.sleep(seconds)
    return 100.0 * (group_cpu_seconds(pgid) - a) / seconds


def single_stream_tok_s(url: str, input_ids: list[int], tokens: int = 256, timeout_s: float = 300.0) -> float:
    body = {"input_ids": input_ids, "sampling_params": {"max_new_tokens": tokens, "temperature": 0, "ignore_eos": True}}
    httpx.post(url + "/generate", json={**body, "sampling_params": {**body["sampling_params"], "max_new_tokens": 8}},
               timeout=60)  # warm
    t = time.perf_counter()
    r = httpx.post(url + "/generate", json=body, timeout=timeout_s)
    r.raise_for_status()
    return r.json()["meta_info"]["completion_tokens"] / (time.perf_counter() - t)


# ------------------------------------------------------------------------------ suite runs

def run_suite(work: Path, baselines: Path, tag: str, env: dict[str, str], *args: str,
              cpus: set[int] | None = None, suite: Path = SUITE,
              timeout_s: float = RUN_TIMEOUT_S) -> tuple[int, str, dict[str, str], dict]:
    """One `pytest perf_tests` session of a suite (default sglang-cpu; real_suite_runs.run_suite);
    every process it starts carries the job tag, swept if the session has to be killed."""
    return real_suite_runs.run_suite(suite, work, baselines, tag, env, *args, timeout_s=timeout_s, cpus=cpus,
                                     on_timeout=lambda: kill_tagged(env.get(JOB_TAG_VAR)))


def verdicts(doc: dict, gate: str = "throughput") -> dict[int, str]:
    return {int(d["level"][1:]): d["verdict"] for d in doc.get("decisions", []) if d["gate"] == gate}


def mean_tok_s(doc: dict) -> dict[int, float]:
    out = {}
    for cell in doc.get("cells", []):
        runs = [r["output_throughput"] for r in cell["runs"]]
        out[int(cell["level"][1:])] = sum(runs) / len(runs)
    return out


def cpu_hog(cpu: int) -> subprocess.Popen:
    """A busy loop pinned to one CPU, in its own group (the 'slowed on purpose' load), bounded to
    10 minutes."""
    code = "import time\nend = time.monotonic() + 600\nwhile time.monotonic() < end:\n    pass\n"
    return subprocess.Popen([sys.executable, "-c", code], start_new_session=True,
                            preexec_fn=lambda: os.sched_setaffinity(0, {cpu}))


def test_suite_launches_records_baselines_and_gates_unchanged_and_slowed_runs(env, work_dir, tmp_path):
    baselines = tmp_path / "baselines"
    tag = uuid.uuid4().hex[:12]
    env = {**env, JOB_TAG_VAR: tag}

    # 1. Launch `baseline`, measure it, store it as the first baseline session.
    code, out, res, doc = run_suite(work_dir, baselines, "update", env, "--update-baselines")
    assert code == 0 and res and set(res.values()) == {"passed"}, out[-4000:]
    server = doc["servers"]["baseline"]
    assert server["mode"] == "launched" and server["effective_args"]["engine_version"] == "0.5.23", server
    assert "sglang.launch_server" in " ".join(server["command"])
    assert all(r["failed"] == 0 for c in doc["cells"] for r in c["runs"]), doc["cells"]
    assert (baselines / "baseline.json").is_file()
    assert not processes_with_tag(tag), processes_with_tag(tag)  # teardown: nothing of its group left
    tok_s = mean_tok_s(doc)
    figure(work_dir, f"suite update run: tok/s C=1 {tok_s[1]:.0f}, C=2 {tok_s[2]:.0f} (mean of 3 runs x 3C requests, "
                     f"32 in / 64 out tokens)")
    calibrate_and_check(work_dir, work_dir / "update-results.json", tok_s, env)

    # 2. Unchanged rerun gated on those baselines: a new launch, same fingerprint, passes.
    code, out, res, doc = run_suite(work_dir, baselines, "unchanged", env, "--require-baselines")
    assert code == 0 and set(res.values()) == {"passed"}, out[-4000:]
    assert set(verdicts(doc).values()) <= {"pass", "inconclusive"}, verdicts(doc)
    assert not processes_with_tag(tag), processes_with_tag(tag)

    # 3. Slowed on purpose: the session and the server it launches confined to one CPU, which a
    # pinned busy loop also wants (about half a core instead of two). Nothing about the server
    # changed, so the fingerprint matches, the gate compares, and the throughput cells fail with
    # the measured ratio in their message. (Four free-running busy loops did the same but made
    # the start-up and the relaunch take over 10 minutes; this is bounded by one core's share.)
    cpu = min(os.sched_getaffinity(0))
    hog = cpu_hog(cpu)
    try:
        code, out, res, doc = run_suite(work_dir, baselines, "slowed", env, "--require-baselines", cpus={cpu})
    finally:
        os.killpg(hog.pid, signal.SIGKILL)
        hog.wait()
    assert not processes_with_tag(tag), processes_with_tag(tag)
    failed = {t: m for t, m in res.items() if m != "passed"}
    assert code == 1 and failed, out[-4000:]
    # every step is slower too, so the engine's step-time cells may fail beside the tok/s ones
    assert any(t.startswith("test_throughput[baseline-c") for t in failed), failed
    assert all(t.startswith(("test_throughput[baseline-c", "test_step_time[baseline-c")) and m.startswith("failure")
               for t, m in failed.items()), failed
    assert "fail" in verdicts(doc).values(), verdicts(doc)
    figure(work_dir, f"slowed run (one CPU shared with a busy loop): tok/s {mean_tok_s(doc)}; verdicts {verdicts(doc)}")


def calibrate_and_check(work: Path, results: Path, real_tok_s: dict[int, float], env: dict[str, str]) -> None:
    """An emulator profile of this machine fitted on the real results. `calibrate` itself simulates
    the written profile and fails beyond 10 % of the measured tok/s; then the emulator is LAUNCHED
    with it and measured live, and must come within 25 % of the real server at C=1 and C=2."""
    profile = work / "sglang-cpu-profile.toml"
    proc = subprocess.run([sys.executable, "-m", "research.calibrate", str(results), "--out", str(profile)],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    (work / "calibrate.txt").write_text(proc.stdout + proc.stderr)
    assert proc.returncode == 0 and profile.is_file(), proc.stdout[-3000:] + proc.stderr[-3000:]
    port = _free_port()
    model = str(Path(env["SPECGUARD_SGLANG_MODELS"]) / "target")
    with open(work / f"emulator-profile-{port}.log", "wb") as f:
        emu = subprocess.Popen([sys.executable, "-m", "specguard.emulator.launch_server", "--model-path", model,
                                "--host", "127.0.0.1", "--port", str(port), *SERVER_FLAGS,
                                "--emulator-profile", str(profile)],
                               stdout=f, stderr=subprocess.STDOUT, start_new_session=True, cwd=REPO)
    try:
        url = f"http://127.0.0.1:{port}"
        wait_http(url, emu)
        emulated = {c: closed_loop_tok_s(url, c) for c in sorted(real_tok_s)}
    finally:
        os.killpg(emu.pid, signal.SIGTERM)
        emu.wait(30)
    figure(work, "emulator with the fitted profile, live: " + ", ".join(
        f"C={c} {emulated[c]:.0f} tok/s (real {real_tok_s[c]:.0f}, {emulated[c] / real_tok_s[c] - 1:+.0%})" for c in emulated))
    for c in emulated:
        assert abs(emulated[c] / real_tok_s[c] - 1) < 0.25, (c, emulated, real_tok_s)


def wait_http(url: str, proc: subprocess.Popen, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"{proc.args} exited with {proc.returncode}"
        try:
            if httpx.get(url + "/health_generate", timeout=5).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise AssertionError(f"{url} not ready after {timeout_s}s")


def closed_loop_tok_s(url: str, concurrency: int, requests_per_worker: int = 3, input_len: int = 32,
                      output_len: int = 64) -> float:
    """The suite's cell shape, by hand: C workers, each sends its next request when the last
    one finished; one warm-up round, then output tokens / wall time of one measured round."""
    def worker(w: int, out: list[int]) -> None:
        with httpx.Client(base_url=url, timeout=120) as c:
            for i in range(requests_per_worker):
                ids = [100 + (w * 7 + i * 13 + k) % 400 for k in range(input_len)]
                r = c.post("/generate", json={"input_ids": ids, "sampling_params": {
                    "max_new_tokens": output_len, "temperature": 0, "ignore_eos": True}})
                out.append(r.json()["meta_info"]["completion_tokens"])

    result = 0.0
    for _ in range(2):  # warm-up round, measured round
        tokens: list[int] = []
        threads = [threading.Thread(target=worker, args=(w, tokens)) for w in range(concurrency)]
        t = time.perf_counter()
        for th in threads:
            th.start()
        for th in threads:
            th.join(300)
        result = sum(tokens) / (time.perf_counter() - t)
    return result


def test_server_that_dies_during_startup_fails_clearly(env, work_dir, tmp_path):
    tag = uuid.uuid4().hex[:12]
    code, out, res, doc = run_suite(work_dir, tmp_path / "b", "badflag", {**env, JOB_TAG_VAR: tag},
                                    "--server-args", "baseline=--no-such-flag 1", "--concurrency", "1")
    assert code == 3, out[-3000:]
    failure = doc["servers"]["baseline"]["failure"] if doc else out
    assert "exited during start-up" in failure and "exit code: 2" in failure, failure
    assert "command:" in failure and "sglang.launch_server" in failure and "--no-such-flag" in failure, failure
    assert "unrecognized arguments: --no-such-flag" in failure, failure  # the log tail
    assert not processes_with_tag(tag)


# ------------------------------------------------------------------------------ by hand

@pytest.fixture(scope="module")
def hand_server(env, work_dir):
    server = HandServer(env, work_dir, "baseline")
    figure(work_dir, f"start-up (to /health_generate 200): {server.startup_s:.1f} s  [{' '.join(server.cmd[1:])}]")
    yield server
    server.stop()


def test_attach_to_a_server_started_by_hand(env, work_dir, tmp_path, hand_server):
    code, out, res, doc = run_suite(work_dir, tmp_path / "b", "attach", env, "--server-url", hand_server.url)
    assert code == 0, out[-4000:]
    server = doc["servers"]["baseline"]
    assert server["attached"] and server["effective_args"]["engine_version"] == "0.5.23", server
    assert all(r["failed"] == 0 and r["output_throughput"] > 0 for c in doc["cells"] for r in c["runs"])
    assert hand_server.proc.poll() is None  # attach never stops a server it did not start


def test_flush_cache_is_refused_while_a_foreign_request_runs(hand_server):
    from specguard.engines.base import ServerBusy
    from specguard.engines.sglang import SGLangEngine

    # The raw route: 400 "Flush cache failed." while another client's request streams.
    busy = contract_shapes._flush_while_busy(hand_server.url, {}, list(range(10, 42)))
    assert (busy["status"], busy["body_first_line"]) == (400, "Flush cache failed."), busy
    assert (busy["timeout=1 status"], busy["timeout=1 body_first_line"]) == (400, "Timed out waiting for idle state."), busy
    # The suite's engine adapter: accepted when idle; while the foreign request runs it waits
    # (?timeout=S), then says the cell cannot be measured, with the server's own counts.
    with httpx.Client(base_url=hand_server.url) as client:
        SGLangEngine().flush_cache(client)
        with contract_shapes.foreign_stream(hand_server.url, {}, list(range(10, 42))) as streaming:
            assert streaming
            # 0.5.23 with ?timeout=S answers 400 "Timed out waiting for idle state." (flush_wrapper.py)
            with pytest.raises(ServerBusy, match=r"/flush_cache: '(Timed out waiting for idle state|Flush cache failed)") as exc:
                SGLangEngine().flush_cache(client, timeout_s=2.0)
            # the counts come from /metrics (sglang:num_running_reqs is refreshed with the scheduler's
            # decode log, so it may still read 0 this early on a slow machine)
            assert exc.value.running is not None and "running" in str(exc.value), str(exc.value)


def test_ids_are_bounded_by_the_served_vocabulary_and_the_server_survives(hand_server, env):
    from specguard.workload import (
        WorkloadSpec,
        build_workload,
        fit_to_vocab,
        resolve_vocab_bound,
        vocab_size_from_server,
    )

    with httpx.Client(base_url=hand_server.url) as client:
        size, how = vocab_size_from_server(client)
        assert size == 512, how  # config.json of the served model (a local directory here)
        # Without the model directory: the out-of-vocabulary probe, refused with 400, server alive.
        import specguard.workload as wl

        real_reader = wl.vocab_size_from_model_dir
        wl.vocab_size_from_model_dir = lambda path: None
        try:
            size, how = vocab_size_from_server(client)
        finally:
            wl.vocab_size_from_model_dir = real_reader
        assert size == 512 and "valid range is [0, 512)" in how, how
        spec = WorkloadSpec(kind="random-ids", input_len=32, output_len=8)  # default bound 32000: unsafe here
        bound = resolve_vocab_bound(spec, client=client)
        workload = fit_to_vocab(build_workload(spec, num_prompts=32), bound.vocab_size)
        assert max(max(p.input_ids) for p in workload.prompts) < 512
        for p in workload.prompts:
            r = client.post("/generate", json={"input_ids": list(p.input_ids), "sampling_params": {
                "max_new_tokens": 8, "temperature": 0, "ignore_eos": True}}, timeout=60)
            assert r.status_code == 200, r.text[:300]
        assert client.get("/health_generate", timeout=30).status_code == 200
    assert hand_server.proc.poll() is None, hand_server.tail()


def test_live_contract_emulator_matches_the_real_server(env, work_dir, hand_server):
    """The emulator launched with the same flags answers the same requests with the same shapes."""
    port = _free_port()
    model = str(Path(env["SPECGUARD_SGLANG_MODELS"]) / "target")
    log = work_dir / f"emulator-{port}.log"
    with open(log, "wb") as f:
        emu = subprocess.Popen([sys.executable, "-m", "specguard.emulator.launch_server", "--model-path", model,
                                "--host", "127.0.0.1", "--port", str(port), *SERVER_FLAGS],
                               stdout=f, stderr=subprocess.STDOUT, start_new_session=True, cwd=REPO)
    try:
        url = f"http://127.0.0.1:{port}"
        wait_http(url, emu)
        ids = list(range(10, 42))
        real, emulated = contract_shapes.probe(hand_server.url, ids), contract_shapes.probe(url, ids)
    finally:
        os.killpg(emu.pid, signal.SIGTERM)
        emu.wait(30)
    diffs = contract_shapes.compare(real, emulated, ("real", "emulator"))
    (work_dir / "contract-diff.txt").write_text("".join(d + "\n" for d in diffs) + f"{len(diffs)} difference(s)\n")
    assert not diffs, f"{len(diffs)} contract difference(s), real vs emulator:\n" + "\n".join(diffs)


def test_idle_cpu_and_teardown_of_the_hand_started_server(work_dir, hand_server):
    figure(work_dir, f"single stream, 256 tokens: {single_stream_tok_s(hand_server.url, list(range(10, 42))):.0f} tok/s")
    time.sleep(2)
    figure(work_dir, f"idle CPU of the server's process group, default flags: {idle_cpu_percent(hand_server.proc.pid):.0f} %")
    pgid = hand_server.proc.pid
    assert len(group_members(pgid)) >= 3, group_members(pgid)  # launcher, scheduler, detokenizer
    hand_server.stop()
    assert hand_server.proc.returncode is not None
    assert not group_members(pgid) and not processes_with_tag(hand_server.tag), group_members(pgid)


# ------------------------------------------------------------------------------ speculation

# SGLang's own CPU speculation path (docs/research/sglang-cpu.md section 7): intel_amx reached through
# SGLang's override_platform(has_amx=True) and the sgl_kernel CPU ops in PyTorch, both switched on
# by SPECGUARD_SGL_CPU_SPEC=1 (tools/sgl_kernel_standin/).
SPEC_FLAGS = ["--device", "cpu", "--attention-backend", "intel_amx", "--disable-cuda-graph", "--enable-metrics",
              "--max-running-requests", "8", "--mem-fraction-static", "0.2", "--max-total-tokens", "65536"]
SPEC_ENV = {"SPECGUARD_SGL_CPU_SPEC": "1"}
SPEC_RUN_TIMEOUT_S = 900
SPEC_STEPS = 3  # standalone and eagle3: --speculative-num-steps 3, topk 1, 4 draft tokens
IDENTITY_PROMPTS = 16
IDENTITY_TOKENS = 40
SPEC_STATE: dict = {}  # readings shared between the tests below (the job's table)
# eagle3 serves the second tiny target (tools/tiny_eagle3.py): its greedy output is the first
# target's, token for token, so the hand-started `reference` stays its reference.
SPEC_MODELS = {"eagle3": "eagle3-target"}


def spec_server_args(models: Path) -> dict[str, list[str]]:
    """The hand-started servers: the reference without speculation and three speculative ones,
    each as the suite file's configuration of the same name (sglang-cpu-spec.toml)."""
    chain = ["--speculative-num-steps", str(SPEC_STEPS), "--speculative-eagle-topk", "1",
             "--speculative-num-draft-tokens", str(SPEC_STEPS + 1)]
    return {
        "reference": [],
        "standalone": ["--speculative-algorithm", "STANDALONE", "--speculative-draft-model-path",
                       str(models / "draft-same"), *chain],
        "ngram": ["--speculative-algorithm", "NGRAM", "--speculative-num-draft-tokens", "8"],
        "eagle3": ["--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", str(models / "eagle3-under-test"),
                   *chain, "--speculative-adaptive"],
    }


def cell_readings(doc: dict) -> dict[tuple[str, int], dict]:
    """Per cell: mean tok/s, mean accept length (/generate), summed correct-drafts histogram,
    steps in use per run, server-side accept lengths per run."""
    out = {}
    for cell in doc.get("cells", []):
        runs = cell["runs"]
        acc = [r["accept_length"] for r in runs if r.get("accept_length") is not None]
        hist: list[int] = []
        for r in runs:
            for i, n in enumerate(r.get("correct_drafts_histogram") or []):
                hist += [0] * (i + 1 - len(hist))
                hist[i] += n
        out[(cell["config"], int(cell["level"][1:]))] = {
            "tok_s": sum(r["output_throughput"] for r in runs) / len(runs),
            "accept": sum(acc) / len(acc) if acc else None,
            "runs_with_histogram": sum(1 for r in runs if r.get("correct_drafts_histogram")),
            "runs": len(runs), "hist": hist,
            "steps": [r.get("spec_num_steps") for r in runs],
            "server_accept": [r.get("server_accept_length") for r in runs],
        }
    return out


def only_runs_disagree(outcomes: dict[str, str]) -> bool:
    """Every test that did not pass is a cell left not measured because its launches' runs
    disagree (decide/consistency.py): the machine, not the server under test."""
    bad = [m for m in outcomes.values() if m != "passed"]
    return bool(bad) and all("not measured: the runs of every launch disagree" in m for m in bad)


def table_lines(tag: str, doc: dict) -> list[str]:
    lines = []
    for (config, c), v in sorted(cell_readings(doc).items(), key=lambda kv: (kv[0][0], kv[0][1])):
        acc = f"{v['accept']:.3f}" if v["accept"] is not None else "-"
        steps = f" steps in use {v['steps']}" if any(s is not None for s in v["steps"]) else ""
        hist = f" correct-drafts histogram {v['hist']}" if v["hist"] else ""
        lines.append(f"{tag}: {config:10s} C={c}  {v['tok_s']:7.1f} tok/s  accept {acc}{hist}{steps}")
    return lines


def test_spec_suite_launches_records_gates_unchanged_and_catches_a_perturbed_draft(env, work_dir, tmp_path):
    """The sglang-cpu-spec suite launched by specguard (reference on intel_amx, ngram, standalone,
    weak): update, unchanged, then the standalone draft replaced by a perturbed copy under the
    same path (draft-under-test -> draft-70): its accept-length gate must fail, named."""
    baselines = tmp_path / "spec-baselines"
    tag = uuid.uuid4().hex[:12]
    env = {**env, JOB_TAG_VAR: tag}
    models = Path(env["SPECGUARD_SGLANG_MODELS"])
    link = models / "draft-under-test"
    assert link.is_symlink() and os.readlink(link) == "draft-same", \
        f"{link} must point at draft-same: rerun tools/build_tiny_models.py --out {models}"
    launched = ("-k", "not eagle3")  # eagle3 is measured attached (test_spec_attach_...)

    code, out, res, doc = run_suite(work_dir, baselines, "spec-update", env, "--update-baselines", *launched,
                                    suite=SPEC_SUITE, timeout_s=SPEC_RUN_TIMEOUT_S)
    assert code == 0 and res and set(res.values()) == {"passed"}, out[-4000:]
    # the engine's step time of every run: decode time over spec_verify_ct (per token without speculation)
    assert all(r["step_time_ms"] and r["step_time_ms"] > 0 for c in doc["cells"] for r in c["runs"]), doc["cells"]
    for name in ("reference", "ngram", "standalone", "weak"):
        server = doc["servers"][name]
        assert server["mode"] == "launched" and server["effective_args"]["engine_version"] == "0.5.23", server
        eff = server["effective_args"]
        assert (eff.get("attention_backend") or eff.get("server_args", {}).get("attention_backend")) == "intel_amx", eff
    assert all(r["failed"] == 0 for c in doc["cells"] for r in c["runs"]), doc["cells"]
    cells = cell_readings(doc)
    for c in (1, 2):
        assert cells["reference", c]["accept"] is None
        assert cells["standalone", c]["accept"] == pytest.approx(SPEC_STEPS + 1, abs=0.05), cells["standalone", c]
        assert 1.1 < cells["weak", c]["accept"] < 1.5, cells["weak", c]  # draft-20: 10/8 = 1.25
        assert cells["ngram", c]["accept"] > 1.5, cells["ngram", c]
        for name in ("ngram", "standalone", "weak"):  # the correct-drafts histogram, every run
            assert cells[name, c]["runs_with_histogram"] == cells[name, c]["runs"], (name, c, cells[name, c])
        hist = cells["standalone", c]["hist"]
        assert len(hist) == SPEC_STEPS + 1 and hist[SPEC_STEPS] == sum(hist), hist  # every verify accepted all
    SPEC_STATE["update"] = doc
    for line in table_lines("spec suite, update run", doc):
        figure(work_dir, line)
    assert not processes_with_tag(tag), processes_with_tag(tag)

    code, out, res, doc = run_suite(work_dir, baselines, "spec-unchanged", env, "--require-baselines", *launched,
                                    suite=SPEC_SUITE, timeout_s=SPEC_RUN_TIMEOUT_S)
    if code == 3 and only_runs_disagree(res):
        # Not a fault: on this shared 2-core machine a busy spell can scatter a cell's short runs by
        # 15-20 % around an unusually fast one (ngram c1 237, 193, 192 and 219, 258, 224 tok/s in a
        # clean-clone CI run, 362, 364, 359 in its update run), and the gate then leaves the cell not
        # measured, as it should. The measurement is retried once, and the figures say so.
        figure(work_dir, "spec suite, unchanged run: not measured (runs disagree) in "
               + ", ".join(sorted(t for t, m in res.items() if m != "passed")) + "; measured again")
        code, out, res, doc = run_suite(work_dir, baselines, "spec-unchanged", env, "--require-baselines", *launched,
                                        suite=SPEC_SUITE, timeout_s=SPEC_RUN_TIMEOUT_S)
    assert code == 0 and set(res.values()) == {"passed"}, out[-4000:]
    assert set(verdicts(doc, "accept_length").values()) == {"pass"}, verdicts(doc, "accept_length")
    for line in table_lines("spec suite, unchanged run", doc):
        figure(work_dir, line)
    assert not processes_with_tag(tag), processes_with_tag(tag)

    # A perturbed draft under the same path: nothing in the fingerprint changes, the gate compares.
    perturbed = link.with_name("draft-under-test.perturbed")
    perturbed.unlink(missing_ok=True)
    perturbed.symlink_to("draft-70")
    os.replace(perturbed, link)
    try:
        code, out, res, doc = run_suite(work_dir, baselines, "spec-perturbed", env, "--require-baselines",
                                        "-k", "standalone and not weak", suite=SPEC_SUITE,
                                        timeout_s=SPEC_RUN_TIMEOUT_S)  # (weak is STANDALONE too: its marker)
    finally:
        restore = link.with_name("draft-under-test.restore")
        restore.unlink(missing_ok=True)
        restore.symlink_to("draft-same")
        os.replace(restore, link)
    assert not processes_with_tag(tag), processes_with_tag(tag)
    failed = {t: m for t, m in res.items() if m != "passed"}
    assert code == 1, out[-4000:]
    assert {"test_accept_length[standalone-c1]", "test_accept_length[standalone-c2]"} <= set(failed), failed
    assert all("standalone" in t and m.startswith("failure") for t, m in failed.items()), failed
    for line in table_lines("spec suite, perturbed draft (draft-70 as standalone's draft)", doc):
        figure(work_dir, line)
    figure(work_dir, f"spec suite, perturbed draft: failed {sorted(failed)}")


@pytest.fixture(scope="module")
def spec_servers(env, work_dir):
    """reference, standalone, ngram and eagle3 (adaptive) started by hand, together, each with
    --sleep-on-idle (four idle schedulers would otherwise busy-poll two cores)."""
    servers: dict[str, HandServer] = {}
    try:
        for name, extra in spec_server_args(Path(env["SPECGUARD_SGLANG_MODELS"])).items():
            servers[name] = HandServer(env, work_dir, f"spec-{name}", [*extra, "--sleep-on-idle"], flags=SPEC_FLAGS,
                                       extra_env=SPEC_ENV, wait=False, model=SPEC_MODELS.get(name, "target"))
        for server in servers.values():
            server.wait_ready()
        figure(work_dir, "speculative servers started by hand, together (to /health_generate 200): "
               + ", ".join(f"{n} {s.startup_s:.0f} s" for n, s in servers.items()))
        yield servers
    finally:
        for server in servers.values():
            server.stop()
        for server in servers.values():
            assert not group_members(server.proc.pid), (server.cmd, group_members(server.proc.pid))


def _generate(url: str, ids: list[int], tokens: int) -> dict:
    r = httpx.post(url + "/generate", json={"input_ids": ids, "sampling_params": {
        "max_new_tokens": tokens, "temperature": 0, "ignore_eos": True}}, timeout=300)
    r.raise_for_status()
    return r.json()


def identity_prompts() -> list[list[int]]:
    """Random ids within the 512-token vocabulary, and repetitive ones (a 5-id phrase repeated)."""
    import random

    rng = random.Random(24)
    prompts = [[rng.randrange(3, 512) for _ in range(rng.randint(8, 40))] for _ in range(IDENTITY_PROMPTS - 4)]
    prompts += [[rng.randrange(3, 512) for _ in range(5)] * 6 for _ in range(4)]
    return prompts


def test_idle_servers_with_sleep_on_idle_leave_the_cpu_idle(spec_servers, work_dir):
    """The four speculative servers, started by hand with --sleep-on-idle and idle: each process
    group uses under 30 % of a core (without the flag an idle scheduler busy-polls one:
    test_idle_cpu_and_teardown_of_the_hand_started_server's figure). The tests below share two
    cores between these four servers and their load, so this is their precondition."""
    groups = {name: server.proc.pid for name, server in spec_servers.items()}
    before = {name: group_cpu_seconds(pgid) for name, pgid in groups.items()}
    time.sleep(5.0)
    idle = {name: 100.0 * (group_cpu_seconds(pgid) - before[name]) / 5.0 for name, pgid in groups.items()}
    figure(work_dir, "idle CPU of each speculative server's process group, --sleep-on-idle: "
           + ", ".join(f"{name} {pct:.0f} %" for name, pct in idle.items()))
    assert all(pct < 30 for pct in idle.values()), idle


def test_speculative_greedy_output_is_token_identical_to_the_reference(spec_servers, work_dir):
    """Greedy verification: every prompt's output under speculation equals the reference server's
    greedy output (no speculation, same model and attention backend), 4 requests at a time so that
    verification runs batched."""
    from concurrent.futures import ThreadPoolExecutor

    prompts = identity_prompts()
    outputs = {}
    for name, server in spec_servers.items():
        with ThreadPoolExecutor(4) as pool:
            outputs[name] = list(pool.map(lambda p, url=server.url: _generate(url, p, IDENTITY_TOKENS), prompts))
    ref = [o["output_ids"] for o in outputs["reference"]]
    assert all(len(o) == IDENTITY_TOKENS for o in ref)
    identical = {}
    for name in ("standalone", "ngram", "eagle3"):
        same = [o["output_ids"] == r for o, r in zip(outputs[name], ref)]
        identical[name] = sum(same)
        metas = [o["meta_info"] for o in outputs[name]]
        accept = [m["spec_accept_length"] for m in metas]
        figure(work_dir, f"token identity, {name}: {sum(same)}/{len(prompts)} prompts identical to the reference's "
                         f"greedy output ({IDENTITY_TOKENS} tokens each, 4 concurrent); per-request accept length "
                         f"min {min(accept):.3f} mean {sum(accept) / len(accept):.3f} max {max(accept):.3f}")
        SPEC_STATE[f"identity-{name}"] = (sum(same), len(prompts), accept)
        if name == "standalone":  # a draft that predicts as the target does accepts every draft
            assert min(accept) >= SPEC_STEPS + 1 - 0.01, accept
            assert all(m["spec_correct_drafts_histogram"][SPEC_STEPS] == m["spec_verify_ct"] for m in metas), metas[0]
        elif name == "ngram":  # the output repeats with period 10: n-gram lookup finds it
            assert sum(accept) / len(accept) > 1.5, accept
        else:  # eagle3-head drafts the target's next tokens; adaptive steps (1-7) set how many per verify
            assert all(m["spec_correct_drafts_histogram"][0] == 0 for m in metas), metas[0]  # no first draft rejected
            assert min(accept) >= 2 - 0.01, accept
    assert identical == {n: len(prompts) for n in identical}, identical


def _metric(url: str, name: str) -> float | None:
    text = httpx.get(url + "/metrics", timeout=30).text
    values = [float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
              if line.startswith(name + "{") or line.startswith(name + " ")]
    return values[0] if values else None


def _chat_sglext(url: str, tokens: int) -> dict:
    """A streamed /v1/chat/completions asking for return_spec_tokens_details: the sglext chunk."""
    body = {"model": "default", "messages": [{"role": "user", "content": "Count with me."}], "max_tokens": tokens,
            "temperature": 0, "ignore_eos": True, "stream": True, "return_spec_tokens_details": True}
    details = None
    with httpx.stream("POST", url + "/v1/chat/completions", json=body, timeout=300) as r:
        assert r.status_code == 200, r.read()[:300]
        for line in r.iter_lines():
            if line.startswith("data:") and "sglext" in line:
                details = json.loads(line[5:])["sglext"]["spec_tokens_details"]
    assert details is not None, "no sglext.spec_tokens_details chunk"
    return details


# Tokens per request for the metric comparison: >= 80 verifies at each server's steady accept length
# (standalone 4, ngram up to 8, eagle3 up to 8: adaptive, 7 steps at one request), so the
# scheduler's last decode-log fold window (40 verifies) lies inside the request.
METRIC_TOKENS = {"standalone": 400, "ngram": 720, "eagle3": 720}


def test_accept_length_on_generate_chat_sglext_and_the_servers_metric_agree(spec_servers, work_dir):
    """Per server: one /generate and one streamed chat request (sglext.spec_tokens_details). The
    server's sglang:spec_accept_length is accepted tokens / verifies over its last decode-log fold
    window (every 40 decode batches, metrics_reporter.py log_decode_stats); each request is long
    enough (>= 80 verifies) that this window lies inside it, and nothing else runs. Then the
    request's completion_tokens / spec_verify_ct agrees with it within 1/spec_verify_ct: the request
    counts the token of its prefill, the scheduler's verify counter does not. NGRAM is warmed first
    with the same prompt (its corpus then holds the output's n-grams), so its acceptance is steady from
    a request's start."""
    lines = []
    for name in ("standalone", "ngram", "eagle3"):
        url, tokens = spec_servers[name].url, METRIC_TOKENS[name]
        if name == "ngram":  # the same prompt once before: the corpus then holds this output's n-grams
            _generate(url, [11, 12, 13, 14], tokens)
        gen = _generate(url, [11, 12, 13, 14], tokens)["meta_info"]
        gauge_gen = _metric(url, "sglang:spec_accept_length")
        if name == "ngram":
            _chat_sglext(url, tokens)
        chat = _chat_sglext(url, tokens)
        gauge_chat = _metric(url, "sglang:spec_accept_length")
        for route, req, gauge in (("/generate", gen, gauge_gen), ("chat sglext", chat, gauge_chat)):
            v = req["spec_verify_ct"]
            explained = 1.0 / v
            lines.append(f"accept length, {name}, {route}: request {req['spec_accept_length']:.4f} "
                         f"(verify ct {v}), sglang:spec_accept_length {gauge}, difference "
                         f"{abs(req['spec_accept_length'] - (gauge or 0)):.4f} (prefill token explains {explained:.4f})")
            SPEC_STATE.setdefault("metric-lines", []).append(lines[-1])
            assert v >= 80, lines[-1]
            assert gauge is not None and gauge > 0, (name, route, gauge)
            assert abs(req["spec_accept_length"] - gauge) <= explained + 1e-9, lines[-1]
            assert req["spec_correct_drafts_histogram"] and sum(req["spec_correct_drafts_histogram"]) == v, req
    for line in lines:
        figure(work_dir, line)


def test_spec_attach_to_the_hand_started_servers_with_adaptive_steps(env, work_dir, tmp_path, spec_servers):
    """Attach mode: the suite measures standalone, ngram and eagle3 on the servers started by hand
    (each with its reference, the hand-started intel_amx server) and records their baselines (the
    mis-wired head's test gates on eagle3's); eagle3 runs --speculative-adaptive, so every run of it
    reports the steps in use (sglang:spec_num_steps)."""
    urls = [f"{n}={s.url}" for n, s in spec_servers.items()]
    args = [a for u in urls for a in ("--server-url", u)]
    baselines = work_dir / "spec-attach-baselines"
    shutil.rmtree(baselines, ignore_errors=True)
    # sglang:spec_num_steps is set at the scheduler's decode-log fold (every 40 decode batches) and
    # reads 0 before the first; eagle3's runs here (accept length ~8) are shorter than one window,
    # so one long request first gives the gauge its steps (the metric test does too, when it runs).
    _generate(spec_servers["eagle3"].url, [11, 12, 13, 14], METRIC_TOKENS["eagle3"])
    code, out, res, doc = run_suite(work_dir, baselines, "spec-attach", env, *args, "-k",
                                    "(standalone or ngram or eagle3) and not weak", "--concurrency", "2", "--repeats", "2",
                                    "--update-baselines", suite=SPEC_SUITE, timeout_s=SPEC_RUN_TIMEOUT_S)
    assert code == 0, out[-4000:]
    for name in ("standalone", "ngram", "eagle3", "reference"):
        server = doc["servers"][name]
        assert server["attached"] and server["effective_args"]["engine_version"] == "0.5.23", server
    cells = cell_readings(doc)
    assert {c for _, c in cells} == {2}, sorted(cells)
    for c in (2,):
        steps = cells["eagle3", c]["steps"]
        assert steps and all(isinstance(s, (int, float)) and s >= 1 for s in steps), steps  # adaptive: read per run
        assert cells["standalone", c]["accept"] == pytest.approx(SPEC_STEPS + 1, abs=0.05)
        # eagle3-head drafts the target's next tokens: every verify accepts all of its steps' drafts
        assert cells["eagle3", c]["accept"] > SPEC_STEPS, cells["eagle3", c]
        hist = cells["eagle3", c]["hist"]
        assert hist and hist[0] == 0, hist  # no verify step rejected the first draft
    assert doc["servers"]["eagle3"]["effective_args"].get("speculative_adaptive") is True
    SPEC_STATE["attach-baselines"] = baselines
    for server in spec_servers.values():
        assert server.proc.poll() is None  # attach never stops a server it did not start
    for line in table_lines("spec suite, attach run", doc):
        figure(work_dir, line)


def test_a_head_wired_one_layer_late_fails_its_accept_length_gate_naming_the_drafter(env, work_dir, spec_servers):
    """Seed 001 on real SGLang: eagle3's head replaced, under the same path, by its mis-wired twin
    (tools/tiny_eagle3.py: the same bytes with eagle_aux_hidden_state_layer_ids [0, 1, 2] instead of
    [-1, 0, 1], so SGLang hands it the hidden states one layer late: models/llama.py
    set_eagle3_layers_to_capture captures the stream entering layer id + 1). Gated attached against
    the baselines the attach test recorded from the right head: the output stays token-identical
    (greedy verification), test_accept_length[eagle3-c2] fails, the summary names the drafter, and
    the per-position acceptance shows the break at the first draft position."""
    baselines = SPEC_STATE.get("attach-baselines")
    assert baselines is not None and any(baselines.rglob("*eagle3*")), \
        "no eagle3 baseline: the attach test (which records it) failed or did not run"
    models = Path(env["SPECGUARD_SGLANG_MODELS"])
    link = models / "eagle3-under-test"
    assert link.is_symlink() and os.readlink(link) == "eagle3-head", \
        f"{link} must point at eagle3-head: rerun tools/build_tiny_models.py --out {models}"

    def point_link_at(target: str) -> None:
        swap = link.with_name("eagle3-under-test.swap")
        swap.unlink(missing_ok=True)
        swap.symlink_to(target)
        os.replace(swap, link)

    point_link_at("eagle3-miswired")
    try:  # the same command line as the hand-started eagle3: the same fingerprint
        twin = HandServer(env, work_dir, "spec-eagle3-miswired", [*spec_server_args(models)["eagle3"], "--sleep-on-idle"],
                          flags=SPEC_FLAGS, extra_env=SPEC_ENV, model=SPEC_MODELS["eagle3"])
    finally:
        point_link_at("eagle3-head")  # the server has read its head by the time it is ready
    try:
        reference = spec_servers["reference"].url
        for ids in identity_prompts()[:4]:
            assert _generate(twin.url, ids, IDENTITY_TOKENS)["output_ids"] == \
                _generate(reference, ids, IDENTITY_TOKENS)["output_ids"], ids
        args = ["--server-url", f"eagle3={twin.url}", "--server-url", f"reference={reference}"]
        code, out, res, doc = run_suite(work_dir, baselines, "spec-miswired", env, *args, "-k", "eagle3",
                                        "--concurrency", "2", "--repeats", "2", "--require-baselines",
                                        suite=SPEC_SUITE, timeout_s=SPEC_RUN_TIMEOUT_S)
    finally:
        twin.stop()
    assert not group_members(twin.proc.pid), twin.cmd
    failed = {t: m for t, m in res.items() if m != "passed"}
    assert code == 1, out[-4000:]
    assert "test_accept_length[eagle3-c2]" in failed and failed["test_accept_length[eagle3-c2]"].startswith("failure"), failed
    assert all("eagle3" in t for t in failed), failed
    assert "drafter regressions (accept length): eagle3 c2" in out, out[-4000:]
    position_line = next((ln.strip() for ln in out.splitlines() if "acceptance per draft position" in ln), "")
    assert re.search(r"1 0\.000 .*FAIL", position_line), out[-4000:]
    cells = cell_readings(doc)
    assert cells["eagle3", 2]["accept"] < 1.1, cells["eagle3", 2]
    for line in table_lines("spec suite, eagle3 head wired one layer late", doc):
        figure(work_dir, line)
    figure(work_dir, f"mis-wired eagle3 head: failed {sorted(failed)}; {position_line}")


def test_the_topk_1_draft_token_rewrite_is_one_line_read_from_the_servers_own_arguments(env, work_dir, tmp_path):
    """Seed 001's silent rewrite, live: EAGLE3 launched with --speculative-num-steps 1
    --speculative-eagle-topk 1 --speculative-num-draft-tokens 16, which SGLang 0.5.23 turns into 2
    draft tokens (srt/arg_groups/speculative_hook.py, _handle_eagle_family: topk 1 forces
    num_steps + 1). The flags go in the configuration's args (the suite file's own keys refuse the
    combination), so specguard compares what was asked on the command line with /server_info's
    resolved arguments: the configuration is not measured, and the summary says 16 -> 2 and why."""
    text = SPEC_SUITE.read_text()
    start = text.index("[servers.eagle3]")
    block = text[start:]
    rewritten = (block.replace("num_steps = 3\neagle_topk = 1\nnum_draft_tokens = 4\n", "")
                 .replace('"65536", "--speculative-adaptive"]',
                          '"65536", "--speculative-num-steps", "1", "--speculative-eagle-topk", "1",\n'
                          '        "--speculative-num-draft-tokens", "16"]'))
    assert rewritten != block and "--speculative-num-draft-tokens" in rewritten
    suite = tmp_path / "sglang-cpu-spec-rewrite.toml"
    suite.write_text(text[:start] + rewritten)
    code, out, res, doc = run_suite(work_dir, tmp_path / "b", "rewrite", env, "-k", "eagle3 and throughput",
                                    "--concurrency", "1", "--repeats", "2", suite=suite, timeout_s=SPEC_RUN_TIMEOUT_S)
    assert code == 3, out[-4000:]
    line = "eagle3: ERROR: asked for 16 draft tokens, server runs 2: topk=1 forces num_steps+1"
    assert line in out, out[-4000:]
    eff = doc["servers"]["eagle3"]["effective_args"]
    assert (eff["num_steps"], eff["eagle_topk"], eff["num_draft_tokens"]) == (1, 1, 2), eff
    figure(work_dir, f"rewrite, live: {line}")


def test_forced_acceptance_holds_on_real_sglang_and_its_spread_is_reported(env, work_dir, tmp_path):
    """The engine measured alone (issue 30): the standalone configuration with
    simulate_accept_length = 2, so SGLang launches with SGLANG_SIMULATE_ACC_LEN=2 (srt/environ.py)
    and every verify step keeps 2 tokens whatever the draft (srt/speculative/spec_utils.py
    generate_simulated_accept_index, its CPU branch). Its accept-length test passes on the forced
    value with no baseline; the forced and the real-draft configurations' run-to-run tok/s spread
    are written beside each other (figures.txt)."""
    text = SPEC_SUITE.read_text()
    start = text.index("[servers.standalone]")
    end = text.index("[servers.", start + 1)
    forced = text[start:end].replace("[servers.standalone]", "[servers.forced]").replace(
        'num_draft_tokens = 4\n', 'num_draft_tokens = 4\nsimulate_accept_length = 2\n')
    assert "simulate_accept_length = 2" in forced
    suite = tmp_path / "sglang-cpu-spec-forced.toml"
    suite.write_text(text + "\n" + forced)
    code, out, res, doc = run_suite(work_dir, tmp_path / "b", "forced", env, "-k",
                                    "(forced or standalone) and not weak and (accept_length or throughput)",
                                    "--concurrency", "2", "--repeats", "3", suite=suite,
                                    timeout_s=SPEC_RUN_TIMEOUT_S)
    assert code == 0, out[-4000:]
    (decision,) = [d for d in doc["decisions"] if d["gate"] == "accept_length" and d["config"] == "forced"]
    assert decision["verdict"] == "pass" and decision["problem"]["why"] == "forced-accept", decision
    (cell,) = [c for c in doc["cells"] if c["config"] == "forced"]
    for run in cell["runs"]:  # 64 tokens: 1 prefill token + ceil(63 / 2) = 32 verify steps a request
        assert run["total_verify_ct"] == run["completed"] * 32, run
        assert run["accept_length"] == pytest.approx(64 / 32, abs=0.01), run
    spread = {}
    for c in doc["cells"]:
        tok = [r["output_throughput"] for r in c["runs"]]
        spread[c["config"]] = statistics.stdev(tok) / statistics.mean(tok)
    figure(work_dir, "forced acceptance, tok/s run-to-run CV at c2: "
           + ", ".join(f"{name} {cv:.1%}" for name, cv in sorted(spread.items())))


def spec_probe(url: str, ids: list[int]) -> dict:
    """contract_shapes.probe plus the speculative fields: the OpenAI routes asked for
    return_spec_tokens_details (sglext chunk), the native /generate not streamed."""
    out = contract_shapes.probe(url, ids)
    with httpx.Client(base_url=url, timeout=120) as c:
        model = c.get("/server_info").json().get("served_model_name") or "default"
        sp = {"max_new_tokens": 16, "temperature": 0, "ignore_eos": True}
        out["/generate not streamed"] = {"status": 200, "body": c.post("/generate", json={
            "input_ids": ids, "sampling_params": sp}).json()}
        for path, body in (("/v1/completions", {"prompt": ids}),
                           ("/v1/chat/completions", {"messages": [{"role": "user", "content": "Say something."}]})):
            status, ev = contract_shapes._sse_events(c, path, {
                "model": model, **body, "max_tokens": 16, "temperature": 0, "ignore_eos": True, "stream": True,
                "stream_options": {"include_usage": True}, "return_spec_tokens_details": True})
            sglext = [e for e in ev if isinstance(e, dict) and "sglext" in e]
            out[f"{path} stream, return_spec_tokens_details"] = {
                "status": status, **contract_shapes._openai_pick(ev), "sglext chunks": len(sglext),
                **({"sglext_chunk": sglext[-1]} if sglext else {})}
    return out


def same_history(url: str) -> None:
    """What state-dependent fields need before a probe, sent alike to both servers: a request long
    enough for the scheduler's decode-log fold (40 verifies; /server_info internal_states then has
    avg_spec_accept_length) and one request aborted by its client (sglang:num_aborted_requests_total
    has a series only after the first abort on the real server)."""
    _generate(url, [5, 6, 7], 200)
    with contract_shapes.foreign_stream(url, {}, [5, 6, 7]) as streaming:
        assert streaming
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and httpx.post(url + "/flush_cache", timeout=30).status_code != 200:
        time.sleep(0.5)  # the aborted request leaves the scheduler


def test_live_contract_speculative_fields_emulator_matches_the_real_server(env, work_dir, spec_servers):
    """The emulator launched with the standalone server's flags answers the same requests, the
    speculative fields included, with the same shapes (one line per difference)."""
    real = spec_servers["standalone"]
    port = _free_port()
    model = str(Path(env["SPECGUARD_SGLANG_MODELS"]) / "target")
    spec_flags = spec_server_args(Path(env["SPECGUARD_SGLANG_MODELS"]))["standalone"]
    with open(work_dir / f"emulator-spec-{port}.log", "wb") as f:
        emu = subprocess.Popen([sys.executable, "-m", "specguard.emulator.launch_server", "--model-path", model,
                                "--host", "127.0.0.1", "--port", str(port), *SPEC_FLAGS, *spec_flags],
                               stdout=f, stderr=subprocess.STDOUT, start_new_session=True, cwd=REPO)
    try:
        url = f"http://127.0.0.1:{port}"
        wait_http(url, emu)
        ids = list(range(10, 42))
        for u in (real.url, url):
            same_history(u)
        got_real, got_emu = spec_probe(real.url, ids), spec_probe(url, ids)
    finally:
        os.killpg(emu.pid, signal.SIGTERM)
        emu.wait(30)
    for probe in (got_real, got_emu):  # both really answered with the speculative fields
        assert probe["/v1/chat/completions stream, return_spec_tokens_details"]["sglext chunks"] >= 1
        assert "spec_verify_ct" in probe["/generate not streamed"]["body"]["meta_info"]
    diffs = contract_shapes.compare(got_real, got_emu, ("real", "emulator"))
    (work_dir / "contract-diff-spec.txt").write_text("".join(d + "\n" for d in diffs) + f"{len(diffs)} difference(s)\n")
    figure(work_dir, f"live contract, speculative (standalone) real vs emulator: {len(diffs)} difference(s)")
    assert not diffs, f"{len(diffs)} contract difference(s), real vs emulator:\n" + "\n".join(diffs)


# The ops SGLang 0.5.23's CPU speculation path calls (docs/research/sglang-cpu.md section 7).
CPU_SPEC_OPS = ("extend_attention_cpu", "decode_attention_cpu", "build_draft_decode_metadata_cpu",
                "verify_tree_greedy_cpu", "build_tree_kernel_efficient_cpu", "reconstruct_indices_from_tree_mask",
                "assign_extend_cache_locs_cpu", "assign_draft_cache_locs_contiguous_cpu",
                "fill_accept_out_cache_loc_cpu", "fill_bonus_tokens_cpu", "assign_req_to_token_pool_cpu",
                "copy_all_layer_kv_cache_cpu")


def test_op_call_log_names_the_ops_that_computed(env, work_dir, spec_servers):
    """Every op of the CPU speculation path computed in this job (OP lines of the stand-in log:
    1st, 10th, 100th, ... call of each op per process), and SGLang's own platform override was
    what made intel_amx reachable (PLATFORM lines)."""
    log = Path(env["SPECGUARD_SGL_KERNEL_LOG"])
    lines = [line.split("\t") for line in log.read_text().splitlines()] if log.exists() else []
    most: dict[str, int] = {}
    for f in lines:
        if f[0] == "OP":
            name = f[1].split(".", 1)[1]
            most[name] = max(most.get(name, 0), int(f[3].split("=")[1]))
    platform = {f[2] for f in lines if f[0] == "PLATFORM"}
    summary = ", ".join(f"{op} >= {most.get(op, 0)}" for op in CPU_SPEC_OPS)
    (work_dir / "op-calls.txt").write_text(summary.replace(", ", "\n") + "\n")
    figure(work_dir, f"op-call log (calls in the busiest process, as logged at 1, 10, 100, ...): {summary}; "
                     f"platform override in {len(platform)} processes")
    assert set(most) <= set(CPU_SPEC_OPS), set(most) - set(CPU_SPEC_OPS)
    assert not [op for op in CPU_SPEC_OPS if op not in most], [op for op in CPU_SPEC_OPS if op not in most]
    assert platform


def test_shape_diff_is_one_line_per_difference_naming_the_side():
    """The contract check's own logic (no server): values never matter, keys and types do."""
    real = {"meta_info": {"id": "a", "completion_tokens": 3, "finish_reason": None}, "text": "x", "ids": [1, 2]}
    emu = {"meta_info": {"id": "b", "completion_tokens": 7.0, "cached_tokens": 0}, "text": "yy", "ids": []}
    diffs = contract_shapes.diff_shapes(contract_shapes.shape(real), contract_shapes.shape(emu), "", ("real", "emulator"))
    assert diffs == ["meta_info.cached_tokens: only emulator has it (int)",
                     "meta_info.completion_tokens: int on real, float on emulator",
                     "meta_info.finish_reason: only real has it (null)"], diffs
    a = contract_shapes.metric_label_sets('sglang:x{model_name="m",tp_rank="0"} 1\n# HELP y\nsglang:y 2\n')
    b = contract_shapes.metric_label_sets('sglang:x{model_name="m"} 1\n')
    assert contract_shapes.diff_metrics(a, b, ("real", "emulator")) == [
        "/metrics sglang:x: labels [['model_name', 'tp_rank']] on real, [['model_name']] on emulator",
        "/metrics sglang:y: only real has it (labels [[]])"]
    same = contract_shapes.compare({"/flush_cache idle": {"status": 200, "body_first_line": "Cache flushed."}},
                                   {"/flush_cache idle": {"status": 400, "body_first_line": "Cache flushed."}},
                                   ("real", "emulator"))
    assert same == ["/flush_cache idle status: 200 on real, 400 on emulator"]


def test_standin_raises_on_every_call_and_logs_it(tmp_path):
    """The stand-in itself (no server): any symbol, of the package or of any submodule, resolves
    to a placeholder that raises when called; both events are logged; scalar_type is left to
    SGLang's own ImportError fallback."""
    log = tmp_path / "standin.log"
    code = """
import pytest, sgl_kernel
from sgl_kernel.flash_attn import flash_attn_with_kvcache
for f in (sgl_kernel.verify_tree_greedy_cpu, flash_attn_with_kvcache, sgl_kernel.common_ops.rmsnorm):
    with pytest.raises(sgl_kernel.StandInCalled):
        f(1, x=2)
with pytest.raises(ImportError):
    from sgl_kernel.scalar_type import ScalarType
assert not hasattr(sgl_kernel, "__wrapped__") and sgl_kernel.STANDIN
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "SPECGUARD_SGL_KERNEL_LOG": str(log),
                               "PYTHONPATH": str(REPO / "tools" / "sgl_kernel_standin")})
    assert proc.returncode == 0, proc.stderr[-2000:]
    events = [line.split("\t")[:2] for line in log.read_text().splitlines()]
    assert ["CALL", "sgl_kernel.verify_tree_greedy_cpu"] in events
    assert ["CALL", "sgl_kernel.flash_attn.flash_attn_with_kvcache"] in events
    assert ["CALL", "sgl_kernel.common_ops.rmsnorm"] in events
    assert ["RESOLVE", "sgl_kernel.common_ops.rmsnorm"] in events and ["MISSING", "sgl_kernel.scalar_type"] in events


def test_sgl_kernel_standin_was_never_called(env):
    """The stand-in logs every symbol it hands out and every call: the log of this whole job must
    show symbols resolved (the log works, SGLang did import it) and not one call."""
    log = Path(env["SPECGUARD_SGL_KERNEL_LOG"])
    lines = log.read_text().splitlines() if log.exists() else []
    resolved = sorted({line.split("\t")[1] for line in lines if line.startswith("RESOLVE\t")})
    called = [line for line in lines if line.startswith("CALL\t")]
    assert resolved, f"no symbol resolved in {log}: the stand-in was not used (or does not log)"
    assert not called, "sgl_kernel stand-in symbols were CALLED:\n" + "\n".join(sorted(set(called)))
    assert all(re.match(r"sgl_kernel(\.\w+)+$", name) for name in resolved), resolved


SOAK_S = float(os.environ.get("SPECGUARD_REAL_SOAK_S", "300"))
SOAK_WINDOW_S = 20  # the suite loader's minimum soak is 4 windows (1 warm-up + 3): 80 s here


def test_a_soak_of_standalone_passes_with_its_windows_reported(env, work_dir, tmp_path):
    """The soak on real SGLang (issue 32): the standalone configuration held at c2 for SOAK_S
    seconds in SOAK_WINDOW_S-second windows through SGLang's CPU speculation path. An unchanged server passes,
    and every window is in the results file and in soak-standalone.jsonl as it closed. Accept
    length is the models' and greedy verification's (draft-same: every draft accepted), so each
    window reads close to steps + 1 = 4; min_change is 10 % because on this shared 2-core machine a
    window's tok/s wanders by several % with the neighbours' load (figures.txt has the windows)."""
    suite = tmp_path / "sglang-cpu-spec-soak.toml"
    suite.write_text(SPEC_SUITE.read_text() + f"""
[soak]
duration_s = {SOAK_S:g}
window_s = {SOAK_WINDOW_S}
concurrency = 2
warmup_windows = 1
configs = ["standalone"]
min_change = 0.10
""")
    code, out, res, doc = run_suite(work_dir, tmp_path / "b", "soak", env, "-k", "soak", suite=suite,
                                    timeout_s=SOAK_S + SPEC_RUN_TIMEOUT_S)
    assert res == {"test_soak[standalone-c2]": "passed"}, out[-4000:]
    assert code == 0, out[-4000:]
    (decision,) = [d for d in doc["decisions"] if d["gate"] == "soak"]
    windows = doc["soaks"]["standalone"]["windows"]
    assert len(windows) >= SOAK_S / SOAK_WINDOW_S - 2 and decision["soak"]["windows"] == len(windows) - 1, decision
    logged = [json.loads(line) for line in (work_dir / "logs-soak" / "soak-standalone.jsonl").read_text().splitlines()]
    assert [w["accept_length"] for w in logged] == [w["accept_length"] for w in windows]
    for w in windows:
        assert w["failed"] == 0 and 3.5 < w["accept_length"] <= 4.0, w
    # the summary line a user reads (pytest -q prints no test ids; the junit outcome above names it)
    assert re.search(r"soak standalone c2: \d+ windows after 1 warm-up.* -> PASS", out), out[-4000:]
    figure(work_dir, f"soak, standalone c2, {len(windows)} windows of {SOAK_WINDOW_S} s: tok/s "
           + " ".join(f"{w['output_throughput']:.1f}" for w in windows)
           + "; accept length " + " ".join(f"{w['accept_length']:.2f}" for w in windows))


# ------------------------------------------------------------------------------ A/B of two builds

# build B's verify step: ~13-22 ms a batched step at c2 here (a standalone step ~37 ms). 10 ms made B
# 0.47x tok/s on a quiet machine (decided), 0.59x [0.42, 0.85] undecided in a clean-clone CI run whose
# launches spread 17 %. 100 ms (step time x3.9) left step time undecided in a CI run whose launches
# spread 23.5 % (p 0.0016 against its alpha 0.0014, 4.7 dof). In 2 rounds a step-time ratio r is decided
# up to a launch spread of about ln(r) / 5.7: 250 ms (x7.8) up to ~36 %, the prior this machine declares.
AB_DELAY_MS = 250
AB_TIMEOUT_S = 900


def ab_decisions(doc: dict) -> dict[tuple[str, str], str]:
    return {(c["config"], c["gate"]): (f"{c['decision']} ({c['direction']})" if c["direction"] else c["decision"])
            for c in doc["cells"]}


def test_ab_of_two_real_sglang_builds_names_the_slower_verify_and_leaves_the_reference_alone(env, work_dir, tmp_path):
    """`specguard ab` between two builds of real SGLang (issue 30, seed 000's "measure both builds"):
    build A is the SGLang venv's python; build B is a wrapper of it that sets
    SPECGUARD_SGL_VERIFY_DELAY_MS, so B's stand-in verify op (tools/sgl_kernel_standin/
    specguard_sgl_cpu_ops.py verify_tree_greedy_cpu, which SGLang's EAGLE-family verify calls
    through spec_tree.py verify_tree_greedy_func) sleeps AB_DELAY_MS per step, and a server
    without speculation never reaches it: two venvs of which one got a slower kernel. standalone
    and its reference at c2, at most 2 rounds (A B, B A: 4 launches a configuration). standalone's
    tok/s and step time are "different (worse)", its speculation ratio worse or undecided; its
    accept length (greedy, the same models) and the reference's tok/s and step time are never
    "different"."""
    tag = f"ab-{uuid.uuid4().hex[:8]}"
    python = env["SPECGUARD_SGLANG_PYTHON"]
    slower = tmp_path / "b-python"
    slower.write_text(f"#!/bin/sh\nexport SPECGUARD_SGL_VERIFY_DELAY_MS={AB_DELAY_MS}\nexec '{python}' \"$@\"\n")
    slower.chmod(0o755)
    results, logs = work_dir / "ab-results.json", work_dir / "logs-ab"
    results.unlink(missing_ok=True)
    cmd = [sys.executable, "-m", "specguard.cli", "ab", "--suite", str(SPEC_SUITE), "--config", "standalone",
           "--concurrency", "2", "--max-rounds", "2", "--a-python", python, "--b-python", str(slower),
           "--results-json", str(results), "--log-dir", str(logs)]
    started = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=REPO, env={**env, JOB_TAG_VAR: tag}, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        out, _ = proc.communicate(timeout=AB_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGINT)  # ab stops the server it launched, then exits
        try:
            out, _ = proc.communicate(timeout=60)
        finally:
            proc.kill()
            kill_tagged(tag)
        pytest.fail(f"specguard ab did not finish in {AB_TIMEOUT_S} s: {out[-3000:]}")
    (work_dir / "ab-summary.txt").write_text(f"$ {' '.join(cmd[2:])}\n({time.monotonic() - started:.0f} s, "
                                             f"exit {proc.returncode})\n{out}")
    assert not processes_with_tag(tag), processes_with_tag(tag)  # every server it launched is gone
    assert proc.returncode == 1, out[-4000:]
    doc = AB.load(results)
    got = ab_decisions(doc)
    for gate in ("throughput", "step_time"):
        assert got[("standalone", gate)] == "different (worse)", (gate, got, out[-3000:])
    # the spec/ref ratio's spread comes from configurations that share its reference (2 dof here):
    # worse or undecided, never same or better
    assert got[("standalone", "speculation")] in ("different (worse)", "undecided"), (got, out[-3000:])
    assert not got[("standalone", "accept_length")].startswith("different"), got
    for gate in ("throughput", "step_time"):
        assert not got[("reference", gate)].startswith("different"), (gate, got, out[-3000:])
    assert "different (worse)" in out
    cells = {(c["config"], c["gate"]): c for c in doc["cells"]}
    figure(work_dir, f"ab, B = verify +{AB_DELAY_MS} ms, c2, {len(doc['launches'])} launches, "
           f"{time.monotonic() - started:.0f} s: " + "; ".join(
               f"{k[0]} {k[1]} {v} (B/A {cells[k]['ratio']:.3f} [{cells[k]['low']:.3f}, {cells[k]['high']:.3f}])"
               if cells[k]["ratio"] is not None else f"{k[0]} {k[1]} {v}" for k, v in sorted(got.items())))


# ------------------------------------------------------------------------------ MTP (NEXTN) past its cap

MTP_SUITE = REPO / "perf_tests" / "suites" / "sglang-cpu-mtp.toml"
MTP_CAP = 48  # _handle_eagle_family (srt/arg_groups/speculative_hook.py): max_running_requests when not given
MTP_LEVELS = (1, 16, 64)
PREFILL_LINE = re.compile(r"Prefill batch, #new-seq: (\d+),.*#running-req: (\d+), #queue-req: (\d+)")


def admissions(log_dir: Path, config: str) -> list[tuple[int, int]]:
    """From the server's own log (scheduler's `Prefill batch` lines): per admitted batch, the
    requests running once it is admitted (#running-req before it + #new-seq) and the requests
    left waiting (#queue-req)."""
    (log,) = log_dir.glob(f"server-{config}-*.log")
    return [(int(new) + int(running), int(queued)) for new, running, queued in PREFILL_LINE.findall(log.read_text())]


def test_mtp_as_nextn_on_real_sglang_is_capped_at_48_and_its_crossover_and_policy_reported(env, work_dir, tmp_path):
    """Seed 004 on the engine itself (issue 30, item 2): a tiny MiMo checkpoint whose MTP layer
    SGLang loads as MiMoMTP (srt/models/mimo_mtp.py) and runs with --speculative-algorithm NEXTN
    (NEXTN resolves to EAGLE: the EAGLE worker, SGLang's CPU speculation path), swept at C = 1, 16,
    64 against the same checkpoint without speculation. The speculative server keeps SGLang's
    default running-request cap (48); the reference is given 64. What must hold: the cap is read
    back from /server_info and named in one line; the server's own scheduler log shows at most 48
    requests running and the rest queued at C = 64, while the reference runs all 64; every draft
    of this MTP layer is accepted (accept length = steps + 1 = 4 at every level); the crossover is
    reported (with its interval, or why none); `specguard recommend` gives the policy, the
    adaptive config and the cap's note. No must-win level is declared here: with one launch per
    configuration and this shared machine's 35 % between-launch prior the ratio's interval spans
    ~0.4x-3x (docs/research/sglang-cpu.md), so no level is decidable yet."""
    tag = uuid.uuid4().hex[:12]
    env = {**env, JOB_TAG_VAR: tag}
    code, out, res, doc = run_suite(work_dir, tmp_path / "mtp-baselines", "mtp", env, "--update-baselines",
                                    suite=MTP_SUITE, timeout_s=SPEC_RUN_TIMEOUT_S)
    assert not processes_with_tag(tag), processes_with_tag(tag)
    assert code == 0 and res and set(res.values()) == {"passed"}, out[-4000:]
    eff, ref = doc["servers"]["mtp"]["effective_args"], doc["servers"]["reference"]["effective_args"]
    assert eff["architecture"] == "MiMoForCausalLM" and eff["engine_version"] == "0.5.23", eff
    assert (eff["max_running_requests"], eff["num_steps"], eff["num_draft_tokens"]) == (MTP_CAP, 3, 4), eff
    assert ref["max_running_requests"] == max(MTP_LEVELS), ref
    logs = work_dir / "logs-mtp"
    (mtp_log,) = logs.glob("server-mtp-*.log")
    assert "type=MiMoMTP" in mtp_log.read_text(), "the draft was not loaded as MiMo's MTP layer"
    assert re.search(rf"mtp: note: the server runs at most {MTP_CAP} requests at once \(SGLang's default cap of "
                     rf"{MTP_CAP} under speculation\) but the sweep goes to {max(MTP_LEVELS)}", out), out[-4000:]
    spec_admitted, ref_admitted = admissions(logs, "mtp"), admissions(logs, "reference")
    assert max(n for n, _ in spec_admitted) == MTP_CAP and max(q for _, q in spec_admitted) > 0, spec_admitted
    assert max(n for n, _ in ref_admitted) == max(MTP_LEVELS), ref_admitted
    cells = cell_readings(doc)
    for c in MTP_LEVELS:
        assert cells["mtp", c]["accept"] == pytest.approx(SPEC_STEPS + 1, abs=0.05), cells["mtp", c]
        hist = cells["mtp", c]["hist"]
        assert hist and hist[SPEC_STEPS] == sum(hist), hist
    crossover = doc["crossovers"]["mtp"]
    assert re.search(r"mtp: (crossover vs reference at c~[\d.]+ \(95% CI|ahead of reference at every|behind reference)",
                     out), out[-4000:]
    rec_json = work_dir / "mtp-recommendation.json"
    proc = subprocess.run([sys.executable, "-m", "specguard.cli", "recommend", str(work_dir / "mtp-results.json"),
                           "--json", str(rec_json)], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "policy:" in proc.stdout and "cap 48" in proc.stdout, proc.stdout
    assert f"mtp ran with max_running_requests={MTP_CAP}" in proc.stdout, proc.stdout
    figure(work_dir, "mtp (NEXTN, MiMo tiny, steps 3): " + "; ".join(
        f"c{c} mtp {cells['mtp', c]['tok_s']:.1f} / reference {cells['reference', c]['tok_s']:.1f} tok/s, "
        f"accept {cells['mtp', c]['accept']:.2f}" for c in MTP_LEVELS))
    figure(work_dir, f"mtp: cap {eff['max_running_requests']} (reference {ref['max_running_requests']}); at most "
           f"{max(n for n, _ in spec_admitted)} running with up to {max(q for _, q in spec_admitted)} queued "
           f"(scheduler log); crossover: {crossover.get('estimate')} confident={crossover.get('confident')}")
    figure(work_dir, "mtp: specguard recommend: " + " | ".join(
        line.strip() for line in proc.stdout.splitlines() if line.startswith(("policy", "  concurrency", "disable"))))
