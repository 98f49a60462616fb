"""What every engine adapter provides, and the parts they share.

An adapter knows only what truly differs between engines: how to launch one, how to tell it is
ready, how to read back the arguments it really runs with, and where its accept length comes
from. Lifecycle, load and statistics are the same for all.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Any

import httpx

from specguard.config import ServerConfig
from specguard.notes import Note, NoteKind
from specguard.prometheus import parse_prometheus

REDACTED = "***"


@dataclass
class EffectiveArgs:
    """What the server really runs, read back from it (not what we asked for)."""

    engine_version: str = ""
    model_path: str = ""
    speculative_algorithm: str | None = None  # normalised: NEXTN servers report EAGLE
    draft_model_path: str | None = None
    num_steps: int | None = None
    eagle_topk: int | None = None
    num_draft_tokens: int | None = None
    max_running_requests: int | None = None
    tp_size: int | None = None
    launch_command: str = ""
    raw: dict[str, Any] = field(default_factory=dict)
    # SGLang: /model_info architectures[0] (it picks default steps/topk/draft tokens by it)
    architecture: str | None = None
    attn_dp_size: int | None = None  # attention data parallelism (0.5.23 --attn-dp-size)
    # every internal_states entry's effective_max_running_requests_per_dp (= cap // attn_dp_size,
    # further limited by KV capacity); max_running_requests stays the server's total
    max_running_requests_per_rank: list[int] = field(default_factory=list)
    speculative_adaptive: bool | None = None
    decode_cuda_graph_bs: list[int] | None = None  # captured decode CUDA-graph batch sizes (rank 0)
    # resolved arguments that change performance (SGLang's /server_info keys; engine-specific)
    server_args: dict[str, Any] = field(default_factory=dict)

    @property
    def request_capacity(self) -> int | None:
        """Requests the server runs at once: per-rank caps x attention-DP ranks when known."""
        if self.max_running_requests_per_rank:
            return min(self.max_running_requests_per_rank) * (self.attn_dp_size or 1)
        return self.max_running_requests

    def fingerprint_fields(self) -> dict[str, Any]:
        """What must match for two measurements to compare; new keys only when known, so
        engines that report none of them keep their fingerprints."""
        extra: dict[str, Any] = {"architecture": self.architecture, "attn_dp_size": self.attn_dp_size,
                                 "max_running_requests_per_rank": self.max_running_requests_per_rank or None,
                                 "speculative_adaptive": self.speculative_adaptive,
                                 "decode_cuda_graph_bs": self.decode_cuda_graph_bs}
        extra.update(self.server_args)
        return {**self._core_fields(), **{k: v for k, v in extra.items() if v is not None}}

    def _core_fields(self) -> dict[str, Any]:
        return {
            "engine_version": self.engine_version,
            "model_path": self.model_path,
            "speculative_algorithm": self.speculative_algorithm,
            "draft_model_path": self.draft_model_path,
            "num_steps": self.num_steps,
            "eagle_topk": self.eagle_topk,
            "num_draft_tokens": self.num_draft_tokens,
            "max_running_requests": self.max_running_requests,
            "tp_size": self.tp_size,
        }


class ServerBusy(RuntimeError):
    """The server kept running or queueing requests that specguard did not send, so its cache
    could not be flushed in the time allowed: the cell is not measured (never a pass or a fail)."""

    def __init__(self, message: str, running: int | None = None, waiting: int | None = None) -> None:
        super().__init__(message)
        self.running = running
        self.waiting = waiting


@dataclass(frozen=True)
class ArgCheck:
    """A difference between the configuration and the server, as a note report/ words;
    `blocking` fails the configuration's tests, `strict` says it blocks only because
    --strict-server-args asked (an attached server's difference from the suite file)."""

    note: Note
    blocking: bool
    strict: bool = False


def redact(argv: list[str], secrets: list[str]) -> list[str]:
    """A copy of a command line safe to print, log or store."""
    out: list[str] = []
    hide_next = False
    for a in argv:
        if hide_next:
            out.append(REDACTED)
            hide_next = False
            continue
        if a in ("--api-key", "--admin-api-key"):
            hide_next = True
        elif a.startswith(("--api-key=", "--admin-api-key=")):
            a = a.split("=", 1)[0] + "=" + REDACTED
        for s in secrets:
            if s:
                a = a.replace(s, REDACTED)
        out.append(a)
    return out


def metrics_text(client: httpx.Client) -> str | None:
    """The server's /metrics page, or None when it has none (or does not answer it)."""
    try:
        r = client.get("/metrics", timeout=10.0)
    except httpx.HTTPError:
        return None
    return r.text if r.status_code == 200 else None


class Engine:
    """Base adapter; SGLang-style defaults, overridden where an engine differs."""

    name = "base"
    api = "native"  # the streaming API used when the suite's sweep.api is not supported
    supported_apis: tuple[str, ...] = ("native", "openai", "chat")
    readiness_path = "/health_generate"
    counter_names: tuple[str, ...] = ()  # Prometheus counters snapshotted around each run
    # The server_accept_lengths source that is the run's accept length when its requests carry
    # no verify counts (engines that stream none); None: only the requests' own counts.
    accept_length_source: str | None = None
    generated_tokens_counter: str | None = None  # cross-checks the client's token total per run

    def python(self, cfg: ServerConfig) -> str:
        return cfg.python or sys.executable

    def launch_command(self, cfg: ServerConfig, host: str, port: int, api_key: str | None) -> list[str]:
        raise NotImplementedError

    def request_extra_body(self, cfg: ServerConfig) -> dict[str, Any] | None:
        return None

    def route_extra_body(self, api: str) -> dict[str, Any] | None:
        """Fields this engine needs in every request of one route (e.g. SGLang's
        return_spec_tokens_details on the OpenAI routes, which /generate would refuse)."""
        return None

    def choose_api(self, wanted: str) -> str:
        return wanted if wanted in self.supported_apis else self.api

    def read_effective_args(self, client: httpx.Client, cfg: ServerConfig | None) -> EffectiveArgs:
        raise NotImplementedError

    def flush_cache(self, client: httpx.Client, timeout_s: float = 30.0) -> None:
        """Clear caches and accept counters before a run; engines without it do nothing.
        Raises ServerBusy when the server stays busy for `timeout_s`."""

    def queue_depth(self, client: httpx.Client) -> tuple[int, int] | None:
        """(running, waiting) requests as the server's /metrics says, or None when unknown."""
        return None

    def steps_in_use(self, eff: EffectiveArgs, after: dict[str, float] | None) -> float | None:
        """The speculative steps the server ran a run with, when they change at run time."""
        return None

    def metrics_snapshot(self, client: httpx.Client) -> dict[str, float] | None:
        """Counter values, or None when the server has no /metrics."""
        text = metrics_text(client)
        if text is None:
            return None
        totals = parse_prometheus(text)
        return {k: totals[k] for k in self.counter_names if k in totals}

    def server_accept_lengths(
        self, client: httpx.Client, before: dict[str, float] | None, after: dict[str, float] | None
    ) -> dict[str, float]:
        """The run's accept length as each server-side source sees it."""
        return {}

    def server_accepted_drafts(self, before: dict[str, float] | None, after: dict[str, float] | None) -> float | None:
        """Drafts the server accepted over a run by its own counters, where requests carry no
        verify counts of their own (the step time needs them); None otherwise."""
        return None

    def idle_spec_counters(self, before: dict[str, float] | None, after: dict[str, float] | None) -> Note | None:
        """Why a run's engine-counter figures (step time, accept length) are unmeasured: the
        server's speculative counters exist and did not move over a run that generated tokens.
        None where the engine reads these from the requests, or the counters moved."""
        return None

    def token_count_disagreement(self, before: dict[str, float] | None, after: dict[str, float] | None,
                                 client_tokens: int) -> Note | None:
        """The server's own counter of generated tokens against the sum the client was told."""
        name = self.generated_tokens_counter
        if not name or not before or not after or name not in before or name not in after:
            return None
        server_tokens = after[name] - before[name]
        if abs(server_tokens - client_tokens) < 0.5:
            return None
        return Note.of(NoteKind.TOKEN_COUNTS_DISAGREE, client_tokens=client_tokens, counter=name,
                       server_tokens=server_tokens)

    def check_args(self, cfg: ServerConfig, eff: EffectiveArgs, max_concurrency: int) -> list[ArgCheck]:
        return []

    def matches(self, cfg: ServerConfig, eff: EffectiveArgs) -> Note | None:
        """None when this attached server can stand for `cfg`, else why not (an ATTACH_MISMATCH note)."""
        return None
