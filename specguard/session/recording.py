"""`--update-baselines`: the session's cells staged as stored sessions, written all or nothing."""

from __future__ import annotations

from specguard import __version__
from specguard.session.cells import CellStore
from specguard.session.history import Histories
from specguard.session.levels import SweepLevels
from specguard.session.options import RunOptions
from specguard.session.parts import SessionParts
from specguard.session.plan import Plan
from specguard.session.servers import ServerPool
from specguard.store.baseline_file import RunSample, StoredSession, now_iso
from specguard.store.baselines import StagedWrite
from specguard.store.refresh import BaselineProblem, BaselineStage, ProblemKind, SkippedConfig


class Recorder:
    """Builds this process's baseline writes from what the session measured."""

    def __init__(self, parts: SessionParts, options: RunOptions, session_id: str, git_commit: str) -> None:
        self._suite_path = str(parts.suite.path)
        self._options = options
        self._pool: ServerPool = parts.pool
        self._cells: CellStore = parts.cells
        self._histories: Histories = parts.histories
        self._levels: SweepLevels = parts.levels
        self._session_id = session_id
        self._git_commit = git_commit

    def stage(self, plan: Plan, interrupted: bool = False) -> BaselineStage:
        """This process's writes, in memory, and whether every planned cell was measured error-free
        (selected cells, and references they needed). Nothing is written here."""
        selected = plan.selected_cells if plan.planned else sorted(self._cells.cells)
        planned = list(dict.fromkeys([*selected, *plan.reference_cells]))
        # An xdist worker answers for the cells it tried; the commit checks the workers' union.
        needed = sorted(self._cells.attempted | set(self._cells.cells)) if self._options.worker_id else planned
        problems, skipped = self._problems(needed)
        if interrupted:
            problems.insert(0, BaselineProblem(ProblemKind.INTERRUPTED))
        notes = [SkippedConfig(name, _first_line(self._pool.state(name).failure)) for name in sorted(skipped)]
        covered = [k for k in planned if (k in self._cells.cells and not self._cells.error(*k)) or k[0] in skipped]
        at = self._levels.level
        return BaselineStage(complete=not problems, problems=problems, writes=self._writes(selected), skipped=notes,
                             planned=[(n, at(v)) for n, v in planned], covered=[(n, at(v)) for n, v in covered])

    def _problems(self, needed: list[tuple[str, int]]) -> tuple[list[BaselineProblem], set[str]]:
        """Why the cells needed cannot be written, and the configurations skipped here."""
        problems: list[BaselineProblem] = []
        skipped: set[str] = set()
        for name, value in needed:
            failure = self._pool.state(name).failure
            cell = self._cells.cell(name, value)
            level = self._levels.level(value)
            if cell is None:
                if failure is not None and failure.skip:
                    skipped.add(name)
                else:
                    problems.append(BaselineProblem(ProblemKind.NOT_MEASURED, name, level, _first_line(failure)))
            elif cell.error:
                problems.append(BaselineProblem(ProblemKind.HAD_ERRORS, name, level, _first_line(cell.error)))
        return problems, skipped

    def _writes(self, selected: list[tuple[str, int]]) -> list[StagedWrite]:
        by_config: dict[str, list[int]] = {}
        for name, level in selected:
            if self._cells.cell(name, level) is not None and not self._cells.error(name, level):
                by_config.setdefault(name, []).append(level)
        writes = []
        for name, levels in by_config.items():
            state = self._pool.state(name)
            if state.handle is None:
                continue
            provenance = {"suite": self._suite_path, "suite_version": __version__, "git_commit": self._git_commit,
                          "server_command": state.handle.command, "server_args": state.handle.effective.raw,
                          "mode": state.mode}
            sessions = {self._levels.store_key(level): StoredSession(session_id=self._session_id, date=now_iso(),
                                                                      provenance=provenance, runs=self.run_samples(name, level))
                        for level in sorted(levels)}
            writes.append(StagedWrite(name, self._histories.fingerprint(name), sessions))
        return writes

    def run_samples(self, name: str, level: int) -> list[RunSample]:
        """The cell's runs as stored, each with the id of the server launch that ran it."""
        tagged = self._cells.tagged_runs(name, level, self._pool.state(name).launch_id)
        return [RunSample.from_metrics(r, i, lid) for i, (lid, r) in enumerate(tagged)]


def _first_line(text: object) -> str:
    """The first line of a failure or an error ("" for none)."""
    return (str(text).splitlines() or [""])[0] if text is not None else ""
