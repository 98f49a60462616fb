"""A gate's decision as data: what was compared with what, the figures, the verdict and, where the
statistics did not decide, why. Nothing here is a sentence: report/verdict_text.py renders every
line a user reads from these fields (the terminal, pytest's failure text, reports, JUnit)."""

from __future__ import annotations

from dataclasses import dataclass

from specguard.decide.consistency import SetAside
from specguard.decide.stats import RatioEstimate
from specguard.labels import SPECULATION, STEP_TIME, THROUGHPUT, GateLabel, Level, TextEnum, Verdict
from specguard.notes import Note
from specguard.store.gaps import HistoryGap


class Half(TextEnum):
    """Which half of a speculative cell's tok/s moved (tok/s = accept length / step time)."""

    ENGINE = "engine"  # the step time
    DRAFTER = "drafter"  # the accept length
    BOTH = "both"
    NEITHER = ""  # neither interval resolved a change
    ENGINE_ONLY = "engine-only"  # acceptance forced (simulate_accept_length): only the engine can move


class Against(TextEnum):
    """What a gate compared the cell with."""

    BASELINE = "baseline"  # the cell's own stored sessions
    REFERENCE = "reference"  # the reference configuration, measured in this session
    REFERENCE_ROLE = "reference-role"  # the same, measured here only because this test needed it
    STORED_REFERENCE = "stored-reference"  # the reference's stored sessions of this environment


class Why(TextEnum):
    """Why a gate's verdict was not (only) the statistics' outcome."""

    TOO_FEW_RUNS = "too-few-runs"  # count: the runs measured
    NO_ACCEPT_LENGTH = "no-accept-length"  # no run carried verify counts (a category's test: none for it)
    NO_STEP_TIME = "no-step-time"  # no request decoded two or more tokens
    # No stored session to compare with; detail: the gap (store.gaps.HistoryGap: which file, what
    # is missing, what to run)
    NO_BASELINE = "no-baseline"  # nothing recorded for this cell yet (a first run)
    OTHER_ENVIRONMENT = "other-environment"  # recorded, but with another fingerprint
    NO_CATEGORY_HISTORY = "no-category-history"  # recorded without this prompt category's figures
    HISTORY_UNREADABLE = "history-unreadable"  # a damaged, unreadable or foreign baseline file (an error)
    NO_REFERENCE = "no-reference"  # detail: the suite file that names none
    REFERENCE_FAILED = "reference-failed"  # detail: why the reference's server could not serve it
    REFERENCE_CELL_FAILED = "reference-cell-failed"  # detail: the reference cell's error at this level
    REFERENCE_UNSTORED = "reference-unstored"  # detail: the gap of its stored sessions; context: why it was not measured
    ZERO_GOODPUT = "zero-goodput"  # detail: the SLOs; reference: whose goodput
    NOT_RUNNING = "not-running"  # speculation configured, no verify counts; detail: what the server runs
    ACCEPT_AT_FLOOR = "accept-at-floor"  # value: the median accept length, limit: min_accept_length
    # Acceptance forced (simulate_accept_length): value the run farthest from what the forced length
    # gives its requests, limit the forced length, count the runs outside it (0: it held)
    FORCED_ACCEPT = "forced-accept"
    # count: the first draft position whose acceptance fell (``positions``), while the accept length held
    POSITION_DROP = "position-drop"
    # Every launch's runs disagree (``GateResult.set_aside``): count the launches, value the largest
    # gap below the fastest run, limit the gap allowed (decide/consistency.py)
    RUNS_DISAGREE = "runs-disagree"
    ACCEPT_DRIFT = "accept-drift"  # advanced.accept_drift = "fail" and the cell's acceptance fell (``drift``)
    UNAVAILABLE = "unavailable"  # detail: why the configuration could not be measured (a Note)
    INTERNAL_ERROR = "internal-error"  # detail: the exception (a specguard bug)


HISTORY_MISSING = (Why.NO_BASELINE, Why.OTHER_ENVIRONMENT, Why.NO_CATEGORY_HISTORY, Why.HISTORY_UNREADABLE)


@dataclass(frozen=True)
class Problem:
    """Why a gate was decided without (or against) its statistics, with the figures that say it."""

    why: Why
    # For the HISTORY_MISSING kinds and REFERENCE_UNSTORED the stored history's gap as data; for
    # UNAVAILABLE and REFERENCE_FAILED why the configuration could not be measured (a note of the
    # session's reason kinds); else a line from below the gate (an exception). Documents written
    # before gaps and reasons were data keep their line as worded then.
    detail: str | HistoryGap | Note = ""
    value: float | None = None
    limit: float | None = None
    count: int | None = None
    reference: str = ""  # the configuration the problem is about, where it is not the gate's own
    context: str = ""  # a second line from below, where the problem has two causes


@dataclass(frozen=True)
class Versus:
    """The other side of a comparison: the cell's stored sessions, or a reference configuration."""

    against: Against
    name: str = ""  # the reference configuration (empty for the cell's own baseline)
    sessions: int = 0  # stored sessions compared with (0: measured in this session)


@dataclass(frozen=True)
class Attribution:
    """A speculative cell's tok/s change split into its halves, each against its own history at
    ATTRIBUTION_CONFIDENCE (decide/gates.py ``attribution``)."""

    half: Half
    step_rate: RatioEstimate | None  # decode-step rate ratio (1 / step-time ratio)
    accept: RatioEstimate | None  # accept-length ratio


@dataclass(frozen=True)
class Factors:
    """Where a speculative configuration's speed comes from against its reference measured in the
    same session: tok/s per request = accept length / step time."""

    accept_length: float
    reference_step_ms: float  # the reference's decode step
    step_ms: float  # the speculative configuration's verify step

    @property
    def step_ratio(self) -> float:
        return self.reference_step_ms / self.step_ms

    @property
    def product(self) -> float:
        return self.accept_length * self.step_ratio


@dataclass(frozen=True)
class PositionShare:
    """Acceptance at one draft position: the share of verify steps that accepted at least
    `position` drafts (the correct-drafts histogram), this session's against the stored sessions'.
    `estimate` is None when no step of this session reached the position (the share fell to 0)."""

    position: int
    verdict: Verdict
    estimate: RatioEstimate | None
    current: float | None
    reference: float | None


class SoakMetric(TextEnum):
    """A soak window's figures (its run's): the ones a change point is searched in."""

    ACCEPT_LENGTH = "accept_length"
    STEP_TIME = "step_time_ms"
    THROUGHPUT = "output_throughput"
    ITL_P99 = "p99_itl_ms"


@dataclass(frozen=True)
class SoakShift:
    """A soak metric's first change the worse way: from `window` on (the soak's windows counted from
    0, warm-up included) its geometric mean went from `before` to `after`, ratio in [low, high]."""

    metric: SoakMetric
    window: int
    before: float
    after: float
    low: float
    high: float
    p_value: float

    @property
    def ratio(self) -> float:
        return self.after / self.before


@dataclass(frozen=True)
class Soak:
    """A soak test's windows and what slid: `windows` measured after `warmup` warm-up windows."""

    windows: int
    warmup: int
    shifts: tuple[SoakShift, ...]
    half: Half  # accept length slid: the drafter; step time: the engine
    stalled: tuple[int, ...] = ()  # windows left out: their tok/s dipped below their neighbours' (decide/soak.py)


@dataclass(frozen=True)
class Drift:
    """A cell's accept length falling across its runs in time order (vllm#41838)."""

    change: float  # relative change over the runs
    runs: int
    p_value: float
    limit_p: float  # the one-sided level below which it is reported


@dataclass(frozen=True)
class GateResult:
    """One gate test's decision. Figures are in the gate's own unit: tok/s (or good requests/s),
    accept length, step time in ms (its estimate is the step *rate* ratio, lower is worse)."""

    gate: GateLabel
    config: str
    level: Level
    verdict: Verdict
    estimate: RatioEstimate | None = None
    current: float | None = None  # mean of this session's samples
    reference: float | None = None  # mean of what it was compared with
    versus: Versus | None = None
    tolerance: float | None = None  # the gate's tolerance (step time: the slowdown fraction)
    rule: str = ""  # the fail rule (config.FAIL_RULES)
    enforced: bool = True  # a speculation gate outside the must-win range only reports
    alpha: float | None = None
    launches: int = 1  # server launches of this configuration pooled into the verdict
    stage: int = 1  # 2: decided again after a relaunch (sequential design, ``relaunch_plan``)
    attribution: Attribution | None = None  # a speculative cell's tok/s verdict: which half moved
    factors: Factors | None = None  # the speculation gate against a reference measured here
    goodput: bool = False  # the speculation gate decided on request goodput (advanced.speculation_metric)
    problem: Problem | None = None
    drift: Drift | None = None  # the accept-length gate: acceptance fell within the session
    positions: tuple[PositionShare, ...] = ()  # the accept-length gate: acceptance per draft position
    soak: Soak | None = None  # the soak test: its windows' change points
    set_aside: tuple[SetAside, ...] = ()  # launches whose runs disagree, left out of the decision
    notes: tuple[Note, ...] = ()  # the server's and the measurement's own notes on this cell

    @property
    def failed(self) -> bool:
        return self.verdict == Verdict.FAIL and self.enforced

    @property
    def key(self) -> tuple[GateLabel, str, Level]:
        """One test's identity: its gate, configuration and level."""
        return self.gate, self.config, self.level

    @property
    def unit(self) -> str:
        """The unit of ``current`` and ``reference`` as a message writes it after the number."""
        if self.gate.gate == STEP_TIME:
            return " ms"
        if self.gate.gate in (THROUGHPUT, SPECULATION):
            return " good req/s" if self.goodput else " tok/s"
        return ""


