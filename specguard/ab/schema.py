"""The shapes of `specguard ab --json` and `specguard bisect --json` (docs/ab.md), as typed
dictionaries: ab/report.py checks a document against them before it is written."""

from __future__ import annotations

from typing import Literal, TypedDict

from specguard.report.schema import SpreadSourceDoc


class AbBuildDoc(TypedDict):
    name: str  # "A" or "B"
    python: str | None  # launch mode: the build's interpreter
    server_args: dict[str, list[str]]  # configuration -> extra server arguments
    urls: dict[str, str]  # attach mode: configuration ("*": every one) -> URL


class AbDesignDoc(TypedDict):
    max_rounds: int
    family_alpha: float
    pass_confidence: float
    prior_dof: float
    order: str
    min_rounds: int
    looks: int
    look_shares: dict[str, float]  # launches per build -> that look's share of a cell's alpha
    alpha_per_look: str
    directions: str
    closed_testing: str
    launch_spread: str


class AbSpreadDoc(TypedDict):
    sd: float  # log scale
    dof: float
    prior_sd: float
    contradicts_prior: bool | None  # None: no estimate or no prior


class AbLaunchDoc(TypedDict):
    round: int
    build: str
    config: str
    wall_s: float
    error: str | None
    skipped: bool


class AbLookDoc(TypedDict):
    round: int
    launches: int
    ratio: float
    low: float
    high: float
    confidence: float
    p_worse: float
    pass_low: float | None
    pass_high: float | None
    dof: float | None  # None: no variance at all
    between_sd: float
    between_source: SpreadSourceDoc  # where between_sd comes from, as the results file stores it


class AbCellDoc(TypedDict):
    config: str
    level: int
    level_name: str
    gate: str
    decision: str
    direction: str | None
    rounds: int
    decided_round: int | None
    alpha: float
    tolerance: float
    prior_sd: float
    error: str | None
    p_closed: float | None
    p_adjusted: float | None
    p_adjusted_better: float | None
    a: float | None
    b: float | None
    ratio: float | None
    low: float | None
    high: float | None
    looks: list[AbLookDoc]
    a_runs: list[list[float]]  # per launch, every run's value as decided (step time: steps/s)
    b_runs: list[list[float]]


class AbGroupDoc(TypedDict):
    """A configuration's cells at one gate (two levels or more), tested together first (closed testing)."""

    config: str
    gate: str
    levels: list[int]
    decision: str  # "different" or "undecided"
    direction: str | None
    decided_round: int | None
    alpha: float  # the sum of its cells'
    p_closed: float  # "no level worse": the pooled test and the smallest cell, Bonferroni
    p_closed_better: float
    p_pooled: float | None  # the pooled test alone, over its looks (None: not looked at)
    rounds: int  # launches per build behind the shown pooled look
    ratio: float | None  # the pooled look's B/A (step time as step time) and its equivalence interval
    low: float | None
    high: float | None


class AbOutcomeDoc(TypedDict):
    exit_code: int
    rounds: int
    regressions: list[str]


class _AbKeys(TypedDict):
    """`specguard ab --results-json FILE` (docs/ab.md "Results JSON")."""

    schema: Literal["specguard-ab"]
    schema_version: int
    suite: str
    mode: str
    argv: list[str]
    builds: list[AbBuildDoc]
    design: AbDesignDoc
    launch_spreads: dict[str, AbSpreadDoc]
    configs: list[str]
    levels: list[int]
    references: dict[str, str]
    launches: list[AbLaunchDoc]
    cells: list[AbCellDoc]
    groups: list[AbGroupDoc]
    not_compared: dict[str, str]
    not_measured: list[str]
    outcome: AbOutcomeDoc


class AbDoc(_AbKeys, total=False):
    notes: list[str]  # `specguard ab`'s selection notes (a bisect step's document has none)


class BisectStepDoc(TypedDict):
    good: int  # builds counted from 1
    candidate: int
    verdict: str
    ab: AbDoc


class BisectDoc(TypedDict):
    """`specguard bisect --results-json FILE` (docs/ab.md)."""

    schema: Literal["specguard-bisect"]
    schema_version: int
    suite: str
    config: str
    assumption: str
    builds: list[AbBuildDoc]
    steps: list[BisectStepDoc]
    first_bad: int | None
    decisions: int
