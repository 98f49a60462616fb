"""The suite file (TOML): server configurations, sweep, workload and tolerances.

Every key is checked before any server starts; a mistake gets an error naming the file, the
key and the fix, because a typo in a merge gate's configuration must never be silently ignored.
"""

from __future__ import annotations

import dataclasses
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, get_args, get_origin, get_type_hints

from specguard.slo import SLOError, parse_slo
from specguard.workload import WORKLOAD_KINDS, WorkloadSpec

# When a drop fails (docs/statistics.md, docs/gate-study.md):
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

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

ENGINES = ("sglang", "emulator", "vllm")
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
    prior_between_sd: float = 0.01  # log-scale tok/s spread between GPU launches (history may raise it); docs/gate-study.md
    prior_between_sd_accept: float = 0.003  # acceptance is a model property; launches barely move it
    history_sessions: int = 5  # baseline sessions kept per cell
    inconclusive: str = "pass"  # what an inconclusive cell counts as: pass or fail
    fail_rule: str = "significant"  # one of FAIL_RULES (above)
    prior_day_sd: float = 0.005  # part of prior_between_sd shared by every launch of a session (relaunching cannot average it)
    prior_between_dof: float = PRIOR_BETWEEN_DOF  # weight of the prior spread against the history's K - 1 dof (docs/statistics.md)
    pass_confidence: float = 0.95  # one-sided level at which a cell is confidently within tolerance (pass)
    speculation_metric: str = "tok_s"  # or "goodput": the speculation gate on request_goodput ([sweep] slo)


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

    def reference_of(self, name: str) -> ServerConfig | None:
        ref = self.servers[name].reference
        return self.servers[ref] if ref else None


# -- loading ----------------------------------------------------------------------------------
def _type_ok(value: Any, hint: Any) -> bool:
    origin = get_origin(hint)
    if hint is Any:
        return True
    if origin is None:
        if hint is float:
            return isinstance(value, (int, float)) and not isinstance(value, bool)
        if hint is int:
            return isinstance(value, int) and not isinstance(value, bool)
        return isinstance(value, hint)
    args = get_args(hint)
    if origin is list:
        return isinstance(value, list) and all(_type_ok(v, args[0]) for v in value)
    if origin is dict:
        return isinstance(value, dict) and all(_type_ok(v, args[1]) for v in value.values())
    # Optional / union
    return any(_type_ok(value, a) for a in args if a is not type(None))


def _type_name(hint: Any) -> str:
    return getattr(hint, "__name__", None) or str(hint).replace("typing.", "")


def _build(cls: type, table: Any, where: str, path: Path, **fixed: Any) -> Any:
    if not isinstance(table, dict):
        raise ConfigError(f"{path}: [{where}] must be a table")
    hints = get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls) if f.name not in fixed]
    kwargs = dict(fixed)
    for key, value in table.items():
        if key not in names:
            shown = [n for n in names if ADVANCED_KEYS.get(n) != where]
            raise ConfigError(f"{path}: unknown key {where}.{key}; known keys: {', '.join(shown)}")
        if not _type_ok(value, hints[key]):
            raise ConfigError(f"{path}: {key_name(f'{where}.{key}')} = {value!r} has the wrong type; "
                              f"expected {_type_name(hints[key])}")
        kwargs[key] = float(value) if hints[key] is float else value
    return cls(**kwargs)


def load_suite(path: str | Path) -> Suite:
    path = Path(path)
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"suite file {path} does not exist (set --suite)") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from exc
    return parse_suite(raw, path)


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
TABLES = ("servers", "sweep", "workload", "tolerances", "advanced")


def key_name(key: str) -> str:
    """A key as the suite file spells it: "sweep.launches" is written "advanced.launches"."""
    table, _, name = key.partition(".")
    return f"advanced.{name}" if ADVANCED_KEYS.get(name) == table else key


def _split_advanced(raw: dict[str, Any], path: Path) -> dict[str, dict[str, Any]]:
    """The suite's tables with [advanced] keys put where the code keeps them; a key in its old
    place, or one that was removed, is an error naming where it goes now."""
    for table in ("sweep", "workload", "tolerances"):
        for key in raw.get(table) or {}:
            if f"{table}.{key}" in REMOVED_KEYS:
                raise ConfigError(f"{path}: {table}.{key} was removed: {REMOVED_KEYS[f'{table}.{key}']}")
            if ADVANCED_KEYS.get(key) == table:
                raise ConfigError(f"{path}: {table}.{key} moved to the [advanced] table; write it there "
                                  f"(advanced.{key} = {raw[table][key]!r})")
    if "attach" in raw:
        raise ConfigError(f"{path}: [attach] moved: write strict_server_args under [advanced]")
    advanced = raw.get("advanced", {})
    if not isinstance(advanced, dict):
        raise ConfigError(f"{path}: [advanced] must be a table")
    tables: dict[str, dict[str, Any]] = {t: dict(raw.get(t) or {}) for t in ("sweep", "workload", "tolerances", "attach")}
    for key, value in advanced.items():
        if key not in ADVANCED_KEYS:
            raise ConfigError(f"{path}: unknown key advanced.{key}; known keys: {', '.join(ADVANCED_KEYS)}")
        tables[ADVANCED_KEYS[key]][key] = value
    for table in ("sweep", "workload", "tolerances"):
        if raw.get(table) is not None and not isinstance(raw[table], dict):
            raise ConfigError(f"{path}: [{table}] must be a table")
    return tables


def parse_suite(raw: dict[str, Any], path: Path) -> Suite:
    for key in raw:
        if key == "attach":
            continue  # named by _split_advanced
        if key not in TABLES:
            raise ConfigError(f"{path}: unknown top-level key {key!r}; known: {', '.join(TABLES)}")
    servers_raw = raw.get("servers")
    if not isinstance(servers_raw, dict) or not servers_raw:
        raise ConfigError(f"{path}: needs at least one [servers.NAME] table")
    tables = _split_advanced(raw, path)
    if "request_rate" in tables["sweep"] and "concurrency" in tables["sweep"]:
        raise ConfigError(f"{path}: sweep.request_rate and sweep.concurrency: a suite sweeps either concurrency or "
                          f"request_rate levels; remove sweep.concurrency (advanced.max_concurrency caps requests in flight)")
    servers = {name: _expand_paths(_build(ServerConfig, t, f"servers.{name}", path, name=name), path)
               for name, t in servers_raw.items()}
    try:
        workload = _build(WorkloadSpec, tables["workload"], "workload", path)
    except ValueError as exc:
        if isinstance(exc, ConfigError):
            raise
        raise ConfigError(f"{path}: [workload]: {exc}") from exc
    suite = Suite(path=path, servers=servers, sweep=_build(SweepConfig, tables["sweep"], "sweep", path), workload=workload,
                  tolerances=_build(Tolerances, tables["tolerances"], "tolerances", path),
                  attach=_build(AttachConfig, tables["attach"], "attach", path))
    validate_suite(suite)
    return suite


_VAR = re.compile(r"\$(?:(\w+)|\{(\w+)\})")
PATH_KEYS = ("model_path", "draft_model_path", "python")


def expand_path(value: str, where: str, path: Path) -> str:
    """`~` and `$VAR`/`${VAR}` expanded, so one suite file serves machines whose models and
    venvs live in different places; an unset variable is an error, never a literal `$VAR` path."""
    for m in _VAR.finditer(value):
        var = m.group(1) or m.group(2)
        if var not in os.environ:
            raise ConfigError(f"{path}: {where} = {value!r} uses ${var}, which is not set; export it or write the path out")
    return os.path.expanduser(os.path.expandvars(value))


def _expand_paths(s: ServerConfig, path: Path) -> ServerConfig:
    key = f"servers.{s.name}"
    changes: dict[str, Any] = {k: expand_path(getattr(s, k), f"{key}.{k}", path) for k in PATH_KEYS if getattr(s, k)}
    spec = s.speculative_config or {}
    draft = spec.get("model")
    if isinstance(draft, str):
        changes["speculative_config"] = {**spec, "model": expand_path(draft, f"{key}.speculative_config.model", path)}
    return dataclasses.replace(s, **changes)


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
    for line in statistical_caveats(suite.tolerances, at):
        if line not in _WARNED:  # the file is validated alone, then with the command line: one line each
            _WARNED.add(line)
            print(f"specguard: warning: {line}", file=sys.stderr)


_WARNED: set[str] = set()


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
