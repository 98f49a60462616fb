"""The emulator over real HTTP on 127.0.0.1, checked against the SGLang 0.5.23 captures.

Each server runs as ``python -m specguard.emulator.launch_server`` in its own process group and
is stopped (SIGTERM to the group, SIGKILL if needed) when its fixture is torn down.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

import specguard
from specguard.emulator.model import ClosedLoop, SimLaunch, simulate_closed_loop
from specguard.emulator.profile import load_profile
from specguard.emulator.spec import SpecRequest

pytestmark = pytest.mark.e2e

CAPTURES = Path(__file__).parents[1] / "fixtures" / "captures" / "sglang-0.5.23"
REPO_ROOT = Path(specguard.__file__).resolve().parent.parent
LISTENING = re.compile(r"listening on http://127\.0\.0\.1:(\d+)")


class EmulatorProcess:
    """One launched emulator: its URL, its log, and a clean stop."""

    def __init__(self, args: list[str], log_path: Path, wait_ready: bool = True) -> None:
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")]))
        env.pop("SGLANG_SIMULATE_ACC_LEN", None)
        self.log_path = log_path
        self._log = open(log_path, "w")
        cmd = [sys.executable, "-m", "specguard.emulator.launch_server", "--port", "0", *args]
        self.proc = subprocess.Popen(cmd, stdout=self._log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        self.url = f"http://127.0.0.1:{self._wait_for_port()}"
        if wait_ready:
            self.wait_ready()

    def _wait_for_port(self, timeout_s: float = 15.0) -> int:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            match = LISTENING.search(self.log_path.read_text())
            if match:
                return int(match.group(1))
            if self.proc.poll() is not None:
                raise RuntimeError(f"emulator exited early:\n{self.log_path.read_text()}")
            time.sleep(0.02)
        raise TimeoutError(f"emulator did not start:\n{self.log_path.read_text()}")

    def wait_ready(self, timeout_s: float = 15.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if httpx.get(self.url + "/health_generate").status_code == 200:
                return
            time.sleep(0.05)
        raise TimeoutError("emulator never became healthy")

    def stop(self) -> int:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self._log.close()
        return self.proc.returncode


@pytest.fixture(scope="module")
def launch(tmp_path_factory):
    started: list[EmulatorProcess] = []

    def _launch(*args: str, wait_ready: bool = True) -> EmulatorProcess:
        log_path = tmp_path_factory.mktemp("emulator") / "server.log"
        server = EmulatorProcess(list(args), log_path, wait_ready)
        started.append(server)
        return server

    yield _launch
    for server in started:
        server.stop()


DETERMINISTIC = ("--random-seed", "7", "--emulator-jitter-pct", "0", "--emulator-drift-pct", "0")


@pytest.fixture(scope="module")
def mtp_server(launch):
    """NEXTN, asked for 8 draft tokens with topk 1 (gets 3), no explicit cap (gets 48)."""
    return launch(
        "--model-path", "/models/tiny", "--speculative-algorithm", "NEXTN", "--speculative-num-steps", "2",
        "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "8", "--enable-metrics",
        "--context-length", "1024", "--cuda-graph-max-bs-decode", "16", *DETERMINISTIC,
    )


def sse_events(body: str) -> list[str]:
    assert body.endswith("\n\n")
    events = body.split("\n\n")[:-1]
    assert all(e.startswith("data: ") for e in events)
    return [e[len("data: "):] for e in events]


def capture_events(name: str) -> list[str]:
    return sse_events((CAPTURES / name).read_text())


# -- info routes ---------------------------------------------------------------------------------
def test_server_info_reports_effective_settings(mtp_server):
    info = httpx.get(mtp_server.url + "/server_info").json()
    capture = json.loads((CAPTURES / "server_info.json").read_text())
    relevant = [
        k for k in capture
        if k.startswith("speculative_") and k in info or k in (
            "model_path", "tokenizer_path", "served_model_name", "context_length", "tp_size", "dp_size",
            "max_running_requests", "enable_metrics", "host", "port", "random_seed", "api_key",
            "launch_command", "version", "internal_states", "status", "decode_log_interval",
        )
    ]
    assert set(relevant) <= set(info)
    assert info["speculative_algorithm"] == "EAGLE"  # NEXTN is reported resolved
    assert (info["speculative_num_steps"], info["speculative_eagle_topk"], info["speculative_num_draft_tokens"]) == (2, 1, 3)
    assert info["max_running_requests"] == 48
    assert "--model-path /models/tiny --speculative-algorithm NEXTN" in info["launch_command"]
    assert info["version"] == "0.5.23" and info["api_key"] is None and info["random_seed"] == 7
    assert info["port"] == int(mtp_server.url.rsplit(":", 1)[1])
    (state,) = info["internal_states"]
    assert state["effective_max_running_requests_per_dp"] == 48
    assert {"last_gen_throughput", "speculative_num_steps"} <= set(state)
    assert "avg_spec_accept_length" not in state  # none folded yet (internal_state.py _average_accept_length)
    assert state["decode_cuda_graph_bs"] == [1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 14, 16]  # --cuda-graph-max-bs-decode 16
    assert info["speculative_adaptive"] is False and info["attn_dp_size"] == 1
    capture_state_keys = set(capture["internal_states"][0]) - set(capture)
    assert capture_state_keys - {"memory_usage", "decode_cuda_graph_bs"} <= set(state)
    assert info["specguard_emulator"]["profile"] == "fast"
    assert httpx.get(mtp_server.url + "/get_server_info").json().keys() == info.keys()


def test_model_info_and_models_match_capture_keys(mtp_server):
    for route, name in (("/model_info", "model_info.json"), ("/v1/models", "v1_models.json")):
        got = httpx.get(mtp_server.url + route).json()
        want = json.loads((CAPTURES / name).read_text())
        assert set(got) == set(want), route
    models = httpx.get(mtp_server.url + "/v1/models").json()
    assert set(models["data"][0]) == set(json.loads((CAPTURES / "v1_models.json").read_text())["data"][0])
    assert models["data"][0]["id"] == "/models/tiny" and models["data"][0]["max_model_len"] == 1024
    got, want = httpx.get(mtp_server.url + "/model_info").json(), json.loads((CAPTURES / "model_info.json").read_text())
    assert set(got["embedding"]) == set(want["embedding"])
    state = httpx.get(mtp_server.url + "/server_info").json()["internal_states"][0]
    want_state = json.loads((CAPTURES / "server_info.json").read_text())["internal_states"][0]
    assert "launch_command" not in state and set(state["memory_usage"]) == set(want_state["memory_usage"])
    assert set(state["memory_usage"]["graph"]) == set(want_state["memory_usage"]["graph"])


# -- native /generate ----------------------------------------------------------------------------
def test_generate_stream_shape_matches_capture(mtp_server):
    r = httpx.post(mtp_server.url + "/generate", json={
        "input_ids": [5, 6, 7, 8], "sampling_params": {"max_new_tokens": 12, "temperature": 0, "ignore_eos": True},
        "stream": True,
    })
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    events = sse_events(r.text)
    assert events[-1] == "[DONE]"
    objs = [json.loads(e) for e in events[:-1]]
    want = [json.loads(e) for e in capture_events("generate_stream.sse")[:-1]]
    # TokenizerManager._calculate_spec_decoding_metrics: spec fields on the final event only.
    spec_keys = {"spec_verify_ct", "spec_accept_length", "spec_accept_rate", "spec_num_correct_drafts",
                 "spec_num_proposed_drafts", "spec_correct_drafts_histogram"}
    assert set(objs[0]) == set(want[0]) == {"text", "output_ids", "meta_info"}
    assert set(objs[0]["meta_info"]) == set(want[0]["meta_info"])
    assert set(objs[-1]["meta_info"]) == set(want[-1]["meta_info"]) | spec_keys
    middle = [o for o in objs[1:-1]]
    assert all(set(o["meta_info"]) == set(want[1]["meta_info"]) for o in middle)
    assert list(objs[-1]["meta_info"]).index("spec_accept_rate") > list(objs[-1]["meta_info"]).index("e2e_latency")
    # cumulative text and ids, several tokens per event under speculation
    counts = [o["meta_info"]["completion_tokens"] for o in objs]
    assert counts[-1] == 12 and counts == sorted(counts) and len(objs) < 12
    assert all(len(o["output_ids"]) == o["meta_info"]["completion_tokens"] for o in objs)
    assert all(objs[i + 1]["text"].startswith(objs[i]["text"]) for i in range(len(objs) - 1))
    assert all(o["meta_info"]["finish_reason"] is None for o in objs[:-1])
    assert objs[-1]["meta_info"]["finish_reason"] == {"type": "length", "length": 12}
    last = objs[-1]["meta_info"]
    assert last["prompt_tokens"] == 4 and last["e2e_latency"] > 0
    assert last["spec_accept_length"] == pytest.approx(12 / last["spec_verify_ct"])
    # spec_num_proposed_drafts = verify_ct x (num_draft_tokens - 1); accept rate = correct / proposed
    assert last["spec_num_proposed_drafts"] == last["spec_verify_ct"] * 2
    assert last["spec_accept_rate"] == pytest.approx(last["spec_num_correct_drafts"] / last["spec_num_proposed_drafts"])
    hist = last["spec_correct_drafts_histogram"]  # index k: verify steps that accepted exactly k drafts
    assert sum(hist) == last["spec_verify_ct"] and len(hist) <= 3 and hist[-1] > 0
    assert sum(k * n for k, n in enumerate(hist)) == last["spec_num_correct_drafts"] == 12 - 1 - last["spec_verify_ct"]


def test_generate_nonstream_and_prefix_cache(mtp_server):
    body = {"text": "the same prompt every time", "sampling_params": {"max_new_tokens": 6}}
    first = httpx.post(mtp_server.url + "/generate", json=body).json()
    second = httpx.post(mtp_server.url + "/generate", json=body).json()
    want = json.loads((CAPTURES / "generate_nonstream.json").read_text())
    assert set(first) == set(want)
    spec_keys = {"spec_verify_ct", "spec_accept_length", "spec_accept_rate", "spec_num_correct_drafts",
                 "spec_num_proposed_drafts", "spec_correct_drafts_histogram"}
    assert set(second["meta_info"]) - spec_keys == set(want["meta_info"])
    assert len(second["output_ids"]) == 6 and second["meta_info"]["finish_reason"] == {"type": "length", "length": 6}
    assert first["meta_info"]["cached_tokens"] == 0
    assert second["meta_info"]["cached_tokens"] == second["meta_info"]["prompt_tokens"] - 1
    assert first["output_ids"] == second["output_ids"] and first["text"] == second["text"]


def test_over_context_length_is_an_in_stream_error(mtp_server):
    r = httpx.post(mtp_server.url + "/generate", json={
        "input_ids": [1, 2], "sampling_params": {"max_new_tokens": 100000}, "stream": True,
    })
    assert r.status_code == 200
    assert r.text == (CAPTURES / "generate_error_stream.sse").read_text()  # same context length: 1024
    r = httpx.post(mtp_server.url + "/generate", json={"input_ids": [1, 2], "sampling_params": {"max_new_tokens": 100000}})
    assert r.status_code == 400 and r.json() == {"error": {"message": r.json()["error"]["message"]}}
    assert "maximum context length" in r.json()["error"]["message"]  # http_server.py _create_error_response
    # OpenAI routes validate before the stream starts: HTTP 400 with an ErrorResponse body, never SSE
    # (serving_base.py handle_request / create_error_response).
    for route, body in (("/v1/completions", {"prompt": "hi"}),
                        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}]})):
        r = httpx.post(mtp_server.url + route, json={**body, "model": "m", "max_tokens": 100000, "stream": True})
        assert r.status_code == 400 and r.headers["content-type"].startswith("application/json")
        err = r.json()
        assert set(err) == {"object", "message", "type", "param", "code"} and err["code"] == 400
        assert err["object"] == "error" and "maximum context length" in err["message"]
    r = httpx.post(mtp_server.url + "/v1/completions", json={"model": "m", "stream": True})
    assert r.status_code == 400 and r.json()["type"] == "Bad Request"


# -- OpenAI routes -------------------------------------------------------------------------------
def test_completions_stream_with_usage_matches_capture(mtp_server):
    r = httpx.post(mtp_server.url + "/v1/completions", json={
        "model": "m", "prompt": "The quick", "max_tokens": 6, "stream": True, "ignore_eos": True,
        "stream_options": {"include_usage": True},
    })
    events = sse_events(r.text)
    want = capture_events("v1_completions_stream.sse")
    assert events[-1] == "[DONE]"
    objs, want_objs = [json.loads(e) for e in events[:-1]], [json.loads(e) for e in want[:-1]]
    assert all(set(o) == set(want_objs[0]) for o in objs)
    assert set(objs[0]["choices"][0]) == set(want_objs[0]["choices"][0])
    usage = objs[-1]
    assert usage["choices"] == [] and set(usage["usage"]) == set(want_objs[-1]["usage"])
    assert usage["usage"]["completion_tokens"] == 6 and usage["usage"]["prompt_tokens"] == 2
    assert objs[-2]["choices"][0]["finish_reason"] == "length"
    assert "".join(o["choices"][0]["text"] for o in objs[:-1]) == " the quick brown fox jumps over"
    without = sse_events(httpx.post(mtp_server.url + "/v1/completions", json={
        "model": "m", "prompt": [1, 2, 3], "max_tokens": 4, "stream": True}).text)
    assert all(json.loads(e)["choices"] for e in without[:-1])  # no usage chunk unless asked


def test_chat_stream_and_nonstream(mtp_server):
    body = {"model": "m", "messages": [{"role": "user", "content": "Say something"}], "max_tokens": 6,
            "stream": True, "stream_options": {"include_usage": True}}
    events = sse_events(httpx.post(mtp_server.url + "/v1/chat/completions", json=body).text)
    want = [json.loads(e) for e in capture_events("v1_chat_stream.sse")[:-1]]
    objs = [json.loads(e) for e in events[:-1]]
    assert events[-1] == "[DONE]"
    assert objs[0]["choices"][0]["delta"] == want[0]["choices"][0]["delta"]  # role chunk
    assert objs[-2]["choices"][0] == want[-2]["choices"][0]  # finish chunk
    assert set(objs[-1]) == set(want[-1]) and set(objs[-1]["usage"]) == set(want[-1]["usage"])
    assert all(set(o) == set(want[1]) for o in objs[1:-1])
    assert objs[-1]["usage"]["completion_tokens"] == 6
    body.update(stream=False)
    r = httpx.post(mtp_server.url + "/v1/chat/completions", json=body).json()
    assert r["object"] == "chat.completion" and r["usage"]["completion_tokens"] == 6
    assert r["choices"][0]["message"]["content"] == " the quick brown fox jumps over"


def test_openai_spec_tokens_details_chunk_before_usage(mtp_server):
    # serving_completions.py / serving_chat.py: with return_spec_tokens_details the stream ends with
    # content chunks, then {"choices": [], "usage": null, "sglext": {"spec_tokens_details": {...}}},
    # then the usage chunk, then [DONE]; non-streamed responses carry a top-level "sglext".
    detail_keys = ["spec_accept_rate", "spec_accept_length", "spec_cap_length", "spec_block_accept_length",
                   "spec_num_correct_drafts", "spec_num_proposed_drafts", "spec_verify_ct",
                   "spec_correct_drafts_histogram", "spec_cap_lens_histogram"]  # protocol.py SpecTokensDetails
    for route, body, obj in (
        ("/v1/completions", {"prompt": "The quick"}, "text_completion"),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "Say"}]}, "chat.completion.chunk"),
    ):
        body = {**body, "model": "m", "max_tokens": 20, "stream": True, "return_spec_tokens_details": True,
                "stream_options": {"include_usage": True}}
        events = sse_events(httpx.post(mtp_server.url + route, json=body).text)
        assert events[-1] == "[DONE]"
        *content, ext, usage = [json.loads(e) for e in events[:-1]]
        assert list(ext) == ["id", "object", "created", "model", "choices", "usage", "sglext"], route
        assert ext["object"] == obj and ext["choices"] == [] and ext["usage"] is None
        details = ext["sglext"]["spec_tokens_details"]
        assert list(details) == detail_keys
        assert details["spec_num_proposed_drafts"] == 2 * details["spec_verify_ct"]
        assert sum(details["spec_correct_drafts_histogram"]) == details["spec_verify_ct"] > 0
        assert details["spec_accept_length"] == pytest.approx(20 / details["spec_verify_ct"])
        assert usage["choices"] == [] and usage["usage"]["completion_tokens"] == 20 and "sglext" not in usage
        assert all("sglext" not in c for c in content)
        plain = sse_events(httpx.post(mtp_server.url + route, json={**body, "return_spec_tokens_details": False}).text)
        assert not any("sglext" in e for e in plain)
        whole = httpx.post(mtp_server.url + route, json={**body, "stream": False}).json()
        assert list(whole)[-1] == "sglext" and list(whole["sglext"]["spec_tokens_details"]) == detail_keys


def test_eagle_defaults_follow_the_profile_architecture(launch):
    # _auto_choose_speculative_params: LlamaForCausalLM -> (5, 4, 8); /model_info reports the
    # architectures the choice was made from.
    server = launch("--speculative-algorithm", "EAGLE3", *DETERMINISTIC)
    info = httpx.get(server.url + "/server_info").json()
    assert (info["speculative_num_steps"], info["speculative_eagle_topk"], info["speculative_num_draft_tokens"]) == (5, 4, 8)
    assert info["max_running_requests"] == 48
    assert httpx.get(server.url + "/model_info").json()["architectures"] == ["LlamaForCausalLM"]
    assert "Auto choose speculative_num_steps" in server.log_path.read_text()


def test_ngram_server_reports_sglangs_resolution(launch):
    # _handle_ngram: topk = --speculative-ngram-max-bfs-breadth (10), 12 draft tokens, steps 12 // 10.
    server = launch("--speculative-algorithm", "NGRAM", "--speculative-eagle-topk", "1", *DETERMINISTIC)
    info = httpx.get(server.url + "/server_info").json()
    assert (info["speculative_num_steps"], info["speculative_eagle_topk"], info["speculative_num_draft_tokens"]) == (1, 10, 12)
    assert info["max_running_requests"] == 48 and info["speculative_ngram_max_bfs_breadth"] == 10
    body = {"input_ids": [1, 2], "sampling_params": {"max_new_tokens": 30}}
    meta = httpx.post(server.url + "/generate", json=body).json()["meta_info"]
    assert meta["spec_num_proposed_drafts"] == 11 * meta["spec_verify_ct"]


def test_attention_dp_reports_one_state_per_rank(launch):
    # parallel_hook.py handle_deprecated_dp_attention: --dp-size 2 --enable-dp-attention -> attn_dp_size 2,
    # dp_size 1, enable_dp_attention true; per-rank cap max_running_requests // attn_dp_size.
    server = launch("--tp", "2", "--dp-size", "2", "--enable-dp-attention", "--max-running-requests", "64",
                    *DETERMINISTIC)
    info = httpx.get(server.url + "/server_info").json()
    assert (info["dp_size"], info["attn_dp_size"], info["enable_dp_attention"]) == (1, 2, True)
    assert info["max_running_requests"] == 64
    assert [s["effective_max_running_requests_per_dp"] for s in info["internal_states"]] == [32, 32]
    ranks = {httpx.post(server.url + "/generate", json={"text": "x", "sampling_params": {"max_new_tokens": 2}}).json()
             ["meta_info"]["dp_rank"] for _ in range(4)}
    assert ranks == {0, 1}  # round robin


def test_adaptive_server_reports_config_and_live_steps(launch, tmp_path):
    # One slot with candidates [0, 1]: the middle candidate (1) at start-up; every verify accepts
    # drafts (accept length forced to the maximum), so the slot stays at 1 and the gauge shows it.
    config = tmp_path / "adaptive.json"
    config.write_text(json.dumps({"1": {"candidate_steps": [0, 1], "warmup_batches": 2, "update_interval": 2}}))
    server = launch("--speculative-algorithm", "EAGLE3", "--speculative-adaptive", "--speculative-adaptive-config",
                    str(config), "--enable-metrics", "--decode-log-interval", "4", *DETERMINISTIC)
    info = httpx.get(server.url + "/server_info").json()
    assert info["speculative_adaptive"] is True and info["speculative_adaptive_config"] == str(config)
    assert (info["speculative_num_steps"], info["speculative_eagle_topk"], info["speculative_num_draft_tokens"]) == (1, 1, 2)
    httpx.post(server.url + "/generate", json={"input_ids": [1, 2], "sampling_params": {"max_new_tokens": 40}})
    steps = scrape(server.url)["sglang:spec_num_steps"]
    (state,) = httpx.get(server.url + "/server_info").json()["internal_states"]
    assert steps in (0, 1) and state["speculative_num_steps"] in (0, 1)
    off = launch("--speculative-algorithm", "EAGLE3", "--speculative-adaptive", "--speculative-num-steps", "3",
                 "--speculative-eagle-topk", "2", "--speculative-num-draft-tokens", "6", *DETERMINISTIC)
    assert httpx.get(off.url + "/server_info").json()["speculative_adaptive"] is False
    assert ("speculative_adaptive disabled: speculative_eagle_topk=2 (only topk=1 is supported). "
            "Falling back to static speculative params.") in off.log_path.read_text()


# -- counters ------------------------------------------------------------------------------------
def scrape(url: str) -> dict[str, float]:
    """/metrics as {name: value summed over label sets} (histogram buckets left out)."""
    values: dict[str, float] = {}
    for line in httpx.get(url + "/metrics").text.splitlines():
        if line.startswith("sglang:") and "_bucket" not in line:
            name, value = line.rsplit(" ", 1)
            key = name.split("{")[0]
            values[key] = values.get(key, 0.0) + float(value)
    return values


def test_spec_counters_appear_once_a_speculative_request_finished(launch):
    # metrics_collector.py: spec_verify_calls_total is inc()ed per finished request with verify steps,
    # so the series is absent before; spec gauges exist (0) from the start; avg_spec_accept_length
    # (internal_state.py _average_accept_length) is absent until the first decode-log fold.
    server = launch("--speculative-algorithm", "EAGLE3", "--speculative-num-steps", "3", "--speculative-eagle-topk",
                    "1", "--speculative-num-draft-tokens", "4", "--enable-metrics", "--decode-log-interval", "5",
                    *DETERMINISTIC)
    before = scrape(server.url)
    assert "sglang:spec_verify_calls_total" not in before
    assert before["sglang:spec_num_steps"] == 0 and before["sglang:spec_accept_length"] == 0
    (state,) = httpx.get(server.url + "/server_info").json()["internal_states"]
    assert "avg_spec_accept_length" not in state
    lines = httpx.get(server.url + "/metrics").text
    httpx.post(server.url + "/generate", json={"input_ids": [9] * 8, "sampling_params": {"max_new_tokens": 60}})
    after = scrape(server.url)
    assert after["sglang:spec_verify_calls_total"] > 0 and after["sglang:spec_num_steps"] == 3
    assert 'sglang:spec_verify_calls_total{engine_type="unified",model_name=' in httpx.get(server.url + "/metrics").text
    assert "spec_verify_calls_total" not in lines
    (state,) = httpx.get(server.url + "/server_info").json()["internal_states"]
    assert state["avg_spec_accept_length"] > 1.5


def test_metrics_and_flush_cache_reset_accept_length(mtp_server):
    async def load():
        async with httpx.AsyncClient(base_url=mtp_server.url) as client:
            await asyncio.gather(*[
                client.post("/generate", json={"input_ids": [9] * 8, "sampling_params": {"max_new_tokens": 120}})
                for _ in range(4)
            ])

    assert httpx.post(mtp_server.url + "/flush_cache").text == (CAPTURES / "flush_cache.txt").read_text()
    asyncio.run(load())  # guarantees a finished speculative request and a decode-log fold
    before = scrape(mtp_server.url)
    for name in ("num_running_reqs", "num_queue_reqs", "gen_throughput", "generation_tokens_total",
                 "num_requests_total", "prompt_tokens_total", "spec_accept_length", "spec_accept_rate",
                 "spec_num_steps", "spec_verify_calls_total"):
        assert f"sglang:{name}" in before
    assert before["sglang:spec_num_steps"] == 2 and before["sglang:spec_num_draft_tokens"] == 3
    asyncio.run(load())
    after = scrape(mtp_server.url)
    tokens = after["sglang:generation_tokens_total"] - before["sglang:generation_tokens_total"]
    verifies = after["sglang:spec_verify_calls_total"] - before["sglang:spec_verify_calls_total"]
    assert tokens == 480 and 1.5 < tokens / verifies < 3.0
    state = httpx.get(mtp_server.url + "/server_info").json()["internal_states"][0]
    assert state["avg_spec_accept_length"] > 1.5 and state["last_gen_throughput"] > 0
    assert httpx.get(mtp_server.url + "/flush_cache").status_code == 200  # GET and POST
    state = httpx.get(mtp_server.url + "/server_info").json()["internal_states"][0]
    assert "avg_spec_accept_length" not in state  # reset_metrics: absent until the next fold


async def first_event_then(url: str, max_new_tokens: int, action):
    """Start a streamed request, wait for its first event (so it runs), then await ``action(client)``."""
    async with httpx.AsyncClient(base_url=url, timeout=60) as client:
        body = {"input_ids": [5] * 4, "sampling_params": {"max_new_tokens": max_new_tokens}, "stream": True}
        async with client.stream("POST", "/generate", json=body) as stream:
            lines = stream.aiter_lines()
            while not (await lines.__anext__()).startswith("data: {"):
                pass
            result = await action(client)
            async for _ in lines:
                pass
        return result


def test_flush_cache_refuses_while_requests_run_and_waits_with_a_timeout(mtp_server):
    # http_server.py flush_cache + flush_wrapper.py: busy and timeout 0 -> 400 "Flush cache failed.\n";
    # ?timeout=S waits for idle (then 200) or answers 400 "Timed out waiting for idle state." at S.
    busy = asyncio.run(first_event_then(mtp_server.url, 400, lambda c: c.post("/flush_cache")))
    assert busy.status_code == 400 and busy.text == "Flush cache failed.\n"
    timed_out = asyncio.run(first_event_then(mtp_server.url, 600, lambda c: c.get("/flush_cache?timeout=0.05")))
    assert timed_out.status_code == 400 and timed_out.text == "Timed out waiting for idle state."

    async def wait_for_idle(client):
        started = time.monotonic()
        r = await client.post("/flush_cache", params={"timeout": "30"})
        return r, time.monotonic() - started

    waited, waited_s = asyncio.run(first_event_then(mtp_server.url, 60, wait_for_idle))
    assert waited.status_code == 200 and waited.text == (CAPTURES / "flush_cache.txt").read_text()
    assert waited_s < 30  # answered when the request finished, not at the deadline
    bad = httpx.post(mtp_server.url + "/flush_cache", params={"timeout": "-1"})
    assert bad.status_code == 400 and bad.json()["type"] == "Bad Request"


# -- auth, metrics switch, startup ---------------------------------------------------------------
def test_health_answers_503_while_starting(launch):
    # health_generate: 503 while the server status is Starting (here: 60 s of emulated start-up, far
    # longer than this check takes, so no wall-clock race).
    server = launch("--emulator-startup-s", "60", wait_ready=False)
    assert httpx.get(server.url + "/health", timeout=10).status_code == 503
    assert httpx.get(server.url + "/health_generate", timeout=10).status_code == 503
    assert httpx.get(server.url + "/ready", timeout=10).status_code == 503
    assert httpx.get(server.url + "/server_info").json()["status"] == "starting"


def test_api_key_incremental_and_metrics_off(launch):
    server = launch("--api-key", "sekret", "--incremental-streaming-output", wait_ready=False)
    server.wait_ready()
    started = time.monotonic()
    assert httpx.get(server.url + "/health", timeout=30).status_code == 200
    # /health runs a one-token probe and checks for scheduler output once a second (>= 1 s)
    assert time.monotonic() - started >= 0.9
    denied = httpx.post(server.url + "/generate", json={"text": "hi"})
    assert denied.status_code == 401 and denied.json() == {"error": "Unauthorized"}
    assert httpx.get(server.url + "/server_info").status_code == 401
    ok = httpx.post(server.url + "/generate", json={"text": "hi", "sampling_params": {"max_new_tokens": 3}},
                    headers={"Authorization": "Bearer sekret"})
    assert ok.status_code == 200 and ok.json()["meta_info"]["completion_tokens"] == 3
    meta = ok.json()["meta_info"]
    assert "spec_verify_ct" not in meta
    # Timing fields need --enable-metrics (tokenizer_manager.py `if self.enable_metrics:`).
    for key in ("request_received_ts", "first_token_latency", "decode_throughput", "queue_time", "forward_entry_time"):
        assert key not in meta
    assert "e2e_latency" in meta and "response_sent_to_client_ts" in meta
    stream = httpx.post(server.url + "/generate", headers={"Authorization": "Bearer sekret"}, json={
        "input_ids": [3, 4], "sampling_params": {"max_new_tokens": 5}, "stream": True})
    deltas = [json.loads(e) for e in sse_events(stream.text)[:-1]]
    # Incremental: each event carries only its new ids (queued chunks coalesce); counts stay cumulative.
    counts = [d["meta_info"]["completion_tokens"] for d in deltas]
    assert counts[-1] == 5 and counts == sorted(set(counts))
    assert [len(d["output_ids"]) for d in deltas] == [b - a for a, b in zip([0] + counts, counts)]
    assert "".join(d["text"] for d in deltas) == " the quick brown fox jumps"
    assert httpx.get(server.url + "/metrics").status_code == 404  # no --enable-metrics
    info = httpx.get(server.url + "/server_info", headers={"Authorization": "Bearer sekret"}).json()
    assert info["api_key"] is None and info["speculative_algorithm"] is None
    assert info["max_running_requests"] is None and info["internal_states"][0]["effective_max_running_requests_per_dp"] == 1024
    assert server.stop() == 0  # SIGTERM: clean exit (stop() waits up to 5 s, then SIGKILL would give -9)


def run_launcher(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    return subprocess.run([sys.executable, "-m", "specguard.emulator.launch_server", "--port", "0", *args],
                          env=env, capture_output=True, text=True, timeout=30)


def test_bad_flags_fail_fast(tmp_path):
    r = run_launcher("--speculative-algorithm", "EAGLE3", "--speculative-eagle-topk", "2")
    assert r.returncode == 2 and "need --speculative-num-steps" in r.stderr
    r = run_launcher("--emulator-profil", "fast", "--emulator-jiter-pct", "0")
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "unknown emulator flag --emulator-jiter-pct" in r.stderr
    r = run_launcher("--speculative-algorithm", "EAGLE3", "--speculative-num-steps", "3")
    assert r.returncode == 2 and "pass --speculative-eagle-topk" in r.stderr
    config = tmp_path / "adaptive.json"
    config.write_text('{"1": {"candidate_steps": [1, 3]}}')
    r = run_launcher("--speculative-algorithm", "EAGLE3", "--speculative-adaptive", "--speculative-adaptive-config",
                     str(config), "--speculative-num-steps", "2", "--speculative-eagle-topk", "1")
    assert r.returncode == 2 and "--speculative-num-steps=2 is not in the adaptive config candidate_steps [1, 3]" in r.stderr
    config.write_text('{"x": {"candidate_steps": [1, 3]}}')
    r = run_launcher("--speculative-algorithm", "EAGLE3", "--speculative-adaptive", "--speculative-adaptive-config",
                     str(config))
    assert r.returncode == 2 and "at least one integer-string BS key" in r.stderr


# -- wall clock vs simulator ---------------------------------------------------------------------
async def closed_loop(url: str, concurrency: int, num_requests: int, prompt: list[int], output_len: int):
    """Closed-loop streamed /generate run; returns (client duration_s, final meta_info per request)."""

    async def stream_one(client: httpx.AsyncClient, max_new_tokens: int) -> dict:
        body = {"input_ids": prompt, "sampling_params": {"max_new_tokens": max_new_tokens}, "stream": True}
        last = None
        async with client.stream("POST", "/generate", json=body) as r:
            async for line in r.aiter_lines():
                if line.startswith("data: {"):
                    last = line
        return json.loads(last[len("data: "):])["meta_info"]

    queue = list(range(num_requests))
    metas: list[dict] = []

    async def client_loop(client: httpx.AsyncClient):
        while queue:
            queue.pop()
            metas.append(await stream_one(client, output_len))

    async with httpx.AsyncClient(base_url=url, timeout=60) as client:
        # Warm up: open the connections and pay httpx's one-time streaming set-up outside the timing.
        await asyncio.gather(*[stream_one(client, 2) for _ in range(concurrency)])
        start = time.perf_counter()
        await asyncio.gather(*[client_loop(client) for _ in range(concurrency)])
        return time.perf_counter() - start, metas


# Speculation with every draft accepted (accept length 4 at 3 steps) keeps the comparison exact.
@pytest.mark.parametrize("spec_args", [(), ("--speculative-algorithm", "EAGLE3", "--speculative-num-steps", "3",
                                            "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4",
                                            "--max-running-requests", "64", "--emulator-accept-length", "4")])
def test_wall_clock_throughput_matches_simulator(launch, spec_args):
    """Serving overhead must not leak into the modelled speed (absolute step deadlines).

    Server side (first request received to last finished) the run must match the simulator
    closely; the client's wall clock also carries its own HTTP overhead (~2-7 ms per request on
    two shared cores), hence the wider bound. Other load on the machine can only slow a run
    down, so the best of up to three runs is compared.
    """
    server = launch(*spec_args, *DETERMINISTIC, "--enable-metrics")
    concurrency, num_requests, prompt, output_len = 4, 4, [11] * 32, 400  # one wave: no client turnaround inside
    spec = SpecRequest("EAGLE3", 3, 1, 4) if spec_args else None
    sim = simulate_closed_loop(load_profile("fast"), spec, ClosedLoop(concurrency, num_requests, len(prompt), output_len), SimLaunch(max_running_requests=64 if spec else None, accept_length=4.0 if spec else None))
    server_ratios, client_ratios = [], []
    for _ in range(3):
        client_s, metas = asyncio.run(closed_loop(server.url, concurrency, num_requests, prompt, output_len))
        assert sum(m["completion_tokens"] for m in metas) == sim.completion_tokens
        server_s = max(m["request_finished_ts"] for m in metas) - min(m["request_received_ts"] for m in metas)
        server_ratios.append(sim.completion_tokens / server_s / sim.output_throughput)
        client_ratios.append(sim.completion_tokens / client_s / sim.output_throughput)
        if abs(server_ratios[-1] - 1) < 0.015 and abs(client_ratios[-1] - 1) < 0.04:
            break
    assert max(server_ratios) == pytest.approx(1.0, abs=0.03), server_ratios
    assert max(client_ratios) == pytest.approx(1.0, abs=0.06), client_ratios
