"""What a study runs: the grid of gate settings, the designs compared, the alpha of each gate test."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from research.study.noise import Noise
from research.study.simulate import Change
from specguard.config import Suite, Tolerances
from specguard.decide.gates import GateDesign, family_alphas
from specguard.emulator.model import PER_REQUEST

# launches=L: L launches per configuration, pooled; on-suspicion (the default): one launch,
# another for every configuration with a suspicious cell after each stage, up to
# GateDesign.max_launches (3), the reference along where a must-win speculation cell leans to a
# loss (GateDesign.reference_losing_p); on-suspicion-noref: the same, the reference along only
# for a suspicious speculation cell; on-suspicion-max2: that with at most 2 launches (the second
# issue-14 round's design). The retired designs "legacy" and "on-suspicion-r1" are gone
# (research/README.md says what they showed); gate-study.json still holds their rows.
DESIGNS = ("attach", "launches=1", "launches=2", "on-suspicion", "on-suspicion-noref", "on-suspicion-max2")
ATTACH = "attach"  # attach mode: the server is not ours to relaunch, one launch decided at the whole alpha
DEFAULT_DESIGN = "on-suspicion" if GateDesign().sequential else f"launches={GateDesign().launches}"
# The GateDesign fields each earlier design sets.
DESIGN_FIELDS: dict[str, dict[str, Any]] = {
    "on-suspicion-noref": {"reference_losing_p": 0.0},
    "on-suspicion-max2": {"max_launches": 2, "reference_losing_p": 0.0},
}
# What gate-study.json records for every grid point: the between-session variance rule and the
# history each cell's spread comes from, the gates' only ones (docs/statistics.md).
SPREAD_RULE, SPREAD_POOL = "pooled-t", "cell"


@dataclass(frozen=True)
class GateSettings:
    """One point of the grid: the knobs the study tunes."""

    repeats: int
    tolerances: Tolerances  # history_sessions = K, the stored baseline sessions compared with
    design: str = DEFAULT_DESIGN  # one of DESIGNS
    overrides: tuple[tuple[str, Any], ...] = ()  # further GateDesign fields, e.g. (("suspicion_p", 0.1),)
    pair_histories: bool = True  # the must-win gate gets both configurations' histories at its level
    # When the reference of a relaunched speculative configuration gets a launch too (while it has
    # no more launches than the speculative one): "speculation" = when a speculation cell was
    # suspicious (the session's rule); "relaunch" = whenever the speculative one is relaunched;
    # "last" = also on its last relaunch; "p<x" = also when a must-win cell's p is below x.
    # Variants measured for the session's rule (docs/research/gate-study.md), not designs of their own.
    reference_follows: str = "speculation"

    @property
    def follows(self) -> str:
        """The extra reference rule this point runs (a variant; the designs' own rule is
        GateDesign.reference_losing_p)."""
        return self.reference_follows

    def label(self) -> str:
        t = self.tolerances
        return (f"design={self.design} repeats={self.repeats} K={t.history_sessions} tol={t.throughput:g}/{t.accept_length:g} "
                f"prior={t.prior_between_sd:g}/{t.prior_between_sd_accept:g} alpha={t.family_alpha:g} rule={t.fail_rule}")

    def gate_design(self) -> GateDesign:
        """The decide/ design this grid point runs."""
        t = self.tolerances
        fixed = {ATTACH: 1, "launches=1": 1, "launches=2": 2, "launches=3": 3}.get(self.design, 1)
        design = GateDesign(launches=fixed, relaunch="on-suspicion" if self.design.startswith("on-suspicion") else "off",
                            prior_day_sd=t.prior_day_sd, prior_dof=t.prior_between_dof, pass_confidence=t.pass_confidence)
        return replace(design, **{**DESIGN_FIELDS.get(self.design, {}), **dict(self.overrides)})

    def settings_record(self) -> dict[str, Any]:
        """The grid point as gate-study.json records it."""
        return {"repeats": self.repeats, "design": self.design, "spread_pool": SPREAD_POOL, **asdict(self.tolerances),
                "spread_rule": SPREAD_RULE}


def launches_used(settings: GateSettings) -> int:
    """Launches per configuration a grid point's design may use: ``max_launches`` when relaunching."""
    d = settings.gate_design()
    return max(d.launches, d.max_launches) if d.sequential else d.launches


def settings_grid(suite: Suite, repeats: Sequence[int], history: Sequence[int], tolerance: Sequence[float],
                  tolerance_accept: Sequence[float], prior: Sequence[float], prior_accept: Sequence[float],
                  family_alpha: Sequence[float], rules: Sequence[str] | None = None,
                  designs: Sequence[str] = (DEFAULT_DESIGN,), prior_dof: Sequence[float] | None = None) -> list[GateSettings]:
    """The grid. A prior spread p comes with a day share scaled like the suite's
    (the library default's, prior_day_sd / prior_between_sd = 0.5), so "prior at half" halves both."""
    base, lib = suite.tolerances, Tolerances()
    day_frac = lib.prior_day_sd / lib.prior_between_sd  # the library's day share, so the defaults are a grid point
    dofs = list(prior_dof or [base.prior_between_dof])
    return [GateSettings(r, replace(base, throughput=t, accept_length=ta, prior_between_sd=p, prior_day_sd=p * day_frac,
                                    prior_between_sd_accept=pa, family_alpha=a, history_sessions=k, fail_rule=rule,
                                    prior_between_dof=dof), design)
            for design, rule, r, k, t, ta, p, pa, a, dof in itertools.product(
                designs, rules or [base.fail_rule], repeats, history, tolerance, tolerance_accept, prior, prior_accept,
                family_alpha, dofs)]


def gate_tests(suite: Suite) -> int:
    """Number of gate tests in a full run: throughput and step time per cell, accept length and
    speculation per speculative cell (what the plugin counts to set alpha per cell)."""
    levels = len(suite.sweep.concurrency)
    spec = sum(1 for s in suite.servers.values() if s.speculative)
    return levels * (2 * len(suite.servers) + 2 * spec)


def suite_alphas(suite: Suite, family_alpha: float, design: GateDesign) -> dict[str, float]:
    """Gate -> per-test alpha of a full run (``gates.family_alphas`` over every gate test, as the
    session splits it), with "speculation, report only" for levels where speculation need not win."""
    tests: list[tuple[str, bool]] = []
    for cfg in suite.servers.values():
        for c in suite.sweep.concurrency:
            tests += [("throughput", True), ("step_time", True)]
            if cfg.speculative:
                limit = cfg.speculation_must_win_up_to
                tests += [("accept_length", True), ("speculation", limit is not None and c <= limit)]
    alphas = family_alphas(tests, family_alpha, design)
    out: dict[str, float] = {}
    for (gate, enforced), a in zip(tests, alphas):
        out[gate if enforced else f"{gate}, report only"] = a
    out.setdefault("speculation", out.get("speculation, report only", family_alpha / max(len(tests), 1)))
    out.setdefault("speculation, report only", out["speculation"])
    out.setdefault("accept_length", family_alpha / max(len(tests), 1))
    return out


@dataclass(frozen=True)
class StudyPlan:
    suite: Suite
    grid: list[GateSettings]
    changes: list[Change]
    noise: Noise
    seed: int
    cache_dir: Path | None = None  # simulated trials are kept here and reused (they do not depend on the grid)
    sim_noise: Noise | None = None  # simulate under this noise and rescale to ``noise`` (``rescale_trial``)
    acceptance: str = PER_REQUEST  # the emulator's acceptance model (SchedulerConfig.acceptance)


def max_launches(grid: Sequence[GateSettings]) -> int:
    """Launches per configuration the grid's designs may use."""
    return max(launches_used(g) for g in grid)
