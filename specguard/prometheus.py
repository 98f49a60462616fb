"""Prometheus text exposition, read: the engines' /metrics and the emulator's contract tests.

A neutral module (no specguard import), so the engine adapters and the measuring side can both
read /metrics without importing each other.
"""

from __future__ import annotations

import math
import re

_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)")


def parse_prometheus(text: str) -> dict[str, float]:
    """Sum of every series of each metric name (label sets such as is_streaming are added up)."""
    return {name: sum(values) for name, values in parse_prometheus_series(text).items()}


def parse_prometheus_series(text: str) -> dict[str, list[float]]:
    """Every series' value of each metric name, in the order served (a gauge per rank stays
    apart from the others, where a sum would be wrong)."""
    series: dict[str, list[float]] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = _SAMPLE.match(line)
        if m is None:
            continue
        try:
            value = float(m.group(3))
        except ValueError:
            continue
        if math.isnan(value):
            continue
        series.setdefault(m.group(1), []).append(value)
    return series
