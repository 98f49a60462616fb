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

from specguard.report.results import configs_by_name, effective, throughputs
from specguard.decide.stats import RatioEstimate, compare_sessions

SCHEMA = "specguard-recommendation"
SCHEMA_VERSION = 1
DEFAULT_CONFIDENCE = 0.95
ADAPTIVE_ALGORITHMS = ("EAGLE", "EAGLE3", "NEXTN")  # NEXTN runs as EAGLE inside SGLang
ADAPTIVE_CONFIG_FILE = "speculative_adaptive.json"
CONCURRENCY, REQUEST_RATE = "concurrency", "request_rate"  # level kinds


class RecommendError(ValueError):
    """The results cannot support a recommendation (the message says what to measure)."""


def level_kind(doc: dict[str, Any]) -> str:
    """What the cells' `concurrency` field holds: open-loop request rates (req/s) when the sweep
    is `[sweep] request_rate` (docs/suite-file.md), client concurrency otherwise."""
    return REQUEST_RATE if (doc.get("sweep") or {}).get("request_rate") else CONCURRENCY


def level_label(kind: str, level: int | float | str) -> str:
    """A level as text and tables name it: c16 (clients) or r8 (req/s), as terminal.level_name;
    level "~" gives the prefix of an estimate (c~ / r~)."""
    return f"{'r' if kind == REQUEST_RATE else 'c'}{level}"


def level_noun(kind: str) -> str:
    return "request rate" if kind == REQUEST_RATE else "concurrency"


@dataclass(frozen=True)
class LevelRatio:
    concurrency: int
    estimate: RatioEstimate


@dataclass(frozen=True)
class Crossing:
    """Where a ratio curve first drops below 1, interpolated on log concurrency.

    `estimate` is None when the ratio stays >= 1 over the measured range (`above_range`);
    `below_range` means it is already below 1 at the first measured level. The interval
    [`low`, `high`] is bounded by the confident levels around the estimate: `low` is where the
    lower confidence bound drops below 1 after the last level that is confidently ahead, `high`
    where the upper bound drops below 1 at or before the first level confidently behind. None:
    unbounded (below the first measured level, or beyond the last).
    """

    estimate: float | None
    low: float | None
    high: float | None
    last_ahead: int | None
    first_behind: int | None
    confident: bool
    below_range: bool
    above_range: bool


@dataclass(frozen=True)
class Band:
    start: int  # inclusive
    end: int | None  # exclusive; None = no upper bound
    config: str | None  # None = no speculation


@dataclass
class Recommendation:
    source: dict[str, Any]
    reference: str
    speculative: str
    lighter: str | None
    confidence: float
    ratios: dict[str, list[LevelRatio]]
    crossover_config: str  # the configuration switched off last: its crossing is the policy's C2
    crossover: Crossing
    lighter_switch: Crossing | None  # primary vs lighter: where the lighter one takes over (C1)
    disable_speculation_at: int | None
    bands: list[Band]
    settings: dict[str, dict[str, Any]]  # per configuration: algorithm, steps, topk, draft tokens, cap
    sglang: dict[str, Any]
    notes: list[str] = field(default_factory=list)
    level_kind: str = CONCURRENCY  # what the levels are: CONCURRENCY (clients) or REQUEST_RATE (req/s, open loop)


def ratio_curve(a: dict[int, list[float]], b: dict[int, list[float]], *, launch_sd: float,
                confidence: float) -> list[LevelRatio]:
    """a/b tok/s per concurrency measured on both sides, as the speculation gate computes it."""
    levels = sorted(set(a) & set(b))
    return [LevelRatio(c, compare_sessions(a[c], b[c], threshold=1.0, launch_sd=launch_sd, confidence=confidence))
            for c in levels if len(a[c]) >= 2 and len(b[c]) >= 2]


def first_crossing(levels: list[int], values: list[float]) -> float | None:
    """First concurrency where `values` drop below 1 (log-log interpolation between the levels
    around it); levels[0] when already below there, None when never below."""
    for i, v in enumerate(values):
        if v < 1.0:
            return float(levels[0]) if i == 0 else _interpolated(levels, values, i - 1)
    return None


def _interpolated(levels: list[int], values: list[float], i: int) -> float:
    """Where `values` cross 1 between levels i and i + 1 (values[i] >= 1 > values[i + 1])."""
    c0, c1, v0, v1 = levels[i], levels[i + 1], values[i], values[i + 1]
    t = math.log(v0) / (math.log(v0) - math.log(v1))
    return math.exp(math.log(c0) + t * (math.log(c1) - math.log(c0)))


def crossing(curve: list[LevelRatio]) -> Crossing:
    levels = [r.concurrency for r in curve]
    est = first_crossing(levels, [r.estimate.ratio for r in curve])
    lows, highs = [r.estimate.low for r in curve], [r.estimate.high for r in curve]
    limit = math.inf if est is None else est
    ahead = [i for i, c in enumerate(levels) if lows[i] > 1.0 and c <= limit]
    behind = [i for i, c in enumerate(levels) if highs[i] < 1.0 and c >= (est or math.inf)]
    lo = hi = None
    if ahead and ahead[-1] + 1 < len(levels):
        lo = min(_interpolated(levels, lows, ahead[-1]), limit)
    if behind:
        j = behind[0]
        hi = float(levels[0]) if j == 0 else max(_interpolated(levels, highs, j - 1), est)
    first_behind = next((r for r in curve if r.estimate.ratio < 1.0), None)
    before = [r for r in curve if first_behind and r.concurrency < first_behind.concurrency]
    last_ahead = before[-1] if before else None
    confident = bool(first_behind and last_ahead and last_ahead.estimate.low > 1.0 and first_behind.estimate.high < 1.0)
    return Crossing(estimate=est, low=lo, high=hi, last_ahead=last_ahead.concurrency if last_ahead else None,
                    first_behind=first_behind.concurrency if first_behind else None, confident=confident,
                    below_range=bool(curve) and curve[0].estimate.ratio < 1.0, above_range=est is None)


def _switch_point(c: Crossing) -> int | None:
    """The integer concurrency from which the crossing's loser should be off."""
    return None if c.estimate is None else max(1, math.ceil(c.estimate - 1e-9))


def _settings(doc: dict[str, Any], name: str) -> dict[str, Any]:
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


def _candidates(doc: dict[str, Any]) -> list[str]:
    """Speculative configurations with a reference, both measured."""
    out = []
    for cfg in doc["configs"]:
        ref = cfg.get("reference")
        if ref and throughputs(doc, cfg["name"]) and throughputs(doc, ref):
            out.append(cfg["name"])
    return out


def _pick_primary(doc: dict[str, Any], wanted: str | None) -> str:
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


def _lighter_options(doc: dict[str, Any], primary: str) -> list[str]:
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


def _later(a: Crossing, b: Crossing) -> bool:
    """Does `a` stay ahead of its reference longer than `b`?"""
    return (math.inf if a.estimate is None else a.estimate) > (math.inf if b.estimate is None else b.estimate)


def recommend(doc: dict[str, Any], *, config: str | None = None, confidence: float = DEFAULT_CONFIDENCE,
              source: str = "") -> Recommendation:
    """The policy a results document supports (see the module docstring)."""
    primary = _pick_primary(doc, config)
    kind, noun = level_kind(doc), level_noun(level_kind(doc))
    unit = " req/s" if kind == REQUEST_RATE else ""
    ref = configs_by_name(doc)[primary]["reference"]
    launch_sd = doc["tolerances"]["prior_between_sd"]
    ref_tps = throughputs(doc, ref)
    ratios = {primary: ratio_curve(throughputs(doc, primary), ref_tps, launch_sd=launch_sd, confidence=confidence)}
    if len(ratios[primary]) < 2:
        raise RecommendError(f"{primary} and {ref} share fewer than 2 measured {noun} levels; a crossover needs a sweep")
    crossings = {primary: crossing(ratios[primary])}
    lighter_options = _lighter_options(doc, primary)
    for name in lighter_options:
        ratios[name] = ratio_curve(throughputs(doc, name), ref_tps, launch_sd=launch_sd, confidence=confidence)
        crossings[name] = crossing(ratios[name])
    lighter = max(lighter_options, key=lambda n: math.inf if crossings[n].estimate is None else crossings[n].estimate,
                  default=None)
    notes: list[str] = []
    switch = None  # where the lighter configuration overtakes the primary (C1)
    if lighter is not None and _later(crossings[lighter], crossings[primary]):
        switch = crossing(ratio_curve(throughputs(doc, primary), throughputs(doc, lighter), launch_sd=launch_sd,
                                      confidence=confidence))
        c1, c2_lighter = _switch_point(switch), _switch_point(crossings[lighter])
        if c1 is None or (c2_lighter is not None and c1 >= c2_lighter):
            switch = None
    if lighter is not None and switch is None:
        notes.append(f"{lighter} (fewer draft tokens) does not take over from {primary} before speculation stops "
                     f"paying against {ref}; no middle band")
        lighter = None
    last = lighter or primary
    c2 = _switch_point(crossings[last])
    c1 = _switch_point(switch) if switch is not None else None
    bands = _bands(primary, lighter, c1, c2)
    levels = [r.concurrency for r in ratios[primary]]
    if crossings[last].above_range:
        notes.append(f"{last} is ahead of {ref} up to the highest measured {noun} ({levels[-1]}{unit}); "
                     f"measure higher {'request rates' if unit else noun} to find where it stops paying")
    if crossings[last].below_range:
        notes.append(f"{last} is already behind {ref} at the lowest measured {noun} ({levels[0]}{unit}): "
                     f"speculation does not pay on this sweep")
    if not crossings[last].confident and not crossings[last].above_range:
        notes.append("the measured levels around the crossover are not confidently resolved "
                     f"at {confidence:.0%}; more repeats or levels between them narrow it")
    others = [n for n in _candidates(doc) if n not in ratios]
    if others:
        notes.append(f"other speculative configurations in the results: {', '.join(others)} "
                     f"(specguard recommend --config NAME)")
    settings = {n: _settings(doc, n) for n in ratios}
    rec = Recommendation(
        source={"file": source, "session_id": doc["session_id"], "created": doc["created"], "suite": doc["suite"]},
        reference=ref, speculative=primary, lighter=lighter, confidence=confidence,
        ratios=ratios, crossover_config=last, crossover=crossings[last], lighter_switch=switch,
        disable_speculation_at=c2, bands=bands, settings=settings, sglang={}, notes=notes, level_kind=kind)
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


def graph_switch_start(start: int, graphs: list[int] | None) -> int:
    """The batch size from which a key of `start` can take effect, nearest to `start`.

    SGLang 0.5.23 routes a decode batch of size b by its padded size: the smallest captured
    decode CUDA-graph batch size >= b (b itself above the largest or without graphs;
    adaptive_spec_params.py AdaptiveSpeculativeParams._route, _pad_to_cuda_graph_bs), then the
    largest key <= that. So a key K applies from b = (largest graph size below K) + 1, up to one
    bucket early. The starts a key can express are 1, g + 1 for each graph size g, and any size
    above the largest graph; this picks the one nearest `start` (the later one on a tie), and
    that value is itself a key that takes effect exactly there.
    """
    if not graphs or start <= 1 or start > max(graphs):
        return start
    below = max((g for g in graphs if g < start), default=0) + 1
    if below == start:
        return start
    above = min(g for g in graphs if g >= start) + 1
    return below if start - below < above - start else above


def sglang_adaptive(rec: Recommendation, max_level: int, configs: list[dict[str, Any]]) -> dict[str, Any]:
    """The policy as SGLang's `--speculative-adaptive-config` JSON, where that mode applies.

    Format from SGLang 0.5.23's python/sglang/srt/speculative/adaptive_spec_params.py
    (DEFAULT_ADAPTIVE_CONFIG, _load_adaptive_config, AdaptiveSpeculativeParams): a JSON object
    whose integer-string keys are running batch sizes, each {"candidate_steps": [non-negative
    ints, ...]}; a batch uses the entry with the largest key <= its size, padded up to a
    CUDA-graph batch size first (see graph_switch_start); step 0 drafts nothing. The adaptive
    mode supports EAGLE/EAGLE3 with topk 1 only (NEXTN is resolved to EAGLE), draft tokens follow
    steps + 1, and --speculative-num-steps must be one of the candidates or the server refuses to
    start (speculative_hook.py _init_adaptive_speculative_params), so the flags name one. The keys
    are running batch sizes (_route looks the batch size up), so a request-rate sweep, whose
    levels are arrival rates with a batch size the server alone decides, gets no table.
    """
    rate = rec.level_kind == REQUEST_RATE
    noun = level_noun(rec.level_kind)
    engine = rec.settings[rec.speculative].get("engine")
    if engine == "vllm":
        bands = "request-rate" if rate else "concurrency"
        return {"applies": False, "reason": f"vLLM has no adaptive speculation mode: apply the policy's {bands} "
                                            f"bands (e.g. route by {noun} between a speculative and a plain server)",
                "notes": []}
    if not any(b.config for b in rec.bands):
        return {"applies": False, "reason": f"speculation does not pay at any measured {noun}: launch without "
                                            "speculation", "notes": []}
    if rate:
        return {"applies": False, "reason": "the sweep's levels are open-loop request rates (req/s), not the running "
                                            "batch sizes SGLang's adaptive config is keyed by: run a concurrency sweep "
                                            "([sweep] concurrency = [...]) to get one", "notes": []}
    for name in {b.config for b in rec.bands if b.config}:
        s = rec.settings[name]
        algo = (s["speculative_algorithm"] or s["effective_algorithm"] or "").upper()
        if algo not in ADAPTIVE_ALGORITHMS:
            return {"applies": False, "reason": f"{name} runs {algo}; SGLang's adaptive mode supports EAGLE/EAGLE3 "
                                                f"(and NEXTN, run as EAGLE) only", "notes": []}
        if s["eagle_topk"] not in (None, 1):
            return {"applies": False, "reason": f"{name} runs topk {s['eagle_topk']}; SGLang's adaptive mode needs topk 1",
                    "notes": []}
        if isinstance(s.get("attn_dp_size"), int) and s["attn_dp_size"] > 1:
            return {"applies": False, "reason": f"{name} runs attention DP ({s['attn_dp_size']} ranks); SGLang 0.5.23 "
                                                f"turns adaptive speculation off under attention DP", "notes": []}
        steps = s["num_steps"]
        if not isinstance(steps, int) or isinstance(steps, bool) or steps < 0:
            return {"applies": False, "reason": f"{name}'s num_steps is not known ({steps!r}); SGLang's candidate_steps "
                                                f"must be non-negative ints", "notes": []}
    graphs = rec.settings[rec.speculative].get("cuda_graph_bs")
    notes = ["keys are running batch sizes of one server (per DP rank); in a closed loop below the server's "
             "running-request cap they equal client concurrency"]
    table: dict[str, dict[str, list[int]]] = {}
    for b in rec.bands:
        key = graph_switch_start(b.start, graphs)
        if key != b.start:
            notes.append(f"the switch measured at {b.start} is keyed {key}: batches are padded to the decode CUDA-graph "
                         f"sizes {graphs} before the lookup, so {key} is the nearest batch size a key takes effect at")
        table[str(key)] = {"candidate_steps": [rec.settings[b.config]["num_steps"] if b.config else 0]}
    if graphs is None:
        notes.append("decode CUDA-graph sizes unknown (the results carry no decode_cuda_graph_bs): SGLang pads a batch "
                     "to the next captured size before the lookup, so a switch can happen up to one graph bucket "
                     "before its key")
    first = table[min(table, key=int)]["candidate_steps"][0]
    flags = ["--speculative-num-steps", str(first), "--speculative-eagle-topk", "1",
             "--speculative-adaptive", "--speculative-adaptive-config", ADAPTIVE_CONFIG_FILE]
    cap = rec.settings[rec.speculative]["max_running_requests"]
    ref_cfg = next((c for c in configs if c["name"] == rec.reference), {})
    if cap is not None and cap < max_level:
        notes.append(f"{rec.speculative} ran with max_running_requests={cap} (SGLang's default under speculation when "
                     f"not set); speculation switched off adaptively keeps that cap, so launch with "
                     f"--max-running-requests {ref_cfg.get('max_running_requests') or max_level} to serve higher "
                     f"concurrency at the reference's speed")
    if cap is not None and rec.disable_speculation_at is not None and rec.disable_speculation_at > cap:
        notes.append(f"the switch-off point {rec.disable_speculation_at} is above the cap {cap}: no batch reaches it, "
                     f"so the table cannot express it; raise --max-running-requests and measure again")
    return {"applies": True, "reason": None, "launch_flags": flags, "speculative_adaptive_config": table, "notes": notes}


def _crossing_json(c: Crossing) -> dict[str, Any]:
    return {"estimate": None if c.estimate is None else round(c.estimate, 2),
            "interval": [None if c.low is None else round(c.low, 2), None if c.high is None else round(c.high, 2)],
            "between": [c.last_ahead, c.first_behind], "confident": c.confident,
            "below_range": c.below_range, "above_range": c.above_range}


def to_json(rec: Recommendation) -> dict[str, Any]:
    """The machine-readable recommendation (documented in docs/results.md)."""
    return {
        "schema": SCHEMA, "schema_version": SCHEMA_VERSION, "source": rec.source,
        "level_kind": rec.level_kind,
        "reference": rec.reference, "speculative": rec.speculative, "lighter": rec.lighter,
        "confidence": rec.confidence,
        "disable_speculation_at": rec.disable_speculation_at,
        "crossover": {"config": rec.crossover_config, **_crossing_json(rec.crossover)},
        "lighter_switch": None if rec.lighter_switch is None else {
            "use_lighter_from": next((b.start for b in rec.bands if b.config == rec.lighter), None),
            **_crossing_json(rec.lighter_switch)},
        "policy": [{"from": b.start, "to": b.end, "speculation": b.config,
                    **({k: rec.settings[b.config][k] for k in ("speculative_algorithm", "num_steps", "eagle_topk",
                                                               "num_draft_tokens")} if b.config else {})}
                   for b in rec.bands],
        "ratios": {name: [{"concurrency": r.concurrency, "ratio": r.estimate.ratio, "low": r.estimate.low,
                           "high": r.estimate.high} for r in curve] for name, curve in rec.ratios.items()},
        "sglang": rec.sglang,
        "notes": rec.notes,
    }


def _interval(c: Crossing, curve: list[LevelRatio], kind: str = CONCURRENCY) -> str:
    lo = f"{c.low:.0f}" if c.low is not None else f"below {level_label(kind, curve[0].concurrency)}"
    hi = f"{c.high:.0f}" if c.high is not None else f"beyond {level_label(kind, curve[-1].concurrency)}"
    return f"{lo}-{hi}"


def _describe(rec: Recommendation, name: str) -> str:
    s = rec.settings[name]
    cap = s["max_running_requests"]
    return (f"{name} ({s['speculative_algorithm']}, steps {s['num_steps']}, topk {s['eagle_topk']}, "
            f"{s['num_draft_tokens']} draft tokens{f', cap {cap}' if cap else ''})")


def render_text(rec: Recommendation) -> str:
    """What a person reads: ratios, the crossover with its interval, the policy, the SGLang form."""
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
    x = rec.crossover
    if x.estimate is None:
        lines.append(f"crossover: none in the measured range ({rec.crossover_config} ahead throughout)")
    else:
        behind = level_label(kind, x.first_behind)
        where = (f"between measured {level_label(kind, x.last_ahead)} and {behind}" if x.last_ahead is not None
                 else f"at or below the lowest measured level {behind}")
        lines.append(f"crossover ({rec.crossover_config} vs {rec.reference}): {level_label(kind, '~')}{x.estimate:.1f}"
                     f"{unit} ({conf} {_interval(x, rec.ratios[rec.crossover_config], kind)}), {where}"
                     f"{'' if x.confident else ', not confidently resolved'}")
    if rec.lighter_switch is not None and rec.lighter_switch.estimate is not None:
        s = rec.lighter_switch
        lines.append(f"{rec.lighter} overtakes {rec.speculative} at {level_label(kind, '~')}{s.estimate:.1f}{unit} "
                     f"({conf} {_interval(s, rec.ratios[rec.speculative], kind)})")
    lines.append("policy:")
    noun = level_noun(kind)
    for b in rec.bands:
        span = f"{noun} {b.start}-{b.end - 1}{unit}" if b.end is not None else f"{noun} >= {b.start}{unit}"
        lines.append(f"  {span:<{width}} {_describe(rec, b.config) if b.config else 'no speculation'}")
    at = "" if rec.disable_speculation_at is None else unit
    lines.append(f"disable_speculation_at: {rec.disable_speculation_at}{at}")
    sg = rec.sglang
    if sg.get("applies"):
        lines.append(f"SGLang: {' '.join(sg['launch_flags'])} where {ADAPTIVE_CONFIG_FILE} is")
        lines.append(f"  {json.dumps(sg['speculative_adaptive_config'])}")
        lines.extend(f"  note: {n}" for n in sg["notes"])
    else:
        lines.append(f"SGLang adaptive config: not applicable: {sg.get('reason')}")
    lines.extend(f"note: {n}" for n in rec.notes)
    return "\n".join(lines)
