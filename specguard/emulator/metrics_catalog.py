"""Every /metrics family a real SGLang 0.5.23 server exposes with --enable-metrics, in one table.

Why: tools/contract_shapes.py compares the emulator's /metrics with a real server's by sample
name and label-name set, and dashboards or readers written against the emulator must find the
real names. Rows marked ``live`` are rendered by server.py from the performance model (the values
specguard reads: generation_tokens_total, num_running_reqs, spec_accept_length, ...); the others
are rendered here, zero or a plausible constant (page_size, num_pages, KV slots, start-up phases).

Sources (SGLang 0.5.23): srt/observability/metrics_collector.py (SchedulerMetricsCollector,
TokenizerMetricsCollector), http_request_metrics.py (http_*, routing_keys_active), cpu_monitor.py
(process_cpu_seconds_total); label values and buckets as captured from a real CPU server
(tests/fixtures/captures/sglang-0.5.23/metrics.txt). None of these families depends on a flag
the emulator takes, other than --enable-metrics itself (LoRA, hierarchical-cache, streaming-
session, priority and SWA-pool families, which do, are not emulated). With attention DP a real
scheduler adds a ``dp_rank`` label; the emulator's scheduler families do not (as before).

Lazily created series: `num_aborted_requests_total` appears on a real server only after its first
aborted request; the emulator always shows it (0 until a client drops a request), so the
contract probe, run against a real server that has already seen an abort, agrees.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

PREFIX = "sglang:"
# Label-name groups: a scheduler's families and the tokenizer's (metrics_collector.py labels dicts).
SCHEDULER = ("engine_type", "model_name", "moe_ep_rank", "pp_rank", "tp_rank")
TOKENIZER = ("engine_type", "model_name")
NONE: tuple[str, ...] = ()

_TTFT_S = (0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 2.0, 4.0, 6.0, 8.0, 10.0, 20.0, 40.0, 60.0, 80.0, 100.0, 200.0, 400.0)
_ITL_S = (0.002, 0.004, 0.006, 0.008, 0.01, 0.015, 0.02, 0.025, 0.03, 0.035, 0.04, 0.06, 0.08, 0.1, 0.2, 0.4,
          0.6, 0.8, 1.0, 2.0, 4.0, 6.0, 8.0)
_TOKENS = (100.0, 300.0, 500.0, 700.0, 1000.0, 1500.0, 2000.0, 3000.0, 4000.0, 5000.0, 6000.0, 7000.0, 8000.0,
           9000.0, 10000.0, 12500.0, 15000.0, 17500.0, 20000.0, 22500.0, 25000.0, 27500.0, 30000.0, 35000.0,
           40000.0, 60000.0, 80000.0, 100000.0, 200000.0, 300000.0, 400000.0, 600000.0, 800000.0, 1e6, 1.1e6)
_IMBALANCE = (1.0, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 7.5, 10.0, 15.0, 20.0, 30.0, 45.0, 60.0)
_SYNC_WAIT_S = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0)
_STAGE_S = tuple(0.001 * 1.62 ** i for i in range(30))  # exponential, as captured
_QUEUE_S = (0.0, 0.001, 0.005, 0.01, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 3.0, 4.0, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0,
            50.0, 60.0, 70.0, 80.0, 90.0, 100.0, 200.0, 300.0, 400.0, 500.0, 600.0, 700.0, 800.0, 900.0, 1000.0,
            1200.0, 1400.0, 1600.0, 1800.0, 2000.0, 2500.0, 3000.0)

GRAPH_PHASES = ("prefill", "decode", "target_verify", "draft_prefill", "draft_decode", "draft_extend")
STARTUP_PHASES = ("load_weight", "kv_cache_allocation", "scheduler_e2e", "tokenizer_e2e")
STAGES = ("other", "recv_requests", "process_input_requests", "get_next_batch_to_run", "process_queue",
          "run_batch", "process_batch_result", "sanity_check_cache", "idle")
ROUTING_BINS = (("0", "1"), ("1", "2"), ("2", "3"), ("3", "5"), ("5", "7"), ("7", "10"))
HTTP_ENDPOINTS = (("/generate", "POST"), ("/metrics", "GET"))


@dataclass(frozen=True)
class MetricFamily:
    """One /metrics family: its series are `labels` (values filled in) plus each `series` dict."""

    name: str  # without the "sglang:" prefix
    kind: str  # "counter" | "gauge" | "histogram"
    labels: tuple[str, ...]
    help: str
    series: tuple[tuple[tuple[str, str], ...], ...] = ((),)  # extra (label, value) pairs per series
    buckets: tuple[float, ...] = ()  # histograms only, without +Inf
    live: bool = False  # rendered by server.py from the model's state


def _one(label: str, *values: str) -> tuple[tuple[tuple[str, str], ...], ...]:
    return tuple(((label, v),) for v in values)


_S, _T = SCHEDULER, TOKENIZER
CATALOG: tuple[MetricFamily, ...] = (
    # -- tokenizer (TokenizerMetricsCollector): per finished request
    MetricFamily("prompt_tokens_total", "counter", _T, "Number of prefill tokens processed.",
                 _one("is_streaming", "true", "false"), live=True),
    MetricFamily("generation_tokens_total", "counter", _T, "Number of generation tokens processed.",
                 _one("is_streaming", "true", "false"), live=True),
    MetricFamily("num_requests_total", "counter", _T, "Number of requests processed.",
                 _one("is_streaming", "true", "false"), live=True),
    MetricFamily("cached_tokens_total", "counter", _T,
                 "Number of cached prompt tokens by source (device/host/storage).", _one("cache_source", "device"),
                 live=True),
    MetricFamily("num_aborted_requests_total", "counter", _T, "Number of requests aborted."),
    MetricFamily("time_to_first_token_seconds", "histogram", _T, "Histogram of time to first token in seconds.",
                 _one("is_streaming", "true", "false"), _TTFT_S, live=True),
    MetricFamily("e2e_request_latency_seconds", "histogram", _T,
                 "Histogram of End-to-end request latency in seconds", _one("is_streaming", "true", "false"),
                 live=True),
    MetricFamily("inter_token_latency_seconds", "histogram", _T, "Histogram of inter-token latency in seconds.",
                 buckets=_ITL_S),
    MetricFamily("request_time_per_output_token_seconds", "histogram", _T,
                 "Per-request TPOT in seconds: (finished_time - first_token_time) / (completion_tokens - 1).",
                 _one("is_streaming", "true", "false"), _ITL_S),
    MetricFamily("prompt_tokens_histogram", "histogram", _T, "Histogram of prompt token length.", buckets=_TOKENS),
    MetricFamily("uncached_prompt_tokens_histogram", "histogram", _T,
                 "Histogram of uncached (compute) prompt token length.", buckets=_TOKENS),
    MetricFamily("generation_tokens_histogram", "histogram", _T, "Histogram of generation token length.",
                 buckets=_TOKENS),
    MetricFamily("startup_time_seconds", "gauge", _T, "Engine startup duration by phase in seconds.",
                 _one("phase", *STARTUP_PHASES)),
    MetricFamily("startup_cuda_graph_time_seconds", "gauge", _T, "CUDA graph capture duration by phase in seconds.",
                 _one("phase", *GRAPH_PHASES)),
    # -- HTTP layer (http_request_metrics.py) and processes (cpu_monitor.py)
    MetricFamily("http_requests_active", "gauge", ("endpoint", "method"), "Number of currently active HTTP requests",
                 tuple((("endpoint", e), ("method", m)) for e, m in HTTP_ENDPOINTS)),
    MetricFamily("http_requests_total", "counter", ("endpoint", "method"),
                 "Total number of HTTP requests by endpoint and method",
                 tuple((("endpoint", e), ("method", m)) for e, m in HTTP_ENDPOINTS)),
    MetricFamily("http_responses_total", "counter", ("endpoint", "method", "status_code"),
                 "Total number of HTTP responses by endpoint and status code",
                 tuple((("endpoint", e), ("method", m), ("status_code", "200")) for e, m in HTTP_ENDPOINTS)),
    MetricFamily("routing_keys_active", "gauge", NONE, "Number of unique routing keys with active requests"),
    MetricFamily("process_cpu_seconds_total", "counter", ("component",),
                 "Total CPU time consumed by this process (user + system)",
                 _one("component", "detokenizer", "tokenizer")),
    # -- scheduler (SchedulerMetricsCollector): counters and histograms
    MetricFamily("num_retracted_reqs", "gauge", _S + ("pid",), "The number of retracted requests."),
    MetricFamily("num_paused_reqs", "gauge", _S + ("pid",), "The number of paused requests by async weight sync."),
    MetricFamily("prefill_effective_tokens_total", "counter", _S,
                 "Effective prefill tokens with retracted-request re-counts excluded, updated on each log interval.",
                 _one("mode", "input", "device_hit", "host_hit", "storage_hit")),
    MetricFamily("scheduler_idle_seconds_total", "counter", _S,
                 "Total wall time while the scheduler has no runnable or queued work."),
    MetricFamily("scheduler_process_cpu_seconds_total", "counter", _S,
                 "Total CPU time consumed by the scheduler process across all threads."),
    MetricFamily("scheduler_stage_seconds_total", "counter", _S,
                 "Total scheduler-loop wall time exclusively attributed to each stage.",
                 tuple((("category", c), ("forward_overlap", "none")) for c in STAGES)),
    MetricFamily("dp_attention_tokens_total", "counter", _S, "Tokens of MLP-sync steps on this DP rank.",
                 _one("kind", "scheduled", "imbalance")),
    MetricFamily("dp_attention_steps_total", "counter", _S, "MLP-sync steps on this DP rank.",
                 _one("rank_state", "active", "idle")),
    MetricFamily("dp_attention_pairs_total", "counter", _S,
                 "Causal (query, key) pairs attended by MLP-sync steps on this DP rank.",
                 _one("kind", "scheduled", "imbalance")),
    MetricFamily("cuda_graph_passes_total", "counter", _S,
                 "Total number of forward passes categorized by CUDA graph.",
                 _one("mode", "prefill_none", "decode_none")),
    MetricFamily("realtime_tokens_total", "counter", _S,
                 "Total number of tokens processed (updated on each log interval). "
                 "mode: prefill_compute, prefill_cache, decode.",
                 _one("mode", "prefill_compute", "decode", "prefill_cache")),
    MetricFamily("dp_attention_token_imbalance_ratio", "histogram", _S,
                 "Per MLP-sync step, max tokens over mean tokens across the DP ranks.", buckets=_IMBALANCE),
    MetricFamily("dp_attention_sync_wait_seconds", "histogram", _S,
                 "Wall time of this DP rank's scheduler MLP-sync all-gather per step.", buckets=_SYNC_WAIT_S),
    MetricFamily("per_stage_req_latency_seconds", "histogram", _S, "The latency of each stage of requests.",
                 _one("stage", "request_process", "prefill_forward"), _STAGE_S),
    MetricFamily("queue_time_seconds", "histogram", _S, "Histogram of queueing time in seconds.", buckets=_QUEUE_S),
    # -- scheduler gauges
    MetricFamily("max_total_num_tokens", "gauge", _S, "Maximum total number of tokens in the KV cache pool.",
                 live=True),
    MetricFamily("weight_memory_usage_gb", "gauge", _S, "Memory used by model weights in GB."),
    MetricFamily("kv_cache_memory_usage_gb", "gauge", _S, "Memory used by the KV cache pools in GB."),
    MetricFamily("graph_memory_usage_gb", "gauge", _S, "Memory used by captured device graphs in GB.",
                 _one("phase", *GRAPH_PHASES)),
    MetricFamily("page_size", "gauge", _S, "KV cache page size in tokens."),
    MetricFamily("num_pages", "gauge", _S, "Number of KV cache pages."),
    MetricFamily("context_len", "gauge", _S, "Maximum context length.", live=True),
    MetricFamily("startup_available_gpu_memory_gb", "gauge", _S, "Available GPU memory in GB at startup."),
    MetricFamily("num_running_reqs", "gauge", _S, "The number of running requests.", live=True),
    MetricFamily("num_queue_reqs", "gauge", _S, "The number of requests in the waiting queue.", live=True),
    MetricFamily("num_grammar_queue_reqs", "gauge", _S, "The number of requests in the grammar waiting queue.",
                 live=True),
    MetricFamily("gen_throughput", "gauge", _S, "The generation throughput (token/s).", live=True),
    MetricFamily("cache_hit_rate", "gauge", _S, "The prefix cache hit rate.", live=True),
    MetricFamily("decode_sum_seq_lens", "gauge", _S, "The sum of all sequence lengths in decode."),
    MetricFamily("token_usage", "gauge", _S, "The token usage.", live=True),
    MetricFamily("full_token_usage", "gauge", _S, "The token usage for full attention layers."),
    MetricFamily("swa_token_usage", "gauge", _S, "The token usage for SWA layers."),
    MetricFamily("mamba_usage", "gauge", _S, "The token usage for Mamba layers."),
    MetricFamily("num_used_tokens", "gauge", _S, "The number of used tokens.", live=True),
    MetricFamily("kv_available_tokens", "gauge", _S, "Number of free token slots in the KV cache pool."),
    MetricFamily("kv_evictable_tokens", "gauge", _S,
                 "Number of evictable (radix-cached) token slots in the KV cache pool."),
    MetricFamily("kv_used_tokens", "gauge", _S, "Number of actively used token slots in the KV cache pool."),
    MetricFamily("swa_available_tokens", "gauge", _S, "Number of free token slots in the SWA pool (hybrid-SWA only)."),
    MetricFamily("swa_evictable_tokens", "gauge", _S, "Number of evictable (radix-cached) token slots in the SWA pool."),
    MetricFamily("swa_used_tokens", "gauge", _S, "Number of actively used token slots in the SWA pool."),
    MetricFamily("mamba_available_tokens", "gauge", _S,
                 "Number of free state slots in the mamba SSM pool (hybrid-SSM only)."),
    MetricFamily("mamba_evictable_tokens", "gauge", _S,
                 "Number of evictable (radix-cached) state slots in the mamba SSM pool."),
    MetricFamily("mamba_used_tokens", "gauge", _S, "Number of actively used state slots in the mamba SSM pool."),
    MetricFamily("spec_accept_length", "gauge", _S,
                 "Mean acceptance length of speculative decoding (accepted drafts + bonus token per forward).",
                 live=True),
    MetricFamily("spec_accept_rate", "gauge", _S,
                 "Speculative acceptance rate (`accepted drafts / proposed drafts` in batch).", live=True),
    MetricFamily("spec_cap_length", "gauge", _S, "Mean DSpark confidence-scheduled verify window per verify step.",
                 live=True),
    MetricFamily("spec_block_accept_length", "gauge", _S, "Mean uncapped full-block accept length per verify step.",
                 live=True),
    MetricFamily("spec_num_steps", "gauge", _S, "Currently active speculative_num_steps.", live=True),
    MetricFamily("spec_num_draft_tokens", "gauge", _S, "Currently active speculative_num_draft_tokens.", live=True),
    MetricFamily("num_prefill_bootstrap_queue_reqs", "gauge", _S,
                 "The number of requests in the prefill bootstrap queue."),
    MetricFamily("num_prefill_inflight_queue_reqs", "gauge", _S,
                 "The number of requests in the prefill inflight queue."),
    MetricFamily("num_decode_prealloc_queue_reqs", "gauge", _S, "The number of requests in the decode prealloc queue."),
    MetricFamily("num_decode_transfer_queue_reqs", "gauge", _S, "The number of requests in the decode transfer queue."),
    MetricFamily("num_decode_host_receive_queue_reqs", "gauge", _S,
                 "Requests in the decode transfer queue receiving into host memory or waiting for device admission."),
    MetricFamily("num_decode_deferred_kv_release_reqs", "gauge", _S,
                 "The number of failed decode requests whose KV allocations are held pending transfer drain "
                 "acknowledgement or timeout."),
    MetricFamily("pending_prealloc_token_usage", "gauge", _S,
                 "The token usage for pending preallocated tokens (not preallocated yet)."),
    MetricFamily("prealloc_full_token_usage", "gauge", _S,
                 "Share of the full-attention KV pool held by decode requests whose KV transfer is pending."),
    MetricFamily("prealloc_swa_token_usage", "gauge", _S,
                 "Share of the SWA KV pool held by decode requests whose KV transfer is pending."),
    MetricFamily("utilization", "gauge", _S, "The utilization."),
    MetricFamily("fwd_occupancy", "gauge", _S, "Forward pass GPU occupancy percentage."),
    MetricFamily("new_token_ratio", "gauge", _S, "The new token ratio."),
    MetricFamily("is_cuda_graph", "gauge", _S, "Whether the batch is using CUDA graph."),
    MetricFamily("num_unique_running_routing_keys", "gauge", _S, "Number of unique routing keys in running batch."),
    MetricFamily("routing_key_running_req_count", "gauge", _S,
                 "Distribution of routing keys by running request count (gt < count <= le).",
                 tuple((("gt", g), ("le", le)) for g, le in ROUTING_BINS)),
    MetricFamily("routing_key_all_req_count", "gauge", _S,
                 "Distribution of routing keys by running+waiting request count (gt < count <= le).",
                 tuple((("gt", g), ("le", le)) for g, le in ROUTING_BINS)),
)


def _labels(pairs: Mapping[str, str]) -> str:
    body = ",".join(f'{k}="{v}"' for k, v in sorted(pairs.items()))
    return "{" + body + "}" if body else ""


def render(base_labels: Mapping[str, str], values: Mapping[str, float] | None = None) -> list[str]:
    """Prometheus text lines for every family not marked live.

    `base_labels` gives the value of each group label (engine_type, model_name, moe_ep_rank, pp_rank,
    tp_rank, pid); `values` sets a constant per family name, or per "name{label=value}" for one series
    (e.g. "startup_time_seconds{phase=load_weight}"); anything else is 0. Histograms are empty."""
    values = values or {}
    lines: list[str] = []
    for fam in CATALOG:
        if fam.live:
            continue
        full = PREFIX + fam.name
        lines.append(f"# HELP {full} {fam.help}")
        lines.append(f"# TYPE {full} {fam.kind}")
        for extra in fam.series:
            pairs = {k: base_labels[k] for k in fam.labels if k in base_labels}
            pairs.update(extra)  # series values win (endpoint, method, component ...)
            if fam.kind == "histogram":
                for bound in fam.buckets:
                    lines.append(f"{full}_bucket{_labels({**pairs, 'le': repr(float(bound))})} 0.0")
                lines.append(f"{full}_bucket{_labels({**pairs, 'le': '+Inf'})} 0.0")
                lines.append(f"{full}_count{_labels(pairs)} 0.0")
                lines.append(f"{full}_sum{_labels(pairs)} 0.0")
                continue
            key = fam.name + ("{" + ",".join(f"{k}={v}" for k, v in extra) + "}" if extra else "")
            value = float(values.get(key, values.get(fam.name, 0.0)))
            lines.append(f"{full}{_labels(pairs)} {value!r}")
    return lines
