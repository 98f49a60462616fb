"""`specguard tune --suite FILE [--config NAME] --out DIR [--verify]`: race a speculative
configuration's settings per concurrency level, emit SGLang's adaptive config, and prove it.

`--simulate` measures in the emulator's virtual time instead of launching (emulator suites
only), and `--seeds N` with it checks racing against the full grid over N seeds.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from specguard.config import ConfigError, ServerConfig, Suite, Tolerances, load_suite
from specguard.decide.baselines import atomic_write_json
from specguard.decide.gates import gate_confidence
from specguard.decide.stats import FAIL, RatioEstimate, compare_sessions
from specguard.labels import ExitCode
from specguard.research import SubParsers
from specguard.research.tune import output
from specguard.research.tune.grid import (
    ADAPTIVE,
    ADAPTIVE_ALGORITHMS,
    DEFAULT_STEPS,
    DEFAULT_TREE_TOPK,
    FIXED,
    LAUNCHED,
    REFERENCE,
    Setting,
    TuneError,
    algorithm_of,
    build_grid,
    geometric_mean,
)
from specguard.research.tune.output import Band
from specguard.research.tune.race import Ledger, Progress, RacePlan, RaceResult, Runner, choices, full_grid, race
from specguard.research.tune.runners import ServerRunner, SimRunner
from specguard.workload import WorkloadError, build_workload

SCHEMA, SCHEMA_VERSION = "specguard-tune", 1
TuneRunner = ServerRunner | SimRunner  # a real launch per setting, or the emulator in virtual time


def _ints(flag: str) -> Callable[[str], list[int]]:
    def parse(text: str) -> list[int]:
        try:
            values = [int(x) for x in text.split(",") if x.strip()]
        except ValueError:
            raise argparse.ArgumentTypeError(f"{flag} {text!r}: use comma-separated integers, e.g. 1,2,3") from None
        if not values or any(v < 1 for v in values):
            raise argparse.ArgumentTypeError(f"{flag} {text!r}: values must be positive")
        return values
    return parse


def add_parser(sub: SubParsers) -> None:
    p = sub.add_parser("tune", help="race speculation settings per concurrency, emit SGLang's adaptive config, verify it")
    p.add_argument("--suite", required=True, help="suite file: its sweep, workload, tolerances and configurations")
    p.add_argument("--config", help="the speculative configuration to tune (default: the only speculative one)")
    p.add_argument("--out", required=True, help="directory for the adaptive config, flags, snippet, plot, tune.json")
    p.add_argument("--verify", action="store_true", help="launch the tuned and SGLang's default adaptive configs and "
                                                         "sweep them against the reference and the best fixed settings")
    p.add_argument("--steps", type=_ints("--steps"), default=list(DEFAULT_STEPS), help="fixed step counts (default 1..7)")
    p.add_argument("--tree-topk", type=_ints("--tree-topk"), default=list(DEFAULT_TREE_TOPK),
                   help="topk values > 1 tried as trees where the algorithm has them (default 4)")
    p.add_argument("--max-running-requests", type=int, default=None,
                   help="cap for the speculative launches (default: the configuration's, else the highest level, "
                        "so SGLang's 48 under speculation is not what is measured)")
    p.add_argument("--tie-tolerance", type=float, default=None, help="default: the suite's tolerances.throughput")
    p.add_argument("--confidence", type=float, default=0.95, help="for dropping settings while racing")
    p.add_argument("--first-repeats", type=int, default=1, help="measured runs per cell in the first round")
    p.add_argument("--no-predict", action="store_true", help="measure every step count (no acceptance prediction)")
    p.add_argument("--full-grid", action="store_true", help="no racing: every setting at every level, full repeats")
    p.add_argument("--simulate", action="store_true", help="virtual time on the emulator's scheduler (emulator suites)")
    p.add_argument("--seeds", type=int, default=0, help="with --simulate: racing vs the full grid over N seeds")
    p.add_argument("--seed", type=int, default=0, help="with --simulate: the seed")
    p.add_argument("--sim-noise-pct", type=float, default=1.0, help="with --simulate: per-step jitter and per-launch drift, %%")
    p.add_argument("--api-key", default=None)


def _pick(suite: Suite, name: str | None) -> ServerConfig:
    if name is not None:
        if name not in suite.servers:
            raise TuneError(f"--config {name!r} is not in {suite.path}; configurations: {', '.join(suite.servers)}")
        cfg = suite.servers[name]
        if not cfg.speculative:
            raise TuneError(f"--config {name!r} is not speculative in {suite.path}; name a speculative configuration")
        return cfg
    spec = [c for c in suite.servers.values() if c.speculative]
    if len(spec) != 1:
        raise TuneError(f"{suite.path} has {len(spec)} speculative configurations ({', '.join(c.name for c in spec)}); "
                        f"pass --config NAME")
    return spec[0]


def _arg_value(args: Sequence[str], flag: str) -> str | None:
    for i, a in enumerate(args):
        if a == flag and i + 1 < len(args):
            return args[i + 1]
        if a.startswith(flag + "="):
            return a.split("=", 1)[1]
    return None


def _runner(args: argparse.Namespace, suite: Suite, cfg: ServerConfig, ref: ServerConfig, cap: int | None,
            out: Path, seed: int, quiet: bool = False) -> TuneRunner:
    paths = {"default": None, "tuned": str((out / output.ADAPTIVE_FILE).resolve())}
    progress = (lambda _: None) if quiet else (lambda msg: print(msg, file=sys.stderr, flush=True))
    if args.simulate:
        if cfg.engine != "emulator":
            raise TuneError(f"--simulate needs an emulator configuration; {cfg.name!r} has engine {cfg.engine!r} in {suite.path}")
        w = suite.workload
        return SimRunner(profile_name=_arg_value(cfg.args, "--emulator-profile") or "fast", algorithm=algorithm_of(cfg),
                         input_len=w.input_len, output_len=w.output_len, requests_per_worker=suite.sweep.requests_per_worker,
                         min_requests_per_run=suite.sweep.min_requests_per_run,
                         cap=cap, seed=seed, jitter_pct=args.sim_noise_pct, drift_pct=args.sim_noise_pct,
                         speed_factor=float(_arg_value(cfg.args, "--emulator-speed-factor") or 1.0),
                         same_prompt=w.kind == "repeated-id", reference_cap=ref.max_running_requests, adaptive_paths=paths,
                         launched_params=(cfg.num_steps, cfg.eagle_topk, cfg.num_draft_tokens),
                         launched_cap=cfg.max_running_requests)
    return ServerRunner(spec_cfg=cfg, reference_cfg=ref, sweep=suite.sweep, workload=build_workload(suite.workload), cap=cap,
                        log_dir=out / "logs", api_key=args.api_key, adaptive_paths=paths, progress=progress)


def run(args: argparse.Namespace) -> int:
    try:
        return _run(args)
    except (ConfigError, TuneError, WorkloadError) as exc:
        print(f"specguard tune: {exc}", file=sys.stderr)
        return ExitCode.USAGE


def _checked_tie_tolerance(args: argparse.Namespace, suite: Suite) -> float:
    """The tie tolerance, after refusing the options that cannot run (one line each)."""
    if args.seeds and not args.simulate:
        raise TuneError("--seeds N compares racing with the full grid in virtual time; add --simulate")
    if args.first_repeats < 1 or args.first_repeats > suite.sweep.repeats:
        raise TuneError(f"--first-repeats {args.first_repeats}: must be between 1 and sweep.repeats = {suite.sweep.repeats}")
    if not 0 < args.confidence < 1:
        raise TuneError(f"--confidence {args.confidence}: must be in (0, 1), e.g. 0.95")
    tie = suite.tolerances.throughput if args.tie_tolerance is None else args.tie_tolerance
    if not 0 <= tie < 1:
        raise TuneError(f"--tie-tolerance {tie}: must be a fraction in [0, 1), e.g. 0.03")
    return tie


@dataclass(frozen=True)
class _Job:
    """What one `specguard tune` run tunes, and how (from the command line and the suite file)."""

    args: argparse.Namespace
    suite: Suite
    cfg: ServerConfig
    ref: ServerConfig
    levels: list[int]
    cap: int | None
    plan: RacePlan
    grid: list[Setting]
    out: Path
    adaptive_ok: bool


def _job(args: argparse.Namespace) -> _Job:
    suite = load_suite(args.suite)
    cfg = _pick(suite, args.config)
    levels = sorted(suite.sweep.concurrency)
    ref = suite.reference_of(cfg.name)
    if ref is None:  # the suite loader already refuses a speculative configuration without one
        raise TuneError(f"{cfg.name!r} has no reference configuration in {suite.path}")
    tie = _checked_tie_tolerance(args, suite)
    cap = args.max_running_requests or cfg.max_running_requests or (None if cfg.engine == "vllm" else max(levels))
    plan = RacePlan(warmup=suite.sweep.warmup, repeats=suite.sweep.repeats, first_repeats=args.first_repeats,
                    confidence=args.confidence, launch_sd=suite.tolerances.prior_between_sd, tie_tolerance=tie,
                    skip_margin=tie, predict=not args.no_predict)
    grid = build_grid(cfg, args.steps, args.tree_topk)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    return _Job(args, suite, cfg, ref, levels, cap, plan, grid, out,
                cfg.engine != "vllm" and algorithm_of(cfg) in ADAPTIVE_ALGORITHMS)


def _run(args: argparse.Namespace) -> int:
    job = _job(args)
    if args.seeds:
        return _seed_check(args, job.suite, job.cfg, job.ref, job.cap, job.out, job.grid, job.levels, job.plan,
                           job.adaptive_ok)
    runner = _runner(args, job.suite, job.cfg, job.ref, job.cap, job.out, args.seed)
    reference = Setting(REFERENCE)
    result = (full_grid if args.full_grid else race)(runner, reference, job.grid, job.levels, job.plan,
                                                     runner_progress(runner))
    ledger = result.ledger
    if reference in ledger.failed:
        print(f"specguard tune: the reference {job.ref.name!r} could not be measured ({ledger.failed[reference]}); "
              f"logs in {job.out / 'logs'}", file=sys.stderr)
        return ExitCode.NOT_MEASURED
    search = (ledger.runs, ledger.launches, ledger.wall_s)
    launched = _launched_setting(job.cfg, job.grid, job.cap)
    default_adaptive = Setting(ADAPTIVE, adaptive_config="default") if job.adaptive_ok else None
    for s in (launched, default_adaptive):
        if s is not None and s.kind in (LAUNCHED, ADAPTIVE):
            ledger.measure(runner, s, job.levels, job.plan.warmup, job.plan.repeats)
    choice = choices(result, job.plan)
    doc = _document(job, result, search, launched)
    bands = _record_choices(job, doc, result, choice, launched, default_adaptive)
    files = _write_outputs(job, doc, result, choice, runner, launched, default_adaptive)
    code = _verify_step(runner, job, choice, doc) if args.verify else ExitCode.OK
    files["tune_json"] = str(job.out / "tune.json")
    doc["files"] = files
    atomic_write_json(job.out / "tune.json", doc)
    print(render(doc, bands))
    return code


def _record_choices(job: _Job, doc: dict[str, Any], result: RaceResult, choice: dict[int, Setting | None],
                    launched: Setting | None, default_adaptive: Setting | None) -> list[Band]:
    """tune.json's table per level, the bands (any setting, adaptive-expressible ones), every
    cell measured and the totals; returns the bands."""
    ledger, levels, reference = result.ledger, job.levels, Setting(REFERENCE)
    adaptive_choice = choices(result, job.plan, adaptive_only=True)
    doc["table"] = output.level_rows(ledger, levels, choice, adaptive_choice, reference, launched, default_adaptive,
                                     job.plan)
    bands = output.bands_of(choice)
    doc["bands"] = [{"first": b.first, "last": b.last, "setting": b.setting.name} for b in bands]
    doc["adaptive_bands"] = [{"first": b.first, "last": b.last, "setting": b.setting.name}
                             for b in output.bands_of(adaptive_choice)]
    doc["cells"] = [{"setting": s.name, "concurrency": c, "tok_s": [round(v, 3) for v in cell.tok_s],
                     "accept_length": round(ledger.accept_length(s, c), 4)} for (s, c), cell in ledger.cells.items()]
    doc["totals"] = _totals(ledger, levels, choice, adaptive_choice, job.grid, reference, launched, default_adaptive)
    return bands


def _write_outputs(job: _Job, doc: dict[str, Any], result: RaceResult, choice: dict[int, Setting | None], runner: TuneRunner,
                   launched: Setting | None, default_adaptive: Setting | None) -> dict[str, str]:
    """The adaptive config (or why not), vLLM's bands, the plot; returns the files written."""
    cfg, ledger = job.cfg, result.ledger
    files: dict[str, str] = {}
    if job.adaptive_ok:
        adaptive_choice = choices(result, job.plan, adaptive_only=True)
        _emit_adaptive(job.out, cfg, job.cap, ledger, adaptive_choice, Setting(REFERENCE), job.plan, runner, doc, files)
    else:
        doc["adaptive_config"] = {"applies": False, "reason": f"{cfg.engine} {algorithm_of(cfg)}: SGLang's adaptive mode "
                                                              f"runs EAGLE/EAGLE3/NEXTN only"}
    if cfg.engine == "vllm":
        atomic_write_json(job.out / "vllm-bands.json", output.vllm_bands(choice))
        files["vllm_bands"] = str(job.out / "vllm-bands.json")
    comparators = [s for s in (launched, default_adaptive) if s is not None and s not in result.settings]
    plotted = [*result.settings, *comparators]
    if output.plot(job.out / "tune.png", ledger, plotted, job.levels, choice,
                   f"{cfg.name} ({algorithm_of(cfg)}): tok/s per setting"):
        files["plot"] = str(job.out / "tune.png")
    return files


def _document(job: _Job, result: RaceResult, search: tuple[int, int, float], launched: Setting | None) -> dict[str, Any]:
    """tune.json's description of the search: what was raced, what it cost, what it skipped."""
    ledger, plan, grid, levels, cfg = result.ledger, job.plan, job.grid, job.levels, job.cfg
    search_runs, search_launches, search_s = search
    return {
        "schema": SCHEMA, "schema_version": SCHEMA_VERSION, "suite": str(job.suite.path), "config": cfg.name,
        "reference": job.ref.name, "algorithm": algorithm_of(cfg), "engine": cfg.engine, "levels": levels,
        "max_running_requests": job.cap, "mode": "simulated (virtual time)" if job.args.simulate else "launched",
        "plan": asdict(plan), "grid": [s.to_json() for s in grid],
        "launched": launched.to_json() if launched else None,
        "cost": {"search_runs": search_runs, "search_launches": search_launches,
                 "full_grid_runs": (len(grid) + 1) * len(levels) * (plan.warmup + plan.repeats),
                 "full_grid_launches": len(grid) + 1,
                 "comparator_runs": ledger.runs - search_runs, "comparator_launches": ledger.launches - search_launches,
                 "search_wall_s": round(search_s, 1), "comparator_wall_s": round(ledger.wall_s - search_s, 1)},
        "skipped_by_prediction": [{"setting": s.name, "concurrency": c, "predicted_tok_s": None if p is None else round(p, 2)}
                                  for s, per in result.skipped.items() for c, p in sorted(per.items())],
        "acceptance_by_position": [round(p, 4) for p in result.acceptance_by_position],
        "failed": {s.name: why for s, why in ledger.failed.items()},
        "events": ledger.events,
    }


def _emit_adaptive(out: Path, cfg: ServerConfig, cap: int | None, ledger: Ledger, adaptive_choice: dict[int, Setting | None],
                   reference: Setting, plan: RacePlan, runner: TuneRunner, doc: dict[str, Any], files: dict[str, str]) -> None:
    """SGLang's adaptive config, its launch flags and a gating suite snippet, written to ``out``
    and recorded in ``doc`` / ``files``."""
    table, notes = output.adaptive_table(adaptive_choice, runner.graph_sizes)
    steps = output.launch_steps(table)
    output.validate_adaptive(table, steps)
    path = out / output.ADAPTIVE_FILE
    atomic_write_json(path, table)
    flags = output.launch_flags(cfg, table, str(path.resolve()), cap)
    (out / "launch-flags.txt").write_text(shlex.join(flags) + "\n")
    must = output.must_win_up_to(ledger, adaptive_choice, reference, plan)
    (out / "suite-snippet.toml").write_text(output.suite_snippet(cfg, table, str(path.resolve()), cap, must))
    files.update(adaptive_config=str(path), launch_flags=str(out / "launch-flags.txt"),
                 suite_snippet=str(out / "suite-snippet.toml"))
    doc["adaptive_config"] = {"table": table, "notes": notes, "graph_sizes": runner.graph_sizes,
                              "launch_flags": flags, "must_win_up_to": must,
                              "default_for_comparison": output.DEFAULT_ADAPTIVE_NOTE}


def _verify_step(runner: Runner, job: _Job, choice: dict[int, Setting | None], doc: dict[str, Any]) -> int:
    """``--verify``: the verify session, recorded in ``doc``; exit 1 when a level failed."""
    if "table" not in doc.get("adaptive_config", {}):
        raise TuneError(f"--verify launches SGLang's adaptive mode, which {job.cfg.engine} {algorithm_of(job.cfg)} "
                        f"does not have")
    steps = output.launch_steps(doc["adaptive_config"]["table"])
    tuned = Setting(ADAPTIVE, steps, 1, steps + 1, adaptive_config="tuned")
    everywhere = doc["totals"]["fixed_measured_everywhere"]
    single = max((g for g in job.grid if g.kind == FIXED and everywhere.get(g.name) is not None),
                 key=lambda g: everywhere[g.name], default=None)
    doc["verify"], doc["verify_summary"] = verify(runner, job.levels, job.plan, job.suite, choice, tuned, single)
    return ExitCode.REGRESSION if doc["verify_summary"]["failed_levels"] else ExitCode.OK


def runner_progress(runner: TuneRunner) -> Progress:
    if isinstance(runner, ServerRunner):
        return runner.progress
    return lambda msg: print(msg, file=sys.stderr, flush=True)


def _launched_setting(cfg: ServerConfig, grid: Sequence[Setting], cap: int | None) -> Setting | None:
    """The configuration exactly as the suite launches it (its own cap), measured as a comparator."""
    if cfg.engine == "vllm":
        return None
    return Setting(LAUNCHED, cfg.num_steps or 0, cfg.eagle_topk, cfg.num_draft_tokens or 0, chain=False)


def _totals(ledger: Ledger, levels: Sequence[int], choice: dict[int, Setting | None],
            adaptive_choice: dict[int, Setting | None], grid: Sequence[Setting], reference: Setting,
            launched: Setting | None, default_adaptive: Setting | None) -> dict[str, Any]:
    """Sum of tok/s over the levels (settings measured at every level only)."""
    def total(pick: Callable[[int], Setting | None]) -> float | None:
        vals: list[float] = []
        for c in levels:
            s = pick(c)
            if s is None or not ledger.tok_s(s, c):
                return None
            vals.append(ledger.mean(s, c))
        return round(sum(vals), 2)

    def always(s: Setting) -> Callable[[int], Setting]:
        return lambda c: s

    fixed = {s.name: total(always(s)) for s in [reference, *grid]}
    complete = {k: v for k, v in fixed.items() if v is not None}
    best_fixed = max(complete, key=lambda k: complete[k]) if complete else None
    out = {"envelope": total(lambda c: choice.get(c)), "adaptive_envelope": total(lambda c: adaptive_choice.get(c)),
           "no_speculation": fixed["reference"], "fixed_measured_everywhere": complete,
           "best_single_fixed": {"setting": best_fixed, "tok_s": complete.get(best_fixed)} if best_fixed else None}
    if launched is not None:
        out["launched"] = total(always(launched))
    if default_adaptive is not None:
        out["default_adaptive"] = total(always(default_adaptive))
    return out


def verify(runner: Runner, levels: Sequence[int], plan: RacePlan, suite: Suite, choice: dict[int, Setting | None],
           tuned: Setting, single: Setting | None = None) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """One session: the tuned and the default adaptive config, the reference, and each level's best
    fixed setting, judged per level with the gates' statistics (two enforced tests per level).
    ``single``: the speculative fixed setting with the best total in the search, measured here at
    every level too, so the tuned config's total can be set against the one fixed speculative
    setting a deployment would otherwise run everywhere."""
    tol = suite.tolerances
    ledger = _verify_session(runner, levels, plan, choice, tuned, single)
    alpha_cell = tol.family_alpha / (2 * len(levels))
    conf = gate_confidence(alpha_cell)
    rows: list[dict[str, Any]] = []
    failed: list[int] = []
    for c in levels:
        row = _verify_level(ledger, c, choice.get(c) or Setting(REFERENCE), tuned, tol, plan, conf)
        if any(row["verdicts"][k].get("verdict") in (FAIL, "error") for k in ("vs_best_fixed", "vs_no_speculation")):
            failed.append(c)
        rows.append(row)
    totals = _verify_totals(ledger, levels, rows)
    return rows, {"totals_tok_s": totals.pop("totals_tok_s"), "confidence": conf, "alpha_cell": alpha_cell,
                  "failed_levels": failed, **totals, "runs": ledger.runs, "launches": ledger.launches,
                  "wall_s": round(ledger.wall_s, 1), "failed_cells": {s.name: why for s, why in ledger.failed.items()}}


def _verify_session(runner: Runner, levels: Sequence[int], plan: RacePlan, choice: dict[int, Setting | None], tuned: Setting,
                    single: Setting | None) -> Ledger:
    """The verify session's launches: tuned, default adaptive, reference at every level; each
    chosen fixed setting where it was chosen; ``single`` wherever the search left it unmeasured."""
    ledger = Ledger()
    reference, default = Setting(REFERENCE), Setting(ADAPTIVE, adaptive_config="default")
    for s in (tuned, default, reference):
        ledger.measure(runner, s, levels, plan.warmup, plan.repeats)
    for s in dict.fromkeys(v for v in choice.values() if v is not None and v.kind == FIXED):
        ledger.measure(runner, s, [c for c in levels if choice.get(c) == s], plan.warmup, plan.repeats)
    if single is not None:
        missing = [c for c in levels if not ledger.tok_s(single, c)]
        if missing:
            ledger.measure(runner, single, missing, plan.warmup, plan.repeats)
    return ledger


def _winner(e: RatioEstimate, rival: str) -> str:
    return "tuned" if e.low > 1 else rival if e.high < 1 else "tie (within noise)"


def _verify_level(ledger: Ledger, c: int, best: Setting, tuned: Setting, tol: Tolerances, plan: RacePlan,
                  conf: float) -> dict[str, Any]:
    """One level of the verify session: the tuned config against the best fixed setting (must
    not be worse beyond the tolerance), no speculation (must win) and the default adaptive config."""
    reference, default = Setting(REFERENCE), Setting(ADAPTIVE, adaptive_config="default")

    def est(a: Setting, b: Setting, threshold: float, rule: str) -> RatioEstimate | None:
        if not ledger.tok_s(a, c) or not ledger.tok_s(b, c):
            return None
        return compare_sessions(ledger.tok_s(a, c), ledger.tok_s(b, c), threshold=threshold, launch_sd=plan.launch_sd,
                                confidence=conf, rule=rule)

    e_fixed = est(tuned, best, 1 - tol.throughput, tol.fail_rule)
    e_ref = est(tuned, reference, 1 + tol.speculation_min_gain, "beyond-tolerance")
    e_def = est(tuned, default, 1.0, "beyond-tolerance")
    row: dict[str, Any] = {
        "concurrency": c, "tuned_tok_s": _r(ledger, tuned, c), "default_adaptive_tok_s": _r(ledger, default, c),
        "best_fixed_tok_s": _r(ledger, best, c), "best_fixed_setting": best.name,
        "no_speculation_tok_s": _r(ledger, reference, c)}
    verdicts: dict[str, dict[str, Any]] = {}
    for key, e in (("vs_best_fixed", e_fixed), ("vs_no_speculation", e_ref), ("vs_default_adaptive", e_def)):
        if e is None:
            verdicts[key] = {"verdict": "error", "detail": "not measured"}
            continue
        verdicts[key] = {"ratio": round(e.ratio, 4), "low": round(e.low, 4), "high": round(e.high, 4),
                         "threshold": e.threshold, "verdict": e.outcome()}
    if e_def is not None:
        verdicts["vs_default_adaptive"]["winner"] = _winner(e_def, "default adaptive")
    if e_fixed is not None:
        verdicts["vs_best_fixed"]["winner"] = _winner(e_fixed, best.name)
    row["verdicts"] = verdicts
    return row


def _verify_totals(ledger: Ledger, levels: Sequence[int], rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Totals over the levels, and the tuned config's gain over each comparator."""
    sums = {k: None if any(r[k] is None for r in rows) else round(sum(r[k] for r in rows), 2)
            for k in ("tuned_tok_s", "default_adaptive_tok_s", "best_fixed_tok_s", "no_speculation_tok_s")}
    both = [r for r in rows if r["tuned_tok_s"] and r["default_adaptive_tok_s"]]
    everywhere = [(s, sum(ledger.mean(s, c) for c in levels)) for s in ledger_settings(ledger)
                  if s.kind != ADAPTIVE and all(ledger.tok_s(s, c) for c in levels)]
    best_single = max(everywhere, key=lambda x: x[1], default=None)
    best_spec = max(((s, t) for s, t in everywhere if s.kind == FIXED), key=lambda x: x[1], default=None)

    def against(best: tuple[Setting, float] | None) -> dict[str, Any] | None:
        return None if best is None else {"setting": best[0].name, "tok_s": round(best[1], 2),
                                          "tuned_over_it": _gain(sums["tuned_tok_s"], best[1])}

    return {"totals_tok_s": sums,
            "tuned_over_default_adaptive": _gain(sums["tuned_tok_s"], sums["default_adaptive_tok_s"]),
            # every level weighs the same here (the total is dominated by the highest levels)
            "tuned_over_default_adaptive_per_level_geomean": round(geometric_mean(
                [r["tuned_tok_s"] / r["default_adaptive_tok_s"] for r in both]) - 1, 4) if both else None,
            "tuned_over_no_speculation": _gain(sums["tuned_tok_s"], sums["no_speculation_tok_s"]),
            "best_single_fixed_measured_everywhere": against(best_single),
            # the verify record keeps no speculation apart from the fixed settings: this is the
            # best one speculative setting run at every level
            "best_single_fixed_speculative_measured_everywhere": against(best_spec)}


def ledger_settings(ledger: Ledger) -> list[Setting]:
    return list(dict.fromkeys(s for s, _ in ledger.cells))


def _r(ledger: Ledger, s: Setting, c: int) -> float | None:
    return round(ledger.mean(s, c), 2) if ledger.tok_s(s, c) else None


def _gain(a: float | None, b: float | None) -> float | None:
    return round(a / b - 1, 4) if a and b else None


def _chosen(choice: dict[int, Setting | None], c: int) -> Setting:
    s = choice[c]
    if s is None:
        raise TuneError(f"no setting could be measured at C={c}")
    return s


def _seed_check(args: argparse.Namespace, suite: Suite, cfg: ServerConfig, ref: ServerConfig, cap: int | None, out: Path,
                grid: list[Setting], levels: list[int], plan: RacePlan, adaptive_ok: bool) -> int:
    """Racing vs the full grid in virtual time, seed by seed: same choices? what share of the runs?"""
    rows: list[dict[str, Any]] = []
    same_choices: list[bool] = []
    run_fractions: list[float] = []
    for seed in range(args.seeds):
        r = race(_runner(args, suite, cfg, ref, cap, out, seed, True), Setting(REFERENCE), grid, levels, plan)
        f = full_grid(_runner(args, suite, cfg, ref, cap, out, seed, True), Setting(REFERENCE), grid, levels, plan)
        r_choice, f_choice = choices(r, plan), choices(f, plan)
        rc = {c: _chosen(r_choice, c) for c in levels}
        fc = {c: _chosen(f_choice, c) for c in levels}
        ra, fa = choices(r, plan, adaptive_only=True), choices(f, plan, adaptive_only=True)
        same = all(rc[c] == fc[c] for c in levels) and all(ra[c] == fa[c] for c in levels)
        rows.append({"seed": seed, "same_choices": same, "race_runs": r.ledger.runs, "full_runs": f.ledger.runs,
                     "race_launches": r.ledger.launches, "full_launches": f.ledger.launches,
                     "race": {c: rc[c].name for c in levels}, "full": {c: fc[c].name for c in levels}})
        same_choices.append(same)
        run_fractions.append(r.ledger.runs / f.ledger.runs)
        print(f"seed {seed}: {'same' if same else 'DIFFERENT'} choices; runs {r.ledger.runs}/{f.ledger.runs} "
              f"({r.ledger.runs / f.ledger.runs:.0%}); launches {r.ledger.launches}/{f.ledger.launches}; "
              + " ".join(f"C{c}={rc[c].name}" + ("" if rc[c] == fc[c] else f"(full: {fc[c].name})") for c in levels))
    agree = sum(same_choices)
    frac = max(run_fractions)
    doc = {"schema": "specguard-tune-seeds", "schema_version": 1, "suite": str(suite.path), "config": cfg.name,
           "mode": "simulated (virtual time)", "noise_pct": args.sim_noise_pct, "plan": asdict(plan),
           "seeds": rows, "same_choices": agree, "max_run_fraction": round(frac, 3)}
    atomic_write_json(out / "seeds.json", doc)
    print(f"racing chose what the full grid chose in {agree} of {len(rows)} seeds; at most {frac:.0%} of its runs "
          f"(written {out / 'seeds.json'})")
    return ExitCode.OK


def render(doc: dict[str, Any], bands: list[Band]) -> str:
    lines = [f"specguard tune: {doc['config']} ({doc['algorithm']}) vs {doc['reference']}, {doc['mode']}, "
             f"max_running_requests {doc['max_running_requests']}", output.render_table(doc["table"], bands)]
    cost = doc["cost"]
    lines.append(f"search: {cost['search_runs']} runs, {cost['search_launches']} launches (full grid: "
                 f"{cost['full_grid_runs']} runs, {cost['full_grid_launches']} launches = "
                 f"{cost['search_runs'] / cost['full_grid_runs']:.0%}) in {cost['search_wall_s']:.0f} s; comparators: "
                 f"{cost['comparator_runs']} runs, {cost['comparator_launches']} launches in {cost['comparator_wall_s']:.0f} s")
    t = doc["totals"]
    parts = [f"{k} {v:.0f}" for k, v in (("envelope", t["envelope"]), ("adaptive envelope", t["adaptive_envelope"]),
                                         ("no speculation", t["no_speculation"]), ("launched", t.get("launched")),
                                         ("default adaptive", t.get("default_adaptive"))) if v is not None]
    if t.get("best_single_fixed"):
        parts.append(f"best single fixed {t['best_single_fixed']['setting']} {t['best_single_fixed']['tok_s']:.0f}")
    lines.append("total tok/s over the sweep: " + ", ".join(parts))
    ac = doc.get("adaptive_config", {})
    if "table" in ac:
        lines.append(f"adaptive config: {ac['table']}")
        lines.append("launch flags: " + shlex.join(ac["launch_flags"]))
    elif ac:
        lines.append(f"adaptive config: not emitted ({ac.get('reason')})")
    lines += [f"search could not measure {name}: {why}" for name, why in doc.get("failed", {}).items()]

    def f(x: float | None) -> str:
        return "-" if x is None else f"{x:.1f}"

    for row in doc.get("verify", []):
        v = row["verdicts"]
        lines.append(f"verify C={row['concurrency']}: tuned {f(row['tuned_tok_s'])}, default adaptive "
                     f"{f(row['default_adaptive_tok_s'])}, best fixed {row['best_fixed_setting']} {f(row['best_fixed_tok_s'])}, "
                     f"no speculation {f(row['no_speculation_tok_s'])} | vs best fixed {v['vs_best_fixed'].get('verdict')} "
                     f"({v['vs_best_fixed'].get('winner', '-')}), vs no spec {v['vs_no_speculation'].get('verdict')}, "
                     f"vs default: {v['vs_default_adaptive'].get('winner', '-')}")
    if doc.get("verify_summary"):
        s = doc["verify_summary"]
        gain = s["tuned_over_default_adaptive"]
        singles = [f"over the best single fixed {k} ({x['setting']}, {x['tok_s']:.0f}) "
                   f"{'-' if x['tuned_over_it'] is None else format(x['tuned_over_it'], '+.1%')}"
                   for k, x in (("setting", s.get("best_single_fixed_measured_everywhere")),
                                ("speculative setting", s.get("best_single_fixed_speculative_measured_everywhere"))) if x]
        lines.append(f"verify totals: {s['totals_tok_s']}; tuned over default adaptive "
                     f"{'-' if gain is None else format(gain, '+.1%')}; " + "".join(f"tuned {x}; " for x in singles)
                     + f"failed levels: {s['failed_levels'] or 'none'}")
        lines += [f"verify could not measure {name}: {why}" for name, why in s["failed_cells"].items()]
    lines += [f"wrote {v}" for v in doc["files"].values()]
    return "\n".join(lines)
