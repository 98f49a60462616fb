"""The test pooled over a configuration's levels, on a linear model of the whole run (docs/ab.md).

A machine that drifts over a run (warming up, a neighbour starting) moves every launch after it,
whatever the build. The ABBA order (``decision.abba_order``) keeps the drift out of a
configuration's B - A difference: its builds' launches have the same mean place in the run. It
does not keep the drift out of the launches' spread around their build's mean, which is what a
two-sample t divides by, so a drifting run looked noisier than it was and lost power (simulated,
eagle3 tok/s -3 %, a random walk of 0.3 % per launch: caught 0.60 of the time where 0.82 without
drift).

So every launch of the run at one gate enters one least-squares model of its location (the median
over its runs of their log values averaged over the levels, which share the launch's offset):

    location ~ configuration + configuration x build B + the run's trend (a line in launch order)

The trend is shared by every configuration (one machine), so it costs one degree of freedom for
the whole run; a configuration's B - A is its own coefficient, tested by t on the residuals of
every configuration's launches (the launch spread is the run's own, never the prior's). Exact for
normal launch offsets and a linear drift; a drift that bends leaves its rest in the residuals,
which widens the interval (conservative). Degree 2 caught 0.725 against the line's 0.71 under
drift, and lost 0.01 without it (200 runs, seed 11): the line is kept.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import special

from specguard.decide.prior import HistoryOf, Origin, SpreadSource
from specguard.decide.stats import RatioEstimate


@dataclass(frozen=True)
class LaunchPoint:
    """One launch in the model: its configuration, whether it is build B, its place in the run's
    launch order and its location (log scale, ``launch_location``)."""

    config: str
    build_b: bool
    slot: int
    location: float


def launch_location(levels: Sequence[Sequence[float]]) -> float | None:
    """One launch's location pooled over its levels (``levels``: each level's run values): per
    run k, its log value averaged over the levels (as many runs as the shortest level has); the
    median over the runs, so that one stalled run does not move it. None when a level has none."""
    runs = min((len(r) for r in levels), default=0)
    if runs == 0:
        return None
    return float(np.median([sum(math.log(r[k]) for r in levels) / len(levels) for k in range(runs)]))


def _design(points: Sequence[LaunchPoint]) -> tuple[np.ndarray, dict[str, int]]:
    """The model's columns: an intercept per configuration, a build-B effect per configuration
    launched in both builds (its column, by name) and the trend."""
    configs = sorted({p.config for p in points})
    both = [c for c in configs if {p.build_b for p in points if p.config == c} == {False, True}]
    effect = {c: len(configs) + i for i, c in enumerate(both)}
    slots = np.array([p.slot for p in points], dtype=float)
    trend = (slots - slots.mean()) / max(float(np.ptp(slots)), 1.0)
    x = np.zeros((len(points), len(configs) + len(both) + 1))
    for i, p in enumerate(points):
        x[i, configs.index(p.config)] = 1.0
        if p.build_b and p.config in effect:
            x[i, effect[p.config]] = 1.0
    x[:, -1] = trend
    return x, effect


@dataclass(frozen=True)
class Contrast:
    """What B/A is estimated of: ``config``'s build effect, or with a ``reference`` its effect less
    the reference's (a speculation ratio: its tok/s over its reference's). ``levels_pooled``: the
    points' locations pool a launch's levels (False: one level's)."""

    config: str
    reference: str | None = None
    levels_pooled: bool = True


def trend_estimate(points: Sequence[LaunchPoint], contrast: Contrast, tolerance: float, *, alpha_look: float,
                   pass_confidence: float) -> RatioEstimate | None:
    """B/A of ``contrast`` from the run's model (module docstring): the ratio, its interval at 1 -
    ``alpha_look`` two-sided, the one-sided p of "B is not below A" and the equivalence bound at
    ``pass_confidence``; None without both builds of its configurations or a residual degree of
    freedom.

    A speculation ratio's variance is the contrast's, c'(X'X)^-1 c s^2: its two build effects share
    the model's residual spread and trend, which the covariance counts exactly, where a spread taken
    from the other speculative configurations' ratios (sharing the same reference launches)
    overstated its degrees of freedom (mtp's speculation group was called worse in 0.0025 of 2000
    unchanged simulated runs at a group alpha of 0.00087; docs/ab.md)."""
    x, effect = _design(points)
    dof = float(len(points) - x.shape[1])
    config, reference = contrast.config, contrast.reference
    names = [config] if reference is None else [config, reference]
    if any(n not in effect for n in names) or dof <= 0 or np.linalg.matrix_rank(x) < x.shape[1]:
        return None
    c = np.zeros(x.shape[1])
    c[effect[config]] = 1.0
    if reference is not None:
        c[effect[reference]] = -1.0
    y = np.array([p.location for p in points])
    inverse = np.linalg.inv(x.T @ x)
    beta = inverse @ x.T @ y
    residual = y - x @ beta
    var = float(residual @ residual) / dof
    diff, se = float(c @ beta), math.sqrt(var * float(c @ inverse @ c))
    if se <= 0:
        return None
    own = [p for p in points if p.config == config]
    others = [p for p in points if p.config not in names]
    q_look, q_pass = float(special.stdtrit(dof, 1 - alpha_look / 2)), float(special.stdtrit(dof, pass_confidence))
    source = SpreadSource(prior=False, levels_pooled=contrast.levels_pooled,
                          history=Origin(HistoryOf.LAUNCHES, len(others), tuple(sorted({p.config for p in others})))
                          if others else None,
                          launches=(sum(not p.build_b for p in own), sum(p.build_b for p in own)))
    return RatioEstimate(ratio=math.exp(diff), low=math.exp(diff - q_look * se), high=math.exp(diff + q_look * se),
                         threshold=1 - tolerance, p_value=float(special.stdtr(dof, diff / se)), dof=dof,
                         confidence=1 - alpha_look, between_sd=math.sqrt(var), between_source=source,
                         test_at=1.0, pass_low=math.exp(diff - q_pass * se), pass_confidence=pass_confidence)


__all__ = ["Contrast", "LaunchPoint", "launch_location", "trend_estimate"]
