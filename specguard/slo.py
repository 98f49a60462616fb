"""Service-level objectives (`ttft_ms=500,tpot_ms=50`): the suite's `[sweep] slo` and `--slo`.

Read by the suite-file check (config) and by the load generator's goodput, so it sits below both.
"""

from __future__ import annotations

import math

SLO_KEYS = ("ttft_ms", "tpot_ms", "e2e_ms")


class SLOError(ValueError):
    """An --slo / goodput text that cannot be read; the message says how to write it."""


def parse_slo(text: str, what: str = "--slo") -> dict[str, float]:
    """`ttft_ms=500,tpot_ms=50[,e2e_ms=...]` -> {"ttft_ms": 500.0, ...} (milliseconds, > 0)."""
    out: dict[str, float] = {}
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        name, sep, value = part.partition("=")
        name = name.strip()
        try:
            number = float(value) if sep else math.nan
        except ValueError:
            number = math.nan
        if name not in SLO_KEYS or not (math.isfinite(number) and number > 0):
            raise SLOError(f"{what} {text!r}: write KEY=MS pairs separated by commas with KEY in "
                           f"{', '.join(SLO_KEYS)} and MS > 0, e.g. ttft_ms=500,tpot_ms=50")
        out[name] = number
    if not out:
        raise SLOError(f"{what} {text!r}: give at least one SLO, e.g. ttft_ms=500,tpot_ms=50")
    return out
