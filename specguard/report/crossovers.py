"""Each speculative configuration's crossover against its reference, as the results document
stores it: the same estimator and confidence as `specguard recommend`, so the two never disagree."""

from __future__ import annotations

from specguard.decide.crossover import CrossoverEstimate
from specguard.report import recommend
from specguard.report.recommend import LevelRatio
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
        out[cfg["name"]] = {"estimate": x.estimate, "low": x.low, "high": x.high, "last_win": x.last_ahead,
                            "first_loss": x.first_behind, "confident": x.confident, "confidence": conf,
                            "text": crossover_text(cfg["name"], ref, x, curve, conf, recommend.level_kind(doc))}
    return out


def crossover_text(name: str, ref: str, x: CrossoverEstimate, curve: list[LevelRatio], conf: float,
                   kind: str = "concurrency") -> str:
    """The crossover sentence, worded as `specguard recommend` words it (levels c16, or r8 in a
    request-rate sweep: `kind`, recommend.level_kind)."""
    levels = [r.concurrency for r in curve]

    def lv(level: float | str) -> str:
        return recommend.level_label(kind, level)

    noun, unit = recommend.level_noun(kind), (" req/s" if kind == recommend.REQUEST_RATE else "")
    if x.below_range:
        return f"behind {ref} from the lowest measured {noun} ({lv(levels[0])})"
    if x.estimate is None:
        return f"ahead of {ref} at every measured {noun} ({lv(levels[0])}-{lv(levels[-1])}); no crossover in range"
    # the estimator sets both levels around a crossover whenever it has one
    assert x.last_ahead is not None and x.first_behind is not None
    lo = f"{x.low:.0f}" if x.low is not None else f"below {lv(levels[0])}"
    hi = f"{x.high:.0f}" if x.high is not None else f"beyond {lv(levels[-1])}"
    return (f"crossover vs {ref} at {lv('~')}{x.estimate:.1f}{unit} ({conf:.0%} CI {lo}-{hi}), between measured "
            f"{lv(x.last_ahead)} and {lv(x.first_behind)}{'' if x.confident else ', not confidently resolved'}")
