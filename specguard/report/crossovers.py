"""Where speculation stops paying against its reference: the spec/reference tok/s ratio per level
(the speculation gate's statistics), the level where it crosses 1 with its interval
(decide/crossover.py), and each speculative configuration's crossover as the results document
stores it. `specguard recommend` builds its policy on the same estimator and confidence, so the
two never disagree; the levels are clients (c16) or, in an open-loop sweep, requests per second
(r8)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal

from specguard.decide.crossover import CrossoverEstimate, estimate_crossover
from specguard.decide.stats import RatioEstimate, compare_sessions
from specguard.labels import level_prefix
from specguard.report.results import throughputs
from specguard.report.schema import CrossoverDoc, ResultsDoc

DEFAULT_CONFIDENCE = 0.95
LevelKind = Literal["concurrency", "request_rate"]
CONCURRENCY: Final[LevelKind] = "concurrency"  # clients
REQUEST_RATE: Final[LevelKind] = "request_rate"  # req/s, open loop


def level_kind(doc: ResultsDoc) -> LevelKind:
    """What the cells' `concurrency` field holds: open-loop request rates (req/s) when the sweep
    is `[sweep] request_rate` (docs/suite-file.md), client concurrency otherwise."""
    return REQUEST_RATE if (doc.get("sweep") or {}).get("request_rate") else CONCURRENCY


def level_label(kind: str, level: int | float | str) -> str:
    """A level as text and tables name it: c16 (clients) or r8 (req/s), as labels.Level does;
    level "~" gives the prefix of an estimate (c~ / r~)."""
    return f"{level_prefix(kind == REQUEST_RATE)}{level}"


def level_noun(kind: str) -> str:
    return "request rate" if kind == REQUEST_RATE else "concurrency"


@dataclass(frozen=True)
class LevelRatio:
    concurrency: int
    estimate: RatioEstimate


def ratio_curve(a: dict[int, list[float]], b: dict[int, list[float]], *, launch_sd: float,
                confidence: float) -> list[LevelRatio]:
    """a/b tok/s per concurrency measured on both sides, as the speculation gate computes it."""
    levels = sorted(set(a) & set(b))
    return [LevelRatio(c, compare_sessions(a[c], b[c], threshold=1.0, launch_sd=launch_sd, confidence=confidence))
            for c in levels if len(a[c]) >= 2 and len(b[c]) >= 2]


def crossing(curve: list[LevelRatio]) -> CrossoverEstimate:
    """Where a ratio curve drops below 1, with its interval: decide.crossover's estimator, the one
    the pytest summary, the report and the gate study use."""
    return estimate_crossover({r.concurrency: r.estimate for r in curve})


def crossovers(doc: ResultsDoc) -> dict[str, CrossoverDoc]:
    """Per speculative configuration, where it stops paying against its reference: the same
    estimator and confidence as `specguard recommend` (decide/crossover.py through
    `crossing` above: the ratio curve interpolated on log concurrency, with its
    interval), so the two never disagree."""
    out: dict[str, CrossoverDoc] = {}
    conf = DEFAULT_CONFIDENCE
    for cfg in doc["configs"]:
        ref = cfg.get("reference")
        if not ref:
            continue
        curve = ratio_curve(throughputs(doc, cfg["name"]), throughputs(doc, ref),
                            launch_sd=doc["tolerances"]["prior_between_sd"], confidence=conf)
        if len(curve) < 2:  # one level has no crossover to speak of (recommend refuses it too)
            continue
        x = crossing(curve)
        out[cfg["name"]] = {"reference": ref, "estimate": x.estimate, "low": x.low, "high": x.high,
                            "last_win": x.last_ahead, "first_loss": x.first_behind, "confident": x.confident,
                            "confidence": conf, "below_range": x.below_range,
                            "measured": [curve[0].concurrency, curve[-1].concurrency]}
    return out


def crossover_line(x: CrossoverDoc, kind: str = "concurrency") -> str:
    """The crossover sentence, worded as `specguard recommend` words it (levels c16, or r8 in a
    request-rate sweep: `kind`, level_kind); a file older than schema 4 keeps its own."""
    if "legacy_text" in x:
        return x["legacy_text"]

    def lv(level: float | str) -> str:
        return level_label(kind, level)

    ref, (first, last) = x["reference"], x["measured"]
    noun, unit = level_noun(kind), (" req/s" if kind == REQUEST_RATE else "")
    if x["below_range"]:
        return f"behind {ref} from the lowest measured {noun} ({lv(first)})"
    if x["estimate"] is None:
        return f"ahead of {ref} at every measured {noun} ({lv(first)}-{lv(last)}); no crossover in range"
    lo = f"{x['low']:.0f}" if x["low"] is not None else f"below {lv(first)}"
    hi = f"{x['high']:.0f}" if x["high"] is not None else f"beyond {lv(last)}"
    resolved = "" if x["confident"] else ", not confidently resolved"
    return (f"crossover vs {ref} at {lv('~')}{x['estimate']:.1f}{unit} ({x['confidence']:.0%} CI {lo}-{hi}), "
            f"between measured {lv(x['last_win'] or '?')} and {lv(x['first_loss'] or '?')}{resolved}")
