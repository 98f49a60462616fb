"""What a comparison measures and how it decides, from the suite file and the command line:
the suite (with --concurrency), the configurations (--config, plus each speculative one's
reference), the gates' tolerances, priors and weights, and the statistics' budget."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace

from specguard.ab.builds import Build, UsageError
from specguard.ab.decision import Budget, GateSpec
from specguard.ab.rounds import Selection
from specguard.config import Suite, load_suite
from specguard.labels import ACCEPT_LENGTH, SPECULATION, STEP_TIME, THROUGHPUT


def load(path: str, concurrency: list[int] | None) -> Suite:
    """The suite file with --concurrency applied (refused for a request-rate suite)."""
    suite = load_suite(path)
    if concurrency is None:
        return suite
    if suite.sweep.request_rate:
        raise UsageError(f"--concurrency: {path} sweeps request_rate levels {suite.sweep.request_rate}; "
                         f"edit the suite's [sweep] request_rate instead")
    return replace(suite, sweep=replace(suite.sweep, concurrency=list(concurrency)))


def levels_of(suite: Suite) -> list[int]:
    return list(suite.sweep.request_rate or suite.sweep.concurrency)


def _reachable(name: str, builds: Sequence[Build]) -> bool:
    """Attach mode: every build has a URL that can serve the configuration."""
    return all(name in b.urls or None in b.urls for b in builds)


def select(suite: Suite, names: Sequence[str], builds: Sequence[Build], *,
           references: bool = True) -> tuple[Selection, list[str]]:
    """The configurations to compare (suite order) and notes. --config names them (default:
    every configuration, in attach mode every one with a URL in both builds); with
    ``references`` each selected speculative configuration brings its reference, whose launches
    within each build give the speculation ratio, where it can be measured."""
    chosen = _chosen(suite, names, builds)
    refs, notes = _references(suite, chosen, builds) if references else ({}, [])
    measured = [c for c in suite.servers if c in chosen or c in refs.values()]
    speculative = frozenset(c for c in measured if suite.servers[c].speculative)
    return Selection(measured, levels_of(suite), speculative, refs, rate=bool(suite.sweep.request_rate)), notes


def _chosen(suite: Suite, names: Sequence[str], builds: Sequence[Build]) -> list[str]:
    """--config's configurations (checked), or the default selection."""
    configs = list(suite.servers)
    attach = any(b.attach for b in builds)
    unknown = [name for name in names if name not in suite.servers]
    if unknown:
        raise UsageError(f"--config {unknown[0]}: no configuration {unknown[0]!r} in {suite.path}; it has "
                         f"{', '.join(configs)}")
    chosen = list(dict.fromkeys(names)) or [c for c in configs if not attach or _reachable(c, builds)]
    if attach:
        _check_reachable(chosen, builds)
    if not chosen:
        raise UsageError("--a-url/--b-url: no configuration of the suite has a URL in both builds; name them: "
                         "--a-url NAME=URL --b-url NAME=URL")
    return chosen


def _check_reachable(chosen: Sequence[str], builds: Sequence[Build]) -> None:
    """Attach mode: each chosen configuration needs a URL in every build."""
    for name in chosen:
        missing = [b for b in builds if name not in b.urls and None not in b.urls]
        if missing:
            flag = f"--{missing[0].name.lower()}-url"
            raise UsageError(f"{flag}: no URL for configuration {name!r}; add {flag} {name}=URL or leave it out of --config")


def _references(suite: Suite, chosen: Sequence[str], builds: Sequence[Build]) -> tuple[dict[str, str], list[str]]:
    """Each chosen speculative configuration's reference where it can be measured, and notes."""
    attach = any(b.attach for b in builds)
    refs: dict[str, str] = {}
    notes = []
    for name in chosen:
        ref = suite.servers[name].reference
        if not suite.servers[name].speculative or not ref:
            continue
        if attach and not _reachable(ref, builds):
            notes.append(f"speculation {name}: not compared, its reference {ref!r} has no --a-url/--b-url")
            continue
        refs[name] = ref
        if ref not in chosen:
            notes.append(f"{ref}: measured as the reference of {name} (its speculation ratio within each build)")
    return refs, notes


# Each gate's weight in the comparison's family (weighted Bonferroni, ``decision.set_alphas``).
# tok/s is the change a build is merged on; step time and accept length split it (log tok/s = log
# accept length - log step time) and a speculation ratio is the quotient of two tok/s groups, so
# they carry much of the same signal and take less of the family than in the history gate
# (``GateDesign.gate_weights``: 1, 1, 0.25, 2). Simulated (research.study.ab_power, 600 runs,
# seed 31, eagle3 tok/s -3 %, at most 4 launches per build): caught 0.805 with the history gate's
# weights, 0.853 with these, 0.858 with tok/s at 3 (docs/ab.md, "Power, simulated").
AB_GATE_WEIGHTS = {THROUGHPUT: 2.0, STEP_TIME: 1.0, ACCEPT_LENGTH: 0.25, SPECULATION: 1.0}


def gate_specs(suite: Suite) -> dict[str, GateSpec]:
    """Each gate's tolerance and prior launch spread, as the suite's gates have them, and its
    family weight (``AB_GATE_WEIGHTS``). Within one interleaved run the day part of the suite's
    between-session spread (``prior_day_sd``) cancels, so the prior is its launch part,
    sqrt(prior^2 - day^2). The speculation ratio's launch holds two launches (speculative and
    reference, each with its own offset), so its prior spread is sqrt(2) x tok/s's. The prior is
    checked against the run's own spread and reported, not decided on (``decision.look_estimate``)."""
    tol, weight = suite.tolerances, AB_GATE_WEIGHTS
    launch = math.sqrt(max(tol.prior_between_sd**2 - min(tol.prior_day_sd, tol.prior_between_sd)**2, 0.0))
    return {
        THROUGHPUT: GateSpec(THROUGHPUT, tol.throughput, launch, weight[THROUGHPUT]),
        STEP_TIME: GateSpec(STEP_TIME, tol.step_time, launch, weight[STEP_TIME], inverted=True),
        ACCEPT_LENGTH: GateSpec(ACCEPT_LENGTH, tol.accept_length, tol.prior_between_sd_accept, weight[ACCEPT_LENGTH]),
        SPECULATION: GateSpec(SPECULATION, tol.throughput, math.sqrt(2) * launch, weight[SPECULATION]),
    }


def budget_of(suite: Suite, max_rounds: int) -> Budget:
    tol = suite.tolerances
    return Budget(family_alpha=tol.family_alpha, pass_confidence=tol.pass_confidence, max_rounds=max_rounds)


__all__ = ["AB_GATE_WEIGHTS", "budget_of", "gate_specs", "levels_of", "load", "select"]
