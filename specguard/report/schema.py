"""The results document's shape (docs/results.md), as typed dictionaries: what it holds is
checked where it is built (session/results.py) and where it is read (report/results.py, the
renderers, compare, recommend).

A base class holds the keys every document has; its `total=False` subclass adds the keys older
files or some sessions lack.
"""

from __future__ import annotations

from typing import Any, Literal, TypedDict


class ConfigDoc(TypedDict, total=False):
    name: str
    engine: str
    model_path: str
    draft_model_path: str | None
    speculative_algorithm: str | None
    num_steps: int | None
    eagle_topk: int | None
    num_draft_tokens: int | None
    max_running_requests: int | None
    reference: str | None
    speculation_must_win_up_to: int | None
    args: list[str]


class CheckDoc(TypedDict):
    """engines.ArgCheck as stored (schema 6 and older: ``{message, blocking}``)."""

    note: NoteDoc
    blocking: bool  # it failed the configuration's tests
    strict: bool  # blocking only because --strict-server-args asked


class _ServerFields(TypedDict):
    engine: str
    command: list[str]
    attached: bool
    effective_args: dict[str, Any] | None
    checks: list[CheckDoc]
    failure: str | None  # its reason's line, then the context (command, exit code, log tail)
    failure_skipped: bool
    mode: str
    differences: list[dict[str, Any]]  # {field, suite, server} (schema 5 and older: and message)


class ServerDoc(_ServerFields, total=False):
    failure_reason: NoteDoc | None  # why, as data (absent in files written before reasons were data)


# A cell summary's latency figures (medians over the runs of each run's latency_ms entry)
LatencyKey = Literal["median_ttft_ms", "p99_ttft_ms", "median_itl_ms", "p99_itl_ms", "median_e2e_latency_ms"]
# Every figure of a cell summary that is one number or null
SummaryFigure = Literal["output_throughput", "output_throughput_min", "output_throughput_max", "accept_length",
                        "step_time_ms", LatencyKey]


class _SummaryFigures(TypedDict):
    runs: int
    output_throughput: float | None
    output_throughput_min: float | None
    output_throughput_max: float | None
    accept_length: float | None
    step_time_ms: float | None  # the engine's time per decode step of a request (per verify step with speculation)
    failed_requests: int
    median_ttft_ms: float | None
    p99_ttft_ms: float | None
    median_itl_ms: float | None
    p99_itl_ms: float | None
    median_e2e_latency_ms: float | None


class SummaryDoc(_SummaryFigures, total=False):
    """A cell's medians over its measured runs (`cell_summary`): what tables and plots show."""

    request_goodput: float | None  # with SLOs
    slo_attainment: float | None
    load_model: str
    categories: dict[str, dict[str, float | None]]  # per prompt category: accept_length, output_throughput, throughput_share


class NoteDoc(TypedDict):
    """notes.Note as stored: ``kind`` (a notes.NoteKind) and the note's figures as keys beside it."""

    kind: str


class CellDoc(TypedDict):
    config: str
    level: str  # labels.Level's name: "c16" (16 clients) or "r8" (8 requests/s, open loop)
    error: str | None
    notes: list[NoteDoc]  # its runs' and its own (schema 5 and older: `warnings`, sentences)
    wall_s: float
    summary: SummaryDoc
    runs: list[dict[str, Any]]  # measure.metrics.RunMetrics, as stored
    warmup_runs: list[dict[str, Any]]


class OriginDoc(TypedDict):
    """decide.prior.Origin: whose values a measured spread comes from."""

    of: str  # decide.prior.HistoryOf
    count: int  # 0: not recorded
    names: list[str]  # schema-5 files also carry `dof_halved` (A/B speculation ratios before 7 Dec; not read)


class SpreadSourceDoc(TypedDict):
    """decide.prior.SpreadSource: where a comparison's between-launch spread comes from."""

    prior: bool
    history: OriginDoc | None
    dropped_prior_sd: float | None
    widened: float
    launches: list[int]
    levels_pooled: bool
    legacy_text: str  # schema 4 and older: the source as specguard worded it then ("" since)


class _EstimateFigures(TypedDict):
    ratio: float
    low: float
    high: float
    threshold: float
    p_value: float
    dof: float
    confidence: float
    between_sd: float
    between_source: SpreadSourceDoc


class EstimateDoc(_EstimateFigures, total=False):
    """A decision's `decide.stats.RatioEstimate`, as stored (the keys older files lack are optional)."""

    test_at: float | None
    pass_low: float | None
    pass_confidence: float | None


class VersusDoc(TypedDict):
    against: str  # decide.result.Against
    name: str
    sessions: int


class FieldDifferenceDoc(TypedDict):
    field: str
    stored: Any  # the fingerprint field's JSON value (null: absent)
    now: Any


class HistoryGapDoc(TypedDict):
    """A `store.gaps.HistoryGap`: why a cell (or a reference) had no stored session to compare with."""

    kind: str  # store.gaps.GapKind
    config: str
    path: str
    level: str
    differing: list[FieldDifferenceDoc]
    category: str
    metric: str
    record_command: str
    detail: str


class _ProblemFields(TypedDict):
    why: str  # decide.result.Why
    detail: str  # "" when the problem's detail is a gap or a reason
    value: float | None
    limit: float | None
    count: int | None
    reference: str
    context: str


class ProblemDoc(_ProblemFields, total=False):
    gap: HistoryGapDoc | None  # a stored history's gap (absent in files written before gaps were data)
    reason: NoteDoc | None  # why a configuration was not measured (absent in files written before reasons were data)


class AttributionDoc(TypedDict):
    half: str  # decide.result.Half ("" for neither)
    step_rate: EstimateDoc | None
    accept: EstimateDoc | None


class FactorsDoc(TypedDict):
    accept_length: float
    reference_step_ms: float
    step_ms: float


class DriftDoc(TypedDict):
    change: float
    runs: int
    p_value: float
    limit_p: float


class PositionDoc(TypedDict):
    """decide.result.PositionShare: acceptance at one draft position."""

    position: int
    verdict: str
    estimate: EstimateDoc | None
    current: float | None
    reference: float | None


class SetAsideDoc(TypedDict):
    """decide.consistency.SetAside: a launch whose runs disagree."""

    launch: int
    runs: list[int]
    gap: float
    limit: float
    config: str


class SoakShiftDoc(TypedDict):
    """decide.result.SoakShift."""

    metric: str
    window: int
    before: float
    after: float
    low: float
    high: float
    p_value: float


class SoakDoc(TypedDict):
    """decide.result.Soak: a soak test's windows and what slid."""

    windows: int
    warmup: int
    shifts: list[SoakShiftDoc]
    half: str
    stalled: list[int]


class SoakWindowsDoc(TypedDict):
    """One configuration's soak windows (`soaks.NAME`): every window's run, warm-up included."""

    concurrency: int
    window_s: float
    warmup_windows: int
    windows: list[dict[str, Any]]  # measure.metrics.RunMetrics, as stored


class _DecisionFields(TypedDict):
    gate: str  # labels.GateLabel's text
    config: str
    level: str  # labels.Level's name
    verdict: str  # labels.Verdict
    estimate: EstimateDoc | None
    current: float | None
    reference: float | None
    versus: VersusDoc | None
    tolerance: float | None
    rule: str
    enforced: bool
    alpha: float | None
    launches: int
    stage: int
    attribution: AttributionDoc | None
    factors: FactorsDoc | None
    goodput: bool
    problem: ProblemDoc | None
    drift: DriftDoc | None
    notes: list[NoteDoc]


class DecisionDoc(_DecisionFields, total=False):
    """A `decide.result.GateResult`, as stored, and what the session derives from it."""

    detectable_drop: float | None  # added by session/results.py (docs/results.md)
    legacy_message: str  # a decision read from a schema-2 file: its line as that specguard worded it
    positions: list[PositionDoc]  # the accept-length gate's per-position acceptance (absent in older files)
    soak: SoakDoc | None  # the soak test's change points (absent in older files)
    set_aside: list[SetAsideDoc]  # launches whose runs disagree, left out (absent in older files)


class TestDoc(TypedDict, total=False):
    """One specguard test's outcome (plugin/outcomes.py TestLog), the record every output counts."""

    nodeid: str
    config: str | None  # None for the session-level test specguard::family_holm
    level: str | None
    gate: str | None
    category: str | None
    outcome: str  # passed / failed / skipped
    verdict: str | None
    enforced: bool
    kind: str | None  # failed tests: regression / not-measured
    message: str


class FailedTestDoc(TypedDict):
    nodeid: str
    kind: str
    message: str


class OutcomeDoc(TypedDict, total=False):
    status: str
    exit_status: int
    failed_tests: list[FailedTestDoc]
    counts: dict[str, int]


class OptionsDoc(TypedDict):
    require_baselines: bool
    update_baselines: bool
    baseline_dir: str
    attached: bool


class _CrossoverFields(TypedDict):
    reference: str | None  # None in a file older than schema 4 (its line is in legacy_text)
    estimate: float | None
    low: float | None
    high: float | None
    last_win: int | None
    first_loss: int | None
    confident: bool
    confidence: float
    below_range: bool  # behind the reference from the first measured level
    measured: list[float]  # the first and the last level measured with the reference


class CrossoverDoc(_CrossoverFields, total=False):
    legacy_text: str  # read from a file older than schema 4: its crossover line as that specguard worded it


class BaselineProblemDoc(TypedDict):
    kind: str  # store.refresh.ProblemKind
    config: str
    level: str | None
    detail: str


class BaselineWriteDoc(TypedDict):
    config: str
    path: str
    levels: list[str]
    sessions_kept: int
    replaced: str | None


class SkippedConfigDoc(TypedDict):
    config: str
    detail: str


class WriteFailureDoc(TypedDict):
    kind: str  # store.refresh.WriteFailureKind
    where: str
    error: str


class BaselineOutcomeDoc(TypedDict):
    """A `store.refresh.BaselineOutcome`: what `--update-baselines` did."""

    result: str  # store.refresh.Refresh
    writes: list[BaselineWriteDoc]
    problems: list[BaselineProblemDoc]
    skipped: list[SkippedConfigDoc]
    failure: WriteFailureDoc | None


# "for" is a Python keyword, so this one is spelled in the functional form.
ReferenceRoleDoc = TypedDict("ReferenceRoleDoc", {"config": str, "level": str, "for": list[str]})


class RelaunchReasonDoc(TypedDict):
    why: str  # decide.gates.RelaunchWhy
    gate: str
    config: str
    level: str
    ratio: float | None  # None: the runs disagreed, nothing was estimated
    p_value: float | None
    limit_p: float


class RelaunchDoc(TypedDict, total=False):
    stage: int
    reasons: list[RelaunchReasonDoc]
    failed: str | None
    lines: list[str]  # a schema-2 file's relaunch lines, as that specguard worded them


class _ResultsKeys(TypedDict):
    """The keys every results document has (report/upgrade.py gives older files the ones they lacked)."""

    schema: str
    schema_version: int
    created: str
    specguard_version: str
    session_id: str
    suite: str
    environment: dict[str, str | None]
    options: OptionsDoc
    # The suite file's [sweep], [workload] and [tolerances] tables (config's dataclasses, asdict):
    # free-form here, since each renderer reads the few keys it needs with a default
    sweep: dict[str, Any]
    workload: dict[str, Any]
    tolerances: dict[str, Any]
    configs: list[ConfigDoc]
    servers: dict[str, ServerDoc]
    cells: list[CellDoc]
    decisions: list[DecisionDoc]
    holm_failures: list[DecisionDoc]
    crossovers: dict[str, CrossoverDoc]
    baseline_updates: list[str]  # what --update-baselines did, in words (older files: the only record)
    outcome: OutcomeDoc


class ResultsDoc(_ResultsKeys, total=False):
    """One session's raw numbers, decisions and environment (docs/results.md)."""

    baseline_outcome: BaselineOutcomeDoc | None  # the same as data (absent in files written before it)
    merged_from: int
    reference_roles: list[ReferenceRoleDoc]
    relaunches: dict[str, list[RelaunchDoc]]
    soaks: dict[str, SoakWindowsDoc]  # test_soak's windows per configuration (absent in older files)
    tests: list[TestDoc]
    run_notes: list[NoteDoc]  # the session's notes under the table (schema 5 and older: sentences)
    hints: dict[str, str]


class BenchLevelDoc(TypedDict):
    concurrency: int  # clients, or in rate mode the in-flight cap
    request_rate: float | None  # req/s (open loop); None: closed loop
    load_model: str
    error: str | None
    runs: list[dict[str, Any]]  # measure.metrics.RunMetrics, as stored


class BenchDoc(TypedDict):
    """`specguard bench --json FILE`: one server's levels, measured without gates."""

    schema: Literal["specguard-bench"]
    schema_version: int
    server: dict[str, Any]  # the engine's fingerprint fields (free-form: whatever the server reports)
    levels: list[BenchLevelDoc]
