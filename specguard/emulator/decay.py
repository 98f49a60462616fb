"""A server that ages: acceptance that decays and steps that slow down over serving time.

The field reports (sglang#37326: acceptance towards zero after ~16 hours, back after a restart;
sglang#28771: 3.33 -> 1.90 within 2 hours; vllm#41838: 3.07 -> 2.8 over hours) fail slowly, so a
soak test needs a server that does the same on demand (issue 32). Both faults follow one ramp:
0 before ``start``, rising linearly to 1 over ``over`` (0: a step at ``start``), then held at 1.

- accept decay F: at ramp r the expected accept length is (1 - F r) times the undecayed one.
  Each draft position's conditional acceptance is multiplied by one factor k (so P(at least j
  drafts) by k**j), k solved for the profile's default acceptance at the positions in use. The
  same draws are compared with lower thresholds, so a request never accepts more as it decays.
  Under SGLang's forced acceptance (simulated_acceptance.py) the forced length is scaled instead;
- step slowdown F: every step (prefill and decode) lasts (1 + F r) times as long. A negative F
  (above -1) is a machine that frees up: with ``--emulator-step-scale 1.5`` and F = -1/3 at a
  step, a launch's first runs are slow and the later ones not, as when a neighbour's job ends
  (the stalled runs the gate's consistency check is for, decide/consistency.py).

The clock starts at the first generation request (health probes excluded), not at launch: a
launched soak's start-up and health wait (which vary, and ``--emulator-startup-s``) do not move
the curve, and an emulator started by hand and left idle until a soak attaches to it decays
from when that traffic begins. Traffic it served before keeps its clock running, as a real
server keeps ageing. The token clock counts generated tokens instead (independent of how fast the
machine keeps up with real time). A /flush_cache does not reset either clock (only a restart
helps, as in sglang#37326).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

import numpy as np


class DecayClock(enum.Enum):
    SECONDS = "s"  # seconds since the first generation request (health probes excluded)
    TOKENS = "tokens"  # generated tokens served to generation requests


@dataclass(frozen=True)
class DecaySettings:
    """``--emulator-fault-accept-decay`` / ``-step-slowdown`` and their ramp, in clock units."""

    accept_decay: float = 0.0  # fraction the accept length falls by, in [0, 1)
    step_slowdown: float = 0.0  # fraction every step lengthens by, > -1 (negative: steps get faster)
    start: float = 0.0  # ramp start after the clock's origin (seconds or tokens)
    over: float = 0.0  # ramp length; 0 = a step change at start
    clock: DecayClock = DecayClock.SECONDS

    def __post_init__(self) -> None:
        unit = self.clock.value
        if not 0.0 <= self.accept_decay < 1.0:
            raise ValueError(f"--emulator-fault-accept-decay must be in [0, 1), got {self.accept_decay}")
        if not self.step_slowdown > -1.0:
            raise ValueError(f"--emulator-fault-step-slowdown must be > -1, got {self.step_slowdown}")
        for name, value in (("start", self.start), ("over", self.over)):
            if not value >= 0.0:
                raise ValueError(f"--emulator-fault-decay-{name}-{unit} must be >= 0, got {value}")

    @property
    def active(self) -> bool:
        return self.accept_decay > 0.0 or self.step_slowdown != 0.0

    def ramp(self, elapsed: float) -> float:
        """0 before ``start``, linear to 1 over ``over``, then 1."""
        if elapsed < self.start:
            return 0.0
        if self.over <= 0.0:
            return 1.0
        return min(1.0, (elapsed - self.start) / self.over)


def position_factor(survival: np.ndarray, target_length: float) -> float:
    """The factor k on every position's conditional acceptance that gives ``target_length``:
    1 + sum_j survival[j] k**(j+1) = target_length, for 1 <= target <= the undecayed length.

    The left side is increasing and convex in k >= 0, so Newton's method from k = 1 falls
    monotonically onto the root (a few iterations; this runs once per decode step)."""
    s = [float(v) for v in survival]
    if target_length >= 1.0 + sum(s):
        return 1.0
    if target_length <= 1.0 or not s:
        return 0.0
    k = 1.0
    for _ in range(50):
        value, slope, power = 1.0 - target_length, 0.0, 1.0
        for j, sj in enumerate(s, start=1):
            slope += j * sj * power  # d/dk of sj k**j, with power = k**(j-1)
            power *= k
            value += sj * power
        step = value / slope
        k -= step
        if step < 1e-13:
            break
    return max(k, 0.0)


class ServingAge:
    """The decay state of one server: its clock, and the factors for the step about to run."""

    def __init__(self, settings: DecaySettings) -> None:
        self.settings = settings
        self.origin_ms: float | None = None  # the first generation request's arrival
        self.tokens = 0  # tokens granted to generation requests
        self.ramp = 0.0  # at the step being planned
        self._k_cache: tuple[int, float, float] | None = None  # (positions, ramp, k)

    def on_submit(self, counted: bool, now_ms: float) -> None:
        if counted and self.origin_ms is None:
            self.origin_ms = now_ms

    def advance(self, now_ms: float) -> None:
        """Read the clock at the start of a step."""
        s = self.settings
        if s.clock is DecayClock.TOKENS:
            self.ramp = s.ramp(float(self.tokens))
        elif self.origin_ms is None:
            self.ramp = 0.0
        else:
            self.ramp = s.ramp((now_ms - self.origin_ms) / 1000.0)

    @property
    def time_factor(self) -> float:
        return 1.0 + self.settings.step_slowdown * self.ramp

    @property
    def length_factor(self) -> float:
        """Accept length now over the undecayed one."""
        return 1.0 - self.settings.accept_decay * self.ramp

    def survival_powers(self, survival: np.ndarray) -> np.ndarray | None:
        """k**1 .. k**positions for the default ``survival`` at the positions in use (None: no decay now)."""
        if self.settings.accept_decay <= 0.0 or self.ramp <= 0.0:
            return None
        positions = len(survival)
        cached = self._k_cache
        if cached is not None and cached[:2] == (positions, self.ramp):
            k = cached[2]
        else:
            k = position_factor(survival, self.length_factor * (1.0 + float(np.sum(survival))))
            self._k_cache = (positions, self.ramp, k)
        powers: np.ndarray = k ** np.arange(1, positions + 1, dtype=float)
        return powers
