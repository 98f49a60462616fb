"""`python -m research.tune --suite FILE --out DIR [--verify] [--seeds N]`: `specguard tune` on an
emulator suite in virtual time (``sim.SimRunner``), and racing checked against the full grid."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

from research.tune.sim import SimRunner
from specguard.labels import ExitCode
from specguard.store.atomic import atomic_write_json
from specguard.tune.cli import USAGE_ERRORS, Job, adaptive_paths, add_arguments, load_job, print_progress, tune
from specguard.tune.grid import REFERENCE, Setting, TuneError, algorithm_of
from specguard.tune.race import RacePlan, choices, full_grid, race

PROG = "python -m research.tune"


def _arg_value(args: Sequence[str], flag: str) -> str | None:
    for i, a in enumerate(args):
        if a == flag and i + 1 < len(args):
            return args[i + 1]
        if a.startswith(flag + "="):
            return a.split("=", 1)[1]
    return None


def sim_runner(job: Job, seed: int, quiet: bool = False) -> SimRunner:
    """The job's settings on the emulator's scheduler: its profile, speed factor and caps."""
    cfg, suite, args = job.cfg, job.suite, job.args
    if cfg.engine != "emulator":
        raise TuneError(f"virtual time needs an emulator configuration; {cfg.name!r} has engine {cfg.engine!r} "
                        f"in {suite.path}")
    w = suite.workload
    return SimRunner(profile_name=_arg_value(cfg.args, "--emulator-profile") or "fast", algorithm=algorithm_of(cfg),
                     input_len=w.input_len, output_len=w.output_len, requests_per_worker=suite.sweep.requests_per_worker,
                     min_requests_per_run=suite.sweep.min_requests_per_run,
                     cap=job.cap, seed=seed, jitter_pct=args.sim_noise_pct, drift_pct=args.sim_noise_pct,
                     speed_factor=float(_arg_value(cfg.args, "--emulator-speed-factor") or 1.0),
                     same_prompt=w.kind == "repeated-id", reference_cap=job.ref.max_running_requests,
                     adaptive_paths=adaptive_paths(job.out),
                     launched_params=(cfg.num_steps, cfg.eagle_topk, cfg.num_draft_tokens),
                     launched_cap=cfg.max_running_requests, progress=(lambda _: None) if quiet else print_progress)


def _chosen(choice: dict[int, Setting | None], c: int) -> Setting:
    s = choice[c]
    if s is None:
        raise TuneError(f"no setting could be measured at C={c}")
    return s


def _seed_row(job: Job, seed: int) -> dict[str, Any]:
    """One seed: racing and the full grid on the same virtual world; their choices and costs."""
    levels, plan = job.levels, job.plan
    r = race(sim_runner(job, seed, True), Setting(REFERENCE), job.grid, levels, plan)
    f = full_grid(sim_runner(job, seed, True), Setting(REFERENCE), job.grid, levels, plan)
    rc = {c: _chosen(choices(r, plan), c) for c in levels}
    fc = {c: _chosen(choices(f, plan), c) for c in levels}
    ra, fa = choices(r, plan, adaptive_only=True), choices(f, plan, adaptive_only=True)
    same = all(rc[c] == fc[c] for c in levels) and all(ra[c] == fa[c] for c in levels)
    print(f"seed {seed}: {'same' if same else 'DIFFERENT'} choices; runs {r.ledger.runs}/{f.ledger.runs} "
          f"({r.ledger.runs / f.ledger.runs:.0%}); launches {r.ledger.launches}/{f.ledger.launches}; "
          + " ".join(f"C{c}={rc[c].name}" + ("" if rc[c] == fc[c] else f"(full: {fc[c].name})") for c in levels))
    return {"seed": seed, "same_choices": same, "race_runs": r.ledger.runs, "full_runs": f.ledger.runs,
            "race_launches": r.ledger.launches, "full_launches": f.ledger.launches,
            "race": {c: rc[c].name for c in levels}, "full": {c: fc[c].name for c in levels}}


def seed_check(args: argparse.Namespace) -> int:
    """Racing vs the full grid in virtual time, seed by seed: same choices? what share of the runs?"""
    job = load_job(args)
    rows = [_seed_row(job, seed) for seed in range(args.seeds)]
    agree = sum(row["same_choices"] for row in rows)
    frac = max(row["race_runs"] / row["full_runs"] for row in rows)
    plan: RacePlan = job.plan
    doc = {"schema": "specguard-tune-seeds", "schema_version": 1, "suite": str(job.suite.path), "config": job.cfg.name,
           "mode": "simulated (virtual time)", "noise_pct": args.sim_noise_pct, "plan": asdict(plan),
           "seeds": rows, "same_choices": agree, "max_run_fraction": round(frac, 3)}
    atomic_write_json(job.out / "seeds.json", doc)
    print(f"racing chose what the full grid chose in {agree} of {len(rows)} seeds; at most {frac:.0%} of its runs "
          f"(written {job.out / 'seeds.json'})")
    return ExitCode.OK


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__)
    add_arguments(parser)
    parser.add_argument("--seeds", type=int, default=0, help="racing vs the full grid over N seeds (no outputs but seeds.json)")
    parser.add_argument("--seed", type=int, default=0, help="the virtual world's seed")
    parser.add_argument("--sim-noise-pct", type=float, default=1.0, help="per-step jitter and per-launch drift, %%")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    if args.seeds < 0:
        parser.error(f"--seeds {args.seeds}: must be >= 0")
    if not args.seeds:
        return tune(args, lambda job: sim_runner(job, args.seed), PROG)
    try:
        return seed_check(args)
    except USAGE_ERRORS as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return ExitCode.USAGE
