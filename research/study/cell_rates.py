"""One cell's fail rates under known noise: the throughput gate (``gates.launch_history_gate``)
on synthetic launches, where the whole-suite study is too coarse to see a per-cell rate of 1e-3
(docs/statistics.md quotes these; `python -m research.study.cell_rates`).

A stored session and this session's launches are day + launch + run noise on log tok/s: the day
part (sd = half the between-session spread, as the study's gpu presets) is shared by a session's
launches, the launch part is each launch's own, runs scatter by 0.5 %.
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass, replace

import numpy as np

from specguard.decide.gates import CellRuns, GateDesign, GateTest, launch_history_gate
from specguard.decide.prior import PRIOR_CHECK_P, Prior, checked_prior
from specguard.decide.stats import Criterion, Rule, compare_launches, history_spread
from specguard.labels import THROUGHPUT, GateLabel, Level, Verdict

DAY_SHARE = 0.5  # the day's sd over the between-session sd (noise.GPU_DAY_SHARE)
RUN_SD = 0.005
ALPHA_CELL = 0.01 / 38  # a throughput test of the default suite: weight 1 of 38 shares


@dataclass(frozen=True)
class CellCase:
    """One cell's setting: the true between-session spread, the declared prior, K stored
    sessions, L launches of this session (fixed, no relaunch), the true change and the rule."""

    truth: float = 0.01
    prior: float = 0.01
    history: int = 5
    launches: int = 1
    drop: float = 0.0
    rule: str = "significant"
    tolerance: float = 0.03
    contradicted_prior: str = "dropped"  # or "raised": the rule before issue 23 (prior raised, kept at its pseudo dof)
    prior_check_p: float = PRIOR_CHECK_P  # 0.05 before issue 23

    def label(self) -> str:
        return (f"truth {self.truth:.1%}, prior {self.prior:.1%}, K {self.history}, {self.launches} launch"
                f"{'es' if self.launches > 1 else ''}, true change {0.0 - self.drop:+.0%}, {self.rule}"
                + (f", check at {self.prior_check_p:g}" if self.prior_check_p != PRIOR_CHECK_P else "")
                + (", contradicted prior raised" if self.contradicted_prior == "raised" else ""))


def _session(rng: np.random.Generator, case: CellCase, launches: int, change: float) -> list[list[float]]:
    day = rng.normal(0.0, case.truth * DAY_SHARE) + change
    launch_sd = case.truth * math.sqrt(1 - DAY_SHARE**2)
    return [list(100 * np.exp(day + rng.normal(0.0, launch_sd) + rng.normal(0.0, RUN_SD, 3))) for _ in range(launches)]


def _decide(case: CellCase, current: list[list[float]], history: list[list[float]]) -> Verdict:
    design = GateDesign(prior_day_sd=case.prior * DAY_SHARE, prior_check_p=case.prior_check_p)
    if case.contradicted_prior == "raised":
        own = history_spread(history)
        raised = checked_prior(case.prior, own, case.prior_check_p)
        factor = raised / case.prior
        criterion = Criterion(1 - case.tolerance, 1 - 2 * ALPHA_CELL, Rule(case.rule, design.pass_confidence))
        prior = Prior(raised, day_sd=case.prior * DAY_SHARE * factor, dof=design.prior_dof)
        est = compare_launches(current, history, criterion, prior, spread=own)
        return est.outcome()
    test = GateTest(GateLabel(THROUGHPUT), "cell", Level(1), ALPHA_CELL)
    return launch_history_gate(test, CellRuns(current, history), case.tolerance, design.prior(case.prior),
                               design.rule(case.rule)).verdict


def cell_rates(case: CellCase, n: int, seed: int = 0) -> dict[str, float]:
    """Share of ``n`` simulated cells that fail, and that are inconclusive."""
    rng = np.random.default_rng(seed)
    fails = inconclusive = 0
    for _ in range(n):
        history = [_session(rng, case, 1, 0.0)[0] for _ in range(case.history)]
        verdict = _decide(case, _session(rng, case, case.launches, math.log(1 - case.drop)), history)
        fails += verdict == Verdict.FAIL
        inconclusive += verdict == Verdict.INCONCLUSIVE
    return {"fail_rate": fails / n, "inconclusive_rate": inconclusive / n}


def _before(case: CellCase) -> CellCase:
    """The case under the rule until issue 23 (a contradicted prior raised, checked at 5 %)."""
    return replace(case, contradicted_prior="raised", prior_check_p=0.05)


AUDIT_CASES = (
    *(f(CellCase(truth=0.024, prior=0.012, launches=L)) for f in (_before, lambda c: c) for L in (1, 3)),
    CellCase(truth=0.024, prior=0.012, prior_check_p=0.05),
    *(f(CellCase(truth=0.024, prior=0.006)) for f in (_before, lambda c: c)),
    CellCase(truth=0.024, prior=0.012, history=10),
    *(CellCase(truth=0.024, prior=0.024, launches=L) for L in (1, 3)),
    *(CellCase(truth=0.01, prior=0.005, launches=L) for L in (1, 3)),
    *(CellCase(launches=L, drop=0.02, rule=rule) for rule in ("significant", "beyond-tolerance") for L in (1, 3)),
    CellCase(),
)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m research.study.cell_rates", description=__doc__)
    p.add_argument("--cells", type=int, default=20000, help="simulated cells per case")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    print(f"alpha per cell {ALPHA_CELL:.3g} (0.01 / 38); {args.cells} cells per case")
    for case in AUDIT_CASES:
        n = args.cells if case.drop == 0 else args.cells // 4
        rates = cell_rates(replace(case), n, args.seed)
        print(f"{case.label()}: fails {rates['fail_rate']:.3%}, inconclusive {rates['inconclusive_rate']:.1%} "
              f"({n} cells)", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
