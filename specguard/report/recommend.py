"""A measured speculation policy: where speculation stops paying, and what to run instead.

From one sweep with a speculative configuration and its non-speculative reference: the
spec/reference tok/s ratio per concurrency (the speculation gate's statistics, at a chosen
confidence), the concurrency where it crosses 1 (interpolated on log concurrency, with the
interval the confidence bounds give), and the policy "speculate below C1, fewer draft tokens in
[C1, C2) when the sweep measured such a configuration, no speculation from C2", also written as
SGLang's `--speculative-adaptive-config` table where that mode applies.

An open-loop sweep (`[sweep] request_rate`) keeps each rate in the cells' `concurrency` field:
the same estimator then gives a crossover in req/s, printed `r~12.3 req/s`, and no adaptive
table, whose keys are running batch sizes that a request rate does not determine.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

from specguard.decide.crossover import CrossoverEstimate
from specguard.report.crossovers import (
    CONCURRENCY,
    DEFAULT_CONFIDENCE,
    REQUEST_RATE,
    LevelKind,
    LevelRatio,
    crossing,
    level_kind,
    level_label,
    level_noun,
    ratio_curve,
)
from specguard.report.recommendation_doc import (
    RECOMMENDATION_SCHEMA,
    RECOMMENDATION_VERSION,
    CrossingDoc,
    PolicyBandDoc,
    RecommendationDoc,
    RecommendationSourceDoc,
    SglangAdaptiveDoc,
)
from specguard.report.results import configs_by_name, effective, throughputs
from specguard.report.schema import ConfigDoc, ResultsDoc
from specguard.sglang_rules import SGLANG_VERSION
from specguard.sglang_rules.adaptive import ADAPTIVE_ALGORITHMS
from specguard.sglang_rules.adaptive_table import Slot, build_adaptive_config
from specguard.sglang_rules.speculative import resolved_algorithm

ADAPTIVE_CONFIG_FILE = "speculative_adaptive.json"


class RecommendError(ValueError):
    """The results cannot support a recommendation (the message says what to measure)."""


@dataclass(frozen=True)
class Band:
    start: int  # inclusive
    end: int | None  # exclusive; None = no upper bound
    config: str | None  # None = no speculation


@dataclass
class Recommendation:
    source: RecommendationSourceDoc
    reference: str
    speculative: str
    lighter: str | None
    confidence: float
    ratios: dict[str, list[LevelRatio]]
    crossover_config: str  # the configuration switched off last: its crossing is the policy's C2
    crossover: CrossoverEstimate
    lighter_switch: CrossoverEstimate | None  # primary vs lighter: where the lighter one takes over (C1)
    disable_speculation_at: int | None
    bands: list[Band]
    settings: dict[str, dict[str, Any]]  # per configuration: algorithm, steps, topk, draft tokens, cap
    notes: list[str] = field(default_factory=list)
    # SGLang's adaptive mode for the policy (sglang_adaptive, which needs the rest built first)
    sglang: SglangAdaptiveDoc = field(default_factory=lambda: SglangAdaptiveDoc(applies=False, reason=None, notes=[]))
    level_kind: LevelKind = CONCURRENCY  # what the levels are: CONCURRENCY (clients) or REQUEST_RATE (req/s, open loop)


def _falls_behind_at(c: CrossoverEstimate) -> float | None:
    """Where the curve's configuration falls behind: the crossover, or the lowest measured level
    when it is behind from there; None when it is ahead throughout."""
    return c.first_behind if c.below_range else c.estimate


def _switch_point(c: CrossoverEstimate) -> int | None:
    """The integer concurrency from which the crossing's loser should be off."""
    at = _falls_behind_at(c)
    return None if at is None else max(1, math.ceil(at - 1e-9))


def _settings(doc: ResultsDoc, name: str) -> dict[str, Any]:
    cfg = configs_by_name(doc)[name]
    graphs = effective(doc, name, "decode_cuda_graph_bs") or effective(doc, name, "cuda_graph_bs_decode")
    return {"engine": cfg.get("engine"), "speculative_algorithm": cfg.get("speculative_algorithm"),
            "cuda_graph_bs": sorted(graphs) if isinstance(graphs, list) and graphs else None,
            "attn_dp_size": effective(doc, name, "attn_dp_size"),
            "effective_algorithm": effective(doc, name, "speculative_algorithm"),
            "num_steps": effective(doc, name, "num_steps"), "eagle_topk": effective(doc, name, "eagle_topk"),
            "num_draft_tokens": effective(doc, name, "num_draft_tokens"),
            "max_running_requests": effective(doc, name, "max_running_requests"),
            "draft_model_path": effective(doc, name, "draft_model_path")}


def _candidates(doc: ResultsDoc) -> list[str]:
    """Speculative configurations with a reference, both measured."""
    out = []
    for cfg in doc["configs"]:
        ref = cfg.get("reference")
        if ref and throughputs(doc, cfg["name"]) and throughputs(doc, ref):
            out.append(cfg["name"])
    return out


def _pick_primary(doc: ResultsDoc, wanted: str | None) -> str:
    candidates = _candidates(doc)
    if wanted is not None:
        if wanted not in configs_by_name(doc):
            raise RecommendError(f"no configuration {wanted!r} in the results; it has {', '.join(configs_by_name(doc))}")
        if wanted not in candidates:
            raise RecommendError(f"{wanted!r} is not a speculative configuration measured together with its reference "
                                 f"(error-free cells on both sides are needed)")
        return wanted
    if not candidates:
        raise RecommendError("the results have no speculative configuration measured together with its reference; "
                             "run the sweep with both selected (e.g. pytest perf_tests -k \"mtp or baseline\")")
    return max(candidates, key=lambda n: (_settings(doc, n)["num_draft_tokens"] or 0, -candidates.index(n)))


def _lighter_options(doc: ResultsDoc, primary: str) -> list[str]:
    """Same reference, algorithm and draft model as the primary, fewer draft tokens."""
    p, ref = _settings(doc, primary), configs_by_name(doc)[primary]["reference"]
    out = []
    for name in _candidates(doc):
        s = _settings(doc, name)
        if (name != primary and configs_by_name(doc)[name]["reference"] == ref
                and s["effective_algorithm"] == p["effective_algorithm"] and s["draft_model_path"] == p["draft_model_path"]
                and (s["num_draft_tokens"] or 0) < (p["num_draft_tokens"] or 0)):
            out.append(name)
    return out


def _ahead_until(c: CrossoverEstimate) -> float:
    at = _falls_behind_at(c)
    return math.inf if at is None else at


def _later(a: CrossoverEstimate, b: CrossoverEstimate) -> bool:
    """Does `a` stay ahead of its reference longer than `b`?"""
    return _ahead_until(a) > _ahead_until(b)


def _lighter_switch(doc: ResultsDoc, primary: str, lighter: str | None, crossings: dict[str, CrossoverEstimate],
                    launch_sd: float, confidence: float) -> CrossoverEstimate | None:
    """Where the lighter configuration overtakes the primary (C1): None when it does not stay
    ahead of the reference longer, or overtakes only once it is behind the reference itself."""
    if lighter is None or not _later(crossings[lighter], crossings[primary]):
        return None
    switch = crossing(ratio_curve(throughputs(doc, primary), throughputs(doc, lighter), launch_sd=launch_sd,
                                  confidence=confidence))
    c1, c2_lighter = _switch_point(switch), _switch_point(crossings[lighter])
    if c1 is None or (c2_lighter is not None and c1 >= c2_lighter):
        return None
    return switch


def _range_notes(last: str, ref: str, x: CrossoverEstimate, levels: list[int], kind: str, confidence: float) -> list[str]:
    """What the sweep leaves open about the crossover of the configuration switched off last."""
    noun, unit = level_noun(kind), " req/s" if kind == REQUEST_RATE else ""
    notes = []
    if x.above_range:
        notes.append(f"{last} is ahead of {ref} up to the highest measured {noun} ({levels[-1]}{unit}); "
                     f"measure higher {'request rates' if unit else noun} to find where it stops paying")
    if x.below_range:
        notes.append(f"{last} is already behind {ref} at the lowest measured {noun} ({levels[0]}{unit}): "
                     f"speculation does not pay on this sweep")
    if not x.confident and not x.above_range:
        notes.append("the measured levels around the crossover are not confidently resolved "
                     f"at {confidence:.0%}; more repeats or levels between them narrow it")
    return notes


def recommend(doc: ResultsDoc, *, config: str | None = None, confidence: float = DEFAULT_CONFIDENCE,
              source: str = "") -> Recommendation:
    """The policy a results document supports (see the module docstring)."""
    primary = _pick_primary(doc, config)
    kind = level_kind(doc)
    ref = configs_by_name(doc)[primary].get("reference")
    if ref is None:  # _pick_primary picks only configurations measured with their reference
        raise RecommendError(f"{primary!r} has no reference in the results")
    launch_sd = doc["tolerances"]["prior_between_sd"]
    ref_tps = throughputs(doc, ref)
    ratios = {primary: ratio_curve(throughputs(doc, primary), ref_tps, launch_sd=launch_sd, confidence=confidence)}
    if len(ratios[primary]) < 2:
        raise RecommendError(f"{primary} and {ref} share fewer than 2 measured {level_noun(kind)} levels; a crossover "
                             f"needs a sweep")
    crossings = {primary: crossing(ratios[primary])}
    lighter_options = _lighter_options(doc, primary)
    for name in lighter_options:
        ratios[name] = ratio_curve(throughputs(doc, name), ref_tps, launch_sd=launch_sd, confidence=confidence)
        crossings[name] = crossing(ratios[name])
    lighter = max(lighter_options, key=lambda n: _ahead_until(crossings[n]), default=None)
    notes: list[str] = []
    switch = _lighter_switch(doc, primary, lighter, crossings, launch_sd, confidence)
    if lighter is not None and switch is None:
        notes.append(f"{lighter} (fewer draft tokens) does not take over from {primary} before speculation stops "
                     f"paying against {ref}; no middle band")
        lighter = None
    last = lighter or primary
    c2 = _switch_point(crossings[last])
    bands = _bands(primary, lighter, _switch_point(switch) if switch is not None else None, c2)
    levels = [r.concurrency for r in ratios[primary]]
    notes += _range_notes(last, ref, crossings[last], levels, kind, confidence)
    others = [n for n in _candidates(doc) if n not in ratios]
    if others:
        notes.append(f"other speculative configurations in the results: {', '.join(others)} "
                     f"(specguard recommend --config NAME)")
    rec = Recommendation(
        source={"file": source, "session_id": doc["session_id"], "created": doc["created"], "suite": doc["suite"]},
        reference=ref, speculative=primary, lighter=lighter, confidence=confidence,
        ratios=ratios, crossover_config=last, crossover=crossings[last], lighter_switch=switch,
        disable_speculation_at=c2, bands=bands, settings={n: _settings(doc, n) for n in ratios}, notes=notes,
        level_kind=kind)
    rec.sglang = sglang_adaptive(rec, max(levels), doc["configs"])
    return rec


def _bands(primary: str, lighter: str | None, c1: int | None, c2: int | None) -> list[Band]:
    cuts: list[tuple[int, str | None]] = [(1, primary)]
    if lighter is not None and c1 is not None:
        cuts.append((c1, lighter))
    if c2 is not None:
        cuts.append((c2, None))
    cuts = [cut for i, cut in enumerate(cuts) if i == len(cuts) - 1 or cut[0] < cuts[i + 1][0]]
    return [Band(start, cuts[i + 1][0] if i + 1 < len(cuts) else None, name) for i, (start, name) in enumerate(cuts)]


def sglang_adaptive(rec: Recommendation, max_level: int, configs: list[ConfigDoc]) -> SglangAdaptiveDoc:
    """The policy as SGLang's `--speculative-adaptive-config` JSON, where that mode applies, from
    the one builder of it (sglang_rules.adaptive_table, which also checks it with SGLang's
    start-up rules): a key per band at the batch size its slot starts at, the measured levels on
    the sides of each switch the policy puts them, step 0 drafting nothing. The adaptive mode
    supports EAGLE/EAGLE3 with topk 1 only (NEXTN is resolved to EAGLE) and draft tokens follow
    steps + 1 (speculative_hook.py _init_adaptive_speculative_params). The keys are running batch
    sizes, so a request-rate sweep, whose levels are arrival rates with a batch size the server
    alone decides, gets no table.
    """
    reason = _adaptive_refusal(rec)
    if reason is not None:
        return {"applies": False, "reason": reason, "notes": []}
    built = build_adaptive_config(_slots(rec), rec.settings[rec.speculative].get("cuda_graph_bs"))
    flags = ["--speculative-num-steps", str(built.num_steps), "--speculative-eagle-topk", "1",
             "--speculative-adaptive", "--speculative-adaptive-config", ADAPTIVE_CONFIG_FILE]
    notes = ["keys are running batch sizes of one server (per DP rank); in a closed loop below the server's "
             "running-request cap they equal client concurrency", *built.notes]
    return {"applies": True, "reason": None, "launch_flags": flags, "speculative_adaptive_config": built.table,
            "notes": notes + _cap_notes(rec, max_level, configs)}


def _slots(rec: Recommendation) -> list[Slot]:
    """The policy's bands as slots, each switch between the measured levels either side of it."""
    levels = [r.concurrency for r in rec.ratios[rec.speculative]]
    return [Slot(rec.settings[b.config]["num_steps"] if b.config else 0, b.start,
                 after=max((c for c in levels if c < b.start), default=0),
                 until=min((c for c in levels if c >= b.start), default=None)) for b in rec.bands]


def _adaptive_refusal(rec: Recommendation) -> str | None:
    """Why SGLang's adaptive config cannot express the policy; None when it can."""
    rate = rec.level_kind == REQUEST_RATE
    noun = level_noun(rec.level_kind)
    if rec.settings[rec.speculative].get("engine") == "vllm":
        bands = "request-rate" if rate else "concurrency"
        return (f"vLLM has no adaptive speculation mode: apply the policy's {bands} bands (e.g. route by {noun} "
                f"between a speculative and a plain server)")
    if not any(b.config for b in rec.bands):
        return f"speculation does not pay at any measured {noun}: launch without speculation"
    if rate:
        return ("the sweep's levels are open-loop request rates (req/s), not the running batch sizes SGLang's adaptive "
                "config is keyed by: run a concurrency sweep ([sweep] concurrency = [...]) to get one")
    for name in {b.config for b in rec.bands if b.config}:
        reason = _setting_refusal(name, rec.settings[name])
        if reason is not None:
            return reason
    return None


def _setting_refusal(name: str, s: dict[str, Any]) -> str | None:
    """Why one configuration of the policy cannot run in SGLang's adaptive mode; None when it can."""
    algo = (s["speculative_algorithm"] or s["effective_algorithm"] or "").upper()
    if resolved_algorithm(algo) not in ADAPTIVE_ALGORITHMS:
        return f"{name} runs {algo}; SGLang's adaptive mode supports EAGLE/EAGLE3 (and NEXTN, run as EAGLE) only"
    if s["eagle_topk"] not in (None, 1):
        return f"{name} runs topk {s['eagle_topk']}; SGLang's adaptive mode needs topk 1"
    if isinstance(s.get("attn_dp_size"), int) and s["attn_dp_size"] > 1:
        return (f"{name} runs attention DP ({s['attn_dp_size']} ranks); SGLang {SGLANG_VERSION} turns adaptive speculation off "
                f"under attention DP")
    steps = s["num_steps"]
    if not isinstance(steps, int) or isinstance(steps, bool) or steps < 0:
        return f"{name}'s num_steps is not known ({steps!r}); SGLang's candidate_steps must be non-negative ints"
    return None


def _cap_notes(rec: Recommendation, max_level: int, configs: list[ConfigDoc]) -> list[str]:
    """What the speculative configuration's running-request cap does to the policy."""
    cap = rec.settings[rec.speculative]["max_running_requests"]
    ref_cap = next((c.get("max_running_requests") for c in configs if c.get("name") == rec.reference), None)
    notes = []
    if cap is not None and cap < max_level:
        notes.append(f"{rec.speculative} ran with max_running_requests={cap} (SGLang's default under speculation when "
                     f"not set); speculation switched off adaptively keeps that cap, so launch with "
                     f"--max-running-requests {ref_cap or max_level} to serve higher "
                     f"concurrency at the reference's speed")
    if cap is not None and rec.disable_speculation_at is not None and rec.disable_speculation_at > cap:
        notes.append(f"the switch-off point {rec.disable_speculation_at} is above the cap {cap}: no batch reaches it, "
                     f"so the table cannot express it; raise --max-running-requests and measure again")
    return notes


def _crossing_json(c: CrossoverEstimate) -> CrossingDoc:
    return {"estimate": None if c.estimate is None else round(c.estimate, 2),
            "interval": [None if c.low is None else round(c.low, 2), None if c.high is None else round(c.high, 2)],
            "between": [c.last_ahead, c.first_behind], "confident": c.confident,
            "below_range": c.below_range, "above_range": c.above_range}


def _band_json(rec: Recommendation, b: Band) -> PolicyBandDoc:
    band: PolicyBandDoc = {"from": b.start, "to": b.end, "speculation": b.config}
    if b.config:
        s = rec.settings[b.config]
        band["speculative_algorithm"], band["num_steps"] = s["speculative_algorithm"], s["num_steps"]
        band["eagle_topk"], band["num_draft_tokens"] = s["eagle_topk"], s["num_draft_tokens"]
    return band


def to_json(rec: Recommendation) -> RecommendationDoc:
    """The machine-readable recommendation (docs/results.md; RECOMMENDATION checks it before it is written)."""
    return {
        "schema": RECOMMENDATION_SCHEMA, "schema_version": RECOMMENDATION_VERSION, "source": rec.source,
        "level_kind": rec.level_kind,
        "reference": rec.reference, "speculative": rec.speculative, "lighter": rec.lighter,
        "confidence": rec.confidence,
        "disable_speculation_at": rec.disable_speculation_at,
        "crossover": {"config": rec.crossover_config, **_crossing_json(rec.crossover)},
        "lighter_switch": None if rec.lighter_switch is None else {
            "use_lighter_from": next((b.start for b in rec.bands if b.config == rec.lighter), None),
            **_crossing_json(rec.lighter_switch)},
        "policy": [_band_json(rec, b) for b in rec.bands],
        "ratios": {name: [{"concurrency": r.concurrency, "ratio": r.estimate.ratio, "low": r.estimate.low,
                           "high": r.estimate.high} for r in curve] for name, curve in rec.ratios.items()},
        "sglang": rec.sglang,
        "notes": rec.notes,
    }


def _interval(c: CrossoverEstimate, curve: list[LevelRatio], kind: str = CONCURRENCY) -> str:
    lo = f"{c.low:.0f}" if c.low is not None else f"below {level_label(kind, curve[0].concurrency)}"
    hi = f"{c.high:.0f}" if c.high is not None else f"beyond {level_label(kind, curve[-1].concurrency)}"
    return f"{lo}-{hi}"


def _describe(rec: Recommendation, name: str) -> str:
    s = rec.settings[name]
    cap = s["max_running_requests"]
    return (f"{name} ({s['speculative_algorithm']}, steps {s['num_steps']}, topk {s['eagle_topk']}, "
            f"{s['num_draft_tokens']} draft tokens{f', cap {cap}' if cap else ''})")


def _at(kind: str, level: int | None) -> str:
    """A measured level as the text names it; "?" where a crossover names none."""
    return "?" if level is None else level_label(kind, level)


def _crossover_lines(rec: Recommendation, conf: str, unit: str) -> list[str]:
    """Where the configuration switched off last crosses its reference, and where the lighter one takes over."""
    kind, x, lines = rec.level_kind, rec.crossover, []
    if x.below_range:
        lines.append(f"crossover: none in the measured range ({rec.crossover_config} behind {rec.reference} from the "
                     f"lowest measured level {_at(kind, x.first_behind)})")
    elif x.estimate is None:
        lines.append(f"crossover: none in the measured range ({rec.crossover_config} ahead throughout)")
    else:
        behind = _at(kind, x.first_behind)
        where = (f"between measured {_at(kind, x.last_ahead)} and {behind}" if x.last_ahead is not None
                 else f"at or below the lowest measured level {behind}")
        lines.append(f"crossover ({rec.crossover_config} vs {rec.reference}): {level_label(kind, '~')}{x.estimate:.1f}"
                     f"{unit} ({conf} {_interval(x, rec.ratios[rec.crossover_config], kind)}), {where}"
                     f"{'' if x.confident else ', not confidently resolved'}")
    s = rec.lighter_switch
    if s is not None and s.below_range:
        lines.append(f"{rec.lighter} is ahead of {rec.speculative} from the lowest measured level "
                     f"{_at(kind, s.first_behind)}")
    elif s is not None and s.estimate is not None:
        lines.append(f"{rec.lighter} overtakes {rec.speculative} at {level_label(kind, '~')}{s.estimate:.1f}{unit} "
                     f"({conf} {_interval(s, rec.ratios[rec.speculative], kind)})")
    return lines


def render_text(rec: Recommendation, adaptive_config_path: str = ADAPTIVE_CONFIG_FILE) -> str:
    """What a person reads: ratios, the crossover with its interval, the policy, the SGLang form
    (`adaptive_config_path`: where the adaptive config's JSON is, as the launch flags name it)."""
    conf = f"{rec.confidence:.0%} CI"
    kind = rec.level_kind
    rate = kind == REQUEST_RATE
    unit, width = (" req/s", 26) if rate else ("", 22)
    per = "open-loop request rate" if rate else "concurrency"
    lines = [f"{_describe(rec, rec.speculative)} vs {rec.reference}: tok/s ratio per {per} ({conf})"]
    for name, curve in rec.ratios.items():
        if name != rec.speculative:
            lines.append(f"{_describe(rec, name)} vs {rec.reference}:")
        for r in curve:
            e = r.estimate
            side = "ahead" if e.low > 1 else "behind" if e.high < 1 else "tied"
            lines.append(f"  {level_label(kind, r.concurrency):<6} {e.ratio:6.3f} [{e.low:.3f}, {e.high:.3f}]  {side}")
    lines += _crossover_lines(rec, conf, unit)
    lines.append("policy:")
    noun = level_noun(kind)
    for b in rec.bands:
        span = f"{noun} {b.start}-{b.end - 1}{unit}" if b.end is not None else f"{noun} >= {b.start}{unit}"
        lines.append(f"  {span:<{width}} {_describe(rec, b.config) if b.config else 'no speculation'}")
    at = "" if rec.disable_speculation_at is None else unit
    lines.append(f"disable_speculation_at: {rec.disable_speculation_at}{at}")
    sg = rec.sglang
    if sg.get("applies"):
        lines.append(f"SGLang: {' '.join(sg['launch_flags'])} where {adaptive_config_path} is")
        lines.append(f"  {json.dumps(sg['speculative_adaptive_config'])}")
        lines.extend(f"  note: {n}" for n in sg["notes"])
    else:
        lines.append(f"SGLang adaptive config: not applicable: {sg.get('reason')}")
    lines.extend(f"note: {n}" for n in rec.notes)
    return "\n".join(lines)
