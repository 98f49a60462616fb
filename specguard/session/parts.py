"""The parts of a session every gate reads: the suite and its design, the planner (family and
alpha), the server pool, the measured cells, the stored histories and the sweep's levels. Built
once by the session (``GateSession``) and handed to the verdict classes as one object."""

from __future__ import annotations

from dataclasses import dataclass

from specguard.config import Suite
from specguard.decide.consistency import StallBasis
from specguard.decide.gates import GateDesign
from specguard.session.cells import STEPS_PER_S, CellStore
from specguard.session.history import Histories
from specguard.session.levels import SweepLevels
from specguard.session.plan import Planner
from specguard.session.servers import ServerPool


@dataclass(frozen=True)
class SessionParts:
    suite: Suite
    design: GateDesign
    planner: Planner
    pool: ServerPool
    cells: CellStore
    histories: Histories
    levels: SweepLevels

    def stall_basis(self, name: str, level: int) -> StallBasis | None:
        """What a configuration's tok/s stalls are judged on at a level (decide/consistency.py): a
        speculative one's decode steps per second, which its runs' acceptance does not move, in
        this session and its stored sessions; None for one without speculation (its tok/s)."""
        if not self.suite.servers[name].speculative:
            return None
        return StallBasis(self.cells.launch_values(name, level, STEPS_PER_S),
                          self.histories.stored(name, level, STEPS_PER_S))
