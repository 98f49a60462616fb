"""What a study prints and writes: the headline rates, one table row per grid point, the summary line."""

from __future__ import annotations

from dataclasses import asdict, replace
from typing import Any

from research.study.simulate import ACCEPTANCE_DROP, ENGINE_SLOWDOWN
from specguard.config import Tolerances

# Designs a stored study may hold that the study no longer runs (research/README.md): rows without
# a "design" are the earliest studies' legacy gates (no prior dof); on-suspicion-r1 ran at 8.
LEGACY, R1, R1_PRIOR_DOF = "legacy", "on-suspicion-r1", 8.0
# Headline rates are the worst over the studied history depths of at least this many stored
# sessions (a suite stores 3-5).
DEEP_HISTORY = 3
# attach mode's rates (one launch, decided at the whole alpha), beside the headline's as attach_*
ATTACH_KEYS = ("false_fail_rate", "false_fail_rate_half_prior", "power_tok_s_5pct", "suite_power_tok_s_5pct",
               "power_tok_s_10pct", "power_step_5pct_c1", "power_step_5pct_by_level")
HEADLINE_KEYS = ("acceptance", "sessions", "false_fail_rate", "power_tok_s_5pct", "power_accept_10pct",
                 "power_speculation_5pct", "launches_per_config", "power_step_5pct_c1", "attribution_correct",
                 "power_ab_tok_s_3pct", "ab_launches_per_build")


def matches(settings: dict[str, Any], target: Tolerances, repeats: int, design: str | None = None) -> bool:
    """Whether a grid point's recorded settings are ``target`` (any K) at ``repeats`` and ``design``."""
    t = asdict(target)
    return (settings["repeats"] == repeats and (design is None or settings.get("design", LEGACY) == design)
            and all(settings.get(k) == v for k, v in t.items() if k != "history_sessions" and k in settings))


def _rate(rows: list[dict[str, Any]], name: str, key: str = "fail_rate", worst: Any = max) -> float | None:
    vals = [s[key] for g in rows for s in g["scenarios"] if s["scenario"] == name and s.get(key) is not None]
    return worst(vals) if vals else None


def _spec_scenario(rows: list[dict[str, Any]]) -> str:
    return next((s["scenario"] for g in rows for s in g["scenarios"] if s["scenario"].startswith("speculation 0.95x")), "")


def _level_rates(rows: list[dict[str, Any]], name: str, gate: str) -> dict[str, float]:
    """Level -> the worst over ``rows`` of the share of sessions whose changed cell at that level
    failed by ``gate`` ("throughput", "step_time" or "either")."""
    per: dict[str, list[float]] = {}
    for g in rows:
        for s in g["scenarios"]:
            if s["scenario"] == name:
                for level, rates in s.get("level_fail_rates", {}).items():
                    per.setdefault(level, []).append(rates[gate])
    return {level: min(v) for level, v in per.items()}


def _step_rates(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The engine slowdown caught per level (by throughput or step_time, and by step_time alone),
    and attribution: the worst over ``rows``."""
    either = _level_rates(rows, ENGINE_SLOWDOWN, "either")
    correct = [g["attribution_correct"] for g in rows if g.get("attribution_correct") is not None]
    return {"power_step_5pct_c1": either.get("c1"), "power_step_5pct_by_level": either,
            "power_step_5pct_step_time_by_level": _level_rates(rows, ENGINE_SLOWDOWN, "step_time"),
            "power_tok_s_5pct_by_level": _level_rates(rows, "tok/s -5%", "throughput"),
            "attribution_correct": min(correct) if correct else None,
            "engine_slowdown_named_drafter": _rate(rows, ENGINE_SLOWDOWN, "wrong_half_rate"),
            "acceptance_drop_named_engine": _rate(rows, ACCEPTANCE_DROP, "wrong_half_rate")}


def _rates(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The headline rates of some grid points (worst over them; powers: the isolated gate's own)."""
    spec = _spec_scenario(rows)
    return {**_step_rates(rows), "false_fail_rate": _rate(rows, "A/A"),
            "power_tok_s_5pct": _rate(rows, "tok/s -5%", "throughput_fail_rate", min),
            "power_tok_s_10pct": _rate(rows, "tok/s -10%", "throughput_fail_rate", min),
            "power_accept_10pct": _rate(rows, "accept -10%", "accept_length_fail_rate", min),
            "power_speculation_5pct": _rate(rows, spec, "speculation_fail_rate", min) if spec else None,
            "suite_power_tok_s_5pct": _rate(rows, "tok/s -5%", "fail_rate", min),
            "suite_power_speculation_5pct": _rate(rows, spec, "fail_rate", min) if spec else None,
            "speculation_fail_rate_reference_7pct_faster": _rate(rows, "reference 7% faster", "speculation_fail_rate"),
            "launches_per_config": _rate(rows, "A/A", "launches_per_config"),
            "launches_per_config_tok_s_5pct": _rate(rows, "tok/s -5%", "launches_per_config"),
            "runs_per_session": _rate(rows, "A/A", "runs_per_session"),
            "crossover_within_one_level": _rate(rows, "A/A", "crossover_within_one_level", min),
            "crossover_within_1_25x": _rate(rows, "A/A", "crossover_within_1_25x", min)}


def _deep(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [g for g in rows if g["settings"]["history_sessions"] >= DEEP_HISTORY]


def headline(result: dict[str, Any], target: Tolerances, repeats: int, design: str | None = None) -> dict[str, Any]:
    """The target settings and design: worst case over the history depths K >= 3 that were
    studied (a suite stores 3-5 sessions), and every K on its own. Powers are the isolated
    gate's own rate (throughput for tok/s drops, accept_length for accept -10 %, speculation for
    0.95x); the whole suite's rates sit beside them in the rows."""
    rows = [g for g in result["grid"] if matches(g["settings"], target, repeats, design)]
    if not rows:
        return {}
    deep = _deep(rows) or rows
    depths = sorted({g["settings"]["history_sessions"] for g in deep})
    half = replace(target, prior_between_sd=target.prior_between_sd / 2, prior_day_sd=target.prior_day_sd / 2)
    half_rows = _deep([g for g in result["grid"] if matches(g["settings"], half, repeats, design)])
    return {**_rates(deep),
            "false_fail_rate_half_prior": _rate(half_rows, "A/A") if half_rows else None,
            "headline_settings": f"design={design} repeats={repeats} "
                                 + " ".join(f"{k}={v}" for k, v in asdict(target).items() if k != "history_sessions")
                                 + ", worst over K in " + ",".join(map(str, depths)),
            "by_history": {str(k): _rates([g for g in rows if g["settings"]["history_sessions"] == k])
                           for k in sorted({g["settings"]["history_sessions"] for g in rows})}}


TABLE_HEAD = ["design", "rule", "repeats", "K", "prior tok (dof)", "false-fail (95% CI)", "launches/config A/A",
              "runs/session", "launches/config per change", "xover ±1 level", "xover 1.25x"]


def _power(rows: dict[str, dict[str, Any]], change: dict[str, Any]) -> str:
    """The suite's fail rate under a change and, in brackets, the isolated gate's own."""
    row = rows[change["scenario"]]
    own = row.get(f"{change['isolates']}_fail_rate") if change.get("isolates") else None
    return f"{row['fail_rate']:.2f}" + (f" ({own:.2f})" if own is not None else "")


def _table_row(g: dict[str, Any], changes: list[dict[str, Any]]) -> str:
    st, rows = g["settings"], {s["scenario"]: s for s in g["scenarios"]}
    aa = rows["A/A"]
    lo, hi = aa["fail_ci95"]
    x125 = aa.get("crossover_within_1_25x")
    design = st.get("design", LEGACY)
    pdof = R1_PRIOR_DOF if design == R1 else st.get("prior_between_dof", "")
    dof = "" if design == LEGACY else f" ({pdof:g}, {st.get('spread_rule', '')}, {st.get('spread_pool', '')})"
    cells = [design, st.get("fail_rule", "beyond-tolerance"), str(st["repeats"]), str(st["history_sessions"]),
             f"{st['prior_between_sd']:g}{dof}", f"{aa['fail_rate']:.1%} ({lo:.1%}-{hi:.1%})",
             f"{aa.get('launches_per_config', 1):.2f}", f"{aa.get('runs_per_session', 0):.0f}",
             " / ".join(f"{rows[c['scenario']].get('launches_per_config', 1):.2f}" for c in changes),
             f"{aa['crossover_within_one_level']:.0%}", "-" if x125 is None else f"{x125:.0%}",
             *[_power(rows, c) for c in changes]]
    return "| " + " | ".join(cells) + " |"


def render_table(result: dict[str, Any]) -> str:
    """One markdown row per grid point: false fails, cost (launches per configuration unchanged
    and under each change, in the order of the power columns), crossover, the suite's power per
    change and, in brackets, the isolated gate's own."""
    changes = [s for s in result["grid"][0]["scenarios"] if s["scenario"] != "A/A"]
    head = [*TABLE_HEAD, *[f"P({c['scenario']})" for c in changes]]
    lines = ["| " + " | ".join(head) + " |", "|" + "---:|" * len(head)]
    lines += [_table_row(g, changes) for g in result["grid"]]
    return "\n".join(lines)


def render_levels(result: dict[str, Any], scenario: str = ENGINE_SLOWDOWN) -> str:
    """One markdown row per grid point: under ``scenario``, the share of sessions whose changed
    cell at each level failed by throughput or step_time, and in brackets by step_time alone;
    then how often a tok/s verdict named the wrong half of a one-half change, and the share of
    sessions where neither did (``attribution_correct``)."""
    changed = [s for s in result["grid"][0]["scenarios"] if s["scenario"] == scenario]
    if not changed:
        return ""
    levels = list(changed[0]["level_fail_rates"])
    head = ["design", "prior", *[f"{level} caught (step_time)" for level in levels],
            f"{ENGINE_SLOWDOWN} read as drafter", f"{ACCEPTANCE_DROP} read as engine", "attribution right"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---:|" * len(head)]
    for g in result["grid"]:
        rows = {s["scenario"]: s for s in g["scenarios"]}
        if scenario not in rows or "wrong_half_rate" not in rows.get(ENGINE_SLOWDOWN, {}):
            continue
        per = rows[scenario]["level_fail_rates"]
        right = g.get("attribution_correct")
        cells = [g["settings"].get("design", LEGACY), f"{g['settings']['prior_between_sd']:g}",
                 *[f"{per[level]['either']:.3f} ({per[level]['step_time']:.3f})" for level in levels],
                 f"{rows[ENGINE_SLOWDOWN]['wrong_half_rate']:.3f}", f"{rows[ACCEPTANCE_DROP]['wrong_half_rate']:.3f}",
                 "-" if right is None else f"{right:.3f}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def summary_line(doc: dict[str, Any]) -> str:
    """The last line of `python -m research.study`: the headline keys of gate-study.json, by the same names."""
    def fmt(v: Any) -> str:
        return "nan" if v is None else (f"{v:.4g}" if isinstance(v, float) else str(v))
    return " ".join(f"{k}={fmt(doc.get(k))}" for k in HEADLINE_KEYS)
