"""Deciding one simulated session as the pytest session decides it.

The runs go to the functions the session calls, with the arguments it passes: per-test alphas
from ``gates.family_alphas``, the must-win gate with both configurations' stored sessions at its
level, ``gates.relaunch_plan`` after each stage, and Holm over each test's final decision
(``gates.final_failures``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from research.study.plan import GateSettings, suite_alphas
from research.study.simulate import Launch, reference_of
from research.study.verdict import SessionVerdict, cut_repeats, later_runs, speculation_ratios
from specguard.config import ServerConfig, Suite
from specguard.decide.consistency import StallBasis, steps_per_s
from specguard.decide.crossover import estimate_crossover
from specguard.decide.gates import (
    ATTRIBUTION_CONFIDENCE,
    CellRuns,
    GateDesign,
    GateTest,
    ReferenceSide,
    RelaunchReason,
    attribution,
    final_failures,
    final_results,
    launch_history_gate,
    must_win_gate,
    relaunch_plan,
    session_spread,
    step_time_gate,
)
from specguard.decide.prior import SpreadEstimate
from specguard.decide.result import Against, Attribution, GateResult, Half, Versus
from specguard.decide.stats import RatioEstimate
from specguard.labels import ACCEPT_LENGTH, SPECULATION, STEP_TIME, THROUGHPUT, GateLabel, Level, Verdict
from specguard.report.verdict_text import relaunch_reason


def decide_session(suite: Suite, settings: GateSettings, current: dict[str, Launch],
                   history: Sequence[dict[str, Launch]], more: dict[str, list[Launch]] | None = None) -> SessionVerdict:
    """Every gate of one session on simulated runs, with the session's alpha per cell and Holm.

    ``more``: further launches per configuration (used by the designs that relaunch)."""
    launches = {n: [first, *((more or {}).get(n, []))] for n, first in current.items()}
    return decide_design(suite, settings, launches, history)


@dataclass
class _SessionState:
    """One session's launches in use and decisions so far (``decide_design``)."""

    suite: Suite
    settings: GateSettings
    design: GateDesign
    cut: dict[str, list[Launch]]  # configuration -> its launches available, runs cut to the repeats
    hist: list[dict[str, Launch]]
    alpha: dict[str, float]
    used: dict[str, int]  # configuration -> launches used so far
    relaunched: dict[str, list[str]] = field(default_factory=dict)
    stage1: list[GateResult] = field(default_factory=list)
    later: list[GateResult] = field(default_factory=list)
    # Where a configuration is not relaunched: its first launch measured once more at each level
    # (the runs after the grid point's repeats), and the cells that took it (``_remeasure``)
    again: dict[str, Launch] = field(default_factory=dict)
    remeasured: set[tuple[str, int]] = field(default_factory=set)

    def decide(self, name: str, stage: int) -> list[GateResult]:
        """The cells of ``name`` on every launch each configuration has used so far."""
        pooled = {n: ls[: self.used[n]] for n, ls in self.cut.items()}
        return _decide_cells(self, pooled, stage, {name})

    def runs(self, launches: dict[str, list[Launch]], name: str, c: int, index: int) -> list[list[float]]:
        """One metric's runs of a cell (0 tok/s, 1 accept length, 2 step rate) per measurement:
        one per launch, and a re-measurement on the same server where it took one."""
        out = [launch[c][index] for launch in launches[name]]
        if (name, c) in self.remeasured:
            out.append(self.again[name][c][index])
        return out

    def tok_s(self, launches: dict[str, list[Launch]], name: str, c: int) -> CellRuns:
        """A cell's tok/s against its stored sessions, a speculative cell's stalls judged on its
        decode steps per second as the session judges them (``SessionParts.stall_basis``)."""
        history = [h[name][c][0] for h in self.hist]
        if not self.suite.servers[name].speculative:
            return CellRuns(self.runs(launches, name, c, 0), history)
        basis = StallBasis([steps_per_s(t, a) or list(t) for t, a in zip(self.runs(launches, name, c, 0),
                                                                         self.runs(launches, name, c, 1), strict=True)],
                           [steps_per_s(h[name][c][0], h[name][c][1]) or list(h[name][c][0]) for h in self.hist])
        return CellRuns(self.runs(launches, name, c, 0), history, basis)


def _start(suite: Suite, settings: GateSettings, launches: dict[str, list[Launch]],
           history: Sequence[dict[str, Launch]]) -> _SessionState:
    tol = settings.tolerances
    design = settings.gate_design()
    alpha = suite_alphas(suite, tol.family_alpha, design)
    r = settings.repeats
    hist = [{n: cut_repeats(session, r) for n, session in h.items()} for h in history[: tol.history_sessions]]
    most = max(design.launches, design.max_launches) if design.sequential else design.launches
    cut = {n: [cut_repeats(launch, r) for launch in ls[:most]] for n, ls in launches.items()}
    used = {n: min(design.launches, len(ls)) for n, ls in cut.items()}
    state = _SessionState(suite, settings, design, cut, hist, alpha, used)
    if remeasures(settings):
        state.again = {n: later_runs(ls[0], r) for n, ls in launches.items()}
        _remeasure(state)
    return state


def remeasures(settings: GateSettings) -> bool:
    """Whether the session measures a cell once more on the same server when its runs disagree:
    where the configuration is not relaunched and one launch is planned (session/campaign.py
    ``_again_if_runs_disagree``; with launches > 1 or relaunching, a new launch replaces it)."""
    design = settings.gate_design()
    return not design.sequential and design.launches == 1


def _remeasure(state: _SessionState) -> None:
    """The cells whose first measurement's tok/s (a speculative cell's judged on its decode steps per
    second) or step rates disagree, each measured again, as
    ``CellGates.runs_disagree`` picks them (the limit pooled with the cell's stored sessions).
    Without the extra runs (a trial simulated with the grid point's repeats only) nothing is."""
    for name, ls in state.cut.items():
        for c in state.suite.sweep.concurrency:
            again = state.again.get(name, {}).get(c)
            if again is None or not again[0]:
                continue
            first = {name: ls[:1]}
            rates = [h[name][c][2] for h in state.hist if h[name][c][2]]
            for cell in (state.tok_s(first, name, c), CellRuns([ls[0][c][2]], rates)):  # what a stall slows
                if cell.launches[0] and cell.consistent()[1]:
                    state.remeasured.add((name, c))


def decide_design(suite: Suite, settings: GateSettings, launches: dict[str, list[Launch]],
                  history: Sequence[dict[str, Launch]]) -> SessionVerdict:
    """One session under a decide/ design: L fixed launches, or relaunches on suspicion.

    Sequential designs run as the session's sweep of a configuration does, one configuration
    after another in the suite's order: its cells are decided (stage 1); while ``relaunch_plan``
    on the latest stage's results names it and it has fewer than ``design.max_launches``
    launches, it gets one more launch and its cells are decided again on all its launches pooled
    (stage k + 1 supersedes stage k). A suspicious speculation cell also relaunches the
    reference, but only while the reference has no more launches than the speculative
    configuration had before this relaunch (so the pair stays level); the reference's own cells
    keep the decisions of its own turn, as in the session. A speculation cell is decided against
    the reference's launches at that moment.

    ``launches`` holds at least as many launches per configuration as the design may use."""
    state = _start(suite, settings, launches, history)
    for name in suite.servers:
        results = state.decide(name, 1)
        state.stage1 += results
        if state.design.sequential:
            _relaunch_while_suspicious(state, name, results)
    return _verdict(state)


def _relaunch_while_suspicious(state: _SessionState, name: str, results: list[GateResult]) -> None:
    """Stages 2, 3, ... of one configuration: relaunched (with its reference where the pair must
    stay level) and decided again while ``relaunch_plan`` names it, up to ``max_launches``."""
    design, used, cut = state.design, state.used, state.cut
    refs = {n: c.reference for n, c in state.suite.servers.items()}
    ref, stage = refs.get(name), 1
    while used[name] < design.max_launches and used[name] < len(cut[name]):
        wanted = relaunch_plan(results, refs, design.suspicion_p, design.reference_losing_p)
        if name not in wanted and (not ref or ref not in wanted):
            break
        stage += 1
        label = f"launch {stage}: " if stage > 2 else ""
        if ref and _reference_comes_along(state, name, ref, wanted, results):
            used[ref] += 1
            why = [relaunch_reason(w) for w in wanted[ref]] if ref in wanted else [f"reference of {name}"]
            state.relaunched.setdefault(ref, []).extend(label + w for w in why)
        used[name] += 1
        state.relaunched.setdefault(name, []).extend(label + relaunch_reason(w) for w in wanted.get(name, []))
        results = state.decide(name, stage)
        state.later += results


def _reference_comes_along(state: _SessionState, name: str, ref: str, wanted: dict[str, list[RelaunchReason]],
                           results: list[GateResult]) -> bool:
    """Whether ``ref`` gets a launch with this relaunch of ``name``: wanted (or following by the
    grid point's variant rule), and only while it has no more launches than ``name`` has so far."""
    design, used = state.design, state.used
    before = used[name]
    follows = ref in wanted or (name in wanted and _reference_follows(state.settings.follows, results, ref,
                                                                        before + 1 == design.max_launches))
    return follows and used[ref] <= before and used[ref] < min(design.max_launches, len(state.cut[ref]))


def _verdict(state: _SessionState) -> SessionVerdict:
    final = final_results(state.stage1, state.later)
    failing = final_failures(final, [], state.settings.tolerances, state.design)
    enforced = [g for g in final if g.enforced]
    estimates = {n: estimate_crossover(rt) for n, rt in speculation_ratios(final).items()}
    halves = {f"{g.config} {g.level}": str(g.attribution.half if g.attribution else Half.NEITHER) for g in final
              if g.gate.gate == THROUGHPUT and g.verdict in (Verdict.FAIL, Verdict.INCONCLUSIVE)
              and state.suite.servers[g.config].speculative}
    return SessionVerdict(bool(failing), failing, sum(g.verdict == Verdict.INCONCLUSIVE for g in enforced), len(enforced),
                          {n: e.first_behind for n, e in estimates.items()}, state.used, state.relaunched, estimates,
                          {str(g.gate): True for g in failing}, halves)


def _decide_cells(state: _SessionState, launches: dict[str, list[Launch]], stage: int,
                  only: set[str]) -> list[GateResult]:
    """Every gate of ``only``'s cells on ``launches``, at the stage's per-test alpha
    (``state.alpha``: "speculation" where it must win, "speculation, report only" elsewhere)."""
    tol, design, hist, alpha = state.settings.tolerances, state.design, state.hist, state.alpha
    out: list[GateResult] = []
    tok_prior = replace(design.prior(tol.prior_between_sd), session=_session_check(state, 0))
    step_prior = replace(design.prior(tol.prior_between_sd), session=_session_check(state, 2))
    for name, cfg in state.suite.servers.items():
        if name not in only:
            continue
        for c in state.suite.sweep.concurrency:
            at = Level(c)
            tok = state.tok_s(launches, name, c)
            throughput = launch_history_gate(_test(THROUGHPUT, name, at, alpha, stage), tok, tol.throughput, tok_prior,
                                             design.rule(tol.fail_rule))
            if cfg.speculative and throughput.estimate is not None:
                throughput = replace(throughput, attribution=_attribution(state, name, c, launches, throughput.estimate))
            out += [throughput, step_time_gate(_test(STEP_TIME, name, at, alpha, stage),
                                               CellRuns(state.runs(launches, name, c, 2), [h[name][c][2] for h in hist]),
                                               tol.step_time, step_prior, design.rule(tol.fail_rule))]
            if not cfg.speculative:
                continue
            out.append(launch_history_gate(_test(ACCEPT_LENGTH, name, at, alpha, stage),
                                           CellRuns(state.runs(launches, name, c, 1), [h[name][c][1] for h in hist]),
                                           tol.accept_length, design.prior(tol.prior_between_sd_accept, day_sd=0.0),
                                           design.rule(tol.fail_rule)))
            out.append(_must_win(state, name, cfg, c, tok, launches, stage))
    return out


def _session_check(state: _SessionState, index: int) -> SpreadEstimate | None:
    """The session's second prior check of a metric (0 tok/s, 2 step rate; session/history.py
    ``check_spread``): every configuration's stored sessions at every level."""
    return session_spread({(n, c): [h[n][c][index] for h in state.hist] for n in state.suite.servers
                           for c in state.suite.sweep.concurrency if all(h[n][c][index] for h in state.hist)})


def _test(gate: str, name: str, level: Level, alpha: dict[str, float], stage: int) -> GateTest:
    return GateTest(GateLabel(gate), name, level, alpha[gate], stage=stage)


def _attribution(state: _SessionState, name: str, c: int, launches: dict[str, list[Launch]],
                 tok_s: RatioEstimate) -> Attribution | None:
    """The half a speculative cell's tok/s verdict names, as the session's ``CellGates._attribute``
    finds it: the step-rate and accept-length estimates against the cell's history at
    ATTRIBUTION_CONFIDENCE (tolerance 0: an estimate, not a decision), then ``gates.attribution``."""
    tol, design, hist = state.settings.tolerances, state.design, state.hist
    one_sided = (1 - ATTRIBUTION_CONFIDENCE) / 2

    def estimate(index: int, gate: str, sd: float, day: float | None) -> RatioEstimate | None:
        runs = state.runs(launches, name, c, index)
        history = [s for s in (h[name][c][index] for h in hist) if s]
        if not history or sum(len(r) for r in runs) < 2:
            return None
        at = GateTest(GateLabel(gate), name, Level(c), one_sided)
        return launch_history_gate(at, CellRuns(runs, history), 0.0, design.prior(sd, day), design.rule(tol.fail_rule)).estimate

    step = estimate(2, STEP_TIME, tol.prior_between_sd, None)
    accept = estimate(1, ACCEPT_LENGTH, tol.prior_between_sd_accept, 0.0)
    return attribution(step, accept, tok_s) if step is not None or accept is not None else None


def _must_win(state: _SessionState, name: str, cfg: ServerConfig, c: int, tok: CellRuns,
              launches: dict[str, list[Launch]], stage: int) -> GateResult:
    """The speculation gate of one cell, called as the session calls it."""
    limit = cfg.speculation_must_win_up_to
    hist = state.hist
    ref = reference_of(cfg)
    pair = ([h[name][c][0] for h in hist], [h[ref][c][0] for h in hist]) if state.settings.pair_histories else None
    must_win = limit is not None and c <= limit
    tol, design = state.settings.tolerances, state.design
    test = GateTest(GateLabel(SPECULATION), name, Level(c),
                    state.alpha["speculation" if must_win else "speculation, report only"], enforced=must_win, stage=stage)
    side = ReferenceSide(Versus(Against.REFERENCE, ref), launches=state.runs(launches, ref, c, 0),
                         stored=pair[1] if pair else None)
    # without the pair's histories the speculative side's limit pools nothing stored either
    spec = tok if pair else CellRuns(tok.launches, (), tok.stalls and replace(tok.stalls, history=()))
    return must_win_gate(test, spec, side, tol.speculation_min_gain, design.prior(tol.prior_between_sd),
                         design.rule(tol.fail_rule))


def _reference_follows(rule: str, results: Sequence[GateResult], ref: str | None, last: bool) -> bool:
    """Whether a relaunched speculative configuration brings its reference along although no
    speculation cell was suspicious (``GateSettings.reference_follows``)."""
    if not ref or rule == "speculation":
        return False
    if rule == "relaunch":
        return True
    if rule == "last":
        return last
    if rule == "not-passing":  # a must-win speculation cell that is not (yet) a confident win
        return any(r.gate.gate == SPECULATION and r.enforced and r.verdict != Verdict.PASS for r in results)
    if rule.startswith("p<"):
        x = float(rule[2:])
        return any(r.gate.gate == SPECULATION and r.enforced and r.estimate is not None and r.estimate.p_value < x
                   for r in results)
    raise ValueError(f"reference_follows {rule!r}; use speculation, relaunch, last or p<x")
