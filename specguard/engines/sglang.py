"""SGLang: `python -m sglang.launch_server`, /server_info, /flush_cache, spec_verify_ct.

The rules this adapter checks a server against are SGLang 0.5.23's own: its argument resolution in
sglang_args.py, the busy flush (python/sglang/srt/managers/scheduler_components/flush_wrapper.py)
here. docs/research/sglang-0.5.23-facts.md has the detail.
"""

from __future__ import annotations

import shlex
import time
from typing import Any

import httpx

from specguard.config import ServerConfig
from specguard.engines import sglang_args
from specguard.engines.base import ArgCheck, EffectiveArgs, Engine, ServerBusy, metrics_text, redact
from specguard.engines.sglang_args import json_int, launched_algorithm
from specguard.notes import Note
from specguard.prometheus import parse_prometheus_series
from specguard.sglang_rules.speculative import resolved_algorithm

# Resolved /server_info arguments that change performance (0.5.23 names, plus older spellings
# when a server reports them); they go into the baseline fingerprint so a change is named.
PERF_ARG_KEYS = (
    "dp_size", "attn_dp_size", "enable_dp_attention", "pp_size", "ep_size",
    "attention_backend", "prefill_attention_backend", "decode_attention_backend", "speculative_draft_attention_backend",
    "kv_cache_dtype", "quantization", "dtype", "disable_overlap_schedule", "enable_mixed_chunk",
    "chunked_prefill_size", "max_prefill_tokens", "page_size", "max_total_tokens", "mem_fraction_static",
    "schedule_policy", "schedule_conservativeness", "disable_radix_cache", "enable_deterministic_inference",
    "stream_interval", "incremental_streaming_output", "num_continuous_decode_steps", "sampling_backend",
    "moe_a2a_backend", "moe_runner_backend", "enable_dp_lm_head",
    "cuda_graph_backend_decode", "cuda_graph_backend_prefill", "cuda_graph_max_bs_decode", "cuda_graph_max_bs_prefill",
    "cuda_graph_bs_decode", "cuda_graph_bs_prefill", "disable_decode_cuda_graph", "disable_prefill_cuda_graph",
    "disable_cuda_graph", "disable_cuda_graph_padding", "cuda_graph_max_bs", "cuda_graph_bs",
    "enable_torch_compile", "torch_compile_max_bs",
    "speculative_adaptive", "speculative_adaptive_config", "speculative_accept_threshold_single",
    "speculative_accept_threshold_acc", "speculative_use_rejection_sampling",
    "speculative_ngram_min_bfs_breadth", "speculative_ngram_max_bfs_breadth", "speculative_ngram_match_type",
    "speculative_ngram_max_trie_depth", "enable_multi_layer_eagle", "enable_two_batch_overlap", "enable_pdmux",
)
# /server_info keys kept out of EffectiveArgs.raw: the per-rank states (read into their own
# fields) and secrets, which must never be stored
UNRECORDED_INFO_KEYS = ("internal_states", "api_key", "admin_api_key", "ssl_keyfile_password")
FLUSH_RETRY_S = 0.5  # servers without ?timeout= answer 400 at once: ask again this often


def redact_command(launch_command: str) -> str:
    """The server's own command line with key values replaced, safe to store."""
    try:
        return shlex.join(redact(shlex.split(launch_command), []))
    except ValueError:
        return "(unparseable launch_command withheld)"


def _int_list(v: Any) -> list[int] | None:
    if isinstance(v, list) and all(json_int(x) is not None for x in v):
        return list(v)
    return None


def _rank_caps(states: list[dict[str, Any]]) -> list[int]:
    """Every rank's effective_max_running_requests_per_dp (internal_states): cap // attn_dp_size,
    further limited by KV capacity."""
    return [c for c in (json_int(s.get("effective_max_running_requests_per_dp")) for s in states) if c is not None]


def _decode_graph_sizes(states: list[dict[str, Any]]) -> list[int] | None:
    """The captured decode CUDA-graph batch sizes of the first rank that reports any."""
    return next((g for g in (_int_list(s.get("decode_cuda_graph_bs")) for s in states) if g), None)


def reported_algorithm(reported: Any, launch_command: str) -> str | None:
    """The server's algorithm, as typed where the server reports only its family: NEXTN is reported
    as EAGLE (_resolve_speculative_algorithm_alias)."""
    typed = launched_algorithm(launch_command)
    if reported and typed and resolved_algorithm(typed) == reported:
        reported = typed
    return reported.upper() if isinstance(reported, str) else None


def attention_dp_size(info: dict[str, Any]) -> int:
    """Attention data-parallel ranks from /server_info: 0.5.23's attn_dp_size, else the older
    spelling --dp-size N --enable-dp-attention, else 1."""
    attn_dp = json_int(info.get("attn_dp_size"))
    if attn_dp is not None:
        return attn_dp
    return (json_int(info.get("dp_size")) or 1) if info.get("enable_dp_attention") is True else 1


def _request_cap(info: dict[str, Any], per_rank: list[int], attn_dp: int) -> int | None:
    """The server's total running-request cap: max_running_requests, else the per-rank caps x ranks."""
    cap = json_int(info.get("max_running_requests"))
    if cap is None and per_rank:
        return min(per_rank) * attn_dp
    return cap


def _performance_args(info: dict[str, Any], attn_dp: int) -> dict[str, Any]:
    """The PERF_ARG_KEYS the server reports, with its attention-DP ranks however it spells them."""
    return {**{k: info[k] for k in PERF_ARG_KEYS if info.get(k) is not None}, "attn_dp_size": attn_dp}


class SGLangEngine(Engine):
    name = "sglang"
    module = "sglang.launch_server"
    counter_names = ("sglang:generation_tokens_total", "sglang:spec_verify_calls_total", "sglang:num_requests_total")
    gauge_names = ("sglang:spec_num_steps", "sglang:spec_accept_length", "sglang:num_running_reqs",
                   "sglang:num_queue_reqs", "sglang:num_grammar_queue_reqs")
    averaged_gauges = ("sglang:spec_num_steps", "sglang:spec_accept_length")  # per rank the same kind of figure
    generated_tokens_counter = "sglang:generation_tokens_total"

    def launch_command(self, cfg: ServerConfig, host: str, port: int, api_key: str | None) -> list[str]:
        cmd = [self.python(cfg), "-m", self.module, "--model-path", cfg.model_path,
               "--host", host, "--port", str(port), "--tp-size", str(cfg.tp_size), "--enable-metrics"]
        if cfg.speculative_algorithm:
            cmd += ["--speculative-algorithm", cfg.speculative_algorithm]
            if cfg.draft_model_path:
                cmd += ["--speculative-draft-model-path", cfg.draft_model_path]
            for flag, value in (("--speculative-num-steps", cfg.num_steps),
                                ("--speculative-eagle-topk", cfg.eagle_topk),
                                ("--speculative-num-draft-tokens", cfg.num_draft_tokens)):
                if value is not None:
                    cmd += [flag, str(value)]
        if cfg.max_running_requests is not None:
            cmd += ["--max-running-requests", str(cfg.max_running_requests)]
        cmd += list(cfg.args)
        if api_key:
            cmd += ["--api-key", api_key]
        return cmd

    def route_extra_body(self, api: str) -> dict[str, Any] | None:
        """On the OpenAI routes the per-request verify counts come only when asked for
        (protocol.py CompletionRequest/ChatCompletionRequest.return_spec_tokens_details), in an
        sglext chunk; /generate's GenerateReqInput has no such field."""
        return {"return_spec_tokens_details": True} if api in ("openai", "chat") else None

    def read_effective_args(self, client: httpx.Client, cfg: ServerConfig | None) -> EffectiveArgs:
        r = client.get("/server_info", timeout=30.0)
        if r.status_code == 404:
            r = client.get("/get_server_info", timeout=30.0)  # older SGLang
        r.raise_for_status()
        info = r.json()
        states = [s for s in info.get("internal_states") or [] if isinstance(s, dict)]
        launch = redact_command(str(info.get("launch_command") or ""))
        attn_dp = attention_dp_size(info)
        per_rank = _rank_caps(states)
        adaptive = info.get("speculative_adaptive")
        return EffectiveArgs(
            engine_version=str(info.get("version", "")),
            model_path=str(info.get("model_path", "")),
            speculative_algorithm=reported_algorithm(info.get("speculative_algorithm"), launch),
            draft_model_path=info.get("speculative_draft_model_path"),
            num_steps=json_int(info.get("speculative_num_steps")),
            eagle_topk=json_int(info.get("speculative_eagle_topk")),
            num_draft_tokens=json_int(info.get("speculative_num_draft_tokens")),
            max_running_requests=_request_cap(info, per_rank, attn_dp),
            tp_size=json_int(info.get("tp_size")),
            launch_command=launch,
            raw={**{k: v for k, v in info.items() if k not in UNRECORDED_INFO_KEYS}, "launch_command": launch},
            architecture=self._architecture(client),
            attn_dp_size=attn_dp,
            max_running_requests_per_rank=per_rank,
            speculative_adaptive=adaptive if isinstance(adaptive, bool) else None,
            decode_cuda_graph_bs=_decode_graph_sizes(states),
            server_args=_performance_args(info, attn_dp),
        )

    @staticmethod
    def _architecture(client: httpx.Client) -> str | None:
        """/model_info `architectures`[0]: what SGLang's default speculative parameters depend on."""
        try:
            r = client.get("/model_info", timeout=30.0)
            archs = r.json().get("architectures") if r.status_code == 200 else None
        except (httpx.HTTPError, ValueError, AttributeError):
            return None
        return archs[0] if isinstance(archs, list) and archs and isinstance(archs[0], str) else None

    # -- per run -----------------------------------------------------------------------------
    def flush_cache(self, client: httpx.Client, timeout_s: float = 30.0) -> None:
        """POST /flush_cache?timeout=S: 0.5.23 waits up to S seconds for idle, then answers 400
        (flush_wrapper.py SchedulerFlushWrapper); a server without the parameter answers 400 at
        once while busy, so it is asked again until the same deadline."""
        deadline = time.monotonic() + timeout_s
        while True:
            remaining = max(0.0, deadline - time.monotonic())
            r = client.post("/flush_cache", params={"timeout": f"{remaining:.3f}"}, timeout=remaining + 30.0)
            if r.status_code == 200:
                return
            if r.status_code != 400:
                raise RuntimeError(f"/flush_cache answered {r.status_code}: {r.text[:200].strip()}")
            if time.monotonic() + FLUSH_RETRY_S > deadline:
                break
            time.sleep(FLUSH_RETRY_S)
        depth = self.queue_depth(client)
        if depth is None:
            counts = "counts unknown (no /metrics: start the server with --enable-metrics)"
            running = waiting = None
        else:
            running, waiting = depth
            counts = f"{running} running and {waiting} waiting requests (sglang:num_running_reqs, num_queue_reqs)"
        raise ServerBusy(f"server stayed busy with traffic specguard did not send for {timeout_s:g}s "
                         f"(/flush_cache: {r.text.strip()[:80]!r}): {counts}; cell not measured", running, waiting)

    def metrics_snapshot(self, client: httpx.Client) -> dict[str, float] | None:
        """Counters summed over their series; gauges: running/waiting summed over ranks, the
        steps and accept-length gauges averaged (each rank reports its own of the same figure)."""
        text = metrics_text(client)
        if text is None:
            return None
        series = parse_prometheus_series(text)
        out = {k: sum(series[k]) for k in self.counter_names if k in series}
        for k in self.gauge_names:
            if series.get(k):
                out[k] = sum(series[k]) / len(series[k]) if k in self.averaged_gauges else sum(series[k])
        return out

    def queue_depth(self, client: httpx.Client) -> tuple[int, int] | None:
        snap = self.metrics_snapshot(client)
        if not snap or "sglang:num_running_reqs" not in snap:
            return None
        waiting = snap.get("sglang:num_queue_reqs", 0.0) + snap.get("sglang:num_grammar_queue_reqs", 0.0)
        return int(snap["sglang:num_running_reqs"]), int(waiting)

    def steps_in_use(self, eff: EffectiveArgs, after: dict[str, float] | None) -> float | None:
        """With adaptive speculation on: sglang:spec_num_steps after the run. The scheduler sets
        it at each decode-log fold (every --decode-log-interval decode batches, metrics_reporter.py
        log_decode_stats), so it is the steps of the last fold window before the run ended: a run
        shorter than one window reads the window before it (0 before the server's first)."""
        if not eff.speculative_adaptive or not after:
            return None
        return after.get("sglang:spec_num_steps")

    def server_accept_lengths(self, client: httpx.Client, before: dict[str, float] | None,
                              after: dict[str, float] | None) -> dict[str, float]:
        out: dict[str, float] = {}
        if before and after:
            tokens = after.get("sglang:generation_tokens_total", 0) - before.get("sglang:generation_tokens_total", 0)
            verify = after.get("sglang:spec_verify_calls_total", 0) - before.get("sglang:spec_verify_calls_total", 0)
            if verify > 0:
                out["metrics"] = tokens / verify
            gauge = after.get("sglang:spec_accept_length", 0.0)  # the last decode-log window's
            if gauge > 0:
                out["gauge"] = gauge
        try:
            info = client.get("/server_info", timeout=30.0).json()
            # avg_spec_accept_length lives in each rank's internal_states entry, absent until the
            # rank folds a verify (internal_state.py _average_accept_length): mean over the ranks
            states = [s for s in info.get("internal_states") or [] if isinstance(s, dict)]
            values = [s["avg_spec_accept_length"] for s in states
                      if isinstance(s.get("avg_spec_accept_length"), (int, float)) and s["avg_spec_accept_length"] > 0]
            if values:
                out["server_info"] = float(sum(values) / len(values))
        except (httpx.HTTPError, ValueError, AttributeError):
            pass
        return out

    # -- configuration against server (sglang_args) ---------------------------------------------
    def check_args(self, cfg: ServerConfig, eff: EffectiveArgs, max_concurrency: int) -> list[ArgCheck]:
        return sglang_args.check_args(cfg, eff, max_concurrency)

    def matches(self, cfg: ServerConfig, eff: EffectiveArgs) -> Note | None:
        return sglang_args.matches(cfg, eff)
