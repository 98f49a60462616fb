"""The family of gate tests a session decides, and what it implies before anything runs.

Once -k/-m have selected the tests, the plan fixes each test's share of the family alpha
(weighted Bonferroni, `gates.family_alphas`; Holm runs over the same weights at the end) and the
reference cells that selected speculation tests need, so a reference is measured even when its
own tests were deselected.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from specguard.config import Suite
from specguard.decide.gates import GateDesign, family_alphas
from specguard.labels import ACCEPT_LENGTH, GATES, SPECULATION, THROUGHPUT
from specguard.session.options import RunOptions


@dataclass(frozen=True)
class PlannedTest:
    """One selected specguard test, as the plugin sees it after -k/-m deselection."""

    config: str
    level: int
    gate: str  # one of labels.GATES
    category: str = ""  # accept_length only: the test of one prompt category ("" = the whole run)


@dataclass(frozen=True)
class Plan:
    """What the selection implies: the family of gate tests and the reference cells it needs."""

    family_size: int
    alpha_cell: float  # the alpha of a test of weight 1 (a throughput test)
    selected_cells: list[tuple[str, int]]
    reference_cells: dict[tuple[str, int], list[str]]  # (reference, level) -> speculative configs needing it
    selected_tests: list[PlannedTest] = field(default_factory=list)
    planned: bool = True  # False: measured before plan(); the family is what was seen
    # (gate, config, level, category) -> the test's share of the family alpha (gates.family_alphas)
    alphas: dict[tuple[str, str, int, str], float] = field(default_factory=dict)

    def alpha_for(self, gate: str, config: str, level: int, category: str = "") -> float:
        """A test's alpha; a test outside the plan gets the weight-1 alpha."""
        return self.alphas.get((gate, config, level, category), self.alpha_cell)


class Planner:
    """Holds the session's plan: fixed by `plan()`, or (for tools that call the gates without a
    pytest selection) built from the tests decided so far."""

    def __init__(self, suite: Suite, options: RunOptions, design: GateDesign) -> None:
        self._suite = suite
        self._options = options
        self._design = design
        self._plan: Plan | None = None
        self._seen: set[PlannedTest] = set()

    def plan(self, selected: list[PlannedTest]) -> Plan:
        """Fix the family (every selected gate test) and the reference cells the selection needs."""
        tests = list(dict.fromkeys(selected))
        for t in tests:
            if t.config not in self._suite.servers:
                raise ValueError(f"plan: unknown configuration {t.config!r}")
            if t.gate not in GATES:
                raise ValueError(f"plan: unknown gate {t.gate!r}; one of {GATES}")
            if t.category and t.gate != ACCEPT_LENGTH:
                raise ValueError(f"plan: only accept_length has per-category tests, not {t.gate!r}")
        self._plan = self._make(tests, planned=True)
        return self._plan

    @property
    def planned(self) -> bool:
        return self._plan is not None

    @property
    def current(self) -> Plan:
        """The plan; without plan() it is built from the gates decided so far (a fallback for tools)."""
        if self._plan is not None:
            return self._plan
        seen = sorted(self._seen, key=lambda t: (t.config, t.level, t.gate, t.category))
        return self._make(seen, planned=False)

    def saw(self, test: PlannedTest) -> None:
        """A gate was asked for (the fallback family when nothing was planned)."""
        self._seen.add(test)

    def must_win_limit(self, name: str, marker_limit: int | None = None) -> int | None:
        """The highest level where `name`'s speculation must win: the test's own marker, else
        --speculation-must-win-up-to, else the suite's speculation_must_win_up_to."""
        cfg = self._suite.servers[name]
        return next((x for x in (marker_limit, self._options.speculation_must_win_up_to,
                                 cfg.speculation_must_win_up_to) if x is not None), None)

    def _can_fail(self, t: PlannedTest) -> bool:
        """A speculation test outside its must-win range only reports (weight 0 in the family)."""
        if t.gate != SPECULATION:
            return True
        limit = self.must_win_limit(t.config)
        return limit is not None and t.level <= limit

    def _make(self, tests: list[PlannedTest], planned: bool) -> Plan:
        refs: dict[tuple[str, int], list[str]] = {}
        for t in tests:
            ref = self._suite.servers[t.config].reference
            if t.gate == SPECULATION and ref:
                specs = refs.setdefault((ref, t.level), [])
                if t.config not in specs:
                    specs.append(t.config)
        family_alpha = self._suite.tolerances.family_alpha
        shares = family_alphas([(t.gate, self._can_fail(t)) for t in tests], family_alpha, self._design)
        alphas = {(t.gate, t.config, t.level, t.category): a for t, a in zip(tests, shares)}
        weight1 = next((a for t, a in zip(tests, shares) if t.gate == THROUGHPUT), None)
        return Plan(family_size=len(tests),
                    alpha_cell=weight1 if weight1 is not None else family_alpha / max(len(tests), 1),
                    selected_cells=list(dict.fromkeys((t.config, t.level) for t in tests)),
                    reference_cells=refs, selected_tests=tests, planned=planned, alphas=alphas)
