"""Impossible values in a suite, caught before any server starts; each names the file's key, or
the command-line flag that set it."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specguard.config.suite import (
    APIS,
    ENGINES,
    FAIL_RULES,
    SGLANG_ALGORITHMS,
    SIMULATE_ACCEPT_CHOICES,
    SIMULATE_ACCEPT_ENV,
    SOAK_MODES,
    ConfigError,
    ServerConfig,
    Suite,
    SweepConfig,
    Tolerances,
    key_name,
)
from specguard.slo import SLOError, parse_slo
from specguard.workload import WORKLOAD_KINDS, WorkloadSpec


@dataclass(frozen=True)
class Origin:
    """Where a checked value came from, as the start of its error message: the command-line flag
    that set it ("--repeats 1 (command line)"), else the suite file's key as written there."""

    path: Path
    sources: dict[str, str]  # a key ("sweep.repeats") -> the flag that set it ("--repeats")

    def __call__(self, key: str, value: Any) -> str:
        flag = self.sources.get(key)
        if flag:  # as typed: a list is comma-separated
            shown = ",".join(map(str, value)) if isinstance(value, list) else str(value)
            return f"{flag} {shown} (command line)"
        return f"{self.path}: {key_name(key)} = {value!r}"


def validate_suite(suite: Suite, sources: dict[str, str] | None = None) -> None:
    """Impossible values, caught before any server starts; the first one found is the error. `sources`
    maps a key to the command-line flag that set it, so a bad value typed there is blamed on the flag.
    A valid value that gives up a guarantee is one warning line on stderr (``statistical_caveats``)."""
    at = Origin(suite.path, sources or {})
    _validate_levels(suite.sweep, suite.tolerances, at)
    _validate_runs(suite.sweep, suite.workload, at)
    _validate_tolerances(suite.tolerances, at)
    _validate_design(suite.sweep, suite.tolerances, at)
    for name, s in suite.servers.items():
        _validate_server(suite.path, name, s, suite)
    _validate_soak(suite, at)
    for line in statistical_caveats(suite.tolerances, at):
        if line not in _WARNED:  # the file is validated alone, then with the command line: one line each
            _WARNED.add(line)
            print(f"specguard: warning: {line}", file=sys.stderr)


_WARNED: set[str] = set()


def _validate_soak(suite: Suite, at: Origin) -> None:
    soak = suite.soak
    for key in ("duration_s", "window_s", "concurrency", "warmup_windows"):
        value = getattr(soak, key)
        positive = key in ("window_s", "concurrency")
        if value < 0 or (positive and value == 0):
            raise ConfigError(f"{at('soak.' + key, value)}: must be {'positive' if positive else '>= 0'}")
    if soak.mode not in SOAK_MODES:
        raise ConfigError(f"{at('soak.mode', soak.mode)}: use one of {', '.join(SOAK_MODES)}")
    if not 0 < soak.alpha < 1 or not 0 <= soak.min_change < 1:
        raise ConfigError(f"{at('soak.alpha', soak.alpha)}: soak.alpha in (0, 1) and soak.min_change in [0, 1)")
    for name in soak.configs:
        if name not in suite.servers:
            raise ConfigError(f"{at('soak.configs', soak.configs)}: {name!r} is not a configuration in this file")
    if soak.duration_s and soak.duration_s < (soak.warmup_windows + 3) * soak.window_s:
        raise ConfigError(f"{at('soak.duration_s', soak.duration_s)}: a soak needs the warm-up windows and at least 3 "
                          f"more of {soak.window_s:g} s: at least {(soak.warmup_windows + 3) * soak.window_s:g} s")


def statistical_caveats(tol: Tolerances, at: Origin) -> list[str]:
    """Valid settings that void a statistical guarantee, one line each: inconclusive = "fail" makes
    every cell the runs cannot resolve a failure, and such cells are common on unchanged code,
    so family_alpha no longer bounds the session's false fails (docs/statistics.md)."""
    if tol.inconclusive != "fail":
        return []
    return [f"{at('tolerances.inconclusive', tol.inconclusive)}: an inconclusive cell fails, so family_alpha no "
            f"longer bounds false fails (unchanged cells a run cannot resolve are inconclusive; docs/statistics.md)"]


def _validate_levels(sw: SweepConfig, tol: Tolerances, at: Origin) -> None:
    """The levels (concurrencies or request rates), the load at rate levels, the SLOs and the metric that needs them."""
    if not sw.concurrency or any(c <= 0 for c in sw.concurrency):
        raise ConfigError(f"{at('sweep.concurrency', sw.concurrency)}: concurrency must be a non-empty list of positive integers")
    if len(set(sw.concurrency)) != len(sw.concurrency):
        raise ConfigError(f"{at('sweep.concurrency', sw.concurrency)}: concurrency has duplicates")
    _validate_load(sw, at)
    if tol.speculation_metric not in ("tok_s", "goodput"):
        raise ConfigError(f"{at('tolerances.speculation_metric', tol.speculation_metric)}: use \"tok_s\" or \"goodput\"")
    if tol.speculation_metric == "goodput" and not sw.slo:
        raise ConfigError(f"{at('tolerances.speculation_metric', tol.speculation_metric)}: goodput needs SLOs; set "
                          f"[sweep] slo = \"ttft_ms=...,tpot_ms=...\"")


def _validate_load(sw: SweepConfig, at: Origin) -> None:
    """Request-rate levels, their cap and burstiness, and the SLOs: each mistake names its key."""
    if sw.request_rate:
        if any(r <= 0 for r in sw.request_rate) or len(set(sw.request_rate)) != len(sw.request_rate):
            raise ConfigError(f"{at('sweep.request_rate', sw.request_rate)}: request_rate must be a list of distinct "
                              f"positive whole requests/s, e.g. [2, 8, 32]")
    elif sw.max_concurrency is not None or sw.burstiness != 1.0:
        key = "sweep.max_concurrency" if sw.max_concurrency is not None else "sweep.burstiness"
        raise ConfigError(f"{at(key, getattr(sw, key.split('.')[1]))}: only used with request_rate levels; "
                          f"set sweep.request_rate = [...] or remove it")
    if sw.max_concurrency is not None and sw.max_concurrency <= 0:
        raise ConfigError(f"{at('sweep.max_concurrency', sw.max_concurrency)}: must be a positive integer")
    if not sw.burstiness > 0:
        raise ConfigError(f"{at('sweep.burstiness', sw.burstiness)}: must be > 0 (1 = Poisson, < 1 burstier)")
    if sw.slo is not None:
        try:
            parse_slo(sw.slo, "sweep.slo")
        except SLOError as exc:
            raise ConfigError(f"{at('sweep.slo', sw.slo)}: {exc}") from None


def _validate_runs(sw: SweepConfig, workload: WorkloadSpec, at: Origin) -> None:
    """What one cell runs: warmup and measured runs, requests per run, the API, timeouts, the prompts' kind."""
    if sw.repeats < 2:
        raise ConfigError(f"{at('sweep.repeats', sw.repeats)}: the gates need at least 2 runs per cell to estimate "
                          f"noise; set repeats >= 2")
    if sw.warmup < 0:
        raise ConfigError(f"{at('sweep.warmup', sw.warmup)}: warmup must be >= 0")
    if sw.min_requests_per_run < 0:
        raise ConfigError(f"{at('sweep.min_requests_per_run', sw.min_requests_per_run)}: must be >= 0 (0: no floor)")
    if sw.requests_per_worker < 1:
        raise ConfigError(f"{at('sweep.requests_per_worker', sw.requests_per_worker)}: must be >= 1")
    if sw.api not in APIS:
        raise ConfigError(f"{at('sweep.api', sw.api)}: use one of {', '.join(APIS)}")
    for key in ("read_timeout_s", "run_timeout_s", "session_timeout_s"):
        if getattr(sw, key) <= 0:
            raise ConfigError(f"{at('sweep.' + key, getattr(sw, key))}: must be positive")
    if workload.kind not in WORKLOAD_KINDS:
        raise ConfigError(f"{at('workload.kind', workload.kind)}: use one of {', '.join(WORKLOAD_KINDS)}")
    if sw.accept_drift not in ("warn", "fail"):
        raise ConfigError(f"{at('sweep.accept_drift', sw.accept_drift)}: use \"warn\" or \"fail\"")


def _validate_tolerances(tol: Tolerances, at: Origin) -> None:
    """Drops worth failing for, the family's false-fail rate, the pass level, the priors, undecided cells."""
    for name, value in (("throughput", tol.throughput), ("accept_length", tol.accept_length),
                        ("step_time", tol.step_time)):
        if not 0 <= value < 1:
            raise ConfigError(f"{at('tolerances.' + name, value)}: must be a fraction in [0, 1), e.g. 0.05 for 5%")
    if not 0 < tol.family_alpha < 0.5:
        raise ConfigError(f"{at('tolerances.family_alpha', tol.family_alpha)}: must be in (0, 0.5), e.g. 0.01")
    if not 0.5 <= tol.pass_confidence < 1:
        raise ConfigError(f"{at('tolerances.pass_confidence', tol.pass_confidence)}: must be a one-sided level in "
                          f"[0.5, 1), e.g. 0.95")
    for key in ("prior_between_sd", "prior_between_sd_accept"):
        if getattr(tol, key) < 0:
            raise ConfigError(f"{at('tolerances.' + key, getattr(tol, key))}: must be >= 0")
    if tol.inconclusive not in ("pass", "fail"):
        raise ConfigError(f"{at('tolerances.inconclusive', tol.inconclusive)}: use \"pass\" or \"fail\"")
    if tol.fail_rule not in FAIL_RULES:
        raise ConfigError(f"{at('tolerances.fail_rule', tol.fail_rule)}: use one of "
                          f"{', '.join(repr(r) for r in FAIL_RULES)} (docs/statistics.md)")


def _validate_design(sw: SweepConfig, tol: Tolerances, at: Origin) -> None:
    """How the gate replicates and pools: launches, relaunches, the prior's shared part and weight, history kept."""
    if sw.launches < 1:
        raise ConfigError(f"{at('sweep.launches', sw.launches)}: must be >= 1 (server launches per configuration)")
    if sw.relaunch not in ("off", "on-suspicion"):
        raise ConfigError(f"{at('sweep.relaunch', sw.relaunch)}: use \"off\" or \"on-suspicion\" (docs/statistics.md)")
    if sw.max_launches < max(sw.launches, 1):
        raise ConfigError(f"{at('sweep.max_launches', sw.max_launches)}: must be >= advanced.launches ({sw.launches}); "
                          "2 is one relaunch at most, 3 two (docs/statistics.md)")
    if not 0 < sw.relaunch_p < 1:
        raise ConfigError(f"{at('sweep.relaunch_p', sw.relaunch_p)}: must be in (0, 1), e.g. 0.05")
    if sw.relaunch == "on-suspicion" and sw.relaunch_p < tol.family_alpha:
        raise ConfigError(f"{at('sweep.relaunch_p', sw.relaunch_p)}: must be >= tolerances.family_alpha "
                          f"({tol.family_alpha:g}) with relaunch = \"on-suspicion\": stage 1 only screens, so a "
                          f"configuration that is not relaunched must have no p below the family alpha (docs/statistics.md)")
    if tol.prior_day_sd < 0 or tol.prior_between_dof <= 0:
        raise ConfigError(f"{at('tolerances.prior_day_sd', tol.prior_day_sd)} / prior_between_dof = {tol.prior_between_dof!r}: "
                          "prior_day_sd must be >= 0 and prior_between_dof > 0 (inf: the prior as known)")
    if tol.history_sessions < 1:
        raise ConfigError(f"{at('tolerances.history_sessions', tol.history_sessions)}: must be >= 1")


def _ngram_breadth(args: list[str]) -> int | None:
    """--speculative-ngram-max-bfs-breadth from a configuration's extra flags (SGLang's default 10)."""
    flag = "--speculative-ngram-max-bfs-breadth"
    for i, a in enumerate(args):
        value = args[i + 1] if a == flag and i + 1 < len(args) else a.split("=", 1)[1] if a.startswith(flag + "=") else None
        if value is not None:
            return int(value) if value.isdigit() else None
    return 10


def _validate_server(p: Path, name: str, s: ServerConfig, suite: Suite) -> None:
    key = f"servers.{name}"
    _validate_engine(p, key, s)
    if s.speculative_algorithm != "NGRAM":  # NGRAM: no topk == 1 rewrite; draft tokens without steps is valid
        _validate_draft_shape(p, key, s)
    elif s.eagle_topk is not None and s.eagle_topk != _ngram_breadth(s.args):
        # SGLang 0.5.23 speculative_hook.py _handle_ngram: topk is always --speculative-ngram-max-bfs-breadth
        raise ConfigError(f"{p}: {key}.eagle_topk = {s.eagle_topk}: NGRAM ignores it (its topk is "
                          f"--speculative-ngram-max-bfs-breadth, here {_ngram_breadth(s.args)}); remove eagle_topk and "
                          f"put that flag in {key}.args")
    _validate_reference(p, key, s, suite.servers)
    _validate_forced_acceptance(p, key, s)
    if s.startup_timeout_s <= 0:
        raise ConfigError(f"{p}: {key}.startup_timeout_s must be positive")


def _validate_engine(p: Path, key: str, s: ServerConfig) -> None:
    """The engine, the model, how speculation is spelled for that engine, and positive sizes."""
    if s.engine not in ENGINES:
        raise ConfigError(f"{p}: {key}.engine = {s.engine!r}; use one of {', '.join(ENGINES)}")
    if not s.model_path:
        raise ConfigError(f"{p}: {key}.model_path is required")
    if s.speculative_algorithm is not None and s.speculative_algorithm not in SGLANG_ALGORITHMS:
        raise ConfigError(f"{p}: {key}.speculative_algorithm = {s.speculative_algorithm!r}; "
                          f"use one of {', '.join(SGLANG_ALGORITHMS)}")
    if s.speculative_config is not None and s.engine != "vllm":
        raise ConfigError(f"{p}: {key}.speculative_config is vLLM's; for {s.engine} use speculative_algorithm and "
                          f"num_steps/eagle_topk/num_draft_tokens")
    if s.engine == "vllm" and s.speculative_algorithm:
        raise ConfigError(f"{p}: {key}: vLLM takes speculative_config (a table), not speculative_algorithm")
    for k in ("num_steps", "eagle_topk", "num_draft_tokens", "max_running_requests", "tp_size"):
        v = getattr(s, k)
        if v is not None and v <= 0:
            raise ConfigError(f"{p}: {key}.{k} = {v} must be positive")
    if s.min_accept_length is not None and not (s.speculative and s.min_accept_length >= 1):
        raise ConfigError(f"{p}: {key}.min_accept_length = {s.min_accept_length}: a speculative configuration's "
                          f"floor of accept length, >= 1 (default 1.05; NGRAM 1.0)")


def _validate_draft_shape(p: Path, key: str, s: ServerConfig) -> None:
    """Steps, topk and draft tokens as SGLang resolves them for every algorithm but NGRAM."""
    steps, draft = s.num_steps, s.num_draft_tokens
    if s.eagle_topk == 1 and steps is not None and draft is not None and draft != steps + 1:
        raise ConfigError(f"{p}: {key}: eagle_topk = 1 with num_steps = {steps} and num_draft_tokens = {draft}: "
                          f"SGLang silently runs num_steps + 1 = {steps + 1} draft tokens with topk 1; set "
                          f"num_draft_tokens = {steps + 1}, or num_steps = {draft - 1} to draft {draft} tokens")
    if (s.eagle_topk is not None or draft is not None) and steps is None and s.speculative_algorithm:
        raise ConfigError(f"{p}: {key}: SGLang refuses eagle_topk/num_draft_tokens without num_steps; set num_steps too")


def _validate_forced_acceptance(p: Path, key: str, s: ServerConfig) -> None:
    """simulate_accept_length: SGLang's forced acceptance (config/suite.py SIMULATE_ACCEPT_ENV)."""
    _validate_forced_env(p, key, s)
    if s.forced_acceptance:
        _validate_forced_length(p, key, s)


def _validate_forced_env(p: Path, key: str, s: ServerConfig) -> None:
    """The variables SGLang reads: the length only through the key; method and token mode as SGLang takes them."""
    if SIMULATE_ACCEPT_ENV[0] in s.env:
        raise ConfigError(f"{p}: {key}.env sets {SIMULATE_ACCEPT_ENV[0]}: write simulate_accept_length = N instead, "
                          f"so the accept-length test checks it and the baseline fingerprint records it")
    for var, choices in SIMULATE_ACCEPT_CHOICES.items():
        if var in s.env and (not s.forced_acceptance or s.env[var] not in choices):
            raise ConfigError(f"{p}: {key}.env.{var} = {s.env[var]!r}: with simulate_accept_length, one of "
                              f"{', '.join(choices)}")
    if s.env.get("SGLANG_SIMULATE_ACC_TOKEN_MODE") == "real-draft-token" and s.eagle_topk not in (None, 1):
        raise ConfigError(f"{p}: {key}.env.SGLANG_SIMULATE_ACC_TOKEN_MODE = \"real-draft-token\" needs eagle_topk = 1 "
                          f"(SGLang refuses it on a tree)")


def _validate_forced_length(p: Path, key: str, s: ServerConfig) -> None:
    length = s.simulate_accept_length
    if not s.speculative or s.engine == "vllm":
        raise ConfigError(f"{p}: {key}.simulate_accept_length forces SGLang's speculative acceptance: it needs "
                          f"speculative_algorithm (engine sglang or emulator)")
    if isinstance(length, bool) or not isinstance(length, int) or length < 1:
        raise ConfigError(f"{p}: {key}.simulate_accept_length = {length!r}: a whole number of tokens per verify step, "
                          f">= 1 (SGLang's match-expected draws floor or ceiling of a fraction once per batch)")
    if s.num_steps is not None and s.speculative_algorithm != "NGRAM" and length > s.num_steps + 1:
        raise ConfigError(f"{p}: {key}.simulate_accept_length = {length} > num_steps + 1 = {s.num_steps + 1}: SGLang "
                          f"caps it there (a verify step keeps at most its drafts and one bonus token)")


def _validate_reference(p: Path, key: str, s: ServerConfig, servers: dict[str, ServerConfig]) -> None:
    """A speculative configuration names the non-speculative one it is compared with."""
    if s.speculative and not s.reference:
        raise ConfigError(f"{p}: {key} is speculative but has no reference; set reference = \"<non-speculative configuration>\"")
    if s.reference is not None:
        if s.reference not in servers:
            raise ConfigError(f"{p}: {key}.reference = {s.reference!r} is not a configuration in this file")
        if servers[s.reference].speculative:
            raise ConfigError(f"{p}: {key}.reference = {s.reference!r} is itself speculative; "
                              f"name a non-speculative configuration")
    if s.speculation_must_win_up_to is not None and not s.speculative:
        raise ConfigError(f"{p}: {key}.speculation_must_win_up_to only makes sense on a speculative configuration")
