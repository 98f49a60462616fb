"""The suite file's typed form: server configurations, sweep, workload and tolerances, and which
keys live under [advanced]."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specguard.workload import WorkloadSpec

# When a drop fails (docs/statistics.md, docs/research/gate-study.md):
# - "significant": the drop is statistically significant (upper bound below 1) and its estimate
#   is beyond the tolerance (asv's rule: practical and statistical significance). family_alpha
#   bounds the false fails of unchanged code; a true drop inside the tolerance can fail (its
#   estimate lands beyond it), more often the closer it is to the tolerance;
# - "beyond-tolerance": the whole interval lies beyond the tolerance (Criterion's rule; stricter,
#   a drop must exceed the tolerance by the interval's half-width before it can fail), so
#   family_alpha bounds the fails of every drop within the tolerance.
FAIL_RULES = ("significant", "beyond-tolerance")
# The weight of prior_between_sd against a cell's history, in pseudo degrees of freedom
# (Tolerances.prior_between_dof, GateDesign.prior_dof and the stats functions' default: one value).
PRIOR_BETWEEN_DOF = 16.0

ENGINES = ("sglang", "emulator", "vllm")
SOAK_LOAD, SOAK_PASSIVE = "load", "passive"  # [soak] mode: the soak's own load, or the server's traffic read off /metrics
SOAK_MODES = (SOAK_LOAD, SOAK_PASSIVE)
# Forced acceptance, as SGLang 0.5.23 reads it (srt/environ.py; spec_utils.py sample_simulated_acc_len,
# generate_simulated_accept_index): the variables a configuration's simulate_accept_* keys set.
SIMULATE_ACCEPT_ENV = ("SGLANG_SIMULATE_ACC_LEN", "SGLANG_SIMULATE_ACC_METHOD", "SGLANG_SIMULATE_ACC_TOKEN_MODE")
SIMULATE_ACCEPT_CHOICES = {"SGLANG_SIMULATE_ACC_METHOD": ("match-expected", "multinomial"),
                           "SGLANG_SIMULATE_ACC_TOKEN_MODE": ("fixed", "real-draft-token")}
SGLANG_ALGORITHMS = ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM")
APIS = ("native", "openai", "chat")


class ConfigError(ValueError):
    """A suite file mistake; the message names the file, the key and the fix."""


@dataclass(frozen=True)
class ServerConfig:
    """One named server configuration (baseline, eagle3, mtp, ...)."""

    name: str
    engine: str = "sglang"
    model_path: str = ""
    draft_model_path: str | None = None
    speculative_algorithm: str | None = None  # SGLang spelling: EAGLE3, NEXTN, ...
    num_steps: int | None = None
    eagle_topk: int | None = None
    num_draft_tokens: int | None = None
    speculative_config: dict[str, Any] | None = None  # vLLM's --speculative-config
    tp_size: int = 1
    max_running_requests: int | None = None
    args: list[str] = field(default_factory=list)  # more launch flags, passed as given
    env: dict[str, str] = field(default_factory=dict)
    gpus: str | None = None  # CUDA_VISIBLE_DEVICES for this configuration
    python: str | None = None  # interpreter that has the engine installed; default: this one
    reference: str | None = None  # the non-speculative configuration to beat
    speculation_must_win_up_to: int | None = None  # concurrency up to which it must win
    startup_timeout_s: float = 600.0
    # Attach mode: a shell command that restarts this configuration's server at the same URL (e.g.
    # `kubectl rollout restart deployment/x && kubectl rollout status deployment/x`), so the
    # session can relaunch it as it relaunches servers it launched itself (docs/cluster.md).
    restart_command: str | None = None
    # Speculation silently off (an upgrade that leaves accept length "stuck at 1", sglang#24795):
    # a measured accept length at or below this fails the accept-length test by name, baseline or
    # not. None: 1.05, or for NGRAM 1.0 (n-grams of text without repetition legitimately accept
    # almost nothing, so only requests without verify counts count as "not running").
    min_accept_length: float | None = None
    # The engine measured alone: every verify step keeps this many tokens (the bonus one included),
    # whatever the drafts, so tok/s and step time are the engine's and the accept-length test checks
    # that the forced value holds. An integer: SGLang's match-expected method draws the floor or the
    # ceiling of a fraction once per batch. SGLang's method and token mode keep their defaults
    # (match-expected, "fixed": one fixed token as every output, so such a configuration is never a
    # reference and its outputs are not compared) unless `env` sets SGLANG_SIMULATE_ACC_METHOD /
    # SGLANG_SIMULATE_ACC_TOKEN_MODE.
    simulate_accept_length: int | None = None

    @property
    def forced_acceptance(self) -> bool:
        return self.simulate_accept_length is not None

    @property
    def launch_env(self) -> dict[str, str]:
        """The environment the server is launched with: `env`, and the forced-acceptance variables."""
        if not self.forced_acceptance:
            return dict(self.env)
        return {**self.env, SIMULATE_ACCEPT_ENV[0]: str(self.simulate_accept_length)}

    @property
    def accept_length_floor(self) -> float:
        """min_accept_length, or its default for the algorithm (see the field)."""
        if self.min_accept_length is not None:
            return self.min_accept_length
        return 1.0 if self.speculative_algorithm == "NGRAM" else 1.05

    @property
    def speculative(self) -> bool:
        return bool(self.speculative_algorithm or self.speculative_config)

    @property
    def algorithm_label(self) -> str:
        if self.speculative_algorithm:
            return self.speculative_algorithm
        if self.speculative_config:
            return str(self.speculative_config.get("method", "spec")).upper()
        return "NONE"


@dataclass(frozen=True)
class SweepConfig:
    concurrency: list[int] = field(default_factory=lambda: [1, 4, 16, 64])
    requests_per_worker: int = 4  # a run is max(C, this * C, min_requests_per_run) requests
    # A floor on a run's requests: at low concurrency requests_per_worker x C is too few requests to
    # sample acceptance (accept length, and tok/s with it) within a few %; 0 = no floor.
    min_requests_per_run: int = 0
    warmup: int = 1  # runs discarded per cell
    repeats: int = 3  # measured runs per cell
    api: str = "native"
    read_timeout_s: float = 60.0  # a request with no bytes for this long fails
    run_timeout_s: float = 600.0  # a run's unfinished requests are cancelled (and counted) after this
    session_timeout_s: float = 4 * 3600.0  # cells not started by then error at once
    launches: int = 1  # server launches per configuration, pooled (the launch is the unit of replication)
    relaunch: str = "on-suspicion"  # or "off": relaunch a configuration whose stage-1 cell is suspicious (docs/statistics.md)
    relaunch_p: float = 0.05  # one-sided p below which a stage-1 cell is suspicious
    max_launches: int = 3  # on suspicion: relaunch while a cell stays suspicious, up to this many launches
    # Open loop (docs/workloads.md): levels are Poisson request rates (req/s) instead of concurrencies;
    # a run is requests_per_worker x rate requests, at most max_concurrency of them in flight.
    request_rate: list[int] = field(default_factory=list)
    max_concurrency: int | None = None  # in-flight cap at request_rate levels (default 64)
    burstiness: float = 1.0  # gamma shape of the arrival gaps (1 = Poisson, < 1 burstier)
    # A cell's accept length falling across its runs in time order beyond what run noise explains
    # (vllm#41838: 3.07 -> 2.8 over hours): "warn" reports it, "fail" fails its accept-length test.
    accept_drift: str = "warn"
    slo: str | None = None  # "ttft_ms=500,tpot_ms=50[,e2e_ms=...]": every run's request_goodput

    def num_requests(self, concurrency: int) -> int:
        return max(concurrency, self.requests_per_worker * concurrency, self.min_requests_per_run)

    @property
    def rate_cap(self) -> int:
        """The in-flight cap of request-rate levels."""
        return self.max_concurrency or 64


@dataclass(frozen=True)
class Tolerances:
    # The tok/s drop a failing estimate must exceed: under fail_rule "significant" a significant
    # drop fails once its estimate is beyond this (a true drop a little smaller can too); under
    # "beyond-tolerance" the whole interval must be (see FAIL_RULES).
    throughput: float = 0.03
    step_time: float = 0.03  # the same for an increase of the engine's step time
    accept_length: float = 0.03
    speculation_min_gain: float = 0.0  # spec/reference must not be confidently below 1 + this
    family_alpha: float = 0.01  # family-wise false-fail rate for the whole session (Holm)
    prior_between_sd: float = 0.01  # log tok/s spread between GPU launches (history may raise it); docs/research/gate-study.md
    prior_between_sd_accept: float = 0.003  # acceptance is a model property; launches barely move it
    history_sessions: int = 5  # baseline sessions kept per cell
    inconclusive: str = "pass"  # what an inconclusive cell counts as: pass or fail
    fail_rule: str = "significant"  # one of FAIL_RULES (above)
    prior_day_sd: float = 0.005  # part of prior_between_sd shared by every launch of a session (relaunching cannot average it)
    prior_between_dof: float = PRIOR_BETWEEN_DOF  # the prior's weight against the history's K - 1 dof (statistics.md)
    pass_confidence: float = 0.95  # one-sided level at which a cell is confidently within tolerance (pass)
    speculation_metric: str = "tok_s"  # or "goodput": the speculation gate on request_goodput ([sweep] slo)


@dataclass(frozen=True)
class SoakConfig:
    """`[soak]`: one long closed-loop run per configuration, cut into windows, each window's accept
    length, step time and tok/s searched for the change point where it started to slide
    (sglang#37326: acceptance towards zero after hours; vllm#41838: 3.07 -> 2.8). Off (no
    test_soak) while duration_s is 0."""

    duration_s: float = 0.0  # the soak's length, warm-up windows included (0: no soak tests)
    window_s: float = 30.0  # the length a window aims at: its request count follows the last window's rate
    concurrency: int = 16  # clients in flight for the whole soak
    warmup_windows: int = 1  # first windows left out of the decision (caches, graphs, the clock)
    configs: list[str] = field(default_factory=list)  # soaked configurations (default: every speculative one)
    alpha: float = 0.001  # two-sided level of a change point (decide/changepoint.py), per metric
    min_change: float = 0.03  # the smallest shift a change point must have to count (3 %)
    # "load": the soak's own closed-loop load at `concurrency`; "passive": no load, the server's
    # /metrics read every window_s (a serving fleet's own traffic; accept length decides)
    mode: str = SOAK_LOAD


@dataclass(frozen=True)
class AttachConfig:
    """How an attached server (--server-url) is held to the suite file's launch values."""

    # False: differences between the suite's launch values and what the server runs are reported
    # (summary, results JSON) and fingerprinted; True: they are errors (the suite describes the deployment).
    strict_server_args: bool = False


@dataclass(frozen=True)
class Suite:
    path: Path
    servers: dict[str, ServerConfig]
    sweep: SweepConfig
    workload: WorkloadSpec
    tolerances: Tolerances
    attach: AttachConfig = field(default_factory=AttachConfig)
    soak: SoakConfig = field(default_factory=SoakConfig)

    @property
    def soaked(self) -> list[str]:
        """The configurations test_soak runs on: [soak] configs, else every speculative one; none while off."""
        if self.soak.duration_s <= 0:
            return []
        return list(self.soak.configs) or [n for n, s in self.servers.items() if s.speculative]

    def reference_of(self, name: str) -> ServerConfig | None:
        ref = self.servers[name].reference
        return self.servers[ref] if ref else None


# Keys a research or an unusual deployment needs, written under [advanced] (key -> the table the
# code keeps them in): the suite's own tables hold what every user meets (docs/suite-file.md).
ADVANCED_KEYS = {
    "min_requests_per_run": "sweep", "read_timeout_s": "sweep", "run_timeout_s": "sweep", "session_timeout_s": "sweep",
    "launches": "sweep", "relaunch": "sweep", "relaunch_p": "sweep", "max_launches": "sweep",
    "max_concurrency": "sweep", "burstiness": "sweep", "accept_drift": "sweep", "repeated_id": "workload",
    "seed": "workload", "speculation_min_gain": "tolerances", "api": "sweep",
    "speculation_metric": "tolerances", "prior_between_sd_accept": "tolerances", "prior_day_sd": "tolerances",
    "prior_between_dof": "tolerances", "pass_confidence": "tolerances", "history_sessions": "tolerances",
    "inconclusive": "tolerances", "fail_rule": "tolerances", "strict_server_args": "attach",
}
REMOVED_KEYS = {"tolerances.spread_rule": "the pooled-t spread is the only rule (docs/statistics.md); delete the key"}
TABLES = ("servers", "sweep", "workload", "tolerances", "soak", "advanced")


def key_name(key: str) -> str:
    """A key as the suite file spells it: "sweep.launches" is written "advanced.launches"."""
    table, _, name = key.partition(".")
    return f"advanced.{name}" if ADVANCED_KEYS.get(name) == table else key
