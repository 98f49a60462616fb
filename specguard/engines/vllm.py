"""vLLM: `python -m vllm.entrypoints.openai.api_server`, /health, /v1/models, spec_decode counters.

What vLLM's OpenAI server does not say about itself, the adapter takes from the launch
configuration and says so: the speculative method is not visible anywhere without dev mode, so
it comes from `speculative_config`; the number of speculative tokens is checked against the
per-position acceptance counters in /metrics, which exist only while speculation is on.
"""

from __future__ import annotations

import json
import re
from typing import Any

import httpx

from specguard.config import ServerConfig
from specguard.engines.base import ArgCheck, EffectiveArgs, Engine
from specguard.notes import Note, NoteKind, RewriteCause

DRAFTS = "vllm:spec_decode_num_drafts_total"
ACCEPTED = "vllm:spec_decode_num_accepted_tokens_total"
ACCEPTED_PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos_total"
_POSITION = re.compile(r'^' + re.escape(ACCEPTED_PER_POS) + r'\{[^}]*\bposition="(\d+)"', re.MULTILINE)


def speculative_positions(metrics_text: str) -> int | None:
    """How many draft positions the server keeps acceptance counters for (its effective
    num_speculative_tokens), or None when it exposes none (speculation off)."""
    positions = {int(p) for p in _POSITION.findall(metrics_text)}
    return len(positions) if positions else None


def _positive_int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


class VLLMEngine(Engine):
    """Shares lifecycle, counter snapshots and the token cross-check with every engine; differs
    in the launch flags, the routes it reads back, and a run-level accept length."""

    name = "vllm"
    module = "vllm.entrypoints.openai.api_server"
    api = "openai"
    supported_apis = ("openai", "chat")
    readiness_path = "/health"
    generated_tokens_counter = "vllm:generation_tokens_total"
    counter_names = (DRAFTS, ACCEPTED, generated_tokens_counter)
    # vLLM streams no per-request verify counts, so the run's accept length is the counter delta.
    accept_length_source = "metrics"

    def launch_command(self, cfg: ServerConfig, host: str, port: int, api_key: str | None) -> list[str]:
        cmd = [self.python(cfg), "-m", self.module, "--model", cfg.model_path, "--served-model-name", cfg.name,
               "--host", host, "--port", str(port)]
        if cfg.tp_size != 1:
            cmd += ["--tensor-parallel-size", str(cfg.tp_size)]
        if cfg.speculative_config:
            cmd += ["--speculative-config", json.dumps(cfg.speculative_config, separators=(",", ":"), sort_keys=True)]
        if cfg.max_running_requests is not None:
            cmd += ["--max-num-seqs", str(cfg.max_running_requests)]
        cmd += list(cfg.args)
        if api_key:
            cmd += ["--api-key", api_key]
        return cmd

    def request_extra_body(self, cfg: ServerConfig) -> dict[str, Any] | None:
        """Each streamed chunk then carries its token ids, so multi-token events are counted
        exactly instead of spread evenly from the usage total."""
        return {"return_token_ids": True}

    def read_effective_args(self, client: httpx.Client, cfg: ServerConfig | None) -> EffectiveArgs:
        r = client.get("/v1/models", timeout=30.0)
        r.raise_for_status()
        models = [m for m in r.json().get("data") or [] if isinstance(m, dict) and not m.get("parent")]
        if not models:
            raise ValueError("/v1/models lists no base model")
        model = models[0]
        version = client.get("/version", timeout=30.0)
        version.raise_for_status()
        metrics = client.get("/metrics", timeout=30.0)
        metrics.raise_for_status()
        positions = speculative_positions(metrics.text)
        spec = (cfg.speculative_config if cfg else None) or {}
        method = str(spec.get("method", "unknown")).upper() if positions is not None else None
        raw: dict[str, Any] = {
            "served_model_name": model.get("id"),
            "root": model.get("root"),
            "max_model_len": model.get("max_model_len"),
            "version": version.json().get("version"),
            "speculative_config": spec or None,  # as launched: vLLM does not report it
            "num_speculative_tokens_in_metrics": positions,
        }
        return EffectiveArgs(
            engine_version=str(raw["version"] or ""),
            model_path=str(model.get("root") or ""),
            speculative_algorithm=method,
            draft_model_path=spec.get("model") if positions is not None else None,
            num_draft_tokens=positions,
            # as launched: vLLM reports neither
            max_running_requests=cfg.max_running_requests if cfg else None,
            tp_size=cfg.tp_size if cfg else None,
            raw=raw,
        )

    def flush_cache(self, client: httpx.Client, timeout_s: float = 30.0) -> None:
        """Nothing to flush: vLLM's OpenAI server has no cache route outside dev mode, and the
        accept-length counters are read as deltas around each run. Suites that want every run
        to prefill from scratch launch with --no-enable-prefix-caching."""

    def server_accept_lengths(self, client: httpx.Client, before: dict[str, float] | None,
                              after: dict[str, float] | None) -> dict[str, float]:
        """1 + accepted / drafts over the run: the mean tokens per step of the steps that drafted
        (steps where the proposer had nothing, e.g. n-gram before any match, are not counted)."""
        if not before or not after:
            return {}
        drafts = after.get(DRAFTS, 0.0) - before.get(DRAFTS, 0.0)
        accepted = after.get(ACCEPTED, 0.0) - before.get(ACCEPTED, 0.0)
        return {"metrics": 1 + accepted / drafts} if drafts > 0 else {}

    def server_accepted_drafts(self, before: dict[str, float] | None, after: dict[str, float] | None) -> float | None:
        """vLLM's accepted-token counter over the run (its responses carry no verify counts)."""
        if not before or not after or ACCEPTED not in after:
            return None
        return after[ACCEPTED] - before.get(ACCEPTED, 0.0)

    def idle_spec_counters(self, before: dict[str, float] | None, after: dict[str, float] | None) -> Note | None:
        """vLLM publishes its counters when a scheduler step logs its stats, so a short run can end
        before they move (seen: an ngram c1 run of 3 requests in 0.43 s read total drafts 0):
        such a run's step time and accept length are unmeasured, never 0 and never "not
        speculating" (that is read from the server's arguments, not from one run)."""
        if not before or not after or DRAFTS not in after:
            return None  # no speculative counters: not speculating
        if after[DRAFTS] - before.get(DRAFTS, 0.0) > 0:
            return None
        return Note.of(NoteKind.COUNTERS_IDLE, engine="vLLM", counter=DRAFTS)

    def check_args(self, cfg: ServerConfig, eff: EffectiveArgs, max_concurrency: int) -> list[ArgCheck]:
        checks: list[ArgCheck] = []
        asked = _positive_int((cfg.speculative_config or {}).get("num_speculative_tokens"))
        if asked is not None and eff.num_draft_tokens is not None and eff.num_draft_tokens != asked:
            checks.append(ArgCheck(Note.of(NoteKind.ARG_REWRITTEN, setting="num_speculative_tokens", asked=asked,
                                           runs=eff.num_draft_tokens, cause=RewriteCause.COUNTED_POSITIONS), True))
        if cfg.max_running_requests is not None and cfg.max_running_requests < max_concurrency:
            checks.append(ArgCheck(Note.of(NoteKind.SWEEP_QUEUES, capacity=cfg.max_running_requests,
                                           max_concurrency=max_concurrency, per_rank=0, ranks=0, default_cap=0), True))
        return checks

    def matches(self, cfg: ServerConfig, eff: EffectiveArgs) -> Note | None:
        have = eff.num_draft_tokens is not None
        if cfg.speculative == have:
            return None
        running = f"speculation ({eff.num_draft_tokens} tokens)" if have else "no speculation"
        wanted = cfg.algorithm_label if cfg.speculative else "no speculation"
        return Note.of(NoteKind.ATTACH_MISMATCH, runs=running, needs=wanted, config=cfg.name,
                       source="/metrics spec_decode counters")
