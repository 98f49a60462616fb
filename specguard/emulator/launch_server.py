"""Drop-in for ``python -m sglang.launch_server``: SGLang's flags in, an emulated server out.

    python -m specguard.emulator.launch_server --model-path M --port 30000 \\
        --speculative-algorithm EAGLE3 --emulator-profile fast

SGLang flags the emulator does not model are accepted with a warning. Emulator-only flags start
with ``--emulator-``; an unknown ``--emulator-*`` flag is an error. The launch applies SGLang's
silent adjustments (``spec.resolve_settings``) and logs them as warnings, as SGLang does;
/server_info then reports the effective values.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import logging.handlers
import os
import queue
import secrets
import shlex
import sys
import time
from typing import Any

from specguard.emulator import categories, simulated_acceptance
from specguard.emulator.categories import parse_category_factors
from specguard.emulator.decay import DecaySettings
from specguard.emulator.faults import add_fault_arguments, decay_settings_from_args, fault_settings_from_args
from specguard.emulator.model import ACCEPTANCE_MODES, PER_REQUEST, SchedulerConfig
from specguard.emulator.profile import EmulatorProfile, load_profile
from specguard.emulator.server import ServerSettings, serve
from specguard.emulator.simulated_acceptance import SimulatedAcceptance
from specguard.emulator.spec import ServingSettings, SpecRequest, resolve_settings
from specguard.sglang_rules import SGLANG_VERSION
from specguard.sglang_rules.adaptive import AdaptiveConfigError
from specguard.sglang_rules.cuda_graph import decode_graph_batch_sizes
from specguard.sglang_rules.speculative import ALGORITHMS

DEFAULT_PROFILE = "fast"
ACCEPT_LENGTH_ENV = simulated_acceptance.LENGTH_ENV

log = logging.getLogger("specguard.emulator")
LAUNCHED_MONOTONIC_S = time.monotonic()


def build_arg_parser() -> argparse.ArgumentParser:
    """SGLang's launch flags that matter to the emulator, plus the ``--emulator-*`` flags."""
    p = argparse.ArgumentParser(
        prog="python -m specguard.emulator.launch_server",
        description="SGLang-compatible emulator with a performance model of speculative decoding.",
    )
    _add_sglang_flags(p.add_argument_group("SGLang flags"))
    _add_emulator_flags(p.add_argument_group("emulator flags"))
    add_fault_arguments(p)
    return p


def _add_sglang_flags(g: argparse._ArgumentGroup) -> None:
    """SGLang 0.5.23's launch flags the emulator reads or reports (others are accepted with a warning)."""
    g.add_argument("--model-path", "--model", default=None, help="reported model path (default: the profile's)")
    g.add_argument("--tokenizer-path", default=None)
    g.add_argument("--served-model-name", default=None)
    g.add_argument("--host", default="127.0.0.1")
    g.add_argument("--port", type=int, default=30000, help="0 picks a free port (printed when listening)")
    g.add_argument("--tp-size", "--tp", dest="tp_size", type=int, default=1)
    g.add_argument("--dp-size", "--dp", "--data-parallel-size", dest="dp_size", type=int, default=1,
                   help="replicas (0.5.23); with --enable-dp-attention: attention-DP ranks (deprecated spelling)")
    g.add_argument("--attn-dp-size", "--attention-data-parallel-size", dest="attn_dp_size", type=int, default=1)
    g.add_argument("--enable-dp-attention", action="store_true",
                   help="Deprecated. Use --attn-dp-size <dp-size> instead of --dp-size <dp-size> --enable-dp-attention.")
    g.add_argument("--dtype", default="auto")
    g.add_argument("--context-length", type=int, default=None)
    g.add_argument("--mem-fraction-static", type=float, default=None)
    g.add_argument("--max-running-requests", type=int, default=None)
    g.add_argument("--max-total-tokens", type=int, default=None)
    g.add_argument("--chunked-prefill-size", type=int, default=None)
    g.add_argument("--random-seed", type=int, default=None)
    g.add_argument("--api-key", default=None)
    g.add_argument("--enable-metrics", action="store_true")
    g.add_argument("--incremental-streaming-output", action="store_true")
    g.add_argument("--decode-log-interval", type=int, default=40)
    g.add_argument("--log-level", default="info")
    g.add_argument("--skip-server-warmup", action="store_true")
    g.add_argument("--trust-remote-code", action="store_true")
    g.add_argument("--disable-radix-cache", action="store_true", help="no prefix-cache hits for repeated prompts")
    g.add_argument("--disable-cuda-graph", action="store_true", help="deprecated alias of --disable-decode-cuda-graph")
    g.add_argument("--disable-decode-cuda-graph", action="store_true")
    g.add_argument("--cuda-graph-max-bs-decode", type=int, default=None)
    g.add_argument("--cuda-graph-bs-decode", type=int, nargs="+", default=None)
    g.add_argument("--disable-cuda-graph-padding", action="store_true")
    g.add_argument("--stream-response-default-include-usage", action="store_true")
    g.add_argument("--speculative-algorithm", default=None, help=f"one of {', '.join(ALGORITHMS)}")
    g.add_argument("--speculative-draft-model-path", "--speculative-draft-model", default=None)
    g.add_argument("--speculative-num-steps", type=int, default=None)
    g.add_argument("--speculative-eagle-topk", type=int, default=None)
    g.add_argument("--speculative-num-draft-tokens", type=int, default=None)
    g.add_argument("--speculative-adaptive", action="store_true")
    g.add_argument("--speculative-adaptive-config", default=None, help="path to a JSON file")
    g.add_argument("--speculative-ngram-min-bfs-breadth", type=int, default=1)
    g.add_argument("--speculative-ngram-max-bfs-breadth", type=int, default=10)
    g.add_argument("--speculative-ngram-match-type", choices=["BFS", "PROB"], default="BFS")
    g.add_argument("--speculative-ngram-max-trie-depth", type=int, default=18)
    g.add_argument("--speculative-ngram-capacity", type=int, default=10 * 1000 * 1000)



def _add_emulator_flags(e: argparse._ArgumentGroup) -> None:
    """The ``--emulator-*`` flags: profile, speed, acceptance, noise, start-up, firehose."""
    e.add_argument("--emulator-profile", default=DEFAULT_PROFILE, help="profile name or TOML path")
    e.add_argument("--emulator-speed-factor", type=float, default=1.0, help="divide all modelled times by X")
    e.add_argument("--emulator-step-scale", type=float, default=1.0, help="multiply step times (1.111 = ~10%% slower)")
    e.add_argument("--emulator-accept-length", type=float, default=None,
                   help=f"force a mean accept length, drawn per request and position (overrides {ACCEPT_LENGTH_ENV}, "
                        "which forces every verify step as SGLang does)")
    e.add_argument("--emulator-category-accept", action="append", default=[], metavar="CATEGORY=FACTOR",
                   help="multiply one prompt category's acceptance per draft position, e.g. code=0.85 (repeatable)")
    e.add_argument("--emulator-acceptance", choices=ACCEPTANCE_MODES, default=PER_REQUEST,
                   help="per-request: a greedy request accepts as a function of its content and position, run after "
                        "run, as SGLang at temperature 0 (default); per-run: fresh draws and a per-run offset, as vLLM")
    e.add_argument("--emulator-jitter-pct", type=float, default=None, help="per-step noise sd in %% (default: profile)")
    e.add_argument("--emulator-drift-pct", type=float, default=None, help="per-launch speed sd in %% (default: profile)")
    e.add_argument("--emulator-startup-s", type=float, default=0.0, help="answer 503 on /health* this long")
    e.add_argument("--emulator-firehose", type=int, default=0, metavar="N",
                   help="stream as fast as possible, N events per write, skipping the model (client benchmarks)")


def build_settings(args: argparse.Namespace, argv: list[str]) -> ServerSettings:
    """Resolve parsed flags into a launch: profile, SGLang's adjustments, reported server args."""
    profile = load_profile(args.emulator_profile)
    if args.emulator_speed_factor <= 0 or args.emulator_step_scale <= 0:
        raise ValueError("--emulator-speed-factor and --emulator-step-scale must be > 0")
    accept_length = forced_accept_length(args.emulator_accept_length)
    dp_size, attn_dp_size, chunked_prefill_size = resolve_parallelism(args)
    try:
        serving = resolve_settings(profile, spec_request(args), args.max_running_requests, accept_length,
                                   dp_size=dp_size, attn_dp_size=attn_dp_size)
    except AdaptiveConfigError as exc:
        raise ValueError(str(exc)) from None
    for message in serving.warnings:
        log.warning(message)
    cuda_graph_bs = decode_cuda_graph_bs(args, serving.rank_cap, serving.spec is not None)
    simulated = simulated_from_environ(args.emulator_accept_length, accept_length, serving)
    faults, decay = fault_settings_from_args(args), decay_settings_from_args(args)
    check_faults_need_speculation(faults.double_count, decay, serving)

    seed = args.random_seed if args.random_seed is not None else secrets.randbelow(1 << 30)
    jitter = profile.jitter_pct if args.emulator_jitter_pct is None else args.emulator_jitter_pct
    drift = profile.drift_pct if args.emulator_drift_pct is None else args.emulator_drift_pct
    config = SchedulerConfig(
        profile, serving, seed, args.emulator_step_scale, args.emulator_speed_factor, jitter, drift,
        args.decode_log_interval, cuda_graph_bs,
        category_accept_factor=parse_category_factors(args.emulator_category_accept),
        acceptance=args.emulator_acceptance, decay=decay, simulated=simulated,
    )
    categories.warm()
    model_args = _model_server_args(args, profile, serving, chunked_prefill_size)
    server_args = {
        **model_args,
        **_runtime_server_args(args, model_args["model_path"], seed, dp_size, attn_dp_size),
        **_speculative_server_args(args, serving),
        "launch_command": shlex.join(argv),
    }
    return ServerSettings(
        scheduler_config=config,
        server_args=server_args,
        host=args.host,
        port=args.port,
        api_key=args.api_key,
        enable_metrics=args.enable_metrics,
        incremental_streaming_output=args.incremental_streaming_output,
        stream_default_include_usage=args.stream_response_default_include_usage,
        startup_s=args.emulator_startup_s,
        emulator_info={**_emulator_info(args, profile, serving, jitter, drift), **_fault_info(simulated, decay, serving)},
        faults=faults,
        firehose_events_per_write=args.emulator_firehose,
        launched_monotonic_s=LAUNCHED_MONOTONIC_S,
    )


def forced_accept_length(flag: float | None) -> float | None:
    """The mean accept length to force: ``--emulator-accept-length``, else SGLang's own
    ``SGLANG_SIMULATE_ACC_LEN`` from the environment (on when > 0, as SGLang reads it), else None
    (the profile's acceptance). The flag draws per request and position around that mean; the
    variable forces every verify step (``simulated_from_environ``)."""
    if flag is None:
        flag = simulated_acceptance.length_from_environ(os.environ)
    return flag


def simulated_from_environ(flag: float | None, length: float | None,
                           serving: ServingSettings) -> SimulatedAcceptance | None:
    """SGLang's forced acceptance: ``length`` from ``SGLANG_SIMULATE_ACC_LEN`` with its method and
    token mode (None when off, without speculation, or when ``--emulator-accept-length`` overrides it)."""
    spec = serving.spec
    if flag is not None or length is None or spec is None:
        return None
    simulated = simulated_acceptance.from_environ(os.environ, length, spec.algorithm, spec.topk)
    log.info("%s=%s (method %s, token mode %s): every verify step accepts a forced length, as SGLang does",
             ACCEPT_LENGTH_ENV, simulated.length, simulated.method.value, simulated.token_mode.value)
    return simulated


def check_faults_need_speculation(double_count: frozenset[object], decay: DecaySettings | None,
                                  serving: ServingSettings) -> None:
    """Accept-length faults on a server without speculation would change nothing: refuse them."""
    if serving.spec is not None:
        return
    if double_count:
        raise ValueError("--emulator-fault-double-count changes accept-length readings: it needs --speculative-algorithm")
    if decay is not None and decay.accept_decay > 0:
        raise ValueError("--emulator-fault-accept-decay decays acceptance: it needs --speculative-algorithm")


def spec_request(args: argparse.Namespace) -> SpecRequest:
    """The speculative flags as given, for ``resolve_settings``."""
    return SpecRequest(
        args.speculative_algorithm, args.speculative_num_steps, args.speculative_eagle_topk,
        args.speculative_num_draft_tokens, adaptive=args.speculative_adaptive,
        adaptive_config=args.speculative_adaptive_config,
        ngram_max_bfs_breadth=args.speculative_ngram_max_bfs_breadth,
        draft_model_path=args.speculative_draft_model_path,
    )


def resolve_parallelism(args: argparse.Namespace) -> tuple[int, int, int]:
    """(dp_size, attn_dp_size, chunked_prefill_size) after SGLang's rewrites: the deprecated
    ``--dp-size N --enable-dp-attention`` becomes ``--attn-dp-size N``, and attention DP needs
    ``tp_size`` to be a multiple of it and divides the chunked-prefill size by it (with a warning)."""
    dp_size, attn_dp_size = args.dp_size, args.attn_dp_size
    if args.enable_dp_attention and attn_dp_size == 1:  # parallel_hook.handle_deprecated_dp_attention
        dp_size, attn_dp_size = 1, args.dp_size
    chunked_prefill_size = args.chunked_prefill_size or 8192
    if attn_dp_size > 1:
        if args.tp_size % attn_dp_size:
            raise ValueError(
                f"--tp-size {args.tp_size} is not a multiple of the attention-DP size {attn_dp_size} "
                f"(SGLang {SGLANG_VERSION} asserts tp_size % attn_dp_size == 0 in _handle_data_parallelism)"
            )
        log.warning("DP attention is enabled. chunked prefill size is adjusted from %d to %d.",
                    chunked_prefill_size, chunked_prefill_size // attn_dp_size)
        chunked_prefill_size //= attn_dp_size
    return dp_size, attn_dp_size, chunked_prefill_size


def _model_server_args(
    args: argparse.Namespace, profile: EmulatorProfile, serving: ServingSettings, chunked_prefill_size: int,
) -> dict[str, Any]:
    """/server_info's model, memory and scheduling fields (the first of its groups, in SGLang's order)."""
    model_path = args.model_path or profile.model_path
    context_length = args.context_length or profile.context_length
    return {
        "model_path": model_path,
        "tokenizer_path": args.tokenizer_path or model_path,
        "tokenizer_mode": "auto",
        "skip_tokenizer_init": False,
        "load_format": "auto",
        "trust_remote_code": args.trust_remote_code,
        "context_length": context_length,
        "is_embedding": False,
        "dtype": args.dtype,
        "quantization": None,
        "kv_cache_dtype": "auto",
        "mem_fraction_static": args.mem_fraction_static if args.mem_fraction_static is not None else 0.85,
        "max_running_requests": serving.reported_max_running_requests,
        "max_queued_requests": None,
        "max_total_tokens": args.max_total_tokens or 4 * context_length,
        "chunked_prefill_size": chunked_prefill_size,
        "schedule_policy": "fcfs",
        "page_size": 1,
        "disable_radix_cache": args.disable_radix_cache,
        "disaggregation_mode": "null",  # a server argument: top level and in every internal state
    }


def _runtime_server_args(
    args: argparse.Namespace, model_path: str, seed: int, dp_size: int, attn_dp_size: int,
) -> dict[str, Any]:
    """/server_info's parallelism, network, logging and CUDA-graph fields."""
    return {
        "tp_size": args.tp_size,
        "pp_size": 1,
        "dp_size": dp_size,
        "attn_dp_size": attn_dp_size,
        "enable_dp_attention": attn_dp_size > 1,  # synthesised by ServerArgs.resolved_dict
        "load_balance_method": "round_robin",
        "ep_size": 1,
        "device": "cuda",
        "random_seed": seed,
        "host": args.host,
        "port": args.port,
        "skip_server_warmup": args.skip_server_warmup,
        "api_key": None,  # never echo the key
        "served_model_name": args.served_model_name or model_path,
        "weight_version": "default",
        "stream_interval": 1,
        "incremental_streaming_output": args.incremental_streaming_output,
        "log_level": args.log_level,
        "enable_metrics": args.enable_metrics,
        "decode_log_interval": args.decode_log_interval,
        "disable_cuda_graph": args.disable_cuda_graph,
        "disable_decode_cuda_graph": args.disable_decode_cuda_graph or args.disable_cuda_graph,
        "cuda_graph_bs_decode": args.cuda_graph_bs_decode,
        "cuda_graph_max_bs_decode": args.cuda_graph_max_bs_decode,
        "disable_cuda_graph_padding": args.disable_cuda_graph_padding,
        "stream_response_default_include_usage": args.stream_response_default_include_usage,
        "enable_mixed_chunk": False,
        "disable_overlap_schedule": False,
        "attention_backend": None,
        "enable_deterministic_inference": False,
    }


def _speculative_server_args(args: argparse.Namespace, serving: ServingSettings) -> dict[str, Any]:
    """/server_info's ``speculative_*`` fields: the resolved values (None without speculation)."""
    spec = serving.spec
    return {
        "speculative_algorithm": spec.reported_algorithm if spec else None,
        "speculative_draft_model_path": args.speculative_draft_model_path if spec else None,
        "speculative_num_steps": spec.num_steps if spec else None,
        "speculative_eagle_topk": spec.topk if spec else None,
        "speculative_num_draft_tokens": spec.num_draft_tokens if spec else None,
        "speculative_accept_threshold_single": 1.0,
        "speculative_accept_threshold_acc": 1.0,
        "speculative_token_map": None,
        "speculative_adaptive": serving.adaptive is not None,
        "speculative_adaptive_config": args.speculative_adaptive_config,
        "speculative_ngram_min_bfs_breadth": args.speculative_ngram_min_bfs_breadth,
        "speculative_ngram_max_bfs_breadth": args.speculative_ngram_max_bfs_breadth,
        "speculative_ngram_match_type": args.speculative_ngram_match_type,
        "speculative_ngram_max_trie_depth": args.speculative_ngram_max_trie_depth,
        "speculative_ngram_capacity": args.speculative_ngram_capacity,
        "enable_multi_layer_eagle": False,
        "enable_two_batch_overlap": False,
    }


def _emulator_info(
    args: argparse.Namespace, profile: EmulatorProfile, serving: ServingSettings, jitter: float, drift: float,
) -> dict[str, object]:
    """/server_info's ``specguard_emulator`` section: the profile and the model's knobs."""
    spec = serving.spec
    return {
        "profile": profile.name,
        "profile_path": profile.source,
        "description": profile.description,
        "speed_factor": args.emulator_speed_factor,
        "step_scale": args.emulator_step_scale,
        "jitter_pct": jitter,
        "drift_pct": drift,
        "effective_max_running_requests": serving.max_running_requests,
        "accept_prob": list(spec.accept_prob) if spec else None,
        "expected_accept_length": spec.expected_accept_length if spec else None,
        "architecture": profile.architecture,
        "adaptive_candidate_steps": serving.adaptive.candidates if serving.adaptive else None,
    }


def _fault_info(simulated: SimulatedAcceptance | None, decay: DecaySettings | None,
                serving: ServingSettings) -> dict[str, object]:
    """/server_info's ``specguard_emulator`` keys for forced acceptance and decay (none when off)."""
    out: dict[str, object] = {}
    spec = serving.spec
    if simulated is not None and spec is not None:
        out["simulated_acceptance"] = simulated.describe()
        out["expected_accept_length"] = simulated.expected_length(spec.positions(spec.num_steps) + 1)
    if decay is not None:
        out["decay"] = {"accept_decay": decay.accept_decay, "step_slowdown": decay.step_slowdown,
                        "start": decay.start, "over": decay.over, "clock": decay.clock.value}
    return out


def decode_cuda_graph_bs(args: argparse.Namespace, rank_cap: int, speculative: bool) -> list[int] | None:
    """The decode CUDA-graph batch sizes a rank captures (None: graphs disabled, no padding).

    SGLang's sizes (sglang_rules.cuda_graph) up to ``--cuda-graph-max-bs-decode``; the emulator's
    default max is the rank's request cap (at most 512), where a real server derives it from GPU
    memory. ``--cuda-graph-bs-decode`` wins.
    """
    if args.disable_cuda_graph or args.disable_decode_cuda_graph:
        return None
    if args.cuda_graph_bs_decode:
        return sorted(set(args.cuda_graph_bs_decode))
    max_bs = args.cuda_graph_max_bs_decode or min(rank_cap, 512)
    return decode_graph_batch_sizes(max_bs, speculative=speculative, padding=not args.disable_cuda_graph_padding)


def _start_logging(level: str) -> logging.handlers.QueueListener:
    """Log to stderr from a background thread, so a slow stderr reader never stalls the event loop."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("[%(asctime)s] %(levelname)s %(message)s", "%Y-%m-%d %H:%M:%S"))
    records: queue.SimpleQueue[logging.LogRecord] = queue.SimpleQueue()
    listener = logging.handlers.QueueListener(records, handler)
    log.handlers[:] = [logging.handlers.QueueHandler(records)]
    log.setLevel(getattr(logging, level.upper(), logging.INFO))
    log.propagate = False
    listener.start()
    return listener


def main(argv: list[str] | None = None) -> int:
    """Parse SGLang-style flags, resolve them and serve until SIGTERM/SIGINT. Returns an exit code."""
    argv = sys.argv[1:] if argv is None else list(argv)
    args, unknown = build_arg_parser().parse_known_args(argv)
    bad = [item.split("=")[0] for item in unknown if item.startswith("--emulator-")]
    if bad:
        sys.stderr.write(
            f"error: unknown emulator flag {bad[0]} (the --emulator-* flags are listed by "
            "`python -m specguard.emulator.launch_server --help`)\n"
        )
        return 2
    listener = _start_logging(args.log_level)
    try:
        for item in unknown:
            if item.startswith("-"):
                log.warning("flag %s is not emulated; ignoring it and its value", item.split("=")[0])
        try:
            settings = build_settings(args, argv)
        except ValueError as exc:
            log.error("%s", exc)
            return 2
        try:
            asyncio.run(serve(settings))
        except OSError as exc:
            log.error("cannot serve on %s:%s: %s", args.host, args.port, exc)
            return 1
        return 0
    finally:
        listener.stop()


if __name__ == "__main__":
    sys.exit(main())
