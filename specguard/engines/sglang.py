"""SGLang: `python -m sglang.launch_server`, /server_info, /flush_cache, spec_verify_ct.

The rules this adapter checks a server against are SGLang 0.5.23's own (paths relative to
python/sglang/srt/): argument resolution in arg_groups/speculative_hook.py, adaptive speculation
in speculative/adaptive_spec_params.py, the busy flush in
managers/scheduler_components/flush_wrapper.py. docs/sglang-0.5.23-facts.md has the detail.
"""

from __future__ import annotations

import shlex
import time
from typing import Any

import httpx

from specguard.config import ServerConfig
from specguard.engines.base import ArgCheck, EffectiveArgs, Engine, ServerBusy, redact
from specguard.prometheus import parse_prometheus_series

# NEXTN (MTP heads) is an alias that SGLang resolves to EAGLE and reports as such
# (_resolve_speculative_algorithm_alias); with a Gemma4 assistant draft both become FROZEN_KV_MTP.
ALGORITHM_FAMILY = {"NEXTN": "EAGLE", "EAGLE": "EAGLE"}
EAGLE_FAMILY = ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE")  # _handle_eagle_family
MODELLED_ALGORITHMS = (*EAGLE_FAMILY, "NGRAM")  # the algorithms whose argument rules specguard checks
# Families whose handler sets max_running_requests = 48 when it is not given (_handle_dflash,
# _handle_dspark, _handle_frozen_kv_mtp, _handle_eagle_family, _handle_ngram; not UNO).
DEFAULT_CAP_48 = ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM", "DFLASH", "DSPARK", "FROZEN_KV_MTP")
ADAPTIVE_ALGORITHMS = ("EAGLE", "EAGLE3")  # adaptive_unsupported_reason (NEXTN arrives as EAGLE)
NGRAM_DEFAULT_BFS_BREADTH = 10  # --speculative-ngram-max-bfs-breadth (arg_groups/fields/spec.py)
NGRAM_DEFAULT_DRAFT_TOKENS = 12  # _handle_ngram
# _auto_choose_speculative_params: (num_steps, eagle_topk, num_draft_tokens) when steps are not given
AUTO_PARAMS_BIG = (5, 4, 8)
AUTO_PARAMS_DEFAULT = (3, 1, 4)
AUTO_PARAMS_BIG_ARCHS = ("LlamaForCausalLM", "Grok1ForCausalLM", "Grok1VForCausalLM")

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
FLUSH_RETRY_S = 0.5  # servers without ?timeout= answer 400 at once: ask again this often


def _int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def flag_value(launch_command: str, flag: str) -> str | None:
    """A flag's value as typed on the server's command line (its `launch_command`)."""
    try:
        argv = shlex.split(launch_command)
    except ValueError:
        return None
    for i, a in enumerate(argv):
        if a == flag and i + 1 < len(argv):
            return argv[i + 1]
        if a.startswith(flag + "="):
            return a.split("=", 1)[1]
    return None


def redact_command(launch_command: str) -> str:
    """The server's own command line with key values replaced, safe to store."""
    try:
        return shlex.join(redact(shlex.split(launch_command), []))
    except ValueError:
        return "(unparseable launch_command withheld)"


def launched_algorithm(launch_command: str) -> str | None:
    """The algorithm as typed on the command line (so NEXTN is told apart from EAGLE)."""
    value = flag_value(launch_command, "--speculative-algorithm")
    return value.upper() if value else None


def has_flag(launch_command: str, flag: str) -> bool:
    """A boolean flag typed on the server's command line."""
    try:
        return flag in shlex.split(launch_command)
    except ValueError:
        return False


def auto_params(algorithm: str | None, architecture: str | None) -> tuple[int, int, int]:
    """(steps, topk, draft tokens) SGLang 0.5.23 picks when steps are not given
    (speculative_hook.py _auto_choose_speculative_params: STANDALONE first, then by architecture)."""
    if (algorithm or "").upper() == "STANDALONE":
        return AUTO_PARAMS_DEFAULT
    return AUTO_PARAMS_BIG if architecture in AUTO_PARAMS_BIG_ARCHS else AUTO_PARAMS_DEFAULT


def ngram_params(num_steps: int | None, num_draft_tokens: int | None, max_bfs_breadth: int | None) -> tuple[int, int, int]:
    """(steps, topk, draft tokens) of an NGRAM server (speculative_hook.py _handle_ngram): topk is
    always --speculative-ngram-max-bfs-breadth, draft tokens default 12, steps draft // topk; no
    topk == 1 rewrite, and draft tokens without steps is valid."""
    topk = max_bfs_breadth or NGRAM_DEFAULT_BFS_BREADTH
    draft = num_draft_tokens if num_draft_tokens is not None else NGRAM_DEFAULT_DRAFT_TOKENS
    return (num_steps if num_steps is not None else draft // topk), topk, draft


def adaptive_unsupported_reason(algorithm: str | None, asked_topk: int | None, eff: EffectiveArgs) -> str | None:
    """Why SGLang 0.5.23 turns --speculative-adaptive off, as far as /server_info tells
    (adaptive_spec_params.py adaptive_unsupported_reason, same order; the platform-worker
    case is not visible from outside)."""
    algo = ALGORITHM_FAMILY.get((algorithm or "").upper(), (algorithm or "").upper())
    if algo not in ADAPTIVE_ALGORITHMS:
        return f"speculative_algorithm={algo or None} (only EAGLE/EAGLE3 are supported)"
    if asked_topk is not None and asked_topk != 1:
        return f"speculative_eagle_topk={asked_topk} (only topk=1 is supported)"
    if (eff.attn_dp_size or 1) > 1:
        return "attention DP is not supported (adaptive tier decisions are not synchronized across DP ranks)"
    for key, why in (("enable_multi_layer_eagle", "MultiLayerEagleWorkerV2 does not implement adaptive"),
                     ("enable_two_batch_overlap", "adaptive state swap would discard the TboAttnBackend wrapper"),
                     ("enable_pdmux", "adaptive state swap does not update decode_attn_backend_group")):
        if eff.raw.get(key) is True:
            return f"{key}=True is not supported ({why})"
    return None


def _int_list(v: Any) -> list[int] | None:
    if isinstance(v, list) and all(_int(x) is not None for x in v):
        return list(v)
    return None


def _asked(cfg_value: int | None, launch_command: str, flag: str) -> int | None:
    """What was asked: the configuration's value, else what the server's command line says."""
    if cfg_value is not None:
        return cfg_value
    value = flag_value(launch_command, flag)
    return int(value) if value is not None and value.isdigit() else None


class SGLangEngine(Engine):
    name = "sglang"
    module = "sglang.launch_server"
    counter_names = ("sglang:generation_tokens_total", "sglang:spec_verify_calls_total", "sglang:num_requests_total")
    gauge_names = ("sglang:spec_num_steps", "sglang:num_running_reqs", "sglang:num_queue_reqs",
                   "sglang:num_grammar_queue_reqs")
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

    def route_extra_body(self, api: str) -> dict | None:
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
        algo = info.get("speculative_algorithm")
        typed = launched_algorithm(launch)
        if algo and typed and ALGORITHM_FAMILY.get(typed) == algo:
            algo = typed  # server reports EAGLE for NEXTN; keep what was asked
        attn_dp = _int(info.get("attn_dp_size"))
        if attn_dp is None:  # before 0.5.23: --dp-size N --enable-dp-attention
            attn_dp = (_int(info.get("dp_size")) or 1) if info.get("enable_dp_attention") is True else 1
        per_rank = [c for c in (_int(s.get("effective_max_running_requests_per_dp")) for s in states) if c is not None]
        cap = _int(info.get("max_running_requests"))
        if cap is None and per_rank:
            cap = min(per_rank) * attn_dp
        graphs = next((g for g in (_int_list(s.get("decode_cuda_graph_bs")) for s in states) if g), None)
        raw = {k: v for k, v in info.items() if k not in ("internal_states", "api_key", "admin_api_key", "ssl_keyfile_password")}
        raw["launch_command"] = launch
        server_args = {k: info[k] for k in PERF_ARG_KEYS if info.get(k) is not None}
        server_args["attn_dp_size"] = attn_dp
        adaptive = info.get("speculative_adaptive") if isinstance(info.get("speculative_adaptive"), bool) else None
        return EffectiveArgs(
            engine_version=str(info.get("version", "")),
            model_path=str(info.get("model_path", "")),
            speculative_algorithm=algo.upper() if isinstance(algo, str) else None,
            draft_model_path=info.get("speculative_draft_model_path"),
            num_steps=_int(info.get("speculative_num_steps")),
            eagle_topk=_int(info.get("speculative_eagle_topk")),
            num_draft_tokens=_int(info.get("speculative_num_draft_tokens")),
            max_running_requests=cap,
            tp_size=_int(info.get("tp_size")),
            launch_command=launch,
            raw=raw,
            architecture=self._architecture(client),
            attn_dp_size=attn_dp,
            max_running_requests_per_rank=per_rank,
            speculative_adaptive=adaptive,
            decode_cuda_graph_bs=graphs,
            server_args=server_args,
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
        step gauge averaged (every rank reports the same steps)."""
        try:
            r = client.get("/metrics", timeout=10.0)
        except httpx.HTTPError:
            return None
        if r.status_code != 200:
            return None
        series = parse_prometheus_series(r.text)
        out = {k: sum(series[k]) for k in self.counter_names if k in series}
        for k in self.gauge_names:
            if series.get(k):
                out[k] = sum(series[k]) / len(series[k]) if k == "sglang:spec_num_steps" else sum(series[k])
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
        log_decode_stats), so it is the steps of the run's last fold window."""
        if not eff.speculative_adaptive or not after:
            return None
        return after.get("sglang:spec_num_steps")

    def server_accept_lengths(self, client, before, after) -> dict[str, float]:
        out: dict[str, float] = {}
        if before and after:
            tokens = after.get("sglang:generation_tokens_total", 0) - before.get("sglang:generation_tokens_total", 0)
            verify = after.get("sglang:spec_verify_calls_total", 0) - before.get("sglang:spec_verify_calls_total", 0)
            if verify > 0:
                out["metrics"] = tokens / verify
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

    # -- configuration against server ----------------------------------------------------------
    def check_args(self, cfg: ServerConfig, eff: EffectiveArgs, max_concurrency: int) -> list[ArgCheck]:
        """Differences between the configuration and the server, each one line; `blocking` marks
        the silent rewrites that make a launched configuration not what the suite describes."""
        checks: list[ArgCheck] = []
        algo = eff.speculative_algorithm
        family = ALGORITHM_FAMILY.get(algo or "", algo)
        if algo and algo not in MODELLED_ALGORITHMS:
            checks.append(ArgCheck(f"server runs {algo}, an algorithm specguard does not model: its steps/topk/draft "
                                   f"tokens are not checked (measured as {cfg.name})", False))
        elif cfg.speculative_algorithm or algo:
            checks += self._speculation_checks(cfg, eff, family)
        checks += self._adaptive_checks(cfg, eff)
        checks += self._cap_checks(cfg, eff, max_concurrency)
        return checks

    def _speculation_checks(self, cfg: ServerConfig, eff: EffectiveArgs, family: str | None) -> list[ArgCheck]:
        checks: list[ArgCheck] = []
        cmd = eff.launch_command
        asked_steps = _asked(cfg.num_steps, cmd, "--speculative-num-steps")
        asked_topk = _asked(cfg.eagle_topk, cmd, "--speculative-eagle-topk")
        asked_draft = _asked(cfg.num_draft_tokens, cmd, "--speculative-num-draft-tokens")
        ngram = family == "NGRAM"
        if ngram:
            breadth = _int(eff.raw.get("speculative_ngram_max_bfs_breadth"))
            steps, topk, draft = ngram_params(asked_steps, asked_draft, breadth)
            if asked_topk is not None and eff.eagle_topk is not None and asked_topk != eff.eagle_topk:
                checks.append(ArgCheck(f"asked for eagle_topk={asked_topk}, NGRAM server runs {eff.eagle_topk}: NGRAM's "
                                       f"topk is --speculative-ngram-max-bfs-breadth (default {NGRAM_DEFAULT_BFS_BREADTH}), "
                                       f"set that flag instead", True))
            asked_topk = None
            if asked_steps is None or asked_draft is None:
                checks.append(ArgCheck(f"NGRAM defaults: server runs {eff.num_steps} steps, topk {eff.eagle_topk}, "
                                       f"{eff.num_draft_tokens} draft tokens (SGLang 0.5.23 _handle_ngram: draft tokens "
                                       f"default {NGRAM_DEFAULT_DRAFT_TOKENS}, steps = draft // topk; expected "
                                       f"{steps}/{topk}/{draft})", False))
        elif eff.speculative_adaptive:
            if asked_draft is not None and eff.num_draft_tokens is not None and asked_draft != eff.num_draft_tokens:
                checks.append(ArgCheck(f"asked for {asked_draft} draft tokens, server runs {eff.num_draft_tokens}: "
                                       f"adaptive speculation sets num_steps + 1 (_init_adaptive_speculative_params)", True))
            asked_draft = None
        elif asked_steps is None and family is not None:
            exp = auto_params(eff.speculative_algorithm, eff.architecture)
            got = (eff.num_steps, eff.eagle_topk, eff.num_draft_tokens)
            arch = eff.architecture or "an architecture /model_info did not report"
            note = "" if got == exp or eff.architecture is None else f"; 0.5.23's table gives {exp[0]}/{exp[1]}/{exp[2]} for it"
            checks.append(ArgCheck(f"num_steps not set: server chose steps {got[0]}, topk {got[1]}, {got[2]} draft tokens "
                                   f"for {arch} (SGLang _auto_choose_speculative_params: (5, 4, 8) for Llama and Grok, "
                                   f"(3, 1, 4) otherwise){note}", False))
        if asked_draft is not None and eff.num_draft_tokens is not None and eff.num_draft_tokens != asked_draft:
            why = ""
            if (not ngram and eff.eagle_topk == 1 and eff.num_steps is not None
                    and eff.num_draft_tokens == eff.num_steps + 1):
                why = ": topk=1 forces num_steps+1"
            checks.append(ArgCheck(f"asked for {asked_draft} draft tokens, server runs {eff.num_draft_tokens}{why}", True))
        for label, asked, got in (("num_steps", asked_steps, eff.num_steps), ("eagle_topk", asked_topk, eff.eagle_topk)):
            if asked is not None and got is not None and asked != got:
                checks.append(ArgCheck(f"asked for {label}={asked}, server runs {got}", True))
        return checks

    def _adaptive_checks(self, cfg: ServerConfig, eff: EffectiveArgs) -> list[ArgCheck]:
        asked = "--speculative-adaptive" in cfg.args or has_flag(eff.launch_command, "--speculative-adaptive")
        if eff.speculative_adaptive:
            where = eff.raw.get("speculative_adaptive_config") or "the default table"
            return [ArgCheck(f"adaptive speculation on ({where}): steps follow the batch size; each run reports the "
                             f"steps in use (spec_num_steps, from sglang:spec_num_steps)", False)]
        if asked and eff.speculative_adaptive is False:
            asked_topk = _asked(cfg.eagle_topk, eff.launch_command, "--speculative-eagle-topk")
            reason = adaptive_unsupported_reason(cfg.speculative_algorithm or eff.speculative_algorithm, asked_topk, eff)
            return [ArgCheck(f"asked for --speculative-adaptive, server runs static steps {eff.num_steps}: SGLang 0.5.23 "
                             f"switched it off ({reason or 'see the server log: speculative_adaptive disabled'})", True)]
        return []

    def _cap_checks(self, cfg: ServerConfig, eff: EffectiveArgs, max_concurrency: int) -> list[ArgCheck]:
        checks: list[ArgCheck] = []
        asked_cap = _asked(cfg.max_running_requests, eff.launch_command, "--max-running-requests")
        dp = eff.attn_dp_size or 1
        if asked_cap is not None and eff.max_running_requests not in (None, asked_cap):
            checks.append(ArgCheck(f"asked for max_running_requests={asked_cap}, server runs {eff.max_running_requests}", True))
        per_rank = eff.max_running_requests_per_rank
        if len(set(per_rank)) > 1:
            checks.append(ArgCheck(f"ranks run different request caps {per_rank} (internal_states "
                                   f"effective_max_running_requests_per_dp)", False))
        if per_rank and eff.max_running_requests is not None:
            expected = max(1, eff.max_running_requests // dp)
            if min(per_rank) < expected:
                checks.append(ArgCheck(f"per-rank request cap is {min(per_rank)}, below max_running_requests // attn_dp_size "
                                       f"= {expected}: KV capacity limits it (token_capacity // 2)", asked_cap is not None))
        capacity = eff.request_capacity
        if capacity is not None and capacity < max_concurrency:
            default = ""
            if (asked_cap is None and eff.max_running_requests == 48
                    and ALGORITHM_FAMILY.get(eff.speculative_algorithm or "", eff.speculative_algorithm) in DEFAULT_CAP_48):
                default = " (SGLang's default cap of 48 under speculation)"
            ranks = f" = {min(per_rank)} per rank x {dp} attention-DP ranks" if dp > 1 and per_rank else ""
            checks.append(ArgCheck(
                f"the server runs at most {capacity} requests at once{ranks}{default} but the sweep goes to "
                f"{max_concurrency}: higher concurrency queues; set max_running_requests on every configuration "
                f"for a fair sweep", asked_cap is not None))
        return checks

    def matches(self, cfg: ServerConfig, eff: EffectiveArgs) -> str | None:
        want = (cfg.speculative_algorithm or "").upper() or None
        have = eff.speculative_algorithm
        if want == have:
            return None
        if want and have and ALGORITHM_FAMILY.get(want) == ALGORITHM_FAMILY.get(have) and not launched_algorithm(eff.launch_command):
            return None  # EAGLE reported, command line unknown: NEXTN and EAGLE both fit
        if want and have and have not in MODELLED_ALGORITHMS:
            return None  # FROZEN_KV_MTP, DFLASH, ...: accepted on attach, check_args warns
        return f"server runs {have or 'no speculation'}; config {cfg.name} needs {want or 'no speculation'}"
