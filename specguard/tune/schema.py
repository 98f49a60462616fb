"""tune.json (`specguard tune`, docs/tuning.md) as a document: its model, checked before the file
is written and on load (store/documents.py). The files tune writes for the engines (SGLang's
adaptive config, vLLM's bands, the launch flags) are in the engines' own formats, not here."""

from __future__ import annotations

from typing import Final, Literal, TypedDict

from specguard.sglang_rules.adaptive_table import AdaptiveTable
from specguard.store.documents import Document
from specguard.tune.grid import SettingJson

TUNE_SCHEMA: Final[Literal["specguard-tune"]] = "specguard-tune"
TUNE_VERSION = 1


class RacePlanDoc(TypedDict):
    """tune.race.RacePlan, as dataclasses.asdict writes it."""

    warmup: int
    repeats: int
    first_repeats: int
    confidence: float
    launch_sd: float
    tie_tolerance: float
    skip_margin: float
    max_rounds: int
    predict: bool


class TuneCostDoc(TypedDict):
    search_runs: int
    search_launches: int
    full_grid_runs: int
    full_grid_launches: int
    comparator_runs: int
    comparator_launches: int
    search_wall_s: float
    comparator_wall_s: float


class SkippedCellDoc(TypedDict):
    setting: str
    concurrency: int
    predicted_tok_s: float | None


class GainDoc(TypedDict):
    ratio: float
    low: float
    high: float


class _LevelRowKeys(TypedDict):
    concurrency: int
    best: SettingJson | None  # null: nothing measured at this level


class LevelRowDoc(_LevelRowKeys, total=False):
    # a level with a best setting
    tok_s: float
    interval: list[float]  # [low, high]
    runs: int
    accept_length: float
    adaptive_choice: str | None
    gain_vs_no_speculation: GainDoc | None
    gain_vs_launched: GainDoc | None
    gain_vs_default_adaptive: GainDoc | None
    no_speculation_tok_s: float | None
    launched_tok_s: float | None
    default_adaptive_tok_s: float | None


class TuneBandDoc(TypedDict):
    first: int  # first measured concurrency of the band
    last: int
    setting: str


class TuneCellDoc(TypedDict):
    setting: str
    concurrency: int
    tok_s: list[float]
    accept_length: float  # 1.0 for the reference, 0.0 where no run reported one


class BestFixedDoc(TypedDict):
    setting: str
    tok_s: float


class _TuneTotalsKeys(TypedDict):
    envelope: float | None  # null: some level has no measured choice
    adaptive_envelope: float | None
    no_speculation: float | None
    fixed_measured_everywhere: dict[str, float]
    best_single_fixed: BestFixedDoc | None


class TuneTotalsDoc(_TuneTotalsKeys, total=False):
    launched: float | None  # the comparators, where they ran
    default_adaptive: float | None


class AdaptiveRefusedDoc(TypedDict):
    applies: Literal[False]
    reason: str


class TunedAdaptiveDoc(TypedDict):
    table: AdaptiveTable
    notes: list[str]
    graph_sizes: list[int] | None
    launch_flags: list[str]
    must_win_up_to: int | None
    default_for_comparison: str


class _VerdictKeys(TypedDict):
    verdict: str  # labels.Verdict ("error" with a detail when a side was not measured)


class VerifyVerdictDoc(_VerdictKeys, total=False):
    detail: str
    ratio: float
    low: float
    high: float
    threshold: float
    winner: str


class VerifyRowDoc(TypedDict):
    concurrency: int
    tuned_tok_s: float | None
    default_adaptive_tok_s: float | None
    best_fixed_tok_s: float | None
    best_fixed_setting: str
    no_speculation_tok_s: float | None
    verdicts: dict[str, VerifyVerdictDoc]  # vs_best_fixed, vs_no_speculation, vs_default_adaptive


class AgainstDoc(TypedDict):
    setting: str
    tok_s: float
    tuned_over_it: float | None


class VerifySummaryDoc(TypedDict):
    totals_tok_s: dict[str, float | None]
    confidence: float
    alpha_cell: float
    failed_levels: list[int]
    tuned_over_default_adaptive: float | None
    tuned_over_default_adaptive_per_level_geomean: float | None
    tuned_over_no_speculation: float | None
    best_single_fixed_measured_everywhere: AgainstDoc | None
    best_single_fixed_speculative_measured_everywhere: AgainstDoc | None
    runs: int
    launches: int
    wall_s: float
    failed_cells: dict[str, str]


class _TuneKeys(TypedDict):
    schema: Literal["specguard-tune"]
    schema_version: int
    suite: str
    config: str
    reference: str
    algorithm: str
    engine: str
    levels: list[int]
    max_running_requests: int | None
    mode: str
    plan: RacePlanDoc
    grid: list[SettingJson]
    launched: SettingJson | None
    cost: TuneCostDoc
    skipped_by_prediction: list[SkippedCellDoc]
    acceptance_by_position: list[float]
    failed: dict[str, str]
    events: list[str]
    table: list[LevelRowDoc]
    bands: list[TuneBandDoc]
    adaptive_bands: list[TuneBandDoc]
    cells: list[TuneCellDoc]
    totals: TuneTotalsDoc
    adaptive_config: TunedAdaptiveDoc | AdaptiveRefusedDoc
    files: dict[str, str]


class TuneDoc(_TuneKeys, total=False):
    verify: list[VerifyRowDoc]  # after --verify
    verify_summary: VerifySummaryDoc


TUNE: Document[TuneDoc] = Document(TUNE_SCHEMA, TUNE_VERSION, TuneDoc, what="tune file",
                                   make="write one with: specguard tune --suite SUITE --config NAME --out DIR")
