"""One pytest session's gates: the object the plugin talks to.

It wires the parts together and holds no logic of its own: the `Planner` (family and alphas),
the `ServerPool` (launch/attach, checks, vocabulary), the `CellStore` (what was measured), the
`Histories` (fingerprints and stored sessions), `Verdicts` (gate dispatch), the `Campaign`
(measuring, relaunch on suspicion) and the `Recorder` (baselines). Data flows config -> server ->
load -> metrics -> decision; the results document is built from it by `session.results`.

The plugin calls, in this order: `plan()` once the selected tests are known, `measure()` and a
gate's `*_result()` per test, `stop_server()` when a configuration's tests are done, then
`stop_all()` and `write_baselines()` (or, on an xdist worker, `stage_baselines()`).
"""

from __future__ import annotations

import time
import uuid

from specguard.config import Suite
from specguard.decide.gates import design_of
from specguard.decide.result import GateResult
from specguard.labels import ACCEPT_LENGTH, SPECULATION, STEP_TIME, THROUGHPUT
from specguard.measure.metrics import RunMetrics
from specguard.measure.progress import Progress
from specguard.measure.sweep import CellMeasurement, Driver, plain_driver
from specguard.session.campaign import Campaign, Relaunch
from specguard.session.cells import CellStore
from specguard.session.history import Histories, git_commit, gpu_fingerprint
from specguard.session.levels import SweepLevels
from specguard.session.options import RunOptions
from specguard.session.parts import SessionParts
from specguard.session.plan import Plan, PlannedTest, Planner
from specguard.session.recording import Recorder
from specguard.session.servers import ServerPool
from specguard.session.soak import run_soak
from specguard.session.verdicts import Verdicts
from specguard.store.refresh import BaselineOutcome, BaselineStage, Refresh, commit_baseline_stages
from specguard.workload import Workload, build_workload


class GateSession:
    """The gates of one pytest session; the plugin calls its methods, never sets its attributes."""

    def __init__(self, suite: Suite, options: RunOptions) -> None:
        self.suite = suite
        self.options = options
        self.session_id = uuid.uuid4().hex[:12]
        self.git_commit = git_commit()
        self.started = time.monotonic()
        self.design = design_of(suite)
        self.workload: Workload = build_workload(suite.workload)
        self.levels = SweepLevels(suite, options)
        self.planner = Planner(suite, options, self.design)
        self.pool = ServerPool(suite, options, self.workload)
        self.cells = CellStore()
        self.histories = Histories(suite, options, self.pool, self.levels, gpu_fingerprint())
        self.parts = SessionParts(suite, self.design, self.planner, self.pool, self.cells, self.histories, self.levels)
        self.verdicts = Verdicts(self.parts)
        self.campaign = Campaign(self.parts, options, self.verdicts)
        self.recorder = Recorder(self.parts, options, self.session_id, self.git_commit)
        self.baseline_outcome: BaselineOutcome | None = None
        self.soaks: dict[str, list[RunMetrics]] = {}  # test_soak's windows per configuration
        self._progress: Progress | None = None

    # -- the plugin's calls ---------------------------------------------------------------------
    def plan(self, selected: list[PlannedTest]) -> Plan:
        return self.planner.plan(selected)

    def set_progress(self, progress: Progress | None) -> None:
        self._progress = progress
        self.campaign.set_progress(progress)

    def measure(self, name: str, level: int, driver: Driver = plain_driver) -> CellMeasurement:
        return self.campaign.measure(name, level, driver)

    def throughput_result(self, name: str, level: int) -> GateResult:
        return self.verdicts.report(THROUGHPUT, name, level)

    def step_time_result(self, name: str, level: int) -> GateResult:
        return self.verdicts.report(STEP_TIME, name, level)

    def accept_length_result(self, name: str, level: int, category: str = "") -> GateResult:
        """The whole run's accept length, or with `category` that prompt category's alone."""
        return self.verdicts.report(ACCEPT_LENGTH, name, level, category=category)

    def speculation_result(self, name: str, level: int, must_win_up_to: int | None = None) -> GateResult:
        if must_win_up_to == self.options.speculation_must_win_up_to:
            must_win_up_to = None  # the session's own limit: the verdict decided at the sweep stands
        return self.verdicts.report(SPECULATION, name, level, must_win_up_to)

    def soak_result(self, name: str) -> GateResult:
        """test_soak: `name` under [soak] load for its duration, decided on its windows' change points."""
        result, self.soaks[name] = run_soak(self.parts, self.options, name, self._progress)
        return self.verdicts.record_soak(result)

    def stop_server(self, name: str) -> None:
        self.pool.stop(name)

    def stop_all(self) -> None:
        """Stop every server this session launched. Writes nothing (see write_baselines)."""
        self.pool.stop_all()

    def stage_baselines(self, interrupted: bool = False) -> BaselineStage:
        return self.recorder.stage(self.planner.current, interrupted)

    def write_baselines(self, interrupted: bool = False) -> BaselineOutcome:
        """With --update-baselines: write every selected cell's session, or nothing (and say why).

        Nothing is written when the run was interrupted or any planned cell (selected, or a
        reference a selected speculation test needed) was not measured error-free.
        """
        if self.baseline_outcome is None:
            if not self.options.update_baselines:
                self.baseline_outcome = BaselineOutcome(Refresh.NOT_REQUESTED)
            else:
                self.baseline_outcome = commit_baseline_stages([self.stage_baselines(interrupted)], self.histories.store,
                                                               keep=self.suite.tolerances.history_sessions)
        return self.baseline_outcome

    # -- what the summary and the results document read -------------------------------------------
    @property
    def results(self) -> list[GateResult]:
        return self.verdicts.results

    @property
    def relaunches(self) -> dict[str, list[Relaunch]]:
        return self.campaign.relaunches

    @property
    def baselines_requested(self) -> bool:
        """Whether this process was asked to write baselines and has tried (its outcome is there)."""
        return self.baseline_outcome is not None and self.baseline_outcome.requested

    def categories_at(self, level: int) -> list[str]:
        return self.levels.categories_at(level, self.workload)

    def final_failures(self) -> list[GateResult]:
        return self.verdicts.final_failures()
