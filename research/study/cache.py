"""Simulated trials kept on disk and reused: they do not depend on the gate settings, so a grid
can be decided again without simulating again (``python -m research.study --cache``)."""

from __future__ import annotations

import hashlib
import pickle
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from research.study.plan import StudyPlan
from research.study.simulate import Trial, extend_trial, rescale_trial, simulate_trial

# Sweep fields that only the decisions read, with the values every cached trial so far was keyed
# with: the key holds them fixed, so changing them in a suite neither misses nor re-simulates.
DECISION_ONLY_SWEEP: dict[str, Any] = {"launches": 1, "relaunch": "on-suspicion", "relaunch_p": 0.05}
DECISION_ONLY_SWEEP_NEW = ("max_launches",)  # added after the cache was keyed: left out of the key
# Sweep fields added after the cache was keyed that the simulation does read: left out of the key
# at the value that changes nothing (the behaviour before they existed), in it at any other.
NEUTRAL_SWEEP: dict[str, Any] = {"min_requests_per_run": 0}
# Server fields added after the cache was keyed that the simulation does not read: left out of the
# key at their default, so a new field of the suite's servers does not orphan every kept trial.
NEUTRAL_SERVER: dict[str, Any] = {"restart_command": None}


def _sim_servers(suite: Any) -> list[tuple[str, dict[str, Any]]]:
    """The servers as the key hashes them (``NEUTRAL_SERVER`` fields at their default left out)."""
    servers: dict[str, dict[str, Any]] = asdict(suite)["servers"]
    return sorted((name, {k: v for k, v in cfg.items() if not (k in NEUTRAL_SERVER and v == NEUTRAL_SERVER[k])})
                  for name, cfg in servers.items())


def _sim_sweep(sweep: Any) -> dict[str, Any]:
    """What the simulation reads of the sweep, as the key hashes it (``DECISION_ONLY_SWEEP``,
    ``NEUTRAL_SWEEP``): a trial kept before a field existed keeps its key."""
    out: dict[str, Any] = asdict(sweep)
    for k in DECISION_ONLY_SWEEP_NEW:
        out.pop(k, None)
    for k, v in NEUTRAL_SWEEP.items():
        if k in out and out[k] == v:
            del out[k]
    for k, v in DECISION_ONLY_SWEEP.items():
        if k in out:
            out[k] = v
    return out


def load_trial(path: Path) -> Trial:
    with open(path, "rb") as f:
        trial: Trial = pickle.load(f)
    return trial


# What a simulated run holds and the model behind it; trials kept under another format are not
# found (issue 23: acceptance per request or per run, start_run per run, step rates per run).
TRIAL_FORMAT = "tok/s, accept length, step rate; acceptance model"


def trial_key(plan: StudyPlan, index: int, max_k: int, max_r: int, max_l: int) -> str:
    """The cache key of a simulated trial: what the simulation reads of the suite (its servers,
    sweep and workload; not its tolerances or the sweep's launch design, which only the
    decisions read), the noise, the changes, the acceptance model, seed, index, depth, repeats
    and launches, and the trial format."""
    sim = repr((_sim_servers(plan.suite), _sim_sweep(plan.suite.sweep), asdict(plan.suite.workload)))
    return hashlib.sha256(repr((sim, asdict(plan.noise), plan.changes, plan.seed, index, max_k, max_r,
                                max_l, TRIAL_FORMAT, plan.acceptance)).encode()).hexdigest()[:24]


def cached_trial(plan: StudyPlan, index: int, max_k: int, max_r: int, max_l: int) -> Trial:
    """``simulate_trial``, kept in ``plan.cache_dir`` under a hash of everything it depends on
    (suite file text, noise, changes, seed, index, depth, repeats, launches). With
    ``plan.sim_noise`` the trial is simulated (and kept) under that noise and rescaled. A trial
    kept with fewer launches is extended (``extend_trial``) and kept under its new key."""
    if plan.sim_noise is not None and plan.sim_noise != plan.noise:
        base = cached_trial(replace(plan, noise=plan.sim_noise, sim_noise=None), index, max_k, max_r, max_l)
        return rescale_trial(plan.suite, base, index, plan.seed, plan.sim_noise, plan.noise, plan.changes)
    cache_dir = plan.cache_dir
    if cache_dir is None:
        return simulate_trial(plan.suite, index, plan.seed, max_k, max_r, plan.noise, plan.changes, max_l,
                              plan.acceptance)

    def path_of(launches: int) -> Path:
        return Path(cache_dir) / f"trial-{trial_key(plan, index, max_k, max_r, launches)}.pkl"

    path = path_of(max_l)
    if path.exists():
        return load_trial(path)
    fewer = next((path_of(k) for k in range(max_l - 1, 0, -1) if path_of(k).exists()), None)
    if fewer is not None:
        trial = extend_trial(plan.suite, load_trial(fewer), index, plan.seed, plan.noise, plan.changes, max_l,
                             plan.acceptance)
    else:
        trial = simulate_trial(plan.suite, index, plan.seed, max_k, max_r, plan.noise, plan.changes, max_l,
                               plan.acceptance)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".tmp{index}")
    tmp.write_bytes(pickle.dumps(trial))
    tmp.replace(path)
    return trial
