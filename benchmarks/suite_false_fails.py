"""Whole-suite false fails on unchanged code: 12 tok/s cells (3 configurations x 4 levels) through
the gate's own code (decide/gates.py launch_history_gate, relaunch_plan; decide/consistency.py),
at K stored sessions, in launch and attach mode, with the gate audit's noise and stalls. Run by
hand; its output is quoted in docs and notes:

    python benchmarks/suite_false_fails.py [--sessions 1500] [--seed 7]
    python benchmarks/suite_false_fails.py --drop 0.10 --cases 0.01:0.01   # power: every cell 10 % slower
    python benchmarks/suite_false_fails.py --unchecked-factor 1            # the gate before K <= 2 widened the prior

Noise (../shared/reference/gate-audit.md section 1, its session.py): a day offset (half the true
spread's variance) shared by a session's launches, a launch offset shared by a launch's levels,
runs 0.5 %, stalls 1 run in 50 at 0.7x. Launch mode relaunches a configuration while
``relaunch_plan`` names it (a suspicious cell, p < 0.05, or a cell whose runs disagree), up to 3
launches; attach mode cannot relaunch and measures a cell whose runs disagree once more on the
same server (session/campaign.py). Per row: the share of sessions with a failed cell (the
false-fail rate per suite run) and with a cell not measured (exit 3), each with its 95 % upper
bound (Clopper-Pearson). With ``--drop`` every launch of this session is that much slower and the
first column is the share of sessions that fail (the power of the whole suite run).
"""

from __future__ import annotations

import argparse
import math
from dataclasses import replace

import numpy as np
from scipy import stats

from specguard.decide import prior as prior_module
from specguard.decide.consistency import consistent_launches
from specguard.decide.gates import CellRuns, GateDesign, GateTest, launch_history_gate, relaunch_plan, session_spread
from specguard.decide.prior import UNCHECKED_PRIOR_FACTOR, Prior
from specguard.labels import THROUGHPUT, GateLabel, Level, Verdict

ALPHA_CELL = 0.01 / 38
LEVELS, CONFIGS, RUNS = (1, 4, 16, 64), ("baseline", "eagle3", "mtp"), 3
RUN_SD, STALL_RATE, STALL_FACTOR, TOLERANCE = 0.005, 0.02, 0.7, 0.03


def _runs(rng: np.random.Generator, offset: float) -> list[float]:
    x = 100 * np.exp(offset + rng.normal(0, RUN_SD, RUNS))
    x[rng.random(RUNS) < STALL_RATE] *= STALL_FACTOR
    return [float(v) for v in x]


class _Config:
    """One configuration's stored sessions and this session's launches, per level."""

    def __init__(self, rng: np.random.Generator, truth: float, k: int, day: float, drop: float) -> None:
        self.rng, self.truth, self.day, self.drop = rng, truth, day, drop
        launch_sd = truth * math.sqrt(0.75)
        self.history = {c: [] for c in LEVELS}  # type: dict[int, list[list[float]]]
        for _ in range(k):
            offset = rng.normal(0, truth / 2) + rng.normal(0, launch_sd)
            for c in LEVELS:
                self.history[c].append(_runs(rng, offset))
        self.launches = {c: [] for c in LEVELS}  # type: dict[int, list[list[float]]]
        self.offset = 0.0
        self.launch()

    def launch(self) -> None:
        self.offset = self.day + self.rng.normal(0, self.truth * math.sqrt(0.75))
        for c in LEVELS:
            self.launches[c].append(self._current(self.offset))

    def _current(self, offset: float) -> list[float]:
        return [v * (1 - self.drop) for v in _runs(self.rng, offset)]

    def measure_again(self, c: int) -> None:
        """Attach mode: the same server (offset), the cell's runs once more."""
        self.launches[c].append(self._current(self.offset))


def _decide(cfg: _Config, name: str, prior: Prior, design: GateDesign):
    test = {c: GateTest(GateLabel(THROUGHPUT), name, Level(c), ALPHA_CELL) for c in LEVELS}
    return [launch_history_gate(test[c], CellRuns(cfg.launches[c], cfg.history[c]), TOLERANCE, prior,
                                design.rule("significant")) for c in LEVELS]


def session(rng: np.random.Generator, truth: float, prior: float, k: int, mode: str,
            drop: float = 0.0, session_check: bool = True) -> tuple[bool, bool]:
    """(a cell failed, a cell was not measured) in one session whose tok/s fell by ``drop`` (0:
    unchanged code)."""
    design = GateDesign(prior_day_sd=prior / 2)
    day = rng.normal(0, truth / 2)
    failed = unmeasured = False
    configs = {name: _Config(rng, truth, k, day, drop) for name in CONFIGS}
    # the prior's second check, as session/history.py check_spread gives it: every configuration's history
    check = session_spread({(n, c): cfg.history[c] for n, cfg in configs.items() for c in LEVELS}) if session_check else None
    tok_prior = replace(design.prior(prior), session=check)
    for name, cfg in configs.items():
        if mode == "attach":
            for c in LEVELS:
                if not consistent_launches(cfg.launches[c], cfg.history[c])[0]:
                    cfg.measure_again(c)
        results = _decide(cfg, name, tok_prior, design)
        while mode == "launch" and len(cfg.launches[LEVELS[0]]) < design.max_launches:
            if name not in relaunch_plan(results, {}, design.suspicion_p):
                break
            cfg.launch()
            results = _decide(cfg, name, tok_prior, design)
        failed |= any(r.verdict == Verdict.FAIL for r in results)
        unmeasured |= any(r.verdict == Verdict.ERROR for r in results)
    return failed, unmeasured


def _upper(hits: int, n: int) -> float:
    return float(stats.beta.ppf(0.95, hits + 1, n - hits)) if hits < n else 1.0


def _lower(hits: int, n: int) -> float:
    return float(stats.beta.ppf(0.05, hits, n - hits + 1)) if hits > 0 else 0.0


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sessions", type=int, default=1500)
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--cases", default="0.01:0.01,0.01:0.005,0.024:0.012,0.024:0.024",
                   help="true spread:prior pairs, comma-separated")
    p.add_argument("--drop", type=float, default=0.0, help="every cell's tok/s this much lower (0.1: -10 %%)")
    p.add_argument("--unchecked-factor", type=float, default=UNCHECKED_PRIOR_FACTOR,
                   help="what a prior too few sessions check counts as (decide/stats.py; 1: the gate before 6 Dec 2026)")
    p.add_argument("--no-session-check", action="store_true",
                   help="the gate without the session's second prior check (prior.SESSION_CHECK_P; before 6 Dec 2026)")
    p.add_argument("--session-check-p", type=float, default=prior_module.SESSION_CHECK_P,
                   help="the level of the session's prior check (prior.SESSION_CHECK_P)")
    p.add_argument("--ks", default="1,2,3,5,10", help="stored sessions per configuration, comma-separated")
    args = p.parse_args()
    prior_module.UNCHECKED_PRIOR_FACTOR = args.unchecked_factor
    prior_module.SESSION_CHECK_P = args.session_check_p
    bound = _lower if args.drop else _upper
    failed = "false fails (95% upper)" if args.drop == 0 else f"failed at -{args.drop:.0%} (95% lower)"
    print(f"12 tok/s cells, runs {RUN_SD:.1%}, stalls {STALL_RATE:g} at {STALL_FACTOR}x, alpha {ALPHA_CELL:.3g} per "
          f"cell; {args.sessions} sessions per row; seed {args.seed}; a prior too few sessions check counts "
          f"x{args.unchecked_factor:g}; the session's prior check {'off' if args.no_session_check else 'on'}")
    print(f"{'spread':>6} {'prior':>6} {'K':>2} {'mode':<7} {failed:>24} {'not measured (95% upper)':>25}")
    for case in args.cases.split(","):
        truth, prior = (float(x) for x in case.split(":"))
        for k in (int(x) for x in args.ks.split(",")):
            for mode in ("launch", "attach"):
                key = [args.seed, k, int(truth * 1e4), int(prior * 1e4), mode == "attach"]
                rng = np.random.default_rng(key + [round(args.drop * 1e3)] if args.drop else key)
                got = [session(rng, truth, prior, k, mode, args.drop, not args.no_session_check)
                       for _ in range(args.sessions)]
                f, u = sum(g[0] for g in got), sum(g[1] for g in got)
                n = args.sessions
                print(f"{truth:>6.1%} {prior:>6.1%} {k:>2} {mode:<7} {f / n:>10.2%} ({bound(f, n):>6.2%})      "
                      f"{u / n:>10.2%} ({_upper(u, n):>6.2%})", flush=True)


if __name__ == "__main__":
    main()
