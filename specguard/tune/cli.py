"""`specguard tune --suite FILE [--config NAME] --out DIR [--verify]`: race a speculative
configuration's settings per concurrency level, emit SGLang's adaptive config, and prove it.

Each setting is one launch of the suite's engine (``runners.ServerRunner``). ``tune`` takes the
runner as an argument: the research checkout runs the same command in the emulator's virtual time
(``python -m research.tune``, docs/tuning.md).
"""

from __future__ import annotations

import argparse
import shlex
import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Protocol, cast

from specguard.config import ConfigError, ServerConfig, Suite, load_suite
from specguard.labels import ExitCode
from specguard.sglang_rules.adaptive_table import launch_num_steps
from specguard.store.atomic import atomic_write_json
from specguard.tune import output, verify
from specguard.tune.grid import (
    ADAPTIVE,
    DEFAULT_STEPS,
    DEFAULT_TREE_TOPK,
    FIXED,
    LAUNCHED,
    REFERENCE,
    Setting,
    TuneError,
    adaptive_capable,
    algorithm_of,
    build_grid,
)
from specguard.tune.output import Band
from specguard.tune.race import Ledger, Progress, RacePlan, RaceResult, Runner, choices, full_grid, race
from specguard.tune.runners import ServerRunner
from specguard.tune.schema import TUNE, TUNE_SCHEMA, TUNE_VERSION, TuneDoc
from specguard.values import arg_type, positive_ints
from specguard.workload import WorkloadError, build_workload

USAGE_ERRORS = (ConfigError, TuneError, WorkloadError)  # a mistake in the options or the suite file: one line, exit 4


class SubParsers(Protocol):
    """What add_parser needs of ArgumentParser.add_subparsers()."""

    def add_parser(self, name: str, **kwargs: Any) -> argparse.ArgumentParser: ...


class TuneRunner(Runner, Protocol):
    """A runner as the command uses it: it reports the CUDA-graph sizes of the speculative
    launches (the adaptive config's keys sit on them) and prints progress."""

    @property
    def graph_sizes(self) -> list[int] | None: ...

    @property
    def progress(self) -> Progress: ...

    @property
    def mode(self) -> str:
        """How tune.json names the measurements: "launched", or the research checkout's virtual time."""


def add_parser(sub: SubParsers) -> None:
    add_arguments(sub.add_parser("tune", help="race speculation settings per concurrency, emit SGLang's adaptive config, "
                                              "verify it"))


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The command's options (research.tune adds its own to them)."""
    p.add_argument("--suite", required=True, help="suite file: its sweep, workload, tolerances and configurations")
    p.add_argument("--config", help="the speculative configuration to tune (default: the only speculative one)")
    p.add_argument("--out", required=True, help="directory for the adaptive config, flags, snippet, plot, tune.json")
    p.add_argument("--verify", action="store_true", help="launch the tuned and SGLang's default adaptive configs and "
                                                         "sweep them against the reference and the best fixed settings")
    p.add_argument("--steps", type=arg_type(positive_ints, "--steps"), default=list(DEFAULT_STEPS),
                   help="fixed step counts (default 1..7)")
    p.add_argument("--tree-topk", type=arg_type(positive_ints, "--tree-topk"), default=list(DEFAULT_TREE_TOPK),
                   help="topk values > 1 tried as trees where the algorithm has them (default 4)")
    p.add_argument("--max-running-requests", type=int, default=None,
                   help="cap for the speculative launches (default: the configuration's, else the highest level, "
                        "so SGLang's 48 under speculation is not what is measured)")
    p.add_argument("--tie-tolerance", type=float, default=None, help="default: the suite's tolerances.throughput")
    p.add_argument("--confidence", type=float, default=0.95, help="for dropping settings while racing")
    p.add_argument("--first-repeats", type=int, default=1, help="measured runs per cell in the first round")
    p.add_argument("--no-predict", action="store_true", help="measure every step count (no acceptance prediction)")
    p.add_argument("--full-grid", action="store_true", help="no racing: every setting at every level, full repeats")
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


def server_runner(job: Job) -> ServerRunner:
    """One launch of the suite's engine per setting, progress on stderr."""
    suite = job.suite
    return ServerRunner(spec_cfg=job.cfg, reference_cfg=job.ref, sweep=suite.sweep, workload=build_workload(suite.workload),
                        cap=job.cap, log_dir=job.out / "logs", api_key=job.args.api_key,
                        adaptive_paths=adaptive_paths(job.out), progress=print_progress)


def print_progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def adaptive_paths(out: Path) -> dict[str, str | None]:
    """The adaptive configs a runner launches: SGLang's default (no file) and the tuned one."""
    return {"default": None, "tuned": str((out / output.ADAPTIVE_FILE).resolve())}


def run(args: argparse.Namespace) -> int:
    return tune(args, server_runner)


def tune(args: argparse.Namespace, make_runner: RunnerFactory, prog: str = "specguard tune") -> int:
    """The command on ``make_runner``'s measurements; a usage or suite-file mistake is one line."""
    try:
        return _run(args, make_runner)
    except USAGE_ERRORS as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return ExitCode.USAGE


def _checked_tie_tolerance(args: argparse.Namespace, suite: Suite) -> float:
    """The tie tolerance, after refusing the options that cannot run (one line each)."""
    if args.first_repeats < 1 or args.first_repeats > suite.sweep.repeats:
        raise TuneError(f"--first-repeats {args.first_repeats}: must be between 1 and sweep.repeats = {suite.sweep.repeats}")
    if not 0 < args.confidence < 1:
        raise TuneError(f"--confidence {args.confidence}: must be in (0, 1), e.g. 0.95")
    tie = suite.tolerances.throughput if args.tie_tolerance is None else args.tie_tolerance
    if not 0 <= tie < 1:
        raise TuneError(f"--tie-tolerance {tie}: must be a fraction in [0, 1), e.g. 0.03")
    return tie


@dataclass(frozen=True)
class Job:
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


RunnerFactory = Callable[[Job], TuneRunner]  # where a job's settings are measured


def load_job(args: argparse.Namespace) -> Job:
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
    return Job(args, suite, cfg, ref, levels, cap, plan, grid, out, adaptive_capable(cfg))


def _run(args: argparse.Namespace, make_runner: RunnerFactory) -> int:
    job = load_job(args)
    runner = make_runner(job)
    reference = Setting(REFERENCE)
    result = (full_grid if args.full_grid else race)(runner, reference, job.grid, job.levels, job.plan, runner.progress)
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
    picks = output.Picks(choices(result, job.plan), choices(result, job.plan, adaptive_only=True), launched,
                         default_adaptive)
    doc = _document(job, result, search, launched, runner.mode)
    bands = _record_choices(job, doc, result, picks)
    files = _write_outputs(job, doc, result, picks, runner)
    code = _verify_step(runner, job, picks.choice, doc) if args.verify else ExitCode.OK
    files["tune_json"] = str(job.out / "tune.json")
    doc["files"] = files
    TUNE.save(cast(TuneDoc, doc), job.out / "tune.json")  # built in steps below; checked whole here
    print(render(doc, bands))
    return code


def _record_choices(job: Job, doc: dict[str, Any], result: RaceResult, picks: output.Picks) -> list[Band]:
    """tune.json's table per level, the bands (any setting, adaptive-expressible ones), every
    cell measured and the totals; returns the bands."""
    ledger, levels = result.ledger, job.levels
    doc["table"] = output.level_rows(ledger, levels, picks, job.plan)
    bands = output.bands_of(picks.choice)
    doc["bands"] = [{"first": b.first, "last": b.last, "setting": b.setting.name} for b in bands]
    doc["adaptive_bands"] = [{"first": b.first, "last": b.last, "setting": b.setting.name}
                             for b in output.bands_of(picks.adaptive)]
    doc["cells"] = [{"setting": s.name, "concurrency": c, "tok_s": [round(v, 3) for v in cell.tok_s],
                     "accept_length": round(ledger.accept_length(s, c), 4)} for (s, c), cell in ledger.cells.items()]
    doc["totals"] = _totals(ledger, levels, picks, job.grid)
    return bands


def _write_outputs(job: Job, doc: dict[str, Any], result: RaceResult, picks: output.Picks,
                   runner: TuneRunner) -> dict[str, str]:
    """The adaptive config (or why not), vLLM's bands, the plot; returns the files written."""
    cfg, ledger, choice = job.cfg, result.ledger, picks.choice
    files: dict[str, str] = {}
    if job.adaptive_ok:
        _emit_adaptive(job, ledger, picks.adaptive, runner, doc, files)
    else:
        doc["adaptive_config"] = {"applies": False, "reason": f"{cfg.engine} {algorithm_of(cfg)}: SGLang's adaptive mode "
                                                              f"runs EAGLE/EAGLE3/NEXTN only"}
    if cfg.engine == "vllm":
        atomic_write_json(job.out / "vllm-bands.json", output.vllm_bands(choice))
        files["vllm_bands"] = str(job.out / "vllm-bands.json")
    comparators = [s for s in (picks.launched, picks.default_adaptive) if s is not None and s not in result.settings]
    plotted = [*result.settings, *comparators]
    if output.plot(job.out / "tune.png", ledger, plotted, job.levels, choice,
                   f"{cfg.name} ({algorithm_of(cfg)}): tok/s per setting"):
        files["plot"] = str(job.out / "tune.png")
    return files


def _document(job: Job, result: RaceResult, search: tuple[int, int, float], launched: Setting | None,
              mode: str) -> dict[str, Any]:
    """tune.json's description of the search: what was raced, what it cost, what it skipped."""
    ledger, plan, grid, levels, cfg = result.ledger, job.plan, job.grid, job.levels, job.cfg
    search_runs, search_launches, search_s = search
    return {
        "schema": TUNE_SCHEMA, "schema_version": TUNE_VERSION, "suite": str(job.suite.path), "config": cfg.name,
        "reference": job.ref.name, "algorithm": algorithm_of(cfg), "engine": cfg.engine, "levels": levels,
        "max_running_requests": job.cap, "mode": mode,
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


def _emit_adaptive(job: Job, ledger: Ledger, adaptive_choice: dict[int, Setting | None], runner: TuneRunner,
                   doc: dict[str, Any], files: dict[str, str]) -> None:
    """SGLang's adaptive config, its launch flags and a gating suite snippet, written to the job's
    output folder and recorded in ``doc`` / ``files``."""
    out, cfg, cap = job.out, job.cfg, job.cap
    built = output.adaptive_config(adaptive_choice, runner.graph_sizes)
    table = built.table
    path = out / output.ADAPTIVE_FILE
    atomic_write_json(path, table)
    flags = output.launch_flags(cfg, table, str(path.resolve()), cap)
    (out / "launch-flags.txt").write_text(shlex.join(flags) + "\n")
    must = output.must_win_up_to(ledger, adaptive_choice, Setting(REFERENCE), job.plan)
    (out / "suite-snippet.toml").write_text(output.suite_snippet(cfg, table, str(path.resolve()), cap, must))
    files.update(adaptive_config=str(path), launch_flags=str(out / "launch-flags.txt"),
                 suite_snippet=str(out / "suite-snippet.toml"))
    doc["adaptive_config"] = {"table": table, "notes": built.notes, "graph_sizes": runner.graph_sizes,
                              "launch_flags": flags, "must_win_up_to": must,
                              "default_for_comparison": output.DEFAULT_ADAPTIVE_NOTE}


def _verify_step(runner: Runner, job: Job, choice: dict[int, Setting | None], doc: dict[str, Any]) -> int:
    """``--verify``: the verify session, recorded in ``doc``; exit 1 when a level failed."""
    if "table" not in doc.get("adaptive_config", {}):
        raise TuneError(f"--verify launches SGLang's adaptive mode, which {job.cfg.engine} {algorithm_of(job.cfg)} "
                        f"does not have")
    steps = launch_num_steps(doc["adaptive_config"]["table"])
    tuned = Setting(ADAPTIVE, steps, 1, steps + 1, adaptive_config="tuned")
    everywhere = doc["totals"]["fixed_measured_everywhere"]
    single = max((g for g in job.grid if g.kind == FIXED and everywhere.get(g.name) is not None),
                 key=lambda g: everywhere[g.name], default=None)
    doc["verify"], doc["verify_summary"] = verify.verify(runner, job.levels, job.plan, job.suite,
                                                                verify.Contenders(tuned, choice, single))
    return ExitCode.REGRESSION if doc["verify_summary"]["failed_levels"] else ExitCode.OK


def _launched_setting(cfg: ServerConfig, grid: Sequence[Setting], cap: int | None) -> Setting | None:
    """The configuration exactly as the suite launches it (its own cap), measured as a comparator."""
    if cfg.engine == "vllm":
        return None
    return Setting(LAUNCHED, cfg.num_steps or 0, cfg.eagle_topk, cfg.num_draft_tokens or 0, chain=False)


def _totals(ledger: Ledger, levels: Sequence[int], picks: output.Picks, grid: Sequence[Setting]) -> dict[str, Any]:
    """Sum of tok/s over the levels (settings measured at every level only)."""
    choice, adaptive_choice, reference = picks.choice, picks.adaptive, Setting(REFERENCE)
    launched, default_adaptive = picks.launched, picks.default_adaptive
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
