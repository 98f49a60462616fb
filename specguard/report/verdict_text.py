"""Every gate decision in words: the one line a failing test prints, the summary's and the reports'
decision lines, all rendered from a `GateResult`'s fields (decide/result.py), never edited later."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from specguard.decide.consistency import SetAside
from specguard.decide.gates import RelaunchReason, RelaunchWhy
from specguard.decide.prior import HistoryOf, Origin, SpreadSource
from specguard.decide.result import (
    HISTORY_MISSING,
    Against,
    Attribution,
    Factors,
    GateResult,
    Half,
    PositionShare,
    Problem,
    Soak,
    SoakMetric,
    SoakShift,
    Versus,
    Why,
)
from specguard.decide.stats import RatioEstimate
from specguard.labels import SPECULATION, STEP_TIME, Verdict
from specguard.notes import Note
from specguard.report.note_text import note_line
from specguard.store.baseline_file import FieldDifference
from specguard.store.gaps import GapKind, HistoryGap

MOVED = {Half.ENGINE: "the engine moved", Half.DRAFTER: "the drafter moved", Half.BOTH: "both halves moved",
         Half.NEITHER: "neither half resolved", Half.ENGINE_ONLY: "acceptance forced: the engine alone"}


def where(r: GateResult) -> str:
    """How a decision's line begins: "throughput eagle3 c16", "speculation (goodput) mtp r8"."""
    gate = "speculation (goodput)" if r.goodput and r.gate.gate == SPECULATION and r.problem is None else str(r.gate)
    return f"{gate} {r.config} {r.level}"


def message(r: GateResult) -> str:
    """The decision's line, then one "notes:" line per note (drift, the server's, the measurement's)."""
    if r.problem is not None:
        head = problem_line(r, r.problem)
    else:
        head = soak_line(r, r.soak) if r.soak is not None else statistics_line(r)
    notes = ([drift_line(r)] if r.drift is not None and (r.problem is None or r.problem.why != Why.ACCEPT_DRIFT) else [])
    notes += [positions_line(r.positions)] if r.positions else []
    notes += [set_aside_line(r.set_aside, r.problem is not None)] if r.set_aside else []
    notes += [note_line(n) for n in dict.fromkeys(r.notes)]
    return head + "".join(f"\n  notes: {n}" for n in notes)


def ratio_text(e: RatioEstimate) -> str:
    """"0.981 [0.962, 1.001]"."""
    return f"{e.ratio:.3f} [{e.low:.3f}, {e.high:.3f}]"


def step_change(rate_ratio: RatioEstimate) -> str:
    """A step-rate ratio as the change of step time it means: "+6.1% [+4.0%, +8.3%]"."""
    return f"{1 / rate_ratio.ratio - 1:+.1%} [{1 / rate_ratio.high - 1:+.1%}, {1 / rate_ratio.low - 1:+.1%}]"


def ratio_change(ratio: RatioEstimate) -> str:
    """A ratio as a change: "-0.2% [-0.5%, +0.1%]"."""
    return f"{ratio.ratio - 1:+.1%} [{ratio.low - 1:+.1%}, {ratio.high - 1:+.1%}]"


def versus_text(v: Versus | None) -> str:
    """What the cell was compared with, as the line names it."""
    if v is None:
        return "?"
    s = "s" if v.sessions != 1 else ""
    return {Against.BASELINE: f"baseline ({v.sessions} session{s})",
            Against.REFERENCE: f"{v.name} (this session)",
            Against.REFERENCE_ROLE: f"{v.name} (this session, measured as reference)",
            Against.STORED_REFERENCE: f"{v.name} (stored, {v.sessions} session{s}, same environment)"}[v.against]


def _interval(e: RatioEstimate) -> str:
    return f"({e.confidence * 100:.2f}% CI, between-launch sd {e.between_sd:.1%} from {spread_source_text(e.between_source)})"


def origin_text(o: Origin) -> str:
    """"history of 5 sessions", "3 configurations' histories", "this run's launches of eagle3"."""
    return {HistoryOf.SESSIONS: f"history of {o.count} sessions" if o.count else "history",
            HistoryOf.CELLS: f"{o.count} cells' histories",
            HistoryOf.CONFIGURATIONS: f"{o.count} configurations' histories",
            HistoryOf.LAUNCHES: f"this run's launches of {', '.join(o.names)}" if o.names else "this session's launches",
            }[o.of]


def spread_source_text(s: SpreadSource) -> str:
    """Where a between-launch spread came from: "prior + history of 5 sessions, 2 launches",
    "3 configurations' histories (the prior 1.50% contradicted, dropped)"."""
    if s.legacy_text:
        return s.legacy_text
    history = origin_text(s.history) + (" (pooled over the levels)" if s.levels_pooled else "") if s.history else ""
    if s.prior:
        text = f"prior + {history}" if history else "prior"
        if s.widened != 1.0:
            text += f" (x{s.widened:g}: too few stored sessions to check it)"
    elif s.dropped_prior_sd is not None:
        text = f"{history} (the prior {s.dropped_prior_sd:.2%} contradicted, dropped)"
    else:  # an A/B run: no prior, its own launches (and perhaps the other configurations')
        return " and ".join([*([history] if history else []), "both builds' own launches"])
    if len(s.launches) == 2:
        return f"{text}; {s.launches[0]}+{s.launches[1]} launches"
    return f"{text}, {s.launches[0]} launches" if s.launches and s.launches[0] > 1 else text


def _outcome(r: GateResult, e: RatioEstimate) -> str:
    """" -> FAIL", or a pass with the one-sided bound it rests on."""
    text = str(r.verdict)
    if r.verdict == Verdict.PASS and e.pass_low is not None and e.pass_confidence is not None:
        text += f" ({e.pass_confidence:.0%} lower bound {e.pass_low:.3f} >= {e.threshold:.2f})"
    return f" -> {text.upper()}"


def statistics_line(r: GateResult) -> str:
    """A decision the statistics made: both sides, the ratio with its interval and spread, the rule."""
    e = r.estimate
    if e is None or r.current is None or r.reference is None:  # a document written by hand, or damaged
        return f"{where(r)}: {str(r.verdict).upper()} (no figures recorded)"
    if r.gate.gate == STEP_TIME:
        return (f"{where(r)}: {r.current:.4g} ms vs {versus_text(r.versus)} {r.reference:.4g} ms, engine step time "
                f"{step_change(e)} {_interval(e)}, tolerance {r.tolerance:.0%} slower, rule {r.rule}{_outcome(r, e)}")
    sides = f"{where(r)}: {r.current:.4g}{r.unit} vs {versus_text(r.versus)} {r.reference:.4g}{r.unit}"
    if r.gate.gate == SPECULATION:
        must = "must win here" if r.enforced else "report only"
        rule = f"fails if confidently below {e.threshold:.2f}x ({must})"
        extra = factors_text(r.factors) if r.factors is not None else ""
    else:
        rule = f"tolerance {r.tolerance:.0%}, rule {r.rule}" + (f", {r.launches} launches" if r.launches > 1 else "")
        extra = attribution_text(r.attribution) if r.attribution is not None else ""
    return f"{sides}, ratio {ratio_text(e)} {_interval(e)}, {rule}{extra}{_outcome(r, e)}"


def attribution_text(a: Attribution) -> str:
    """"; engine step time +5.8% [...], accept length +0.0% [...] (the engine moved)"."""
    parts = ([f"engine step time {step_change(a.step_rate)}"] if a.step_rate is not None else [])
    parts += [f"accept length {ratio_change(a.accept)}"] if a.accept is not None else []
    return f"; {', '.join(parts)} ({MOVED[a.half]})"


def factors_text(f: Factors) -> str:
    """Where a speculative configuration's speed comes from against its reference measured here."""
    return (f"; the drafter's accept length {f.accept_length:.2f} x the engine's step time ratio {f.step_ratio:.2f} "
            f"({f.reference_step_ms:.3g} ms the reference's decode step / {f.step_ms:.3g} ms the verify step) "
            f"= {f.product:.2f}")


def drift_line(r: GateResult) -> str:
    d = r.drift
    assert d is not None
    return (f"accept length fell {d.change:+.1%} across the cell's {d.runs} runs in time order "
            f"(trend p = {d.p_value:.2g} < {d.limit_p}): acceptance drifts within the session")


def problem_line(r: GateResult, p: Problem) -> str:
    """A decision the statistics did not make (or overruled), and why."""
    at = where(r)
    if p.why in HISTORY_MISSING:  # the line names the cell
        return cell_gap_line(p.detail) if isinstance(p.detail, HistoryGap) else str(p.detail)
    if p.why == Why.UNAVAILABLE:
        return _reason(p)  # the reason's line names the configuration
    if p.why == Why.ACCEPT_DRIFT:
        return f"{at}: {drift_line(r)} (advanced.accept_drift = \"fail\")"
    return f"{at}: {_PROBLEMS[p.why](p, r)}"


def _reason(p: Problem) -> str:
    """Why a configuration could not be measured: its reason's line (an older file's line as written)."""
    return note_line(p.detail) if isinstance(p.detail, Note) else str(p.detail)


def _share_change(s: PositionShare) -> str:
    """One position's change: "-34.0% [-40.1%, -27.5%]", or "0 of steps" when none reached it."""
    return ratio_change(s.estimate) if s.estimate is not None else "fell to 0"


SOAK_NAMES = {SoakMetric.ACCEPT_LENGTH: "accept length", SoakMetric.STEP_TIME: "step time",
              SoakMetric.THROUGHPUT: "tok/s", SoakMetric.ITL_P99: "ITL p99"}
SOAK_HALF = {Half.DRAFTER: "the drafter", Half.ENGINE: "the engine", Half.BOTH: "the drafter and the engine"}


def soak_shift_text(s: SoakShift) -> str:
    """"accept length -9.8% [-12.1%, -7.4%] from window 7 (3.02 -> 2.72)"."""
    fmt = ".3g" if s.metric != SoakMetric.THROUGHPUT else ".0f"
    return (f"{SOAK_NAMES[s.metric]} {s.ratio - 1:+.1%} [{s.low - 1:+.1%}, {s.high - 1:+.1%}] from window {s.window} "
            f"({s.before:{fmt}} -> {s.after:{fmt}})")


def soak_line(r: GateResult, soak: Soak) -> str:
    """A soak test's line: its windows, what slid from which window, and which half moved."""
    head = f"{where(r)}: {soak.windows} windows after {soak.warmup} warm-up"
    if soak.stalled:
        head += f" ({len(soak.stalled)} stalled left out: window {', '.join(map(str, soak.stalled))})"
    if not soak.shifts:
        return f"{head}: no lasting slide in accept length, step time or tok/s -> PASS"
    moved = f" ({SOAK_HALF[soak.half]} moved)" if soak.half in SOAK_HALF else ""
    shifts = "; ".join(soak_shift_text(s) for s in soak.shifts)
    return f"{head}: {shifts}{moved} -> {r.verdict.value.upper()}"


def set_aside_line(aside: Sequence[SetAside], undecided: bool) -> str:
    """The launches whose runs disagreed: "runs disagree (stalled?), set aside: launch 1 runs
    1, 2 up to 30.0% below the fastest (limit 10.0%)"."""
    parts = [f"{a.config + ' ' if a.config else ''}launch {a.launch} run{'s' if len(a.runs) > 1 else ''} "
             f"{', '.join(map(str, a.runs))} up to {a.gap:.1%} below its fastest (limit {a.limit:.1%})" for a in aside]
    then = ("no launch left to decide on" if undecided else "decided on the launches whose runs agree")
    return f"runs disagree (a stall?), set aside: {'; '.join(parts)}; {then}"


def positions_line(shares: Sequence[PositionShare]) -> str:
    """The accept-length gate's per-position acceptance in one line: "acceptance per draft
    position (share of verify steps accepting >= k drafts, vs baseline): 1 0.93 +0.1% [...], ..."."""
    parts = [f"{s.position} {s.current or 0.0:.3f} {_share_change(s)}{' FAIL' if s.verdict == Verdict.FAIL else ''}"
             for s in shares]
    return "acceptance per draft position (share of verify steps accepting >= k drafts, vs baseline): " + \
        ", ".join(parts)


def _position_drop(p: Problem, r: GateResult) -> str:
    s = next(s for s in r.positions if s.position == p.count)
    accept = f" while the accept length moved {ratio_change(r.estimate)}" if r.estimate is not None else ""
    return (f"acceptance at draft position {p.count} fell: {s.current or 0.0:.3f} of verify steps accepted >= "
            f"{p.count} drafts vs {s.reference or 0.0:.3f} stored ({_share_change(s)}){accept}; the drafter's later "
            f"positions stopped agreeing with the target (a head fed other hidden states, a changed draft tree) -> FAIL")


def _forced_accept(p: Problem, r: GateResult) -> str:
    head = f"acceptance forced to {p.limit:g} tokens per verify step (simulate_accept_length)"
    if not p.count:
        return (f"{head}: every run holds it (median {r.current:.3f}, farthest {p.value:.3f}; each request's prefill "
                f"token and shorter last step allowed) -> PASS")
    return (f"{head}, but {p.count} run{'s' if p.count != 1 else ''} read otherwise (farthest {p.value:.3f}): the "
            f"server does not apply SGLANG_SIMULATE_ACC_LEN as launched -> FAIL")


def _no_accept_length(p: Problem, r: GateResult) -> str:
    if r.gate.category:
        return (f"no run has an accept length for prompt category {r.gate.category!r}: its requests carried no "
                f"spec_verify_ct (per-category accept lengths need per-request counts: api native or openai)")
    return ("no run has an accept length: the requests carried no spec_verify_ct and the engine's "
            "run-level source (if any) saw no drafts")


def _zero_goodput(p: Problem, r: GateResult) -> str:
    if p.reference:
        return (f"reference {p.reference} had goodput 0 in a run (no request met sweep.slo = {p.detail!r}); the "
                f"goodput ratio is undefined")
    return (f"goodput 0 in a run: no request met sweep.slo = {p.detail!r}, so the goodput ratio is undefined; loosen "
            f"the SLOs or lower the level")


def _unstored(p: Problem, r: GateResult) -> str:
    why = (f"reference {p.reference!r} cannot be measured here ({p.context})" if p.context
           else f"reference {p.reference!r} was not measured")
    stored = reference_gap_text(p.detail) if isinstance(p.detail, HistoryGap) else p.detail
    return f"{why} and has no usable stored baseline: {stored}"


_PROBLEMS: dict[Why, Callable[[Problem, GateResult], str]] = {
    Why.TOO_FEW_RUNS: lambda p, r: f"only {p.count} samples; need >= 2",
    Why.NO_ACCEPT_LENGTH: _no_accept_length,
    Why.NO_STEP_TIME: lambda p, r: "no run has a step time: no request decoded two or more tokens",
    Why.NO_REFERENCE: lambda p, r: f"configuration has no reference in {p.detail}",
    Why.REFERENCE_FAILED: lambda p, r: f"reference {p.reference!r} could not be measured: {_reason(p)}",
    Why.REFERENCE_CELL_FAILED: lambda p, r: f"reference {p.reference} {r.level} could not be measured: {p.detail}",
    Why.REFERENCE_UNSTORED: _unstored,
    Why.ZERO_GOODPUT: _zero_goodput,
    Why.NOT_RUNNING: lambda p, r: (f"speculation is not running: the server runs {p.detail} but its requests carry "
                                   f"no verify counts and its own counters saw no drafts"),
    Why.ACCEPT_AT_FLOOR: lambda p, r: (f"accept length {p.value:.3f} <= min_accept_length {p.limit:g}: the verify "
                                       f"steps keep almost no draft (every draft rejected, or speculation off)"),
    Why.POSITION_DROP: _position_drop,
    Why.FORCED_ACCEPT: _forced_accept,
    Why.INTERNAL_ERROR: lambda p, r: f"internal error (a specguard bug): {p.detail}",
    Why.RUNS_DISAGREE: lambda p, r: (f"not measured: the runs of {'every launch' if (p.count or 0) > 1 else 'its launch'} "
                                     f"disagree (up to {p.value or 0:.1%} below the fastest run, limit {p.limit or 0:.1%}; a "
                                     f"stalled machine?), so no median can be trusted; measure again on a quieter machine"),
}


# -- no stored session to compare with (store/gaps.py) -----------------------------------------------
_FIGURES = {"step_rates": "step times", "accept_lengths": "accept lengths", "request_goodputs": "request goodputs"}


def short(value: Any, limit: int = 48) -> str:
    """repr(value), cut to about `limit` characters (whole list items, then "...")."""
    text = repr(value)
    if len(text) <= limit:
        return text
    if isinstance(value, (list, tuple)):
        shown: list[str] = []
        for item in value:
            if len(", ".join([*shown, repr(item)])) > limit - 8:
                break
            shown.append(repr(item))
        return "[" + ", ".join(shown) + f", ... ({len(value)} items)]"
    return text[: limit - 3] + "..."


def difference_text(d: FieldDifference) -> str:
    """"max_running_requests: stored 128, now 64" (long values cut, so a line stays readable)."""
    return f"{d.field}: stored {short(d.stored)}, now {short(d.now)}"


def differences_text(diffs: Sequence[FieldDifference]) -> str:
    return "; ".join(difference_text(d) for d in diffs)


def cell_gap_line(g: HistoryGap) -> str:
    """Why a cell's history gates had nothing to compare with, and the command that records it."""
    where, create = f"{g.config} {g.level}", f"create one with: {g.record_command}"
    if g.kind == GapKind.UNREADABLE:
        return g.detail
    if g.kind == GapKind.OTHER_ENVIRONMENT:
        return (f"baseline for {where} was recorded with another environment; differing fields: "
                f"{differences_text(g.differing)}. Not compared. To accept this environment, {create}")
    if g.kind == GapKind.NO_CATEGORY:
        return (f"the baseline for {where} in {g.path} has no accept lengths for prompt category {g.category!r} "
                f"(recorded before per-category figures were stored, or its runs had no such prompts); {create}")
    if g.kind == GapKind.NO_FIGURES:
        return (f"the baseline for {where} in {g.path} has no {_FIGURES.get(g.metric, g.metric)} (its runs were "
                f"recorded without them); {create}")
    return f"no baseline for {where} in {g.path}; {create}"  # no file, no entries, no cell at this level


def reference_gap_text(g: HistoryGap) -> str:
    """Why the reference's stored sessions cannot stand in for it (the speculation gate's line ends with it)."""
    if g.kind == GapKind.UNREADABLE:
        return g.detail
    if g.kind == GapKind.NO_FILE:
        return f"no stored reference ({g.path} does not exist)"
    if g.kind == GapKind.NO_ENTRIES:
        return f"{g.path} has no entries"
    if g.kind == GapKind.OTHER_ENVIRONMENT:
        return f"{g.path} was recorded in another environment, not used; differing fields: {differences_text(g.differing)}"
    return f"{g.path} has this environment but no {g.level} cell"  # or its sessions there lack the figure


def relaunch_reason(reason: RelaunchReason) -> str:
    """Why a configuration was launched again, as the summary's "relaunched" line gives it."""
    cell = f"{reason.gate} {reason.config} {reason.level}"
    if reason.why == RelaunchWhy.RUNS_DISAGREE or reason.ratio is None or reason.p_value is None:
        return f"{cell}: its runs disagree (a stall?), measured again"
    if reason.why == RelaunchWhy.LEANS_TO_LOSS:
        return (f"reference of speculation {reason.config} {reason.level}, which leans to a loss "
                f"(ratio {reason.ratio:.3f}, p = {reason.p_value:.3g} < {reason.limit_p:g})")
    line = f"{cell}: p = {reason.p_value:.3g} < {reason.limit_p:g} (ratio {reason.ratio:.3f})"
    return f"reference of {line}" if reason.why == RelaunchWhy.REFERENCE else line
