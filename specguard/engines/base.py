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
from specguard.measure.metrics import parse_prometheus

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

    def fingerprint_fields(self) -> dict[str, Any]:
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


@dataclass(frozen=True)
class ArgCheck:
    """A difference between the configuration and the server; `blocking` fails the tests."""

    message: str
    blocking: bool


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

    def request_extra_body(self, cfg: ServerConfig) -> dict | None:
        return None

    def choose_api(self, wanted: str) -> str:
        return wanted if wanted in self.supported_apis else self.api

    def read_effective_args(self, client: httpx.Client, cfg: ServerConfig | None) -> EffectiveArgs:
        raise NotImplementedError

    def flush_cache(self, client: httpx.Client) -> None:
        """Clear caches and accept counters before a cell; engines without it do nothing."""

    def metrics_snapshot(self, client: httpx.Client) -> dict[str, float] | None:
        """Counter values, or None when the server has no /metrics."""
        try:
            r = client.get("/metrics", timeout=10.0)
        except httpx.HTTPError:
            return None
        if r.status_code != 200:
            return None
        totals = parse_prometheus(r.text)
        return {k: totals[k] for k in self.counter_names if k in totals}

    def server_accept_lengths(
        self, client: httpx.Client, before: dict[str, float] | None, after: dict[str, float] | None
    ) -> dict[str, float]:
        """The run's accept length as each server-side source sees it."""
        return {}

    def token_count_disagreement(self, before: dict[str, float] | None, after: dict[str, float] | None,
                                 client_tokens: int) -> str | None:
        """The server's own counter of generated tokens against the sum the client was told."""
        name = self.generated_tokens_counter
        if not name or not before or not after or name not in before or name not in after:
            return None
        server_tokens = after[name] - before[name]
        if abs(server_tokens - client_tokens) < 0.5:
            return None
        return f"token counts disagree: responses reported {client_tokens} completion tokens, server counter {name} rose by {server_tokens:g}"

    def check_args(self, cfg: ServerConfig, eff: EffectiveArgs, max_concurrency: int) -> list[ArgCheck]:
        return []

    def matches(self, cfg: ServerConfig, eff: EffectiveArgs) -> str | None:
        """None when this attached server can stand for `cfg`, else the reason it cannot."""
        return None
