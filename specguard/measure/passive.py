"""One window of a passive soak: what a serving server's own /metrics counters say about the
traffic it served between two snapshots, with no request sent by specguard (issue 32: the
monitor sglang#37326's user wrote by hand, without adding load to a fleet).

Accept length is the server's tokens over its verify calls in the window (the engine's
``server_accept_lengths``, source "metrics"); tok/s and requests/s are its counters' rises over
the window's wall time, so they follow the traffic as much as the server; the concurrency is the
running requests at the window's end (sglang:num_running_reqs).
"""

from __future__ import annotations

import httpx

from specguard.engines.base import Engine
from specguard.measure.metrics import RunMetrics

# The server's finished-requests counter, where it has one (SGLang 0.5.23: metrics_collector.py
# TokenizerMetricsCollector num_requests_total); tok/s needs only the engine's generated tokens.
REQUESTS_COUNTER = "sglang:num_requests_total"


class NoMetrics(RuntimeError):
    """The server has no /metrics (SGLang without --enable-metrics): a passive soak has nothing to read."""


def snapshot(engine: Engine, client: httpx.Client) -> dict[str, float]:
    """The engine's counters now; NoMetrics when the server has no /metrics (or the engine no
    generated-tokens counter). A counter not on the page yet reads 0: a labelled Prometheus series
    appears at its first increment, so a server that has served nothing may not list it."""
    snap = engine.metrics_snapshot(client)
    name = engine.generated_tokens_counter
    if snap is None or not name:
        raise NoMetrics(f"no /metrics to read {name or 'a generated-tokens counter'} from: a passive soak reads only "
                        f"the server's counters (start SGLang with --enable-metrics)")
    return {name: 0.0, **snap}


def passive_window(engine: Engine, client: httpx.Client, before: dict[str, float], after: dict[str, float],
                   duration_s: float) -> RunMetrics | None:
    """The window between two snapshots; None when the server generated no token in it (no
    traffic: nothing was measured)."""
    name = engine.generated_tokens_counter or ""
    tokens = after[name] - before[name]
    if tokens <= 0:
        return None
    requests = int(after.get(REQUESTS_COUNTER, 0.0) - before.get(REQUESTS_COUNTER, 0.0))
    sources = engine.server_accept_lengths(client, before, after)
    depth = engine.queue_depth(client)
    return RunMetrics(
        concurrency=depth[0] if depth else 0, num_requests=requests, completed=requests, failed=0,
        duration_s=duration_s, total_input_tokens=0, total_output_tokens=int(tokens),
        output_throughput=tokens / duration_s, request_throughput=requests / duration_s,
        accept_length=sources.get("metrics"), server_accept_length=sources,
        load_model=f"passive: /metrics only, {duration_s:.0f} s",
    )
