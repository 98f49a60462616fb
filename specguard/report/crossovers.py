"""Each speculative configuration's crossover against its reference, as the results document
stores it: the same estimator and confidence as `specguard recommend`, so the two never disagree."""

from __future__ import annotations

from specguard.report import recommend
from specguard.report.results import throughputs
from specguard.report.schema import CrossoverDoc, ResultsDoc


def crossovers(doc: ResultsDoc) -> dict[str, CrossoverDoc]:
    """Per speculative configuration, where it stops paying against its reference: the same
    estimator and confidence as `specguard recommend` (decide/crossover.py through
    report/recommend.py `crossing`: the ratio curve interpolated on log concurrency, with its
    interval), so the two never disagree."""
    out: dict[str, CrossoverDoc] = {}
    conf = recommend.DEFAULT_CONFIDENCE
    for cfg in doc["configs"]:
        ref = cfg.get("reference")
        if not ref:
            continue
        curve = recommend.ratio_curve(throughputs(doc, cfg["name"]), throughputs(doc, ref),
                                      launch_sd=doc["tolerances"]["prior_between_sd"], confidence=conf)
        if len(curve) < 2:  # one level has no crossover to speak of (recommend refuses it too)
            continue
        x = recommend.crossing(curve)
        out[cfg["name"]] = {"reference": ref, "estimate": x.estimate, "low": x.low, "high": x.high,
                            "last_win": x.last_ahead, "first_loss": x.first_behind, "confident": x.confident,
                            "confidence": conf, "below_range": x.below_range,
                            "measured": [curve[0].concurrency, curve[-1].concurrency]}
    return out


def crossover_line(x: CrossoverDoc, kind: str = "concurrency") -> str:
    """The crossover sentence, worded as `specguard recommend` words it (levels c16, or r8 in a
    request-rate sweep: `kind`, recommend.level_kind); a file older than schema 4 keeps its own."""
    if "legacy_text" in x:
        return x["legacy_text"]

    def lv(level: float | str) -> str:
        return recommend.level_label(kind, level)

    ref, (first, last) = x["reference"], x["measured"]
    noun, unit = recommend.level_noun(kind), (" req/s" if kind == recommend.REQUEST_RATE else "")
    if x["below_range"]:
        return f"behind {ref} from the lowest measured {noun} ({lv(first)})"
    if x["estimate"] is None:
        return f"ahead of {ref} at every measured {noun} ({lv(first)}-{lv(last)}); no crossover in range"
    lo = f"{x['low']:.0f}" if x["low"] is not None else f"below {lv(first)}"
    hi = f"{x['high']:.0f}" if x["high"] is not None else f"beyond {lv(last)}"
    resolved = "" if x["confident"] else ", not confidently resolved"
    return (f"crossover vs {ref} at {lv('~')}{x['estimate']:.1f}{unit} ({x['confidence']:.0%} CI {lo}-{hi}), "
            f"between measured {lv(x['last_win'] or '?')} and {lv(x['first_loss'] or '?')}{resolved}")
