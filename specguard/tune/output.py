"""What `specguard tune` writes: the table per level and band, SGLang's adaptive config with its
launch flags, a suite snippet that gates the tuned deployment, vLLM's per-band token count, the
plot, and tune.json. Every emitted adaptive config comes from the one builder of it
(sglang_rules.adaptive_table), which checks it with SGLang's start-up rules."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specguard.config import ServerConfig
from specguard.decide.stats import RatioEstimate
from specguard.sglang_rules import SGLANG_VERSION
from specguard.sglang_rules.adaptive_table import AdaptiveConfig, Slot, build_adaptive_config, launch_num_steps
from specguard.tune.grid import REFERENCE, Setting, TuneError, algorithm_of
from specguard.tune.race import Ledger, RacePlan, ratio, tok_s_interval

ADAPTIVE_FILE = "tuned_speculative_adaptive.json"
DEFAULT_ADAPTIVE_NOTE = f"SGLang {SGLANG_VERSION} DEFAULT_ADAPTIVE_CONFIG (srt/speculative/adaptive_spec_params.py)"


def steps_of(s: Setting) -> int:
    return 0 if s.kind == REFERENCE else s.num_steps


@dataclass(frozen=True)
class Band:
    first: int  # first measured concurrency of the band
    last: int  # last measured concurrency
    setting: Setting


def bands_of(choice: dict[int, Setting | None]) -> list[Band]:
    """Consecutive levels with the same chosen setting."""
    out: list[Band] = []
    for c in sorted(choice):
        s = choice[c]
        if s is None:
            continue
        if out and out[-1].setting == s:
            out[-1] = Band(out[-1].first, c, s)
        else:
            out.append(Band(c, c, s))
    return out


def adaptive_config(choice: dict[int, Setting | None], graphs: Sequence[int] | None) -> AdaptiveConfig:
    """SGLang's --speculative-adaptive-config through the one builder (sglang_rules.adaptive_table):
    one fixed step count per band (measured, so no runtime walking among candidates is needed),
    each band switched on at the geometric middle of the levels around the switch, those two
    levels kept on their sides (the builder raises if SGLang would not start with it)."""
    bands = bands_of(choice)
    slots: list[Slot] = []
    for i, band in enumerate(bands):
        if band.setting.kind != REFERENCE and not band.setting.adaptive_expressible:
            raise TuneError(f"{band.setting.name} cannot be a slot of SGLang's adaptive table (topk 1 chains only)")
        if i == 0:
            slots.append(Slot(steps_of(band.setting)))
            continue
        below = bands[i - 1].last
        slots.append(Slot(steps_of(band.setting), start=math.ceil(math.sqrt(below * band.first)), after=below,
                          until=band.first))
    built = build_adaptive_config(slots, graphs)
    notes = list(built.notes)
    if all(e["candidate_steps"] == [0] for e in built.table.values()):
        notes.append("speculation won at no measured level: the table drafts nothing; deploy without speculation")
    notes.append("keys are running batch sizes per server; a closed loop below the running-request cap runs "
                 "batches of about the client concurrency")
    return AdaptiveConfig(built.table, built.num_steps, notes)


def launch_flags(cfg: ServerConfig, table: dict[str, Any], config_path: str, cap: int | None) -> list[str]:
    steps = launch_num_steps(table)
    flags = ["--speculative-algorithm", algorithm_of(cfg)]
    if cfg.draft_model_path:
        flags += ["--speculative-draft-model-path", cfg.draft_model_path]
    flags += ["--speculative-num-steps", str(steps), "--speculative-eagle-topk", "1",
              "--speculative-num-draft-tokens", str(steps + 1), "--speculative-adaptive",
              "--speculative-adaptive-config", config_path]
    if cap is not None:
        flags += ["--max-running-requests", str(cap)]
    return flags


def _toml(value: Any) -> str:
    return json.dumps(value)  # strings, ints and lists of strings are valid TOML this way


def suite_snippet(cfg: ServerConfig, table: dict[str, Any], config_path: str, cap: int | None,
                  must_win_up_to: int | None) -> str:
    """A [servers.NAME-tuned] table: the tuned adaptive deployment, gated against the reference."""
    steps = launch_num_steps(table)
    lines = [f"# specguard tune: {cfg.name} with the tuned adaptive config; add to the suite file",
             f"[servers.{cfg.name}-tuned]", f"engine = {_toml(cfg.engine)}", f"model_path = {_toml(cfg.model_path)}"]
    if cfg.draft_model_path:
        lines.append(f"draft_model_path = {_toml(cfg.draft_model_path)}")
    lines += [f"speculative_algorithm = {_toml(algorithm_of(cfg))}", f"num_steps = {steps}", "eagle_topk = 1",
              f"num_draft_tokens = {steps + 1}"]
    if cap is not None:
        lines.append(f"max_running_requests = {cap}")
    lines.append(f"args = {_toml([*cfg.args, '--speculative-adaptive', '--speculative-adaptive-config', config_path])}")
    lines.append(f"reference = {_toml(cfg.reference)}")
    if must_win_up_to is not None:
        lines.append(f"speculation_must_win_up_to = {must_win_up_to}  # it won confidently at every level up to here")
    else:
        lines.append("# no speculation_must_win_up_to: the tuned setting did not win confidently at the lowest level")
    lines.append(f"startup_timeout_s = {cfg.startup_timeout_s:g}")
    return "\n".join(lines) + "\n"


def must_win_up_to(ledger: Ledger, choice: dict[int, Setting | None], reference: Setting, plan: RacePlan) -> int | None:
    """The highest level up to which the chosen setting beat the reference confidently at every level."""
    last = None
    for c in sorted(choice):
        s = choice[c]
        if s is None or s.kind == REFERENCE or not ledger.tok_s(reference, c):
            break
        if ratio(ledger, s, reference, c, plan).low <= 1.0:
            break
        last = c
    return last


def vllm_bands(choice: dict[int, Setting | None]) -> list[dict[str, Any]]:
    """vLLM has no per-batch switch in this version: the token count to deploy per band."""
    return [{"from_concurrency": b.first, "to_concurrency": b.last,
             "num_speculative_tokens": steps_of(b.setting)} for b in bands_of(choice)]


def _est(e: RatioEstimate | None) -> dict[str, float] | None:
    return None if e is None else {"ratio": round(e.ratio, 4), "low": round(e.low, 4), "high": round(e.high, 4)}


@dataclass(frozen=True)
class Picks:
    """What the search chose per level (``choice``: the fastest setting; ``adaptive``: the fastest
    SGLang's adaptive mode can express) and the comparators measured beside them: the
    configuration as the suite launches it and SGLang's default adaptive config (None: not run)."""

    choice: dict[int, Setting | None]
    adaptive: dict[int, Setting | None]
    launched: Setting | None
    default_adaptive: Setting | None


def level_rows(ledger: Ledger, levels: Sequence[int], picks: Picks, plan: RacePlan) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []  # tune.json's "table"
    reference, launched, default_adaptive = Setting(REFERENCE), picks.launched, picks.default_adaptive
    for c in levels:
        s = picks.choice.get(c)
        if s is None:
            rows.append({"concurrency": c, "best": None})
            continue
        mean, lo, hi = tok_s_interval(ledger.tok_s(s, c), plan.launch_sd, plan.confidence)

        def gain(other: Setting | None, s: Setting = s, c: int = c) -> dict[str, float] | None:
            if other is None or not ledger.tok_s(other, c):
                return None
            if other == s:
                return {"ratio": 1.0, "low": 1.0, "high": 1.0}
            return _est(ratio(ledger, s, other, c, plan))

        a = picks.adaptive.get(c)
        rows.append({
            "concurrency": c, "best": s.to_json(), "tok_s": round(mean, 2), "interval": [round(lo, 2), round(hi, 2)],
            "runs": len(ledger.tok_s(s, c)), "accept_length": round(ledger.accept_length(s, c), 3),
            "adaptive_choice": a.name if a else None,
            "gain_vs_no_speculation": gain(reference), "gain_vs_launched": gain(launched),
            "gain_vs_default_adaptive": gain(default_adaptive),
            "no_speculation_tok_s": round(ledger.mean(reference, c), 2) if ledger.tok_s(reference, c) else None,
            "launched_tok_s": round(ledger.mean(launched, c), 2) if launched and ledger.tok_s(launched, c) else None,
            "default_adaptive_tok_s": (round(ledger.mean(default_adaptive, c), 2)
                                       if default_adaptive and ledger.tok_s(default_adaptive, c) else None),
        })
    return rows


def render_table(rows: list[dict[str, Any]], bands: list[Band]) -> str:
    def g(x: dict[str, float] | None) -> str:
        return "-" if x is None else f"{x['ratio'] - 1:+.0%} [{x['low'] - 1:+.0%},{x['high'] - 1:+.0%}]"

    out = [f"{'C':>5} {'best setting':<26} {'tok/s':>9} {'interval':>19} {'vs no spec':>20} {'vs launched':>20} "
           f"{'vs default adaptive':>20}"]
    for r in rows:
        if r["best"] is None:
            out.append(f"{r['concurrency']:>5} (not measured)")
            continue
        iv = f"[{r['interval'][0]:.1f}, {r['interval'][1]:.1f}]"
        out.append(f"{r['concurrency']:>5} {r['best']['name']:<26} {r['tok_s']:>9.1f} {iv:>19} "
                   f"{g(r['gain_vs_no_speculation']):>20} {g(r['gain_vs_launched']):>20} {g(r['gain_vs_default_adaptive']):>20}")
    out.append("bands: " + "; ".join(f"C {b.first}-{b.last}: {b.setting.name}" for b in bands))
    return "\n".join(out)


def plot(path: Path, ledger: Ledger, settings: Sequence[Setting], levels: Sequence[int],
         choice: dict[int, Setting | None], title: str) -> bool:
    """tok/s vs concurrency per setting (measured cells), the chosen envelope on top; False without matplotlib."""
    from specguard.report import plots

    if not plots.available():
        return False
    fig, (ax,) = plots._figure()
    for s in settings:
        pts = [(c, ledger.mean(s, c)) for c in levels if ledger.tok_s(s, c)]
        if not pts:
            continue
        style: dict[str, Any] = {"linestyle": "--"} if s.kind in ("adaptive", "launched") else {}
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", markersize=3, linewidth=1, alpha=0.8,
                label=s.name, **style)
    env = [(c, ledger.mean(s, c)) for c, s in sorted(choice.items()) if s is not None]
    ax.plot([p[0] for p in env], [p[1] for p in env], color="black", linewidth=3, alpha=0.35, label="chosen envelope")
    plots._concurrency_axis(ax, list(levels))
    plots._plain_log_y(ax, [ledger.mean(s, c) for s in settings for c in levels if ledger.tok_s(s, c)])
    ax.set_ylabel("output tok/s")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=6, ncol=2)
    path.write_bytes(plots._png(fig))
    return True
