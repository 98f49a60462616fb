"""The between-launch spread a comparison with stored sessions uses: declared (``Prior``),
measured (``SpreadEstimate``, pooled over cells), and how the measured one checks the declared
one: a prior a history contradicts is dropped, one too few sessions can check counts double,
and the session's pooled history checks it once more. decide/stats.py's comparisons read it."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from enum import Enum

from scipy import special

from specguard.config import PRIOR_BETWEEN_DOF

# A history whose spread exceeds the prior's at this level contradicts the prior. 1 %, not 5 %:
# a contradicted prior is dropped (``between_estimate``) and a cell of K = 5 stored sessions then
# has 4 dof, too few to fail anything at its alpha, so with a right prior the check disarms about
# this share of cells. At 5 % that cost the engine-slowdown scenario 2-4 points of power per level;
# at 1 % a prior at half the truth is caught in 51 % of cells instead of 67 % (docs/statistics.md).
PRIOR_CHECK_P = 0.01

# A history of fewer than this many dof (K <= 2 stored sessions) cannot tell a prior set too small:
# at K = 1 nothing checks it, and at K = 2 the chi-square check on one dof catches a prior at half
# the truth in about 1 cell of 5. Such a prior then failed unchanged code in 3.7-8.8 % of whole-suite
# runs at K = 1 and up to 7 % at K = 2 (benchmarks/suite_false_fails.py), so below this depth the
# prior counts at UNCHECKED_PRIOR_FACTOR times its value: the gate stays valid for a prior down to
# half the truth, at the price of failing only larger drops until more sessions are recorded
# (report/resolution.py ``few_sessions_lines`` says which cells and how many sessions fix it).
UNCHECKED_BELOW_DOF = 2
UNCHECKED_PRIOR_FACTOR = 2.0

# Where a cell's own history does not contradict the prior, the session's pooled history
# (``Prior.session``: every configuration's stored sessions, 3 (K - 1) dof for three
# configurations) checks it once more, at this level. One cell's K - 1 dof let a prior at half the
# truth fail unchanged code in 1.2-7.2 % of attach-mode runs at K = 3-10; with the pooled check it
# is 0.0-0.8 % (benchmarks/suite_false_fails.py, docs/guarantees.md). 30 %, not 1 %: with 6 dof
# (K = 3) a check at 5 % still passes a half prior in about 1 session of 5, and at 20 % K = 3 at a
# 2.4 % spread kept 1.0-1.2 % false fails. With a right prior the check disarms about 3 sessions in
# 10, which only widens their intervals (the pooled spread, its own dof): -5 % at K = 5 in attach
# mode is caught 0.946 instead of 0.991.
SESSION_CHECK_P = 0.3


@dataclass(frozen=True)
class Prior:
    """The declared between-launch spread of a metric (log scale) and how much it counts: its
    share common to every launch of one session (``day_sd``), its weight in pseudo degrees of
    freedom, and the level at which a history's own spread contradicts it (``checked_prior``)."""

    between_sd: float
    day_sd: float = 0.0
    dof: float = PRIOR_BETWEEN_DOF
    check_p: float = PRIOR_CHECK_P
    widened: float = 1.0  # the factor ``unchecked_prior`` applied to both sds (1: as declared)
    session: SpreadEstimate | None = None  # the session's pooled history, a second check (SESSION_CHECK_P)


class HistoryOf(Enum):
    """Whose values a measured spread comes from."""

    SESSIONS = "sessions"  # one cell's stored sessions
    CELLS = "cells"  # several cells' histories, pooled
    CONFIGURATIONS = "configurations"  # every configuration's histories, each counted once
    LAUNCHES = "launches"  # this session's own launches (or an A/B run's, of the configurations named)


@dataclass(frozen=True)
class Origin:
    """Where a measured spread comes from: ``count`` sessions, cells, configurations or launches
    (0: not recorded, a results file of schema 4 or older) and the configurations by name where the
    launches are another run's."""

    of: HistoryOf = HistoryOf.SESSIONS
    count: int = 0
    names: tuple[str, ...] = ()


@dataclass(frozen=True)
class SpreadEstimate:
    """A measured between-session variance of log values (one-launch sessions) with its degrees
    of freedom: the history's K session means give K - 1. Estimates of several cells (the same
    metric on the same machine) pool into one (``pool_spreads``)."""

    var: float
    dof: float
    origin: Origin = Origin()


@dataclass(frozen=True)
class SpreadSource:
    """Where a comparison's between-launch spread comes from, as data (report/verdict_text.py
    ``spread_source_text`` words it): the declared prior (``prior``: it counts; ``widened``: the
    factor ``unchecked_prior`` applied), a measured spread (``history``), a prior that history
    contradicted and so dropped (``dropped_prior_sd``), and the launches of this comparison pooled
    in, one count per side (``launches``: (L,) against stored sessions, (La, Lb) for two sides).
    ``legacy_text``: a results file of schema 4 or older, the source as specguard worded it then."""

    prior: bool = True
    history: Origin | None = None
    dropped_prior_sd: float | None = None
    widened: float = 1.0
    launches: tuple[int, ...] = ()
    levels_pooled: bool = False  # A/B: one test pooled over a configuration's levels
    legacy_text: str = ""


def pool_spreads(estimates: Sequence[SpreadEstimate | None]) -> SpreadEstimate | None:
    """Pool spread estimates of one metric (dof-weighted). Independent ones only: cells of one
    configuration share their launches (decide/gates.py ``session_spread`` counts each
    configuration once)."""
    est = [e for e in estimates if e is not None and e.dof > 0]
    if not est:
        return None
    dof = sum(e.dof for e in est)
    var = sum(e.var * e.dof for e in est) / dof
    return SpreadEstimate(var, dof, Origin(HistoryOf.CELLS, len(est)))


def between_variance(prior_sd: float, measured: SpreadEstimate | None,
                     prior_dof: float) -> tuple[float, float, SpreadSource]:
    """Between-session variance (one-launch sessions) and its degrees of freedom.

    The prior counts as ``prior_dof`` pseudo-observations of the variance, the history as its own
    dof (a scaled-inverse-chi^2 update); the test uses t with the summed dof, so a history of K
    sessions enters with K - 1 dof, not as known. An infinite ``prior_dof`` is a known prior.
    """
    p2 = prior_sd**2
    if measured is None or measured.dof <= 0 or math.isinf(prior_dof):
        return p2, prior_dof, SpreadSource()
    dof = prior_dof + measured.dof
    return (prior_dof * p2 + measured.dof * measured.var) / dof, dof, SpreadSource(history=measured.origin)


def between_estimate(prior_sd: float, measured: SpreadEstimate | None, pool: SpreadEstimate | None,
                     prior_dof: float, check_p: float = PRIOR_CHECK_P) -> tuple[float, float, SpreadSource]:
    """The between-session variance a comparison uses, its dof and its source: the prior pooled
    with ``measured`` (``between_variance``), unless ``pool`` contradicts the prior
    (``checked_prior``). Then the prior is dropped and the contradicting history stands alone,
    with its own dof: raising the prior to the history's spread and still counting it as
    ``prior_dof`` pseudo-observations would credit K - 1 sessions with prior_dof + K - 1 dof."""
    if pool is not None and checked_prior(prior_sd, pool, check_p) != prior_sd:
        return pool.var, pool.dof, SpreadSource(prior=False, history=pool.origin, dropped_prior_sd=prior_sd)
    return between_variance(prior_sd, measured, prior_dof)


def unchecked_prior(prior: Prior, pool: SpreadEstimate | None) -> Prior:
    """``prior`` as a comparison against stored sessions uses it: widened by
    UNCHECKED_PRIOR_FACTOR (both its sds, so the day share stays) where ``pool``, the history
    that checks it, has fewer than UNCHECKED_BELOW_DOF degrees of freedom."""
    checking_dof = pool.dof if pool is not None else 0.0
    if checking_dof >= UNCHECKED_BELOW_DOF or prior.widened != 1.0:
        return prior
    f = UNCHECKED_PRIOR_FACTOR
    return replace(prior, between_sd=prior.between_sd * f, day_sd=prior.day_sd * f, widened=f)


def checking_history(prior: Prior, pool: SpreadEstimate | None) -> tuple[SpreadEstimate | None, float]:
    """The history that checks ``prior`` and the level it checks at: the cell's own (``pool``) at
    ``prior.check_p``; where that does not contradict it, the session's pooled history
    (``prior.session``) at SESSION_CHECK_P."""
    if prior.session is None or checked_prior(prior.between_sd, pool, prior.check_p) != prior.between_sd:
        return pool, prior.check_p
    return prior.session, SESSION_CHECK_P


def checked_prior(prior_sd: float, pool: SpreadEstimate | None, p: float = PRIOR_CHECK_P) -> float:
    """The prior between-session sd, unless the history ``pool`` (the cell's own, or the pair's
    for a speculation cell) contradicts it.

    A prior set too small (half the true spread, say) would otherwise pull every cell's estimate
    down with its pseudo dof and fail unchanged code. Under "the prior is right" the history's
    statistic dof * S^2 / prior^2 is chi^2 with dof degrees of freedom; above its 1 - p quantile
    the prior is replaced by the history's estimate S (only ever raised, never lowered: the check
    is one-sided; ``between_estimate`` then drops the prior's pseudo dof too). With a right prior
    this happens in about p of the sessions and only widens their intervals."""
    if pool is None or pool.dof <= 0 or not math.isfinite(pool.dof) or pool.var <= prior_sd**2:
        return prior_sd
    if prior_sd <= 0 or pool.dof * pool.var / prior_sd**2 > float(special.chdtri(pool.dof, p)):
        return math.sqrt(pool.var)
    return prior_sd
