"""The gates, each a one-line verdict with its evidence (docs/statistics.md).

- throughput and accept length (``launch_history_gate``): this session's launches of a cell
  against the cell's stored baseline sessions;
- speculation (``must_win_gate``): a speculative configuration against its non-speculative
  reference, measured in this session when possible, else against the reference's stored sessions.

Each test gets its share of the family alpha (``family_alphas``); at the end Holm runs over each
test's final decision (``final_failures``), which can only add failures (``holm_failures``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from specguard.config import PRIOR_BETWEEN_DOF, Suite, Tolerances
from specguard.decide.stats import (
    FAIL,
    INCONCLUSIVE,
    PASS,
    PRIOR_CHECK_P,
    RatioEstimate,
    SpreadEstimate,
    compare_launch_sets,
    compare_launches,
    history_spread,
    holm_adjust,
    pool_spreads,
)
from specguard.labels import STEP_TIME

SKIP, ERROR = "skip", "error"


@dataclass
class GateResult:
    gate: str  # a labels.GateLabel: "throughput", "accept_length[code]", "step_time", "speculation"
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
    # A speculative cell's tok/s verdict: which half moved, "engine" (step time), "drafter"
    # (accept length), "both", or "" (neither resolved, or not asked); see ``attribution``.
    attribution: str = ""

    @property
    def failed(self) -> bool:
        return self.verdict == FAIL and self.enforced


def _mean(xs: Sequence[float]) -> float:
    return sum(xs) / len(xs) if xs else math.nan


def _flat(groups: Sequence[Sequence[float]]) -> list[float]:
    """Every run of some launches (or stored sessions), in order."""
    return [v for g in groups for v in g]


def _launch_count(launches: Sequence[Sequence[float]]) -> int:
    return sum(1 for launch in launches if len(launch))


def gate_confidence(alpha_cell: float) -> float:
    """Two-sided CI level whose upper bound is the one-sided test at alpha_cell."""
    return 1 - 2 * alpha_cell


def verdict_line(gate: str, config: str, c: int, unit: str, cur: float, ref: float, ref_name: str,
                 est: RatioEstimate, tol_text: str, verdict: str) -> str:
    """The message of a gate result: both sides, the ratio with its interval and spread, the verdict."""
    ci = f"{est.confidence * 100:.2f}% CI"
    if verdict == PASS and est.pass_low is not None and est.pass_confidence is not None:
        verdict += f" ({est.pass_confidence:.0%} lower bound {est.pass_low:.3f} >= {est.threshold:.2f})"
    return (f"{gate} {config} c{c}: {cur:.4g}{unit} vs {ref_name} {ref:.4g}{unit}, ratio {est.describe()} ({ci}, "
            f"between-launch sd {est.between_sd:.1%} from {est.between_source}), {tol_text} -> {verdict.upper()}")


def counts_as_failure(result: GateResult, tol: Tolerances) -> bool:
    if not result.enforced:
        return False
    if result.verdict in (FAIL, ERROR):
        return True
    return result.verdict == INCONCLUSIVE and tol.inconclusive == "fail"


def holm_failures(results: Sequence[GateResult], family_alpha: float) -> list[GateResult]:
    """Enforced results that Holm rejects at the family level but the per-cell test passed
    (rejected = significantly below the tested ratio, with the estimate beyond the threshold)."""
    tested = [(r, r.estimate) for r in results if r.estimate is not None and r.enforced]
    # Weighted Holm with weights = the per-test alphas (a weighted Bonferroni split, ``family_alphas``);
    # equal alphas (or any unknown) give the ordinary Holm.
    alphas = [r.alpha for r, _ in tested]
    weights = [a for a in alphas if a] if all(alphas) else None
    adjusted = holm_adjust([e.p_value for _, e in tested], weights)
    return [r for (r, e), p in zip(tested, adjusted) if p < family_alpha and e.ratio < e.threshold and r.verdict != FAIL]


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
    prior_check_p: float = PRIOR_CHECK_P  # level at which a cell's history contradicts the prior (stats.checked_prior)

    @property
    def sequential(self) -> bool:
        return self.relaunch == "on-suspicion"

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


def pair_spread(spec_history: Sequence[Sequence[float]], reference_history: Sequence[Sequence[float]]) -> SpreadEstimate | None:
    """The spread behind a speculation ratio: both configurations' stored histories at this
    level, pooled (each K - 1 dof). Pass it as ``must_win_gate(..., pair_histories=...)``."""
    return pool_spreads([history_spread(spec_history) if spec_history else None,
                         history_spread(reference_history) if reference_history else None])


def launch_history_gate(gate: str, config: str, concurrency: int, launches: Sequence[Sequence[float]],
                        history: Sequence[Sequence[float]], *, tolerance: float, prior_between_sd: float,
                        alpha_cell: float, rule: str, design: GateDesign = GateDesign(),
                        prior_day_sd: float | None = None, stage: int = 1) -> GateResult:
    """This session's launches of a cell (one list of runs per server launch) against its stored
    sessions. Fails iff current/baseline is significantly below 1 and estimated below
    1 - tolerance (rule "significant"), or its whole interval is below 1 - tolerance
    ("beyond-tolerance"). The cell's own history estimates the between-session spread (K - 1
    dof, pooled with the prior) and raises a prior it contradicts (``stats.checked_prior``)."""
    runs = _flat(launches)
    if len(runs) < 2:
        return GateResult(gate, config, concurrency, ERROR,
                          f"{gate} {config} c{concurrency}: only {len(runs)} samples; need >= 2")
    day = design.prior_day_sd if prior_day_sd is None else prior_day_sd
    own = history_spread(history)
    est = compare_launches(launches, history, threshold=1 - tolerance, prior_between_sd=prior_between_sd,
                           prior_day_sd=min(day, prior_between_sd), confidence=gate_confidence(alpha_cell), rule=rule,
                           spread=own, prior_dof=design.prior_dof, pass_confidence=design.pass_confidence, pool=own,
                           prior_check_p=design.prior_check_p)
    verdict = est.outcome()
    unit = " tok/s" if gate == "throughput" else ""
    base_mean = _mean(_flat(history))
    n_l = _launch_count(launches)
    msg = verdict_line(gate, config, concurrency, unit, _mean(runs), base_mean,
                       f"baseline ({len(history)} session{'s' if len(history) != 1 else ''})", est,
                       f"tolerance {tolerance:.0%}, rule {rule}" + (f", {n_l} launches" if n_l > 1 else ""), verdict)
    return GateResult(gate, config, concurrency, verdict, msg, est, _mean(runs), base_mean, alpha=alpha_cell,
                      launches=n_l, stage=stage)


def step_time_gate(config: str, concurrency: int, launches: Sequence[Sequence[float]], history: Sequence[Sequence[float]],
                   *, tolerance: float, prior_between_sd: float, alpha_cell: float, rule: str,
                   design: GateDesign = GateDesign(), stage: int = 1) -> GateResult:
    """The engine's time per decode step of a request against its stored sessions. ``launches``
    and ``history`` hold step rates (1000 / step ms: lower is worse, as tok/s), so the gate is
    the history gate's; a step-time increase of ``tolerance`` is the rate ratio 1 / (1 +
    tolerance). The result's estimate is the rate ratio (what Holm and the summary compare);
    its message and figures speak of step time in ms."""
    result = launch_history_gate(STEP_TIME, config, concurrency, launches, history, tolerance=1 - 1 / (1 + tolerance),
                                 prior_between_sd=prior_between_sd, alpha_cell=alpha_cell, rule=rule, design=design,
                                 stage=stage)
    est = result.estimate
    if est is None or result.current is None or result.reference is None:
        return result
    result.current, result.reference = 1e3 / result.current, 1e3 / result.reference
    n = len(history)
    result.message = (f"step_time {config} c{concurrency}: {result.current:.4g} ms vs baseline ({n} session"
                      f"{'s' if n != 1 else ''}) {result.reference:.4g} ms, engine step time {step_change(est)} "
                      f"({est.confidence * 100:.2f}% CI, between-launch sd {est.between_sd:.1%} from {est.between_source}), "
                      f"tolerance {tolerance:.0%} slower, rule {rule}" + result.message[result.message.rindex(" -> "):])
    return result


def step_change(rate_ratio: RatioEstimate) -> str:
    """A step-rate ratio as the change of step time it means: "+6.1% [+4.0%, +8.3%]"."""
    return (f"{1 / rate_ratio.ratio - 1:+.1%} [{1 / rate_ratio.high - 1:+.1%}, "
            f"{1 / rate_ratio.low - 1:+.1%}]")


def ratio_change(ratio: RatioEstimate) -> str:
    """A ratio as a change: "-0.2% [-0.5%, +0.1%]"."""
    return f"{ratio.ratio - 1:+.1%} [{ratio.low - 1:+.1%}, {ratio.high - 1:+.1%}]"


# Two-sided level at which a half is named. A session makes two such claims per speculative cell
# (16 on the default suite); 1 - 0.05 / 16 ~ 0.997 keeps all of them right at 95 % jointly
# (Bonferroni) where nothing moved. At 0.95 the study's acceptance-only drop read as the engine's in
# 35 % of sessions (per-request acceptance; 12 % per-run; 45 % / 22.5 % with the prior at half the
# truth), for the step-time shift of 0.3-1.3 % that fewer tokens per step bring (docs/gate-study.md).
ATTRIBUTION_CONFIDENCE = 0.997


def attribution(step_rate: RatioEstimate | None, accept: RatioEstimate | None) -> tuple[str, str]:
    """Which half of a speculative cell's tok/s moved: (half, text). tok/s of a request is its
    accept length over its step time, so a tok/s change splits into the engine's (step time)
    and the drafter's (accept length). A half is named when its interval (at
    ATTRIBUTION_CONFIDENCE) excludes no change: "engine", "drafter", "both" or ""."""
    parts, moved = [], []
    if step_rate is not None:
        parts.append(f"engine step time {step_change(step_rate)}")
        if step_rate.high < 1 or step_rate.low > 1:
            moved.append("engine")
    if accept is not None:
        parts.append(f"accept length {ratio_change(accept)}")
        if accept.high < 1 or accept.low > 1:
            moved.append("drafter")
    half = "both" if len(moved) == 2 else moved[0] if moved else ""
    return half, ", ".join(parts)


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
    ``pair_histories``: the speculative configuration's and the reference's stored sessions at
    this level, whose spreads (pooled, ``pair_spread``) estimate the spread and check the prior;
    without them (or without any stored session) ``spread`` (the session's pooled tok/s spread,
    ``session_spread``) is the estimate.
    """
    threshold = 1 + tol.speculation_min_gain
    own = pair_spread(*pair_histories) if pair_histories is not None else None
    day, confidence = min(design.prior_day_sd, tol.prior_between_sd), gate_confidence(alpha_cell)
    estimate = own if own is not None else spread
    if reference:
        est = compare_launch_sets(spec, reference, threshold=threshold, prior_between_sd=tol.prior_between_sd,
                                  prior_day_sd=day, confidence=confidence, rule="significant", spread=estimate,
                                  prior_dof=design.prior_dof, pass_confidence=design.pass_confidence, pool=own,
                                  prior_check_p=design.prior_check_p)
        ref_runs = _flat(reference)
    elif reference_history:
        # the reference's stored sessions check the prior where the pair has no history at this level
        est = compare_launches(spec, reference_history, threshold=threshold, prior_between_sd=tol.prior_between_sd,
                               prior_day_sd=day, confidence=confidence, rule="significant", spread=estimate,
                               prior_dof=design.prior_dof, pass_confidence=design.pass_confidence,
                               pool=own if own is not None else history_spread(reference_history),
                               prior_check_p=design.prior_check_p)
        ref_runs = _flat(reference_history)
    else:
        raise ValueError("must_win_gate needs the reference's launches or its stored sessions")
    verdict = est.outcome()
    where = "must win here" if must_win else "report only"
    runs = _flat(spec)
    n_l = _launch_count(spec)
    msg = verdict_line("speculation", config, concurrency, " tok/s", _mean(runs), _mean(ref_runs), reference_name, est,
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
        why = (f"{r.gate} {r.config} c{r.concurrency}: p = {r.estimate.p_value:.3g} < {suspicion_p:g} "
               f"(ratio {r.estimate.ratio:.3f})")
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
    out: dict[tuple[str, str, int], GateResult] = {}
    for r in [*stage1, *stage2]:
        key = (r.gate, r.config, r.concurrency)
        if key not in out or r.stage >= out[key].stage:
            out[key] = r
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


__all__ = ["ERROR", "FAIL", "INCONCLUSIVE", "PASS", "SKIP", "GateDesign", "GateResult", "counts_as_failure", "design_of",
           "family_alphas", "final_failures", "final_results", "gate_confidence", "holm_failures", "launch_history_gate",
           "must_win_gate", "pair_spread", "relaunch_plan", "session_spread", "step_time_gate", "attribution",
           "verdict_line"]
