"""The noise a simulated launch carries on top of the emulator's model, and its named presets."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

# GPU servers (docs/research/gate-study.md): runs within a launch agree to ~0.2-0.8 %, launches to ~1-2 %.
GPU_WITHIN = 0.005
# The spread between sessions (what a stored history measures) is split into a day part shared by
# every launch of one session (the machine's mood: clocks, thermals, neighbours) and a per-launch
# part that relaunching averages. "1 % launch spread" (preset gpu) = 1 % between one-launch
# sessions: day 0.5 %, launch 0.87 %. One run in 50 stalls at 0.7x.
GPU_DAY_SHARE = 0.5
GPU_STALL_RATE = 0.02
GPU_STALL_FACTORS = (0.7,)


@dataclass(frozen=True)
class Noise:
    """Noise of one simulated launch: the model's own (None = the profile's) plus the client's."""

    drift_pct: float | None = None  # per launch, lognormal sd in %
    jitter_pct: float | None = None  # per step
    within: dict[int, float] = field(default_factory=dict)  # extra log sd per run, by concurrency
    between: dict[int, float] = field(default_factory=dict)  # extra log sd per launch, by concurrency
    stall_rate: float = 0.0  # probability that a run stalls (another job takes the cores)
    stall_factors: tuple[float, ...] = ()  # a stalled run's tok/s is one of these x its own
    bias: dict[str, float] = field(default_factory=dict)  # "config cN" -> real / model mean tok/s
    day_pct: float = 0.0  # per session, shared by every launch of every configuration (the machine's mood), sd in %


# The default suite's real-time client on top of the model, measured by ``measure_noise`` from 8
# real sessions (5 repeats each) of the shipped client on the 2-core machine, committed with their
# manifests in docs/research/evidence/noise/<label>/ (`tools/measure_noise.py --label quiet|busy`, 30 Nov
# 2026; tests/research/test_study.py checks these constants against the committed noise.json files).
# Quiet: load average 0.5-1.7 (nothing else running). Busy: 2.1-2.7 (other sessions' jobs).
EMULATOR_QUIET = Noise(
    within={1: 0.0, 4: 0.0, 16: 0.0016, 64: 0.0033}, between={1: 0.0109, 4: 0.0094, 16: 0.0, 64: 0.0061},
    stall_rate=0.0146, stall_factors=(0.9234, 0.9376, 0.9393, 0.9587, 0.9666, 0.9675, 0.9692),
    bias={"baseline c1": 0.9911, "baseline c4": 0.9784, "baseline c16": 0.9775, "baseline c64": 0.9694,
          "eagle3 c1": 0.9973, "eagle3 c4": 0.9788, "eagle3 c16": 0.9936, "eagle3 c64": 0.9946,
          "mtp c1": 0.9794, "mtp c4": 0.9728, "mtp c16": 0.9842, "mtp c64": 0.9908})
EMULATOR_BUSY = Noise(
    within={1: 0.0, 4: 0.0071, 16: 0.0039, 64: 0.0062}, between={1: 0.0186, 4: 0.0, 16: 0.0014, 64: 0.0},
    stall_rate=0.0042, stall_factors=(0.8877, 0.9659),
    bias={"baseline c1": 0.9867, "baseline c4": 0.9721, "baseline c16": 0.9691, "baseline c64": 0.9593,
          "eagle3 c1": 0.9809, "eagle3 c4": 0.976, "eagle3 c16": 0.9873, "eagle3 c64": 0.9899,
          "mtp c1": 0.9843, "mtp c4": 0.9822, "mtp c16": 0.9911, "mtp c64": 0.9957})

NOISE_PRESETS = ("emulator", "emulator-busy", "gpu-quiet", "gpu", "gpu-drift2")


def preset(name: str, levels: Sequence[int], drift_pct: float | None = None,
           jitter_pct: float | None = None) -> Noise:
    """Named noise levels: the default suite's real-time emulator on the shared machine (quiet
    or busy), and GPU servers with 0.5, 1 or 2 % launch-to-launch drift (docs/research/gate-study.md says why)."""
    if name in ("emulator", "emulator-busy"):
        return replace(EMULATOR_QUIET if name == "emulator" else EMULATOR_BUSY, drift_pct=drift_pct, jitter_pct=jitter_pct)
    total = {"gpu-quiet": 0.5, "gpu": 1.0, "gpu-drift2": 2.0}[name]
    day = total * GPU_DAY_SHARE
    drift = math.sqrt(total**2 - day**2)
    return Noise(drift_pct=drift if drift_pct is None else drift_pct, jitter_pct=jitter_pct,
                 within={c: GPU_WITHIN for c in levels}, between={}, stall_rate=GPU_STALL_RATE,
                 stall_factors=GPU_STALL_FACTORS, bias={}, day_pct=day)


def rescalable(a: Noise, b: Noise) -> bool:
    """Whether trials simulated under ``a`` give exactly those under ``b`` by ``rescale_trial``: the
    two differ only in the per-launch drift and the day's sd, both present in each."""
    def rest(n: Noise) -> Noise:
        return replace(n, drift_pct=None, day_pct=0.0)
    return (rest(a) == rest(b) and all(x is not None and x > 0 for x in (a.drift_pct, b.drift_pct))
            and (a.day_pct > 0) == (b.day_pct > 0))
