"""`python -m research.study`: the gate's false-fail rate and power on simulated sessions (docs/research/gate-study.md)."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from research.study.client_noise import measure_noise
from research.study.crossover_study import crossover_study
from research.study.noise import NOISE_PRESETS, Noise, preset, rescalable
from research.study.plan import ATTACH, DEFAULT_DESIGN, DESIGNS, GateSettings, StudyPlan, gate_tests, settings_grid
from research.study.report import ATTACH_KEYS, headline, matches, render_levels, render_table, summary_line
from research.study.run import run_study
from research.study.simulate import scenarios
from specguard.config import FAIL_RULES, ConfigError, Suite, Tolerances, load_suite
from specguard.emulator.model import ACCEPTANCE_MODES, PER_REQUEST, PER_RUN
from specguard.labels import ExitCode
from specguard.store.atomic import atomic_write_json
from specguard.values import arg_type, names, numbers, positive_ints

PROG = "python -m research.study"
DEFAULT_SUITE = Path("perf_tests/suite.toml")


def build_parser() -> argparse.ArgumentParser:
    """`python -m research.study`: the gate's false-fail rate and power on simulated sessions."""
    p = argparse.ArgumentParser(prog=PROG, description="measure the gate's false-fail rate and power on the emulator's "
                                                       "model (docs/research/gate-study.md)")
    p.add_argument("--suite", type=Path, default=DEFAULT_SUITE)
    p.add_argument("--sessions", type=int, default=200, help="simulated sessions per scenario")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--jobs", type=int, default=1, help="worker processes")
    p.add_argument("--json", dest="json_path", type=Path, help="write the full result here")
    p.add_argument("--config", help="configuration the changes are injected into (default: first speculative)")
    p.add_argument("--headline", choices=("defaults", "suite"), default="suite",
                   help="the top-level rates are for specguard's default tolerances or the suite file's")
    grid = p.add_argument_group("grid (comma-separated lists; default: the suite's value)")
    grid.add_argument("--repeats", type=arg_type(positive_ints, "--repeats"))
    grid.add_argument("--history", type=arg_type(positive_ints, "--history"), default=[1, 5], help="stored baseline sessions K")
    grid.add_argument("--tolerance", type=arg_type(numbers, "--tolerance"), help="throughput tolerance")
    grid.add_argument("--tolerance-accept", type=arg_type(numbers, "--tolerance-accept"))
    grid.add_argument("--prior-sd", type=arg_type(numbers, "--prior-sd"), help="prior between-launch sd of log tok/s")
    grid.add_argument("--prior-sd-accept", type=arg_type(numbers, "--prior-sd-accept"))
    grid.add_argument("--family-alpha", type=arg_type(numbers, "--family-alpha"))
    grid.add_argument("--fail-rule", type=names, help=f"comma-separated: {', '.join(FAIL_RULES)}")
    grid.add_argument("--design", type=names,
                      help=f"comma-separated: {', '.join(DESIGNS)} (default: the library's default design)")
    grid.add_argument("--prior-dof", type=arg_type(numbers, "--prior-dof"),
                      help="weight of the prior spread in pseudo dof (inf: known)")
    p.add_argument("--ab-runs", type=int, default=400,
                   help="simulated `specguard ab` runs behind power_ab_tok_s_3pct and ab_launches_per_build (0: skip)")
    p.add_argument("--cache", type=Path, help="keep simulated trials here and reuse them (they do not depend on the grid)")
    p.add_argument("--acceptance", type=names, default=[PER_REQUEST],
                   help=f"comma-separated emulator acceptance models, the first gives the headline: {PER_REQUEST} "
                        f"(SGLang at temperature 0: a greedy request accepts the same run after run), {PER_RUN} "
                        f"(vLLM: fresh draws and a per-run offset, large at small batches)")
    p.add_argument("--crossover-suite", default="perf_tests/suites/seed-a.toml",
                   help="suite whose sweep scores the crossover estimate against the truth ('none': skip)")
    noise = p.add_argument_group("noise")
    noise.add_argument("--noise", type=names, default=["emulator"],
                       help="comma-separated presets, the first gives the headline: emulator, emulator-busy (the "
                            "fast profile's drift and jitter plus the real-time client's noise measured on a quiet or "
                            "busy machine), gpu-quiet (0.5%% drift per launch), gpu (1%% drift per launch, 0.5%% per "
                            "run), gpu-drift2 (2%% drift)")
    noise.add_argument("--noise-from", type=Path, nargs="+", metavar="RESULTS_JSON",
                       help="re-measure the emulator preset's client noise from real sessions' --results-json files")
    noise.add_argument("--drift-pct", type=float, help="per-launch model drift, sd in %% (replaces the preset's)")
    noise.add_argument("--jitter-pct", type=float, help="per-step model jitter, sd in %%")
    noise.add_argument("--extra-within-pct", type=float, help="extra per-run noise at every level, sd in %%")
    noise.add_argument("--extra-between-pct", type=float, help="extra per-launch noise at every level, sd in %%")
    noise.add_argument("--stall-rate", type=float, help="probability that a run stalls (0: none)")
    return p


def _noise(name: str, args: argparse.Namespace, suite: Suite, measured: Noise | None) -> Noise:
    levels = suite.sweep.concurrency
    noise = preset(name, levels, args.drift_pct, args.jitter_pct)
    if measured is not None and name.startswith("emulator"):
        noise = replace(noise, within=measured.within, between=measured.between, stall_rate=measured.stall_rate,
                        stall_factors=measured.stall_factors, bias=measured.bias)
    if args.extra_within_pct is not None:
        noise = replace(noise, within={c: args.extra_within_pct / 100 for c in levels})
    if args.extra_between_pct is not None:
        noise = replace(noise, between={c: args.extra_between_pct / 100 for c in levels})
    if args.stall_rate is not None:
        noise = replace(noise, stall_rate=args.stall_rate)
    return noise


def _usage_error(args: argparse.Namespace, suite: Suite, config: str | None) -> str | None:
    """The first thing wrong with the command line, as one line; None when it can run."""
    if config not in suite.servers or not suite.servers[config].speculative:
        return f"--config must name a speculative configuration of {args.suite}"
    for flag, given, known in (("--design", args.design, DESIGNS), ("--fail-rule", args.fail_rule, FAIL_RULES),
                               ("--noise", args.noise, NOISE_PRESETS), ("--acceptance", args.acceptance, ACCEPTANCE_MODES)):
        bad = [x for x in given or [] if x not in known]
        if bad:
            return f"unknown {flag} {', '.join(bad)}; use {', '.join(known)}"
    return None


def _grid(args: argparse.Namespace, suite: Suite) -> list[GateSettings]:
    tol = suite.tolerances
    return settings_grid(suite, args.repeats or [suite.sweep.repeats], args.history, args.tolerance or [tol.throughput],
                         args.tolerance_accept or [tol.accept_length], args.prior_sd or [tol.prior_between_sd],
                         args.prior_sd_accept or [tol.prior_between_sd_accept], args.family_alpha or [tol.family_alpha],
                         args.fail_rule or [tol.fail_rule], args.design or [DEFAULT_DESIGN], args.prior_dof)


def _measured_noise(args: argparse.Namespace, suite: Suite) -> tuple[Noise | None, dict[str, Any] | None]:
    """The client noise re-measured from ``--noise-from`` (printed to stderr), if given."""
    if not args.noise_from:
        return None, None
    docs = [json.loads(f.read_text(encoding="utf-8")) for f in args.noise_from]
    measured, report = measure_noise(docs, suite, seed=args.seed)
    print(json.dumps(report, indent=1), file=sys.stderr)
    return measured, report


def _study(name: str, args: argparse.Namespace, suite: Suite, config: str, grid: list[GateSettings],
           measured: Noise | None, acceptance: str) -> dict[str, Any]:
    """One noise preset's study under one acceptance model (GPU presets simulated at 1 % and
    rescaled where exact), its table printed."""
    noise = _noise(name, args, suite, measured)
    sim = _noise("gpu", args, suite, measured) if name.startswith("gpu") else None
    plan = StudyPlan(suite, grid, scenarios(suite, config, noise), noise, args.seed, args.cache,
                     sim if sim is not None and rescalable(sim, noise) else None, acceptance)
    study = {"noise": asdict(noise), "acceptance": acceptance, **run_study(plan, args.sessions, args.jobs)}
    print(f"\nnoise {name}, acceptance {acceptance}:\n{render_table(study)}\n\n{render_levels(study)}")
    return study


def _headlines(study: dict[str, Any], target: Tolerances, repeats: int, design: str) -> dict[str, Any]:
    """The headline design's rates, and attach mode's (one launch, no relaunch) beside them as attach_*."""
    head = headline(study, target, repeats, design)
    attach = headline(study, target, repeats, ATTACH)
    return {**head, **{f"attach_{k}": attach.get(k) for k in ATTACH_KEYS if attach}}


def _crossover(args: argparse.Namespace, grid: list[GateSettings], target: Tolerances) -> dict[str, Any] | None:
    """The crossover study on ``--crossover-suite``, one row per design at the headline tolerances."""
    if not args.crossover_suite or args.crossover_suite == "none":
        return None
    cs = load_suite(args.crossover_suite)
    head_noise = _noise(args.noise[0], args, cs, None) if args.noise[0].startswith("gpu") else preset("gpu", cs.sweep.concurrency)
    designs = [g for g in grid if matches({"repeats": g.repeats, "design": g.design, **asdict(g.tolerances)},
                                          replace(target, history_sessions=g.tolerances.history_sessions), g.repeats)]
    seen, uniq = set(), []
    for g in designs:
        if g.design not in seen:
            seen.add(g.design)
            prior = replace(g.tolerances, prior_between_sd=target.prior_between_sd)
            uniq.append(replace(g, repeats=cs.sweep.repeats, tolerances=prior))
    if not uniq:
        return None
    cross = crossover_study(cs, head_noise, uniq, args.sessions, args.seed, args.jobs)
    print(f"\ncrossover on {cs.path} (truth c{cross['true_crossover_c']:.1f}): "
          + ", ".join(f"{r['design']}: {r['within_1_25x']:.0%} within 1.25x" for r in cross["rows"]))
    return cross


def run(args: argparse.Namespace) -> int:
    suite = load_suite(args.suite)
    config = args.config or next((n for n, s in suite.servers.items() if s.speculative), None)
    error = _usage_error(args, suite, config)
    if error or config is None:
        print(f"{PROG}: {error}", file=sys.stderr)
        return ExitCode.USAGE
    grid = _grid(args, suite)
    measured, noise_report = _measured_noise(args, suite)
    by_acceptance = {acc: {name: _study(name, args, suite, config, grid, measured, acc) for name in args.noise}
                     for acc in args.acceptance}
    target = suite.tolerances if args.headline == "suite" else Tolerances()
    design = DEFAULT_DESIGN if DEFAULT_DESIGN in (args.design or [DEFAULT_DESIGN]) else (args.design or [DEFAULT_DESIGN])[0]
    heads = {acc: _headlines(studies[args.noise[0]], target, suite.sweep.repeats, design)
             for acc, studies in by_acceptance.items()}
    head_acceptance = args.acceptance[0]
    head = heads[head_acceptance]
    if not head:
        print(f"{PROG}: the grid has no point with the {args.headline} tolerances at repeats="
              f"{suite.sweep.repeats}; the document gets no headline rates", file=sys.stderr)
    cross = _crossover(args, grid, target)
    seed_a = next((r["within_1_25x"] for r in (cross or {}).get("rows", []) if r["design"] == design), None)
    ab = _ab_headline(suite, args.ab_runs, args.seed) if args.ab_runs > 0 else {}  # no acceptance model in it
    doc = {"sessions": args.sessions, "acceptance": head_acceptance, **head, "crossover_within_1_25x_seed_a": seed_a,
           "headline_noise": args.noise[0], "headline_of": args.headline, "headline_design": design,
           "suite": str(args.suite), "changed_config": config, "seed": args.seed, "gate_tests": gate_tests(suite),
           "argv": sys.argv[1:], "noise_measurement": noise_report, "crossover_study": cross,
           **ab,
           "studies": by_acceptance[head_acceptance],
           "other_acceptance": {acc: {"acceptance": acc, "sessions": args.sessions, **heads[acc], **ab,
                                      "studies": by_acceptance[acc]}
                                for acc in args.acceptance[1:]}}
    if args.json_path:
        atomic_write_json(args.json_path, doc)
    for other in doc["other_acceptance"].values():  # the headline's line comes last
        print(summary_line(other))
    print(summary_line(doc))
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(sys.argv[1:] if argv is None else argv)
    try:
        return run(args)
    except ConfigError as exc:  # a suite the loader rejects: one line naming it, no traceback
        print(f"{PROG}: {exc}", file=sys.stderr)
        return ExitCode.USAGE


def _ab_headline(suite: Suite, runs: int, seed: int) -> dict[str, Any]:
    """`specguard ab`'s two headline keys (research/study/ab_power.py; imported here, not at the top,
    so that `python -m research.study.ab_power` runs its module once)."""
    from research.study.ab_power import ab_headline

    return dict(ab_headline(suite, runs, seed))
