"""The gates: each decides one test from the numbers and returns a `GateResult` (decide/result.py),
data only; report/verdict_text.py words it.

- throughput, accept length and step time (``launch_history_gate``, ``step_time_gate``): this
  session's launches of a cell against the cell's stored baseline sessions;
- speculation (``must_win_gate``): a speculative configuration against its non-speculative
  reference, measured in this session when possible, else against the reference's stored sessions.

Each test gets its share of the family alpha (``family_alphas``); at the end Holm runs over each
test's final decision (``final_failures``), which can only add failures (``holm_failures``).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, replace

from specguard.config import PRIOR_BETWEEN_DOF, Suite, Tolerances
from specguard.decide.consistency import SetAside, StallBasis, consistent_launches
from specguard.decide.prior import (
    PRIOR_CHECK_P,
    HistoryOf,
    Origin,
    Prior,
    SpreadEstimate,
    pool_spreads,
    unchecked_prior,
)
from specguard.decide.result import (
    Against,
    Attribution,
    GateResult,
    Half,
    Problem,
    Versus,
    Why,
)
from specguard.decide.stats import (
    Criterion,
    RatioEstimate,
    Rule,
    compare_launch_sets,
    compare_launches,
    history_spread,
    holm_adjust,
)
from specguard.labels import SPECULATION, STEP_TIME, THROUGHPUT, GateLabel, Level, TextEnum, Verdict

Runs = Sequence[Sequence[float]]  # one list of run values per server launch (or per stored session)


@dataclass(frozen=True)
class CellRuns:
    """One series of a cell as a gate reads it: this session's launches and the cell's stored
    sessions (one list of run values each), and where its stalls are judged on other values than
    its own (a speculative cell's tok/s, decide/consistency.py), those."""

    launches: Runs
    history: Runs = ()
    stalls: StallBasis | None = None

    def consistent(self) -> tuple[Runs, tuple[SetAside, ...]]:
        """The launches whose runs agree, and those set aside (decide/consistency.py)."""
        return consistent_launches(self.launches, self.history, self.stalls)


@dataclass(frozen=True)
class GateTest:
    """The test a gate decides: its gate, configuration and level, its share of the family alpha
    (one-sided), whether it can fail, and the stage of the sequential design it is decided at."""

    gate: GateLabel
    config: str
    level: Level
    alpha: float
    enforced: bool = True
    stage: int = 1

    def result(self, verdict: Verdict, **fields: object) -> GateResult:
        return GateResult(self.gate, self.config, self.level, verdict, enforced=self.enforced, alpha=self.alpha,
                          stage=self.stage, **fields)  # type: ignore[arg-type]

    def problem(self, verdict: Verdict, problem: Problem, current: float | None = None) -> GateResult:
        return GateResult(self.gate, self.config, self.level, verdict, current=current, stage=self.stage, problem=problem)


def _mean(xs: Sequence[float]) -> float:
    return sum(xs) / len(xs) if xs else math.nan


def _flat(groups: Runs) -> list[float]:
    """Every run of some launches (or stored sessions), in order."""
    return [v for g in groups for v in g]


def _launch_count(launches: Runs) -> int:
    return sum(1 for launch in launches if len(launch))


def gate_confidence(alpha_cell: float) -> float:
    """Two-sided CI level whose upper bound is the one-sided test at alpha_cell."""
    return 1 - 2 * alpha_cell


def counts_as_failure(result: GateResult, tol: Tolerances) -> bool:
    if not result.enforced:
        return False
    if result.verdict in (Verdict.FAIL, Verdict.ERROR):
        return True
    return result.verdict == Verdict.INCONCLUSIVE and tol.inconclusive == "fail"


def holm_failures(results: Sequence[GateResult], family_alpha: float) -> list[GateResult]:
    """Enforced results that Holm rejects at the family level but the per-cell test passed
    (rejected = significantly below the tested ratio, with the estimate beyond the threshold)."""
    tested = [(r, r.estimate) for r in results if r.estimate is not None and r.enforced]
    # Weighted Holm with weights = the per-test alphas (a weighted Bonferroni split, ``family_alphas``);
    # equal alphas (or any unknown) give the ordinary Holm.
    alphas = [r.alpha for r, _ in tested]
    weights = [a for a in alphas if a] if all(alphas) else None
    adjusted = holm_adjust([e.p_value for _, e in tested], weights)
    return [r for (r, e), p in zip(tested, adjusted)
            if p < family_alpha and e.ratio < e.threshold and r.verdict != Verdict.FAIL]


@dataclass(frozen=True)
class GateDesign:
    """How a session replicates and decides: ``launches`` per configuration (fixed), and with
    ``relaunch = "on-suspicion"`` one more launch of each configuration with a suspicious cell
    (one-sided p < ``suspicion_p``), again after each stage while a cell stays suspicious, up to
    ``max_launches`` launches in all.

    Every stage but the last only screens. A configuration's cells are decided on all its
    launches pooled, at its last stage, at the cell's whole alpha. It stops before
    ``max_launches`` only when no cell is suspicious: every p >= suspicion_p >= family alpha
    there, so nothing can fail. A failure can therefore only come from the test on
    ``max_launches`` launches, a fixed-size test whose p-value is valid, so per-cell alpha and
    Holm at the family alpha over the final decisions keep the family bound. Attach mode cannot
    relaunch: stage 1 is the only test, at the whole alpha.
    """

    launches: int = 1
    relaunch: str = "on-suspicion"  # or "off"
    suspicion_p: float = 0.05
    max_launches: int = 3  # with relaunch on suspicion: launches per configuration at most
    # A relaunched speculative configuration brings its reference along where one of its must-win
    # speculation cells has a one-sided p below this (its estimate on the losing side), so the
    # pair stays level where the verdict can still turn; 0: only for suspicious speculation cells.
    reference_losing_p: float = 0.5
    prior_day_sd: float = 0.005  # share of prior_between_sd common to every launch of one session
    prior_dof: float = PRIOR_BETWEEN_DOF  # weight of prior_between_sd, pseudo dof (Tolerances.prior_between_dof)
    # Weighted Bonferroni (``family_alphas``): a test's share of the family alpha is proportional to
    # its gate's weight; report-only speculation tests weigh 0 (they cannot fail). Fixed in advance.
    gate_weights: tuple[tuple[str, float], ...] = (("throughput", 1.0), ("accept_length", 0.25), ("step_time", 1.0),
                                                   ("speculation", 2.0))
    pass_confidence: float | None = 0.95  # one-sided level of a pass (equivalence); None: the fail interval's
    prior_check_p: float = PRIOR_CHECK_P  # level at which a cell's history contradicts the prior (prior.checked_prior)

    @property
    def sequential(self) -> bool:
        return self.relaunch == "on-suspicion"

    def prior(self, between_sd: float, day_sd: float | None = None) -> Prior:
        """A metric's prior under this design: its day share is the design's (capped at the whole
        spread) unless given (accept length: 0, it does not move with the day)."""
        day = min(self.prior_day_sd, between_sd) if day_sd is None else day_sd
        return Prior(between_sd, day, self.prior_dof, self.prior_check_p)

    def rule(self, fail_rule: str) -> Rule:
        return Rule(fail_rule, self.pass_confidence)

    def screen_is_valid(self, family_alpha: float) -> bool:
        """Screening stages need suspicion_p >= family alpha: a configuration that was not
        relaunched then has no cell whose p-value a per-cell test or Holm could reject."""
        return not self.sequential or self.suspicion_p >= family_alpha


def design_of(suite: Suite) -> GateDesign:
    """The design a suite file declares ([advanced] launches / relaunch / relaunch_p /
    max_launches / prior_day_sd / prior_between_dof / pass_confidence)."""
    sw, tol = suite.sweep, suite.tolerances
    return GateDesign(launches=sw.launches, relaunch=sw.relaunch, suspicion_p=sw.relaunch_p,
                      max_launches=sw.max_launches, prior_day_sd=tol.prior_day_sd, prior_dof=tol.prior_between_dof,
                      pass_confidence=tol.pass_confidence)


def session_spread(cell_histories: dict[tuple[str, int], Runs]) -> SpreadEstimate | None:
    """One metric's between-session spread pooled over the session's cells, (config, level) ->
    stored sessions. Cells of one configuration share their launches, so each configuration
    counts once: the median of its cells' spreads (a stored session whose runs stalled at one
    level moves that level's spread, not the median) with K - 1 dof; configurations pool."""
    per_config: dict[str, list[SpreadEstimate]] = {}
    for (config, _c), hist in cell_histories.items():
        est = history_spread(hist)
        if est is not None:
            per_config.setdefault(config, []).append(est)
    medians = [SpreadEstimate(statistics.median(e.var for e in ests), min(e.dof for e in ests))
               for ests in per_config.values()]
    pooled = pool_spreads(medians)
    return replace(pooled, origin=Origin(HistoryOf.CONFIGURATIONS, len(medians))) if pooled is not None else None


def pair_spread(spec_history: Runs, reference_history: Runs) -> SpreadEstimate | None:
    """The spread behind a speculation ratio: both configurations' stored histories at this
    level, pooled (each K - 1 dof): ``CellRuns.history`` and ``ReferenceSide.stored``."""
    return pool_spreads([history_spread(spec_history) if spec_history else None,
                         history_spread(reference_history) if reference_history else None])


RATE_GATES = (THROUGHPUT, STEP_TIME)  # gates whose runs a stall slows (decide/consistency.py)


def runs_disagree(problem: Problem | None) -> bool:
    """The decision was not made because every launch's runs disagreed (measure again)."""
    return problem is not None and problem.why == Why.RUNS_DISAGREE


def _disagreeing(test: GateTest, aside: tuple[SetAside, ...]) -> GateResult:
    worst = max(aside, key=lambda a: a.gap)
    result = test.problem(Verdict.ERROR, Problem(Why.RUNS_DISAGREE, value=worst.gap, limit=worst.limit,
                                                 count=len(aside)))
    return replace(result, set_aside=aside)


def launch_history_gate(test: GateTest, cell: CellRuns, tolerance: float, prior: Prior, rule: Rule) -> GateResult:
    """This session's launches of a cell (one list of runs per server launch) against its stored
    sessions. Fails iff current/baseline is significantly below 1 and estimated below
    1 - tolerance (rule "significant"), or its whole interval is below 1 - tolerance
    ("beyond-tolerance"). The cell's own history estimates the between-session spread (K - 1
    dof, pooled with the prior) and drops a prior it contradicts (``prior.between_estimate``).
    For a rate, a launch whose runs disagree (decide/consistency.py) is set aside; when every
    launch is, the cell is not measured (an error, never a regression)."""
    launches, history = cell.launches, cell.history
    aside: tuple[SetAside, ...] = ()
    if test.gate.gate in RATE_GATES:
        launches, aside = cell.consistent()
        if aside and not launches:
            return _disagreeing(test, aside)
    runs = _flat(launches)
    if len(runs) < 2:
        return test.problem(Verdict.ERROR, Problem(Why.TOO_FEW_RUNS, count=len(runs)))
    own = history_spread(history)
    est = compare_launches(launches, history, Criterion(1 - tolerance, gate_confidence(test.alpha), rule),
                           unchecked_prior(prior, own), spread=own, pool=own)
    return test.result(est.outcome(), estimate=est, current=_mean(runs), reference=_mean(_flat(history)),
                       versus=Versus(Against.BASELINE, sessions=len(history)), tolerance=tolerance, rule=rule.fail_rule,
                       launches=_launch_count(launches), set_aside=aside)


def step_time_gate(test: GateTest, cell: CellRuns, tolerance: float, prior: Prior, rule: Rule) -> GateResult:
    """The engine's time per decode step of a request against its stored sessions. ``cell``
    holds step rates (1000 / step ms: lower is worse, as tok/s), so the gate is
    the history gate's; a step-time increase of ``tolerance`` is the rate ratio 1 / (1 +
    tolerance). The result's estimate is the rate ratio (what Holm and the summary compare);
    its figures are step times in ms and its tolerance the slowdown."""
    result = launch_history_gate(test, cell, 1 - 1 / (1 + tolerance), prior, rule)
    if result.estimate is None or result.current is None or result.reference is None:
        return result
    return replace(result, current=1e3 / result.current, reference=1e3 / result.reference, tolerance=tolerance)


# Two-sided level at which a half is named. A session makes two such claims per speculative cell
# (16 on the default suite); 1 - 0.05 / 16 ~ 0.997 keeps all of them right at 95 % jointly
# (Bonferroni) where nothing moved. At 0.95 the study's acceptance-only drop read as the engine's in
# 35 % of sessions (per-request acceptance; 12 % per-run; 45 % / 22.5 % with the prior at half the
# truth), for the step-time shift of 0.3-1.3 % that fewer tokens per step bring (docs/research/gate-study.md).
ATTRIBUTION_CONFIDENCE = 0.997


# A half is named only for an effect of its own: its change confidently beyond 1 % and beyond a
# third of the tok/s change. A drafter-only drop shortens the verify step by 0.3-1.3 % (fewer
# tokens per step: the gate audit's section 5), a true side effect that "excludes no change" read
# as the engine's in 3.5 % of the study's sessions (20 % with the prior at half the truth).
MIN_HALF_EFFECT = 0.01
MIN_HALF_SHARE = 1 / 3


def attribution(step_rate: RatioEstimate | None, accept: RatioEstimate | None,
                tok_s: RatioEstimate | None = None) -> Attribution:
    """Which half of a speculative cell's tok/s moved. tok/s of a request is its accept length
    over its step time (log tok/s = log accept length - log step time), so a tok/s change splits
    into the engine's share (step time) and the drafter's (accept length). A half is named when
    its interval (at ATTRIBUTION_CONFIDENCE) lies beyond its minimum effect on the log scale:
    MIN_HALF_EFFECT, or MIN_HALF_SHARE of the tok/s change (``tok_s``) where that is larger."""
    floor = max(math.log1p(MIN_HALF_EFFECT), MIN_HALF_SHARE * abs(math.log(tok_s.ratio)) if tok_s else 0.0)

    def beyond(e: RatioEstimate | None) -> bool:
        return e is not None and (math.log(e.high) < -floor or math.log(e.low) > floor)

    engine, drafter = beyond(step_rate), beyond(accept)
    half = Half.BOTH if engine and drafter else Half.ENGINE if engine else Half.DRAFTER if drafter else Half.NEITHER
    return Attribution(half, step_rate, accept)


@dataclass(frozen=True)
class ReferenceSide:
    """What a speculation test compares with: the reference's launches in this session (the day
    cancels), or else all its stored sessions of this environment (``history``).
    ``stored``: the reference's stored sessions at this level; with the speculative side's
    (``CellRuns.history``) their pooled spread (``pair_spread``) estimates the spread and checks
    the prior; without them (None) ``session_spread`` (the session's pooled tok/s spread) is the
    estimate."""

    versus: Versus
    launches: Runs | None = None
    history: Runs | None = None
    stored: Runs | None = None
    session_spread: SpreadEstimate | None = None
    stalls: StallBasis | None = None  # what its launches' stalls are judged on (a speculative reference's)


def must_win_gate(test: GateTest, spec: CellRuns, reference: ReferenceSide, min_gain: float, prior: Prior,
                  rule: Rule) -> GateResult:
    """Speculation vs its reference at one level, launches as units. ``spec``: the speculative
    configuration's launches, its stored sessions at this level and its stall basis (its runs'
    consistency is judged on them, decide/consistency.py).

    Hypothesis tested where speculation must win (``test.enforced``): H0 "spec/reference >= 1 +
    min_gain" (speculation wins as declared). The cell fails when the data reject H0 at the
    cell's alpha: the upper confidence bound is below 1 + min_gain. It passes when the lower
    bound is at or above 1 + min_gain (a confident win) and is inconclusive between. "Confidently
    above" cannot be required: where the true gain is a few percent (eagle3 at c16 on the fast
    profile: 2.3 %) no affordable number of launches resolves it, and every healthy run would fail.
    The fail rule is always "significant" here (``rule`` gives the pass level).
    """
    spec_kept, reference, aside = _consistent_sides(spec, reference)
    if aside and (not spec_kept or reference.launches == []):
        return _disagreeing(test, aside)
    threshold = 1 + min_gain
    own = pair_spread(spec.history, reference.stored) if reference.stored is not None else None
    estimate = own if own is not None else reference.session_spread
    criterion = Criterion(threshold, gate_confidence(test.alpha), replace(rule, fail_rule="significant"))
    if reference.launches:
        est = compare_launch_sets(spec_kept, reference.launches, criterion, prior, spread=estimate, pool=own)
        ref_runs = _flat(reference.launches)
    elif reference.history:
        # the reference's stored sessions check the prior where the pair has no history at this level
        pool = own if own is not None else history_spread(reference.history)
        est = compare_launches(spec_kept, reference.history, criterion, prior, spread=estimate, pool=pool)
        ref_runs = _flat(reference.history)
    else:
        raise ValueError("must_win_gate needs the reference's launches or its stored sessions")
    return test.result(est.outcome(), estimate=est, current=_mean(_flat(spec_kept)), reference=_mean(ref_runs),
                       versus=reference.versus, tolerance=min_gain, rule="significant", launches=_launch_count(spec_kept),
                       set_aside=aside)


def _consistent_sides(spec: CellRuns, reference: ReferenceSide) -> tuple[Runs, ReferenceSide, tuple[SetAside, ...]]:
    """Both sides' launches whose runs agree (decide/consistency.py), each side's limit pooled with
    its own stored sessions at this level, as the session's check before a re-measure pools it
    (``CellGates.runs_disagree``); the reference's launches become [] when none agrees."""
    spec_kept, spec_aside = spec.consistent()
    if not reference.launches:
        return spec_kept, reference, spec_aside
    ref_kept, ref_aside = consistent_launches(reference.launches, reference.stored or (), reference.stalls)
    ref_aside = tuple(replace(a, config=reference.versus.name) for a in ref_aside)
    return spec_kept, replace(reference, launches=ref_kept), spec_aside + ref_aside


class RelaunchWhy(TextEnum):
    """Why a configuration is launched again after a stage."""

    SUSPICIOUS = "suspicious"  # one of its enforced cells has p below the suspicion level
    RUNS_DISAGREE = "runs-disagree"  # one of its cells was not decided: every launch's runs disagreed
    REFERENCE = "reference"  # the reference of a suspicious speculation cell
    LEANS_TO_LOSS = "leans-to-loss"  # the reference of a relaunched configuration whose must-win cell leans to a loss


@dataclass(frozen=True)
class RelaunchReason:
    """One reason to relaunch: the test that asked for it, its estimate's ratio and p, the level
    (no ratio and p where the runs disagreed: nothing was estimated)."""

    why: RelaunchWhy
    gate: GateLabel
    config: str
    level: Level
    ratio: float | None
    p_value: float | None
    limit_p: float


def relaunch_plan(stage1: Sequence[GateResult], references: dict[str, str | None],
                  suspicion_p: float = 0.05, losing_p: float = 0.0) -> dict[str, list[RelaunchReason]]:
    """Which configurations to relaunch after a stage, and why (configuration -> reasons).

    A configuration is relaunched when one of its cells was not decided because every launch's
    runs disagreed (``runs_disagree``; the speculation gate's reference, when its launches did),
    and when one of its enforced cells has a one-sided p-value below
    ``suspicion_p`` (failed cells included: the relaunch sharpens the rest of its cells). A
    suspicious speculation cell relaunches the speculative configuration and its reference; so
    does, once the speculative configuration is relaunched anyway, a must-win speculation cell
    with p below ``losing_p`` (GateDesign.reference_losing_p). ``references``: configuration ->
    its reference (None for none).
    """
    plan = _disagreeing_plan(stage1, suspicion_p)
    for r in stage1:
        if r.estimate is None or not r.enforced or r.estimate.p_value >= suspicion_p:
            continue
        why = RelaunchReason(RelaunchWhy.SUSPICIOUS, r.gate, r.config, r.level, r.estimate.ratio, r.estimate.p_value,
                             suspicion_p)
        plan.setdefault(r.config, []).append(why)
        ref = references.get(r.config)
        if r.gate.gate == SPECULATION and ref:
            plan.setdefault(ref, []).append(replace(why, why=RelaunchWhy.REFERENCE))
    for r in stage1:
        ref = references.get(r.config)
        if (r.gate.gate != SPECULATION or r.estimate is None or not r.enforced or not ref or r.config not in plan
                or ref in plan or r.estimate.p_value >= losing_p):
            continue
        plan[ref] = [RelaunchReason(RelaunchWhy.LEANS_TO_LOSS, r.gate, r.config, r.level, r.estimate.ratio,
                                    r.estimate.p_value, losing_p)]
    return plan


def _disagreeing_plan(stage1: Sequence[GateResult], suspicion_p: float) -> dict[str, list[RelaunchReason]]:
    """The configurations whose launches a cell set aside, where no launch of it was left."""
    plan: dict[str, list[RelaunchReason]] = {}
    for r in stage1:
        if not runs_disagree(r.problem):
            continue
        for name in sorted({a.config or r.config for a in r.set_aside}):
            plan.setdefault(name, []).append(RelaunchReason(RelaunchWhy.RUNS_DISAGREE, r.gate, r.config, r.level,
                                                            None, None, suspicion_p))
    return plan


def family_alphas(tests: Sequence[tuple[str, bool]], family_alpha: float,
                  design: GateDesign = GateDesign()) -> list[float]:
    """Per-test alpha of a session's family: (gate, enforced) for every selected gate test.

    Weighted Bonferroni: test i gets family_alpha * w_i / sum(w), w_i its gate's weight
    (``design.gate_weights``), 0 for a test that cannot fail (report-only speculation), so the
    alphas of the tests that can fail sum to the family alpha. Holm over them is the weighted
    Holm (``holm_failures`` takes each result's alpha as its weight)."""
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
    out: dict[tuple[GateLabel, str, Level], GateResult] = {}
    for r in [*stage1, *stage2]:
        if r.key not in out or r.stage >= out[r.key].stage:
            out[r.key] = r
    return list(out.values())


def final_failures(stage1: Sequence[GateResult], stage2: Sequence[GateResult], tol: Tolerances,
                   design: GateDesign = GateDesign()) -> list[GateResult]:
    """Every enforced failure of a session: per-cell verdicts and Holm at the family alpha over
    each test's final decision (``final_results``). Non-sequential designs: ``stage2`` is empty."""
    if not design.screen_is_valid(tol.family_alpha):
        raise ValueError(f"relaunch_p {design.suspicion_p:g} is below family_alpha {tol.family_alpha:g}: a "
                         f"relaunch on suspicion needs relaunch_p >= family_alpha (docs/statistics.md)")
    final = final_results(stage1, stage2)
    return [r for r in final if counts_as_failure(r, tol)] + holm_failures(final, tol.family_alpha)


__all__ = ["ATTRIBUTION_CONFIDENCE", "GateDesign", "GateResult", "GateTest", "ReferenceSide", "RelaunchReason",
           "RelaunchWhy", "attribution", "counts_as_failure", "design_of", "family_alphas", "final_failures",
           "final_results", "gate_confidence", "holm_failures", "launch_history_gate", "must_win_gate", "pair_spread",
           "relaunch_plan", "session_spread", "step_time_gate"]
