"""The three gates, each a one-line verdict with its evidence.

- throughput: this session's tok/s against the stored baseline history of the cell;
- accept length: the same on per-run accept lengths (ratio of sums within each run);
- speculation: a speculative configuration against its non-speculative reference, measured in
  this session when both are selected, else against the reference's stored baseline.

Per-cell tests use alpha / m (m gate cells in the session); the session end applies Holm to all
p-values, which can only add failures (see `holm_failures`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from specguard.config import Tolerances
from specguard.decide.stats import (FAIL, INCONCLUSIVE, PASS, RatioEstimate, SpreadEstimate, compare_launch_sets,
                                    compare_launches, compare_sessions, compare_to_history, history_spread, holm_adjust,
                                    pool_spreads)

SKIP, ERROR = "skip", "error"


@dataclass
class GateResult:
    gate: str  # "throughput", "accept_length", "speculation"
    config: str
    concurrency: int
    verdict: str  # pass / fail / inconclusive / skip / error
    message: str
    estimate: RatioEstimate | None = None
    current: float | None = None  # mean of this session's samples
    reference: float | None = None  # mean of what it was compared with
    enforced: bool = True  # speculation gate outside the must-win range only reports
    alpha: float | None = None
    launches: int = 1  # server launches of this configuration pooled into the verdict
    stage: int = 1  # 2: decided again after a relaunch (sequential design, ``relaunch_plan``)

    @property
    def failed(self) -> bool:
        return self.verdict == FAIL and self.enforced


def _mean(xs: Sequence[float]) -> float:
    return sum(xs) / len(xs) if xs else math.nan


def gate_confidence(alpha_cell: float) -> float:
    """Two-sided CI level whose upper bound is the one-sided test at alpha_cell."""
    return 1 - 2 * alpha_cell


def _line(gate: str, config: str, c: int, unit: str, cur: float, ref: float, ref_name: str,
          est: RatioEstimate, tol_text: str, verdict: str) -> str:
    ci = f"{est.confidence * 100:.2f}% CI"
    if verdict == PASS and est.pass_low is not None and est.pass_confidence is not None:
        verdict += f" ({est.pass_confidence:.0%} lower bound {est.pass_low:.3f} >= {est.threshold:.2f})"
    return (f"{gate} {config} c{c}: {cur:.4g}{unit} vs {ref_name} {ref:.4g}{unit}, ratio {est.describe()} ({ci}, "
            f"between-launch sd {est.between_sd:.1%} from {est.between_source}), {tol_text} -> {verdict.upper()}")


def history_gate(gate: str, config: str, concurrency: int, current: Sequence[float],
                 history: Sequence[Sequence[float]], *, tolerance: float, prior_between_sd: float,
                 alpha_cell: float, rule: str) -> GateResult:
    """Fail iff current/baseline is significantly below 1 and estimated below 1 - tolerance
    (rule "significant"), or its whole interval is below 1 - tolerance ("beyond-tolerance")."""
    if len(current) < 2:
        return GateResult(gate, config, concurrency, ERROR, f"{gate} {config} c{concurrency}: only {len(current)} samples; need >= 2")
    est = compare_to_history(current, history, threshold=1 - tolerance, prior_between_sd=prior_between_sd,
                             confidence=gate_confidence(alpha_cell), rule=rule)
    verdict = est.outcome()
    unit = " tok/s" if gate == "throughput" else ""
    base_mean = _mean([v for s in history for v in s])
    msg = _line(gate, config, concurrency, unit, _mean(current), base_mean,
                f"baseline ({len(history)} session{'s' if len(history) != 1 else ''})", est,
                f"tolerance {tolerance:.0%}, rule {rule}", verdict)
    return GateResult(gate, config, concurrency, verdict, msg, est, _mean(current), base_mean, alpha=alpha_cell)


def speculation_gate(config: str, concurrency: int, spec: Sequence[float], reference: Sequence[float],
                     reference_name: str, *, must_win: bool, tol: Tolerances, alpha_cell: float) -> GateResult:
    """Speculative vs reference tok/s at one concurrency; enforced only where it must win."""
    threshold = 1 + tol.speculation_min_gain
    est = compare_sessions(spec, reference, threshold=threshold, launch_sd=tol.prior_between_sd,
                           confidence=gate_confidence(alpha_cell))
    verdict = est.outcome()
    where = "must win here" if must_win else "report only"
    msg = _line("speculation", config, concurrency, " tok/s", _mean(spec), _mean(reference), reference_name, est,
                f"must not be below {threshold:.2f}x ({where})", verdict)
    return GateResult("speculation", config, concurrency, verdict, msg, est, _mean(spec), _mean(reference),
                      enforced=must_win, alpha=alpha_cell)


def counts_as_failure(result: GateResult, tol: Tolerances) -> bool:
    if not result.enforced:
        return False
    if result.verdict in (FAIL, ERROR):
        return True
    return result.verdict == INCONCLUSIVE and tol.inconclusive == "fail"


def holm_failures(results: Sequence[GateResult], family_alpha: float) -> list[GateResult]:
    """Enforced results that Holm rejects at the family level but the per-cell test passed
    (rejected = significantly below the tested ratio, with the estimate beyond the threshold)."""
    tested = [r for r in results if r.estimate is not None and r.enforced]
    # Weighted Holm with weights = the per-test alphas (a weighted Bonferroni split, ``family_alphas``);
    # equal alphas (or any unknown) give the ordinary Holm.
    weights = [r.alpha for r in tested] if all(r.alpha for r in tested) else None
    adjusted = holm_adjust([r.estimate.p_value for r in tested], weights)
    return [r for r, p in zip(tested, adjusted)
            if p < family_alpha and r.estimate.ratio < r.estimate.threshold and r.verdict != FAIL]


def crossover(ratios: dict[int, RatioEstimate]) -> tuple[int | None, int | None, str]:
    """Where speculation stops paying: (last level it confidently wins, first level it confidently
    loses, text). The crossover lies between them."""
    levels = sorted(ratios)
    wins = [c for c in levels if ratios[c].low > 1.0]
    losses = [c for c in levels if ratios[c].high < 1.0]
    first_loss = next((c for c in levels if ratios[c].ratio < 1.0), None)
    if first_loss is None:
        return (levels[-1] if levels else None, None, "speculation is ahead at every measured concurrency")
    below = [c for c in levels if c < first_loss]
    if not below:
        return (None, first_loss, f"speculation is behind from the first measured concurrency ({first_loss})")
    last_win = below[-1]
    certainty = "confidently" if last_win in wins and first_loss in losses else "not confidently"
    return (last_win, first_loss, f"crossover between c{last_win} and c{first_loss} ({certainty} resolved)")


__all__ = ["ERROR", "FAIL", "INCONCLUSIVE", "PASS", "SKIP", "GateResult", "counts_as_failure", "crossover",
           "history_gate", "holm_failures", "speculation_gate"]


# -- launches, relaunch on suspicion and the speculation gate (issue 14, docs/statistics.md) ----
STAGE_ALPHA_RULES = ("screen", "halves")


@dataclass(frozen=True)
class GateDesign:
    """How a session replicates and decides: ``launches`` per configuration (fixed), and with
    ``relaunch = "on-suspicion"`` one more launch of each configuration with a suspicious cell
    (one-sided p < ``suspicion_p``), again after each stage while a cell stays suspicious, up to
    ``max_launches`` launches in all.

    How the alpha is shared between the stages (``stage_alpha_rule``):

    - "screen" (default): every stage but the last only screens. A configuration's cells are
      decided on all its launches pooled, at its last stage, at the cell's whole alpha. It stops
      before ``max_launches`` only when no cell is suspicious: every p >= suspicion_p >= family
      alpha there, so nothing can fail. A failure can therefore only come from the test on
      ``max_launches`` launches, a fixed-size test whose p-value is valid, so per-cell alpha and
      Holm at the family alpha over the final decisions keep the family bound. Attach mode
      cannot relaunch: stage 1 is the only test, at the whole alpha.
    - "halves" (the earlier rule): each stage at half the cell alpha, Holm at half the family
      alpha, union bound over the two stages.
    """

    launches: int = 1
    relaunch: str = "on-suspicion"  # or "off"
    suspicion_p: float = 0.05
    max_launches: int = 3  # with relaunch on suspicion: launches per configuration at most
    # A relaunched speculative configuration brings its reference along where one of its must-win
    # speculation cells has a one-sided p below this (its estimate on the losing side), so the
    # pair stays level where the verdict can still turn; 0: only for suspicious speculation cells.
    reference_losing_p: float = 0.5
    stage_alpha_rule: str = "screen"  # or "halves" (STAGE_ALPHA_RULES)
    prior_day_sd: float = 0.005  # share of prior_between_sd common to every launch of one session
    prior_dof: float = 16.0  # weight of prior_between_sd, in pseudo degrees of freedom (Tolerances.prior_between_dof)
    spread_rule: str = "pooled-t"  # or "max-known" (the earlier rule)
    # Which history estimates a cell's spread: "cell" = its own (K - 1 dof; the pooled ``spread`` a
    # caller passes then only checks the prior); "suite"/"config" = the ``spread`` passed, as is.
    spread_pool: str = "cell"
    # Raise the prior where a history contradicts it (stats.checked_prior): "cell" = the cell's own
    # history (the pair's, for speculation), "pooled" = the session's pooled ``spread``, "off".
    prior_check: str = "cell"
    # Weighted Bonferroni (``family_alphas``): a test's share of the family alpha is proportional to
    # its gate's weight; report-only speculation tests weigh 0 (they cannot fail). Fixed in advance.
    gate_weights: tuple[tuple[str, float], ...] = (("throughput", 1.0), ("accept_length", 0.25), ("speculation", 2.0))
    pass_confidence: float | None = 0.95  # one-sided level of a pass (equivalence); None: the fail interval's

    @property
    def sequential(self) -> bool:
        return self.relaunch == "on-suspicion"

    def __post_init__(self) -> None:
        if self.stage_alpha_rule not in STAGE_ALPHA_RULES:
            raise ValueError(f"stage alpha rule {self.stage_alpha_rule!r}; use one of {', '.join(STAGE_ALPHA_RULES)}")

    def stage_alpha(self, alpha_cell: float) -> float:
        """Per-cell alpha of a stage's decisions (the same for both stages)."""
        return alpha_cell / 2 if self.sequential and self.stage_alpha_rule == "halves" else alpha_cell

    def holm_alpha(self, family_alpha: float) -> float:
        """The alpha Holm runs at over the session's final decisions."""
        return family_alpha / 2 if self.sequential and self.stage_alpha_rule == "halves" else family_alpha

    def screen_is_valid(self, family_alpha: float) -> bool:
        """"screen" needs suspicion_p >= family alpha: a configuration that was not relaunched then
        has no cell whose p-value a per-cell test or Holm could reject."""
        return self.stage_alpha_rule != "screen" or not self.sequential or self.suspicion_p >= family_alpha


def design_of(suite: "Suite") -> GateDesign:  # noqa: F821 - config.Suite, imported lazily by callers
    """The design a suite file declares ([sweep] launches / relaunch / relaunch_p, [tolerances]
    prior_day_sd / prior_between_dof / spread_rule), defaults where a key is absent."""
    sw, tol, d = suite.sweep, suite.tolerances, GateDesign()
    return GateDesign(launches=getattr(sw, "launches", d.launches), relaunch=getattr(sw, "relaunch", d.relaunch),
                      suspicion_p=getattr(sw, "relaunch_p", d.suspicion_p),
                      max_launches=getattr(sw, "max_launches", d.max_launches),
                      prior_day_sd=getattr(tol, "prior_day_sd", d.prior_day_sd),
                      prior_dof=getattr(tol, "prior_between_dof", d.prior_dof),
                      spread_rule=getattr(tol, "spread_rule", d.spread_rule),
                      pass_confidence=getattr(tol, "pass_confidence", d.pass_confidence))


def session_spread(cell_histories: dict[tuple[str, int], Sequence[Sequence[float]]]) -> SpreadEstimate | None:
    """One metric's between-session spread pooled over the session's cells, (config, C) ->
    stored sessions. Cells of one configuration share their launch, so the degrees of freedom
    claimed are the sum over configurations of K - 1, not over cells."""
    per_config: dict[str, int] = {}
    ests = []
    for (config, _c), hist in cell_histories.items():
        est = history_spread(hist)
        if est is not None:
            ests.append(est)
            per_config[config] = max(per_config.get(config, 0), int(est.dof))
    return pool_spreads(ests, dof_cap=float(sum(per_config.values())))


PRIOR_CHECKS = ("cell", "pooled", "off")


def _check_pool(design: GateDesign, pooled: SpreadEstimate | None, own: SpreadEstimate | None) -> SpreadEstimate | None:
    """The history the prior is checked against (``design.prior_check``)."""
    if design.prior_check not in PRIOR_CHECKS:
        raise ValueError(f"prior check {design.prior_check!r}; use one of {', '.join(PRIOR_CHECKS)}")
    return {"cell": own, "pooled": pooled, "off": None}[design.prior_check]


def launch_history_gate(gate: str, config: str, concurrency: int, launches: Sequence[Sequence[float]],
                        history: Sequence[Sequence[float]], *, tolerance: float, prior_between_sd: float,
                        alpha_cell: float, rule: str, design: GateDesign = GateDesign(),
                        spread: SpreadEstimate | None = None, prior_day_sd: float | None = None,
                        stage: int = 1) -> GateResult:
    """``history_gate`` with the launch as the unit: ``launches`` holds one list of runs per server
    launch of this session. ``alpha_cell`` is the stage's alpha (``design.stage_alpha``).
    ``spread``: the metric's spread pooled over the session's cells (``session_spread``); under
    ``design.spread_pool = "cell"`` the cell's own history is the estimate and ``spread`` only
    checks the prior."""
    runs = [v for l in launches for v in l]
    if len(runs) < 2:
        return GateResult(gate, config, concurrency, ERROR, f"{gate} {config} c{concurrency}: only {len(runs)} samples; need >= 2")
    day = design.prior_day_sd if prior_day_sd is None else prior_day_sd
    est = compare_launches(launches, history, threshold=1 - tolerance, prior_between_sd=prior_between_sd,
                           prior_day_sd=min(day, prior_between_sd), confidence=gate_confidence(alpha_cell), rule=rule,
                           spread=None if design.spread_pool == "cell" else spread, prior_dof=design.prior_dof,
                           spread_rule=design.spread_rule, pass_confidence=design.pass_confidence,
                           pool=_check_pool(design, spread, history_spread(history)))
    verdict = est.outcome()
    unit = " tok/s" if gate == "throughput" else ""
    base_mean = _mean([v for s in history for v in s])
    n_l = len([l for l in launches if len(l)])
    msg = _line(gate, config, concurrency, unit, _mean(runs), base_mean,
                f"baseline ({len(history)} session{'s' if len(history) != 1 else ''})", est,
                f"tolerance {tolerance:.0%}, rule {rule}" + (f", {n_l} launches" if n_l > 1 else ""), verdict)
    return GateResult(gate, config, concurrency, verdict, msg, est, _mean(runs), base_mean, alpha=alpha_cell,
                      launches=n_l, stage=stage)


def must_win_gate(config: str, concurrency: int, spec: Sequence[Sequence[float]],
                  reference: Sequence[Sequence[float]] | None, reference_name: str, *, must_win: bool,
                  tol: Tolerances, alpha_cell: float, design: GateDesign = GateDesign(),
                  spread: SpreadEstimate | None = None, reference_history: Sequence[Sequence[float]] | None = None,
                  stage: int = 1,
                  pair_histories: tuple[Sequence[Sequence[float]], Sequence[Sequence[float]]] | None = None) -> GateResult:
    """Speculation vs its reference at one concurrency, launches as units.

    Hypothesis tested where speculation must win: H0 "spec/reference >= 1 + speculation_min_gain"
    (speculation wins as declared). The cell fails when the data reject H0 at the cell's alpha:
    the upper confidence bound is below 1 + min_gain. It passes when the lower bound is at or
    above 1 + min_gain (a confident win) and is inconclusive between. "Confidently above" cannot
    be required: where the true gain is a few percent (eagle3 at c16 on the fast profile: 2.3 %)
    no affordable number of launches resolves it, and every healthy run would fail.

    ``reference``: the reference's launches in this session (the day cancels); else
    ``reference_history``: all K stored sessions of the reference with this fingerprint.
    ``spread``: the session's pooled tok/s spread (``session_spread``); ``pair_histories``: the
    speculative configuration's and the reference's stored sessions at this level, whose spreads
    (pooled, ``pair_spread``) are the estimate under ``design.spread_pool = "cell"`` (else, or
    without them, ``spread`` is).
    """
    threshold = 1 + tol.speculation_min_gain
    day = min(design.prior_day_sd, tol.prior_between_sd)
    own = pair_spread(*pair_histories) if pair_histories is not None and design.spread_pool == "cell" else None
    common = dict(threshold=threshold, prior_between_sd=tol.prior_between_sd, prior_day_sd=day,
                  confidence=gate_confidence(alpha_cell), rule="significant", spread=own if own is not None else spread,
                  prior_dof=design.prior_dof, spread_rule=design.spread_rule, pass_confidence=design.pass_confidence,
                  pool=_check_pool(design, spread, own if own is not None else (
                      history_spread(reference_history) if not reference and reference_history else None)))
    if reference:
        est = compare_launch_sets(spec, reference, **common)
        ref_runs = [v for l in reference for v in l]
    elif reference_history:
        est = compare_launches(spec, reference_history, **common)
        ref_runs = [v for s in reference_history for v in s]
    else:
        raise ValueError("must_win_gate needs the reference's launches or its stored sessions")
    verdict = est.outcome()
    where = "must win here" if must_win else "report only"
    runs = [v for l in spec for v in l]
    n_l = len([l for l in spec if len(l)])
    msg = _line("speculation", config, concurrency, " tok/s", _mean(runs), _mean(ref_runs), reference_name, est,
                f"fails if confidently below {threshold:.2f}x ({where})", verdict)
    return GateResult("speculation", config, concurrency, verdict, msg, est, _mean(runs), _mean(ref_runs),
                      enforced=must_win, alpha=alpha_cell, launches=n_l, stage=stage)


def relaunch_plan(stage1: Sequence[GateResult], references: dict[str, str | None],
                  suspicion_p: float = 0.05, losing_p: float = 0.0) -> dict[str, list[str]]:
    """Which configurations to relaunch after a stage, and why (configuration -> reasons).

    A configuration is relaunched when one of its enforced cells has a one-sided p-value below
    ``suspicion_p`` (failed cells included: the relaunch sharpens the rest of its cells). A
    suspicious speculation cell relaunches the speculative configuration and its reference; so
    does, once the speculative configuration is relaunched anyway, a must-win speculation cell
    with p below ``losing_p`` (GateDesign.reference_losing_p). ``references``: configuration ->
    its reference (None for none).
    """
    plan: dict[str, list[str]] = {}
    for r in stage1:
        if r.estimate is None or not r.enforced or r.estimate.p_value >= suspicion_p:
            continue
        why = f"{r.gate} {r.config} c{r.concurrency}: p = {r.estimate.p_value:.3g} < {suspicion_p:g} (ratio {r.estimate.ratio:.3f})"
        plan.setdefault(r.config, []).append(why)
        ref = references.get(r.config)
        if r.gate == "speculation" and ref:
            plan.setdefault(ref, []).append(f"reference of {why}")
    for r in stage1:
        ref = references.get(r.config)
        if (r.gate != "speculation" or r.estimate is None or not r.enforced or not ref or r.config not in plan
                or ref in plan or r.estimate.p_value >= losing_p):
            continue
        plan[ref] = [f"reference of speculation {r.config} c{r.concurrency}, which leans to a loss "
                     f"(ratio {r.estimate.ratio:.3f}, p = {r.estimate.p_value:.3g} < {losing_p:g})"]
    return plan


def family_alphas(tests: Sequence[tuple[str, bool]], family_alpha: float,
                  design: GateDesign = GateDesign()) -> list[float]:
    """Per-test alpha of a session's family: (gate, enforced) for every selected gate test.

    Weighted Bonferroni: test i gets family_alpha * w_i / sum(w), w_i its gate's weight
    (``design.gate_weights``), 0 for a test that cannot fail (report-only speculation), so the
    alphas of the tests that can fail sum to the family alpha. Holm over them is the weighted
    Holm (``holm_failures`` takes each result's alpha as its weight). Before the stage rule
    (``design.stage_alpha``)."""
    weights = dict(design.gate_weights)
    w = [weights.get(gate, 1.0) if enforced else 0.0 for gate, enforced in tests]
    total = sum(w)
    if total <= 0:
        return [family_alpha / max(len(tests), 1)] * len(tests)
    # a report-only test still reports an interval: it gets the smallest enforced alpha's level
    floor = min((x for x in w if x > 0), default=1.0)
    return [family_alpha * (x if x > 0 else floor) / total for x in w]


def final_results(stage1: Sequence[GateResult], stage2: Sequence[GateResult]) -> list[GateResult]:
    """Each test's final decision: its stage-2 result where its configuration was relaunched
    (that supersedes the stage-1 verdict, a fail included), else its stage-1 result."""
    out: dict[tuple[str, str, int], GateResult] = {}
    for r in [*stage1, *stage2]:
        key = (r.gate, r.config, r.concurrency)
        if key not in out or r.stage >= out[key].stage:
            out[key] = r
    return list(out.values())


def final_failures(stage1: Sequence[GateResult], stage2: Sequence[GateResult], tol: Tolerances,
                   design: GateDesign = GateDesign()) -> list[GateResult]:
    """Every enforced failure of a session: per-cell verdicts and Holm over each test's final
    decision (``final_results``), Holm at ``design.holm_alpha`` (the family alpha under the
    "screen" rule, half of it under "halves"). Non-sequential designs: ``stage2`` is empty."""
    if not design.screen_is_valid(tol.family_alpha):
        raise ValueError(f"relaunch_p {design.suspicion_p:g} is below family_alpha {tol.family_alpha:g}: the "
                         f"\"screen\" stage rule needs relaunch_p >= family_alpha (docs/statistics.md)")
    final = final_results(stage1, stage2)
    return [r for r in final if counts_as_failure(r, tol)] + holm_failures(final, design.holm_alpha(tol.family_alpha))


__all__ += ["GateDesign", "design_of", "family_alphas", "final_failures", "final_results", "launch_history_gate", "must_win_gate", "relaunch_plan",
            "session_spread"]


def pair_spread(spec_history: Sequence[Sequence[float]], reference_history: Sequence[Sequence[float]]) -> SpreadEstimate | None:
    """The spread behind a speculation ratio: both configurations' stored histories at this
    level, pooled (each K - 1 dof). Pass it as ``must_win_gate(..., spread=...)``."""
    return pool_spreads([history_spread(spec_history) if spec_history else None,
                         history_spread(reference_history) if reference_history else None])


__all__ += ["pair_spread"]
