"""The recommendation file (`specguard recommend RESULTS --json FILE`, docs/results.md) as a
document: its model, checked before the file is written and on load (store/documents.py)."""

from __future__ import annotations

from typing import Final, Literal, TypedDict

from specguard.sglang_rules.adaptive_table import AdaptiveTable
from specguard.store.documents import Document

RECOMMENDATION_SCHEMA: Final[Literal["specguard-recommendation"]] = "specguard-recommendation"
RECOMMENDATION_VERSION = 1


class RecommendationSourceDoc(TypedDict):
    """The results file the recommendation came from."""

    file: str
    session_id: str
    created: str
    suite: str


class CrossingDoc(TypedDict):
    """Where a ratio curve crosses 1 (decide.crossover.CrossoverEstimate), rounded to 0.01."""

    estimate: float | None
    interval: list[float | None]  # [low, high]; null: beyond the sweep
    between: list[int | None]  # [last measured level ahead, first behind]
    confident: bool
    below_range: bool
    above_range: bool


class PolicyCrossoverDoc(CrossingDoc):
    config: str  # the configuration switched off last


class LighterSwitchDoc(CrossingDoc):
    use_lighter_from: int | None


# "from" is a Python keyword, so the band's required keys are spelled in the functional form.
_BandKeys = TypedDict("_BandKeys", {"from": int, "to": int | None, "speculation": str | None})


class PolicyBandDoc(_BandKeys, total=False):
    # a band with speculation on: its configuration's settings (null where the results lack one)
    speculative_algorithm: str | None
    num_steps: int | None
    eagle_topk: int | None
    num_draft_tokens: int | None


class LevelRatioDoc(TypedDict):
    concurrency: int  # the level (a request rate in req/s when level_kind is "request_rate")
    ratio: float
    low: float
    high: float


class _SglangAdaptiveKeys(TypedDict):
    applies: bool
    reason: str | None  # why the adaptive mode does not apply (null when it does)
    notes: list[str]


class SglangAdaptiveDoc(_SglangAdaptiveKeys, total=False):
    # where it applies: the launch flags and the --speculative-adaptive-config table
    launch_flags: list[str]
    speculative_adaptive_config: AdaptiveTable


class RecommendationDoc(TypedDict):
    schema: Literal["specguard-recommendation"]
    schema_version: int
    source: RecommendationSourceDoc
    level_kind: Literal["concurrency", "request_rate"]
    reference: str
    speculative: str
    lighter: str | None
    confidence: float
    disable_speculation_at: int | None
    crossover: PolicyCrossoverDoc
    lighter_switch: LighterSwitchDoc | None
    policy: list[PolicyBandDoc]
    ratios: dict[str, list[LevelRatioDoc]]
    sglang: SglangAdaptiveDoc
    notes: list[str]


RECOMMENDATION: Document[RecommendationDoc] = Document(
    RECOMMENDATION_SCHEMA, RECOMMENDATION_VERSION, RecommendationDoc, what="recommendation file",
    make="write one with: specguard recommend RESULTS --json FILE")
