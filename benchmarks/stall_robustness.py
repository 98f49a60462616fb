"""Stalled runs against the tok/s gate (decide/gates.py launch_history_gate with the runs'
consistency check of decide/consistency.py), in attach mode: one measurement on a server that is
not ours to relaunch, measured once more on the same server when its runs disagree, as
session/campaign.py does. Run by hand; its output is quoted in docs and notes:

    python benchmarks/stall_robustness.py [--sessions 1000] [--seed 0]

The noise is the gate audit's (../shared/reference/gate-audit.md sections 1-2): true spread 1 %
between sessions (half of its variance the day, shared by a session's launches), runs 0.5 %,
stalls 1 run in 50 at 0.7x; the prior 1 % (half of it the day share); K stored sessions; one cell
at the default suite's per-cell alpha (0.01 / 38); tolerance 3 %. Scenarios:
- two-stalled: the first measurement's runs 1 and 2 stall (a re-measure draws its own stalls);
  before the check this failed 1000 times in 1000 at K = 5 (the audit's stall.py);
- drop-one-stalled: tok/s truly 5 % lower and run 3 of the first measurement stalls (the median
  holds, so the cell is not measured again and must still fail);
- drop-5, drop-10: tok/s truly lower, the stall model's own stalls only;
- unchanged: the stall model's own stalls only; the per-suite rate is 1 - (1 - per cell)^12.
Per scenario: the share of sessions failed, not measured (exit 3) and measured twice.
"""

from __future__ import annotations

import argparse
import math

import numpy as np

from specguard.decide.consistency import consistent_launches
from specguard.decide.gates import CellRuns, GateDesign, GateTest, launch_history_gate, runs_disagree
from specguard.labels import THROUGHPUT, GateLabel, Level, Verdict

ALPHA_CELL = 0.01 / 38
TOLERANCE = 0.03
RUN_SD, STALL_RATE, STALL_FACTOR = 0.005, 0.02, 0.7


def _launch(rng: np.random.Generator, offset: float, change: float = 0.0,
            stalled: tuple[int, ...] | None = None, runs: int = 3) -> list[float]:
    """One launch's runs (or one measurement's): ``offset`` is the day's and the launch's."""
    x = 100 * np.exp(offset + rng.normal(0, RUN_SD, runs)) * (1 + change)
    hit = rng.random(runs) < STALL_RATE if stalled is None else np.isin(np.arange(runs), stalled)
    x[hit] *= STALL_FACTOR
    return [float(v) for v in x]


def session(rng: np.random.Generator, k: int, spread: float, prior: float, change: float,
            stalled: tuple[int, ...] | None) -> tuple[Verdict, int]:
    """One attach-mode session's verdict and how many measurements it took."""
    def offset() -> float:  # a day's offset (half the variance) and a launch's
        return float(rng.normal(0, spread / 2) + rng.normal(0, spread * math.sqrt(0.75)))

    history = [_launch(rng, offset()) for _ in range(k)]
    server = offset()  # attach mode: one server, so a second measurement shares its offset
    measurements = [_launch(rng, server, change, stalled)]
    kept, _ = consistent_launches(measurements, history)
    if not kept:  # session/campaign.py _again_if_runs_disagree: once more on the same server
        measurements.append(_launch(rng, server, change))
    design = GateDesign(prior_day_sd=prior / 2)
    test = GateTest(GateLabel(THROUGHPUT), "eagle3", Level(16), ALPHA_CELL)
    result = launch_history_gate(test, CellRuns(measurements, history), TOLERANCE, design.prior(prior),
                                 design.rule("significant"))
    assert result.verdict != Verdict.ERROR or runs_disagree(result.problem), result
    return result.verdict, len(measurements)


SCENARIOS = {"two-stalled": (0.0, (0, 1)), "drop-one-stalled": (-0.05, (2,)), "drop-5": (-0.05, None),
             "drop-10": (-0.10, None), "unchanged": (0.0, None)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sessions", type=int, default=1000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--spread", type=float, default=0.01, help="true between-session spread (log sd)")
    p.add_argument("--prior", type=float, default=0.01, help="the suite's prior_between_sd")
    args = p.parse_args()
    print(f"attach mode, true spread {args.spread:.1%}, prior {args.prior:.1%}, runs {RUN_SD:.1%}, stalls "
          f"{STALL_RATE:g} at {STALL_FACTOR}x, alpha {ALPHA_CELL:.3g} per cell; {args.sessions} sessions each; "
          f"seed {args.seed}")
    print(f"{'scenario':<18} {'K':>2} {'failed':>8} {'not measured':>13} {'measured twice':>15} {'per 12-cell suite':>18}")
    for name, (change, stalled) in SCENARIOS.items():
        for k in (1, 2, 5):
            rng = np.random.default_rng([args.seed, k, list(SCENARIOS).index(name)])
            got = [session(rng, k, args.spread, args.prior, change, stalled) for _ in range(args.sessions)]
            failed = sum(v == Verdict.FAIL for v, _ in got) / args.sessions
            unmeasured = sum(v == Verdict.ERROR for v, _ in got) / args.sessions
            twice = sum(n > 1 for _, n in got) / args.sessions
            suite = f"fail {1 - (1 - failed) ** 12:.2%}, exit 3 {1 - (1 - unmeasured) ** 12:.2%}" if name == "unchanged" else ""
            print(f"{name:<18} {k:>2} {failed:>8.3f} {unmeasured:>13.3f} {twice:>15.3f} {suite:>18}")


if __name__ == "__main__":
    main()
