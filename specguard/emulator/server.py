"""The HTTP face of the emulator: SGLang 0.5.x's routes, field for field, on aiohttp.

Routes: /health, /health_generate, /ready, /model_info (/get_model_info), /server_info
(/get_server_info), /flush_cache, /v1/models, /metrics (with --enable-metrics), POST /generate,
/v1/completions, /v1/chat/completions. Generation goes through the ``RealtimeEngine``; bodies
come from ``responses``. Nothing here blocks the event loop.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import signal
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from aiohttp.typedefs import Handler

from specguard.emulator import metrics_catalog, vocab
from specguard.emulator.categories import category_of_messages, category_of_text
from specguard.emulator.faults import (
    BAD_COUNT,
    CUT,
    ERROR,
    MALFORMED,
    NO_COUNT,
    STALL,
    DoubleCount,
    FaultPlan,
    FaultSettings,
)
from specguard.emulator.firehose import Firehose
from specguard.emulator.model import (
    BatchScheduler,
    GenRequest,
    LatencyHistogram,
    SchedulerConfig,
    SchedulerStats,
    acceptance_key,
)
from specguard.emulator.realtime import RealtimeEngine, RequestProgress
from specguard.emulator.responses import (
    SSE_DONE,
    ChatFormat,
    CompletionFormat,
    NativeFormat,
    RequestContext,
    context_error_message,
    native_error,
    native_error_body,
    openai_error,
    sse,
)
from specguard.emulator.simulated_acceptance import TokenMode
from specguard.emulator.tokens import FIXED_TOKEN, OutputText, apply_chat_template, count_prompt_tokens
from specguard.sglang_rules import SGLANG_VERSION

SSE_HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
# http_server.py flush_cache() and scheduler_components/flush_wrapper.py
FLUSH_OK = (
    "Cache flushed.\nPlease check backend logs for more details. (When there are running or waiting requests, "
    "the operation will not be performed.)\n"
)
FLUSH_FAILED = "Flush cache failed.\n"
FLUSH_TIMED_OUT = "Timed out waiting for idle state."
# /model_info "embedding" of a generative Llama, as captured from SGLang 0.5.23
# (tests/fixtures/captures/sglang-0.5.23/model_info.json); resolved_embedding_plan on a real server.
EMBEDDING_BCG: dict[str, object] = {
    "prefill_backend": "disabled", "enabled": False, "capture_token_budget": 4096,
    "capture_batch_sizes": [4, 8, 12, 16, 20, 24, 28, 32, 48, 64, 80, 96, 112, 128, 144, 160, 176, 192, 208,
                            224, 240, 256, 288, 320, 352, 384, 416, 448, 480, 512, 576, 640, 704, 768, 832,
                            896, 960, 1024, 1280, 1536, 1792, 2048, 2304, 2560, 2816, 3072, 3328, 3584, 3840,
                            4096],
}
EMBEDDING_CACHE = {"kv_cache_disabled": False, "radix_cache_disabled": False, "chunked_prefill_disabled": False}
EMBEDDING_PLAN: dict[str, object] = {
    "family": "none", "task": "none", "execution": "none", "attention": "none", "pooling": "model_defined",
    "normalize": False, "postprocessor": "none", "tokenizer_special_tokens": "model_default",
    "supports_dimensions": False, "supports_token_embeddings": False, "supports_multimodal": False,
    "requires_embedding_flag": False, "auto_enable_embedding": False, "bcg_eligibility": "disabled",
    "safe_disable_kv_cache": False, "safe_disable_radix_cache": False, "safe_disable_chunked_prefill": False,
    "enabled": False, "matryoshka_dimensions": [],
    "bcg": EMBEDDING_BCG,
    "cache": EMBEDDING_CACHE,
}
GRAPH_PHASES = ("prefill", "decode", "target_verify", "draft_prefill", "draft_decode", "draft_extend")
HEALTH_POLL_S = 1.0  # health_generate sleeps 1 s between checks
HEALTH_GENERATION_ENV = "SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION"
HEALTH_TIMEOUT_ENV = "SGLANG_HEALTH_CHECK_TIMEOUT"
DEFAULT_MAX_NEW_TOKENS = 128  # SGLang's sampling_params default
DEFAULT_COMPLETION_MAX_TOKENS = 16  # OpenAI /v1/completions default

log = logging.getLogger("specguard.emulator")


@dataclass
class ServerSettings:
    """A resolved emulator launch: the performance model plus what the HTTP layer needs."""

    scheduler_config: SchedulerConfig
    server_args: dict[str, Any]  # resolved SGLang server arguments (JSON values), reported by /server_info
    host: str = "127.0.0.1"
    port: int = 30000
    api_key: str | None = None
    enable_metrics: bool = False
    incremental_streaming_output: bool = False
    stream_default_include_usage: bool = False  # --stream-response-default-include-usage
    startup_s: float = 0.0  # /health answers 503 this long after the socket is bound
    emulator_info: dict[str, object] = field(default_factory=dict)  # reported as /server_info "specguard_emulator"
    faults: FaultSettings = field(default_factory=FaultSettings)
    firehose_events_per_write: int = 0  # > 0: streams skip the model (firehose.py)
    launched_monotonic_s: float = 0.0  # time.monotonic() when the launch began

    @property
    def context_length(self) -> int:
        return int(self.server_args["context_length"])

    @property
    def served_model_name(self) -> str:
        return str(self.server_args["served_model_name"])


class BadRequest(Exception):
    """A request SGLang would reject with HTTP 400 (``validation``: a body-validation error)."""

    def __init__(self, message: str, validation: bool = False) -> None:
        super().__init__(message)
        self.validation = validation


def _json_response(obj: object, status: int = 200) -> web.Response:
    return web.Response(text=json.dumps(obj, separators=(",", ":")), status=status, content_type="application/json")


class _MetricsText:
    """/metrics families in SGLang's text format and label style, appended to ``lines``."""

    def __init__(self, model: str, stats: SchedulerStats) -> None:
        self.model = model
        self.stats = stats
        self.gauge_labels = f'engine_type="unified",model_name="{model}",moe_ep_rank="0",pp_rank="0",tp_rank="0"'
        self.lines: list[str] = []

    def metric(self, name: str, kind: str, help_text: str, samples: list[tuple[str, float]]) -> None:
        self.lines.append(f"# HELP sglang:{name} {help_text}")
        self.lines.append(f"# TYPE sglang:{name} {kind}")
        self.lines.extend(f"sglang:{suffix} {float(value)!r}" for suffix, value in samples)

    def gauge(self, name: str, help_text: str, value: float) -> None:
        self.metric(name, "gauge", help_text, [(f"{name}{{{self.gauge_labels}}}", value)])

    def by_streaming(self, name: str, help_text: str, attr: str) -> None:
        """A counter of ``TokenCounters.attr``, one sample per ``is_streaming`` value."""
        model, counters = self.model, self.stats.counters
        self.metric(name, "counter", help_text, [
            (f'{name}{{engine_type="unified",is_streaming="{str(k).lower()}",model_name="{model}"}}',
             getattr(counters[k], attr))
            for k in (True, False)
        ])

    def histogram(self, name: str, help_text: str, attr: str) -> None:
        """The latency histogram ``TokenCounters.attr``, per ``is_streaming`` value."""
        model = self.model
        samples = []
        for k in (True, False):
            h: LatencyHistogram = getattr(self.stats.counters[k], attr)
            stream = str(k).lower()
            labels = f'engine_type="unified",is_streaming="{stream}"'
            samples.append((f'{name}_sum{{{labels},model_name="{model}"}}', h.sum_s))
            for bound, n in zip(h.bounds_s, h.cumulative):
                samples.append((f'{name}_bucket{{{labels},le="{bound}",model_name="{model}"}}', n))
            samples.append((f'{name}_bucket{{{labels},le="+Inf",model_name="{model}"}}', h.count))
            samples.append((f'{name}_count{{{labels},model_name="{model}"}}', h.count))
        self.metric(name, "histogram", help_text, samples)


class EmulatorServer:
    """Routes and per-launch state. Build the app with ``build_app``; run it with ``serve``."""

    def __init__(self, settings: ServerSettings) -> None:
        self.settings = settings
        self.scheduler = BatchScheduler(settings.scheduler_config)
        self.spec = self.scheduler.spec
        simulated = settings.scheduler_config.simulated
        fixed = simulated is not None and simulated.token_mode is TokenMode.FIXED
        self.out = OutputText(FIXED_TOKEN if fixed else None)  # SGLang writes token 100 at every verify step
        self.double_count = settings.faults.double_count
        self.engine: RealtimeEngine | None = None
        self.ready_at = 0.0  # loop time when /health starts answering 200
        self.startup_time_s = 0.0  # seconds from launch to listening (internal_states[i].startup_time)
        self.faults = FaultPlan(settings.faults, settings.scheduler_config.seed)
        n = settings.firehose_events_per_write
        self.firehose = Firehose(self.out, n) if n else None
        self._flush_lock: asyncio.Lock | None = None  # FIFO, like the tokenizer's queueing communicator
        self.spec_draft_tokens = self.spec.num_draft_tokens if self.spec else None  # the tokenizer's static value
        # model_config.vocab_size: --model-path's config.json when it exists here, else the profile's (vocab.py)
        self.vocab_size = vocab.resolve_vocab_size(settings.server_args.get("model_path"), self.scheduler.profile.vocab_size)
        self.aborted_requests = 0  # sglang:num_aborted_requests_total

    def build_app(self) -> web.Application:
        app = web.Application(middlewares=[self._auth], client_max_size=64 * 1024 * 1024)
        r = app.router
        r.add_get("/health", self.health_generate)
        r.add_get("/health_generate", self.health_generate)
        r.add_get("/ready", self.ready)
        for path in ("/model_info", "/get_model_info"):
            r.add_get(path, self.model_info)
        for path in ("/get_server_info",) if self.settings.faults.old_server_info else ("/server_info", "/get_server_info"):
            r.add_get(path, self.server_info)
        r.add_route("GET", "/flush_cache", self.flush_cache)
        r.add_route("POST", "/flush_cache", self.flush_cache)
        r.add_get("/v1/models", self.models)
        if self.settings.enable_metrics:
            r.add_get("/metrics", self.metrics)
        r.add_post("/generate", self.generate)
        r.add_post("/v1/completions", self.completions)
        r.add_post("/v1/chat/completions", self.chat_completions)
        app.on_startup.append(self._on_startup)
        app.on_cleanup.append(self._on_cleanup)
        return app

    async def _on_startup(self, app: web.Application) -> None:
        self.engine = RealtimeEngine(self.scheduler)
        self.engine.start()
        self._flush_lock = asyncio.Lock()
        self.ready_at = asyncio.get_running_loop().time() + self.settings.startup_s
        self.startup_time_s = time.monotonic() - self.settings.launched_monotonic_s if self.settings.launched_monotonic_s else 0.0

    async def _on_cleanup(self, app: web.Application) -> None:
        if self.engine is not None:
            await self.engine.stop()

    def _started_engine(self) -> RealtimeEngine:
        """The engine, which the app's start-up creates before any request is served."""
        if self.engine is None:
            raise RuntimeError("the emulator's engine starts with the app (build_app, then run it)")
        return self.engine

    def _starting(self) -> bool:
        return self.settings.faults.never_ready or asyncio.get_running_loop().time() < self.ready_at

    @web.middleware
    async def _auth(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        key = self.settings.api_key
        path = request.path
        if key and not (path.startswith("/health") or path.startswith("/ready") or path.startswith("/metrics")):
            if request.headers.get("Authorization") != f"Bearer {key}":
                return _json_response({"error": "Unauthorized"}, status=401)
        try:
            return await handler(request)
        except BadRequest as exc:
            if path.startswith("/v1/") or exc.validation:
                return _json_response(openai_error(str(exc), "Bad Request" if exc.validation else "BadRequestError"),
                                      status=400)
            return _json_response(native_error_body(str(exc)), status=400)

    # -- health and info ---------------------------------------------------------------------
    async def ready(self, request: web.Request) -> web.Response:
        return web.Response(status=503 if self._starting() else 200)

    async def health_generate(self, request: web.Request) -> web.Response:
        """/health and /health_generate are one handler (http_server.py health_generate).

        503 while starting. Unless SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION is false (then /health
        answers 200 at once), a one-token probe is queued when the server is idle (a busy server's
        own outputs count), and every second the handler checks for any scheduler output since it
        started: 200 when there was one, 503 after SGLANG_HEALTH_CHECK_TIMEOUT (20) seconds.
        """
        if self._starting():
            return web.Response(status=503)
        if request.path == "/health" and os.environ.get(HEALTH_GENERATION_ENV, "true").lower() in ("0", "false", "no", "off"):
            return web.Response(status=200)
        engine = self._started_engine()
        tic = engine.now_ms()
        probe = None
        if not self.scheduler.has_work():
            probe = GenRequest(prompt_tokens=1, max_new_tokens=1, counted=False, streaming=False)
            engine.submit(probe)
        timeout_s = float(os.environ.get(HEALTH_TIMEOUT_ENV, "20"))
        deadline = tic + timeout_s * 1000.0
        try:
            while engine.now_ms() < deadline:
                await asyncio.sleep(HEALTH_POLL_S)
                if engine.last_output_ms > tic:
                    return web.Response(status=200)
        finally:
            if probe is not None and not probe.finished:
                engine.abort(probe)
        log.error("Health check failed. Server couldn't get a response from detokenizer for last %s seconds.", timeout_s)
        return web.Response(status=503)

    async def model_info(self, request: web.Request) -> web.Response:
        args, profile = self.settings.server_args, self.scheduler.profile
        return _json_response({
            "model_path": args["model_path"],
            "served_model_name": args["served_model_name"],
            "tokenizer_path": args["tokenizer_path"],
            "is_generation": True,
            "preferred_sampling_params": None,
            "weight_version": "default",
            "load_format": "auto",
            "reasoning_parser": None,
            "tool_call_parser": None,
            "disaggregation_mode": "null",
            "has_image_understanding": False,
            "has_audio_understanding": False,
            "model_type": profile.model_type,
            "architectures": list(profile.architectures),
            "embedding": dict(EMBEDDING_PLAN, bcg=dict(EMBEDDING_BCG), cache=dict(EMBEDDING_CACHE)),
        })

    async def server_info(self, request: web.Request) -> web.Response:
        if request.path == "/get_server_info":
            log.warning("Endpoint '/get_server_info' is deprecated; use '/server_info' instead.")
        args = self.settings.server_args
        s = self.scheduler.stats
        sched = self.scheduler
        graphs = sched.config.cuda_graph_bs
        states = []
        for _ in range(sched.num_ranks):
            state = {k: v for k, v in args.items() if k != "launch_command"}  # not in a scheduler's state
            state.update({
                "world_size": args["tp_size"],
                "startup_time": self._startup_phases(tokenizer=False),  # a dict of phases, as on a real scheduler
                "effective_max_running_requests_per_dp": sched.rank_cap,
                "last_gen_throughput": s.gen_throughput,
                "memory_usage": {
                    "weight": 0.0, "kvcache": 0.0, "startup_available": 0.0,
                    "token_capacity": args["max_total_tokens"], "token_capacity_swa": None,
                    "graph": dict.fromkeys(GRAPH_PHASES, 0.0),
                },
                "disaggregation_mode": "null",
                "decode_cuda_graph_bs": list(graphs) if graphs else [],
                "decode_cuda_graph_memory_gb": 0.0,
            })
            if self.spec is not None:
                # runtime overrides: the steps in use (adaptive moves them)
                state["speculative_num_steps"] = sched.current_steps
                state["speculative_num_draft_tokens"] = sched.current_draft_tokens
                if s.avg_spec_accept_length is not None:  # absent until the rank's first fold
                    state["avg_spec_accept_length"] = s.avg_spec_accept_length * self._doubled(DoubleCount.SERVER_INFO)
            states.append(state)
        info = dict(args)
        info.update({
            "status": "starting" if self._starting() else "ready",
            "max_total_num_tokens": args["max_total_tokens"],
            "max_req_input_len": args["context_length"] - 1,
            "internal_states": states,
            "version": SGLANG_VERSION,
            "frontend": "python",
            "startup_time": self._startup_phases(tokenizer=True),  # http_server.py server_info: top level too
            "specguard_emulator": dict(self.settings.emulator_info, drift_factor=self.scheduler.drift),
        })
        if self.settings.faults.old_server_info:  # an older SGLang: fewer fields, no internal states
            for key in ("internal_states", "launch_command", "speculative_num_draft_tokens", "status", "version"):
                info.pop(key, None)
        return _json_response(info)

    async def models(self, request: web.Request) -> web.Response:
        args = self.settings.server_args
        return _json_response({"object": "list", "data": [{
            "id": args["served_model_name"], "object": "model", "created": int(time.time()),
            "owned_by": "sglang", "root": args["model_path"], "parent": None,
            "max_model_len": args["context_length"],
        }]})

    async def flush_cache(self, request: web.Request) -> web.Response:
        """GET/POST /flush_cache[?timeout=S]: 400 while requests run or wait; with a timeout, wait for idle.

        http_server.py flush_cache (``timeout: float = Query(0.0, ge=0.0)``) and
        SchedulerFlushWrapper.handle/check_pending; concurrent calls queue FIFO.
        """
        raw = request.query.get("timeout", "0")
        try:
            timeout_s = float(raw)
        except ValueError:
            timeout_s = -1.0
        if not timeout_s >= 0.0:  # also NaN
            raise BadRequest(f"timeout: Input should be greater than or equal to 0 (got {raw!r})", validation=True)
        assert self._flush_lock is not None
        async with self._flush_lock:
            sched = self.scheduler
            if timeout_s > 0.0 and sched.has_work():
                engine = self._started_engine()
                deadline = engine.now_ms() + timeout_s * 1000.0
                while sched.has_work():
                    remaining_s = (deadline - engine.now_ms()) / 1000.0
                    if remaining_s <= 0:
                        log.warning("Deferred flush_cache timed out while waiting for idle state.")
                        return web.Response(text=FLUSH_TIMED_OUT, status=400)
                    await engine.wait_idle(remaining_s)
            if sched.has_work():
                log.warning("Cache not flushed because there are pending requests. #queue-req: %d, #running-req: %d",
                            len(sched.waiting), len(sched.running))
                return web.Response(text=FLUSH_FAILED, status=400)
            sched.reset_accept_stats()
            sched.start_run()
            log.info("Cache flushed successfully!")
            return web.Response(text=FLUSH_OK)

    async def metrics(self, request: web.Request) -> web.Response:
        return web.Response(text=self._render_metrics(), content_type="text/plain", charset="utf-8")

    def _render_metrics(self) -> str:
        model = self.settings.served_model_name
        out = _MetricsText(model, self.scheduler.stats)
        self._request_metrics(out)
        self._load_metrics(out)
        self._spec_metrics(out)
        out.lines.extend(metrics_catalog.render(  # every other family of a real 0.5.23 server (metrics_catalog.py)
            {"engine_type": "unified", "model_name": model, "moe_ep_rank": "0", "pp_rank": "0", "tp_rank": "0",
             "pid": str(os.getpid())}, self._catalog_values()))
        return "\n".join(out.lines) + "\n"

    def _request_metrics(self, out: _MetricsText) -> None:
        """Finished requests: token and request counters, TTFT and end-to-end latency histograms."""
        s = self.scheduler.stats
        out.by_streaming("prompt_tokens_total", "Number of prefill tokens processed.", "prompt_tokens")
        out.by_streaming("generation_tokens_total", "Number of generation tokens processed.", "generation_tokens")
        out.by_streaming("num_requests_total", "Number of requests processed.", "num_requests")
        out.metric("cached_tokens_total", "counter", "Number of cached prompt tokens by source (device/host/storage).", [
            (f'cached_tokens_total{{cache_source="device",engine_type="unified",model_name="{out.model}"}}',
             s.counters[True].cached_tokens + s.counters[False].cached_tokens),
        ])
        out.histogram("time_to_first_token_seconds", "Histogram of time to first token in seconds.", "ttft")
        out.histogram("e2e_request_latency_seconds", "Histogram of End-to-end request latency in seconds", "e2e")

    def _load_metrics(self, out: _MetricsText) -> None:
        """The scheduler's load gauges (those a stand-in cannot know are 0)."""
        sched = self.scheduler
        out.gauge("num_running_reqs", "The number of running requests.", len(sched.running))
        out.gauge("num_queue_reqs", "The number of requests in the waiting queue.", len(sched.waiting))
        out.gauge("num_grammar_queue_reqs", "The number of requests in the grammar waiting queue.", 0)
        out.gauge("cache_hit_rate", "The prefix cache hit rate.", 0.0)
        out.gauge("token_usage", "The token usage.", 0.0)
        out.gauge("num_used_tokens", "The number of used tokens.", 0)
        out.gauge("context_len", "The context length.", self.settings.context_length)
        out.gauge("gen_throughput", "The generation throughput (token/s).", sched.stats.gen_throughput)
        out.gauge("max_total_num_tokens", "Maximum total number of tokens in the KV cache pool.",
                  self.settings.server_args["max_total_tokens"])

    def _spec_metrics(self, out: _MetricsText) -> None:
        """Speculative decoding: accept-length gauges, the steps in use, verify calls (0 without it)."""
        s = self.scheduler.stats
        out.gauge("spec_accept_length",
                  "Mean acceptance length of speculative decoding (accepted drafts + bonus token per forward).",
                  s.spec_accept_length * self._doubled(DoubleCount.ACCEPT_GAUGE))
        out.gauge("spec_accept_rate", "Speculative acceptance rate (`accepted drafts / proposed drafts` in batch).",
                  s.spec_accept_rate)
        # sampled at the decode-log fold (MetricsReporter.log_decode_stats): 0 before the first
        out.gauge("spec_cap_length", "DSPARK/ragged-verify cap length (0 here).", 0.0)
        out.gauge("spec_block_accept_length", "DSPARK/ragged-verify block accept length (0 here).", 0.0)
        out.gauge("spec_num_steps", "Currently active speculative_num_steps.", s.spec_num_steps)
        out.gauge("spec_num_draft_tokens",
                  "Currently active speculative_num_draft_tokens (decouples from steps under topk>1).",
                  s.spec_num_draft_tokens)
        if s.counters[True].spec_requests + s.counters[False].spec_requests:  # inc()ed by finished spec requests
            out.metric("spec_verify_calls_total", "counter", "Number of speculative verify calls, summed over requests.", [
                (f'spec_verify_calls_total{{engine_type="unified",model_name="{out.model}"}}',
                 (s.counters[True].verify_calls + s.counters[False].verify_calls)
                 * self._doubled(DoubleCount.VERIFY_COUNTER)),
            ])

    def _doubled(self, source: DoubleCount) -> int:
        """2 where --emulator-fault-double-count names this reading, else 1."""
        return 2 if source in self.double_count else 1

    def _startup_phases(self, tokenizer: bool) -> dict[str, float | dict[str, float]]:
        """internal_states[i].startup_time / top-level startup_time: seconds per start-up phase."""
        out: dict[str, float | dict[str, float]] = {
            "load_weight": 0.0, "kv_cache_allocation": 0.0, "scheduler_e2e": self.startup_time_s,
            "cuda_graph": dict.fromkeys(GRAPH_PHASES, 0.0),
        }
        if tokenizer:
            out["tokenizer_e2e"] = self.startup_time_s
        return out

    def _catalog_values(self) -> dict[str, float]:
        """Plausible constants for the catalog's non-live families (the rest stay 0)."""
        total = int(self.settings.server_args["max_total_tokens"])
        page = int(self.settings.server_args.get("page_size") or 1)
        return {"page_size": page, "num_pages": total // page, "kv_available_tokens": total,
                "num_aborted_requests_total": self.aborted_requests,
                "startup_time_seconds{phase=scheduler_e2e}": self.startup_time_s,
                "startup_time_seconds{phase=tokenizer_e2e}": self.startup_time_s}

    # -- generation --------------------------------------------------------------------------
    async def generate(self, request: web.Request) -> web.StreamResponse:
        body = await _read_json(request)
        params = body.get("sampling_params") or {}
        max_new = _int_param(params.get("max_new_tokens"), DEFAULT_MAX_NEW_TOKENS, "max_new_tokens")
        category = ""  # token ids: no category (emulator/categories.py)
        ids_error: str | None = None
        if body.get("input_ids") is not None:
            ids = body["input_ids"]
            if not (isinstance(ids, list) and all(isinstance(i, int) for i in ids)):
                raise BadRequest("input_ids must be a flat list of token ids (batches are not emulated)", validation=True)
            prompt_tokens, key = len(ids), hash(tuple(ids))
            content: object = tuple(ids)
            ids_error = vocab.input_ids_error(ids, self.vocab_size)  # emulator-only: real 0.5.23 crashes here
        elif isinstance(body.get("text"), str):
            prompt_tokens, key = count_prompt_tokens(body["text"]), hash(body["text"])
            content = body["text"]
            category = category_of_text(body["text"])
        else:
            # GenerateReqInput.normalize raises a ValueError: {"error": {"message"}} with HTTP 400
            raise BadRequest("Either text or input_ids should be provided (a single prompt, not a batch).")
        incremental = self.settings.incremental_streaming_output
        req = GenRequest(prompt_tokens, max_new, prompt_key=key, streaming=bool(body.get("stream", False)),
                         category=category, accept_key=greedy_key(params.get("temperature"), content))
        return await self._serve_generation(
            request, req, lambda ctx: NativeFormat(ctx, incremental), model="",
            invalid=(vocab.token_ids_logprob_error(body.get("token_ids_logprob"), self.vocab_size)
                     or vocab.logit_bias_error(params.get("logit_bias"), self.vocab_size)
                     or ids_error),
        )

    async def completions(self, request: web.Request) -> web.StreamResponse:
        body = await _read_json(request)
        prompt = body.get("prompt")
        if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
            prompt = prompt[0]
        category = ""
        if isinstance(prompt, str):
            prompt_tokens, key, category = count_prompt_tokens(prompt), hash(prompt), category_of_text(prompt)
            content: object = prompt
        elif isinstance(prompt, list) and prompt and all(isinstance(i, int) for i in prompt):
            prompt_tokens, key = len(prompt), hash(tuple(prompt))
            content = tuple(prompt)
        else:
            raise BadRequest("prompt must be a string or a list of token ids (one prompt per request)", validation=True)
        max_tokens = _int_param(body.get("max_tokens"), DEFAULT_COMPLETION_MAX_TOKENS, "max_tokens")
        req = GenRequest(prompt_tokens, max_tokens, prompt_key=key, category=category)
        return await self._serve_openai(request, body, req, CompletionFormat, content)

    async def chat_completions(self, request: web.Request) -> web.StreamResponse:
        body = await _read_json(request)
        messages = body.get("messages")
        if not (isinstance(messages, list) and messages and all(isinstance(m, dict) for m in messages)):
            raise BadRequest("messages must be a non-empty list of message objects", validation=True)
        text = apply_chat_template(messages)
        prompt_tokens = count_prompt_tokens(text)
        limit = body.get("max_completion_tokens", body.get("max_tokens"))
        max_tokens = _int_param(limit, max(self.settings.context_length - prompt_tokens, 0), "max_tokens")
        req = GenRequest(prompt_tokens, max_tokens, prompt_key=hash(text), category=category_of_messages(messages))
        return await self._serve_openai(request, body, req, ChatFormat, text)

    async def _serve_openai(
        self, request: web.Request, body: dict[str, Any], req: GenRequest, format_cls: type[CompletionFormat],
        content: object,
    ) -> web.StreamResponse:
        """The OpenAI routes' common part: n, stream, include_usage, return_spec_tokens_details, the
        model name, and the greedy draws of ``content`` (``req``: the route's prompt and length).

        include_usage: ``stream_options.include_usage`` or --stream-response-default-include-usage
        (openai/utils.py should_include_usage).
        """
        if body.get("n", 1) != 1:
            raise BadRequest("only n = 1 is emulated", validation=True)
        options = body.get("stream_options") or {}
        include_usage = bool(options.get("include_usage", False)) or self.settings.stream_default_include_usage
        spec_details = bool(body.get("return_spec_tokens_details", False))
        model = body.get("model") or self.settings.served_model_name

        def make_format(ctx: RequestContext) -> CompletionFormat:
            ctx.include_usage = include_usage
            ctx.return_spec_tokens_details = spec_details
            return format_cls(ctx)

        req.streaming = bool(body.get("stream", False))
        req.accept_key = greedy_key(body.get("temperature"), content)
        return await self._serve_generation(request, req, make_format, model=model, native=False)

    async def _inject(self, fault: str, text: str, finished: bool, request: web.Request) -> str | None:
        return await _inject_fault(fault, text, finished, request, self.settings.faults.stall_s)

    async def _serve_generation(
        self, request: web.Request, req: GenRequest,
        make_format: Callable[[RequestContext], NativeFormat | CompletionFormat], model: str, native: bool = True,
        invalid: str | None = None,
    ) -> web.StreamResponse:
        """Queue one request (``req``: its prompt, length, prefix key, stream flag, category and
        greedy key) in the scheduler and answer with SSE events or one JSON body.

        ``invalid``: a validation error found by the caller (vocab.py), reported like SGLang's
        tokenizer-manager errors, after the context-length check as in _validate_one_request.

        Each wake-up sends one event covering every step since the last one, as the tokenizer
        drains its queue (TokenizerManager._wait_one_response): cumulative text, or one coalesced
        delta with --incremental-streaming-output. A request error is a 400 JSON body, except on a
        native /generate stream (HTTP 200, an in-band error event, then [DONE]).
        """
        prompt_tokens, max_new_tokens, stream = req.prompt_tokens, req.max_new_tokens, req.streaming
        if self.firehose is not None and stream and max_new_tokens > 0:
            return await self.firehose.serve(request, self.firehose.writes(make_format, prompt_tokens, max_new_tokens, model))
        fault = self._draw_fault()
        if fault == ERROR:
            status = self.settings.faults.error_status
            return _json_response({"object": "error", "message": "injected server error", "code": status}, status=status)
        message = invalid
        if prompt_tokens + max_new_tokens > self.settings.context_length:
            message = context_error_message(self.settings.context_length, prompt_tokens, max_new_tokens)
        if message is not None:
            return await _reject(request, message, in_band=stream and native)

        if self.settings.server_args["disable_radix_cache"]:
            req.prompt_key = None
        engine = self._started_engine()
        progress = engine.submit(req)
        fmt = make_format(self._request_context(req, engine, model))
        try:
            if not stream:
                await engine.wait_finished(progress)
                last = (req.completion_tokens, req.verify_ct, req.accepted_drafts)
                return web.Response(text=fmt.body(last), content_type="application/json")
            return await self._stream(request, progress, fmt, fault)
        finally:
            if not req.finished:  # the client went away (or the stream was cut): free its slot
                engine.abort(req)
                self.aborted_requests += 1

    def _draw_fault(self) -> str | None:
        """The fault injected into this request (None: none); crashes the server when it is due."""
        fault = self.faults.next_request() if self.settings.faults.any else None
        if self.faults.should_crash():
            _die(f"fault injection: crashing after {self.settings.faults.crash_after_requests} requests", 134)
        return fault

    def _request_context(self, req: GenRequest, engine: RealtimeEngine, model: str) -> RequestContext:
        """What the response formats need to know about a queued request."""
        return RequestContext(
            rid=uuid.uuid4().hex, req=req, out=self.out, wall_s=engine.wall_s,
            spec_draft_tokens=self.spec_draft_tokens, model=model, created_s=int(time.time()),
            enable_metrics=self.settings.enable_metrics,
            dp_rank=req.rank if self.scheduler.num_ranks > 1 else None,
            verify_count_factor=self._doubled(DoubleCount.META_VERIFY_CT),
        )

    async def _stream(
        self, request: web.Request, progress: RequestProgress, fmt: NativeFormat | CompletionFormat,
        fault: str | None,
    ) -> web.StreamResponse:
        """SSE events until the request finishes: one per wake-up, covering every step since the
        last, then the closing event and [DONE]; an injected fault strikes when it is due."""
        req = progress.req
        resp = web.StreamResponse(headers=SSE_HEADERS)
        steps_per_event = self._doubled(DoubleCount.STREAM)  # 2: a stream that merges verify steps pairwise
        try:
            await resp.prepare(request)
            sent = held = 0
            while not req.finished:
                await progress.event.wait()
                marks = progress.take()
                held += len(marks)
                if sent and held < steps_per_event and not req.finished:
                    continue  # the first event (the prefill's token) is never held
                held, mark = 0, marks[-1]
                chunks = [fmt.event(sent, mark, req.finished)]
                sent = mark[0]
                if req.finished:
                    chunks.append(fmt.closing(mark))
                    chunks.append(SSE_DONE)
                text = "".join(chunks)
                if fault is not None and _fault_due(fault, req.finished, sent, req.max_new_tokens):
                    injected = await self._inject(fault, text, req.finished, request)
                    if injected is None:
                        return resp
                    text = injected
                    fault = fault if fault == NO_COUNT else None  # the others strike once
                await resp.write(text.encode())
            return resp
        except ConnectionResetError:
            return resp  # the client went away; _serve_generation frees its slot


async def _reject(request: web.Request, message: str, in_band: bool) -> web.StreamResponse:
    """A request error: HTTP 400 (raised as BadRequest), or ``in_band`` (a native /generate stream)
    HTTP 200 with an error event, then [DONE]."""
    if not in_band:
        raise BadRequest(message)
    resp = web.StreamResponse(headers=SSE_HEADERS)
    await resp.prepare(request)
    await resp.write((sse(native_error(message)) + SSE_DONE).encode())
    return resp


def _fault_due(fault: str, finished: bool, sent: int, max_new_tokens: int) -> bool:
    """Counts are corrupted at the end (or throughout); the rest strike half-way through."""
    if fault == NO_COUNT:
        return True
    if fault == BAD_COUNT:
        return finished
    return finished or sent * 2 >= max_new_tokens


_COUNT = re.compile(r'"completion_tokens":(\d+)')


async def _inject_fault(fault: str, text: str, finished: bool, request: web.Request, stall_s: float) -> str | None:
    """Corrupt one write of a stream; None means the connection was dropped."""
    if fault == CUT:
        transport = request.transport  # None once the client has gone: nothing left to cut
        if transport is not None:
            transport.abort()  # mid-stream TCP drop: no [DONE], no final chunk
        return None
    if fault == STALL:
        await asyncio.sleep(stall_s)
        return text
    if fault == MALFORMED:
        return 'data: {"text":"torn event","meta_info":{"id":\n\n' + text
    if fault == NO_COUNT:
        return re.sub(r'"completion_tokens":\d+,?', "", text)
    if fault == BAD_COUNT and finished:
        return _COUNT.sub(lambda m: f'"completion_tokens":{int(m.group(1)) + 3}', text)
    return text


async def _read_json(request: web.Request) -> dict[str, Any]:
    try:
        body = await request.json()
    except ValueError:
        raise BadRequest("request body is not valid JSON") from None
    if not isinstance(body, dict):
        raise BadRequest("request body must be a JSON object")
    return body


def greedy_key(temperature: Any, content: object) -> int | None:
    """A greedy request's acceptance key (model.acceptance_key of its prompt): its acceptance
    repeats run after run. Sampling (temperature > 0, or none given: SGLang's default is 1.0)
    draws afresh."""
    try:
        greedy = temperature is not None and float(temperature) == 0.0
    except (TypeError, ValueError):
        greedy = False
    return acceptance_key("prompt", content) if greedy and content is not None else None


def _int_param(value: object, default: int, name: str) -> int:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise BadRequest(f"{name} must be a non-negative integer")
    return value


def _die(message: str, code: int) -> None:
    """Exit at once, like a crash; the log goes straight to stderr (the log thread dies too)."""
    sys.stderr.write(f"[{time.strftime('%Y-%m-%d %H:%M:%S')}] ERROR {message}\n")
    sys.stderr.flush()
    os._exit(code)


def _exit_during_startup() -> None:
    _die("fault injection: exiting during start-up", 3)


async def serve(settings: ServerSettings) -> None:
    """Serve until SIGTERM or SIGINT, then shut down cleanly."""
    server = EmulatorServer(settings)
    runner = web.AppRunner(server.build_app(), access_log=None, handler_cancellation=True, shutdown_timeout=0.5)
    await runner.setup()
    site = web.TCPSite(runner, settings.host, settings.port)
    await site.start()
    host, port = runner.addresses[0][:2]
    settings.server_args["port"] = port  # the real port when launched with --port 0
    log.info("specguard emulator (SGLang %s API) listening on http://%s:%d", SGLANG_VERSION, host, port)

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    if settings.faults.exit_during_startup_s is not None:
        loop.call_later(settings.faults.exit_during_startup_s, _exit_during_startup)
    loop.call_at(server.ready_at, log.info, "The server is fired up and ready to roll!")
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
        log.info("shutting down")
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
        await runner.cleanup()
