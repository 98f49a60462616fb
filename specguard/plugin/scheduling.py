"""pytest-xdist: a configuration and its reference on one worker, one launched server at a time.

Every server is launched once and every cell measured once: the controller sends all tests of a
configuration group to one worker (xdist's own loadgroup cannot be relied on: with pytest 9 its
group tag on node ids has no effect), workers claim configurations and share a launch lock, and
the controller merges the workers' results documents and commits their staged baselines.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from specguard.config import Suite
from specguard.notes import Note, NoteKind
from specguard.plugin import state
from specguard.plugin.options import baseline_dir, get_suite
from specguard.store.baselines import BaselineStore
from specguard.store.refresh import BaselineOutcome, BaselineStage, commit_baseline_stages

WORKER_OUTPUT_KEY = "specguard_results"
WORKER_STAGE_KEY = "specguard_baseline_stage"
_CELL_ID = re.compile(r"\[(.+)\]$")


def group_of(suite: Suite, name: str) -> str:
    """A configuration's group: itself, or its reference (measured together, on one worker)."""
    return suite.servers[name].reference or name


def is_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


def run_notes(config: pytest.Config, suite: Suite) -> list[Note]:
    """How the controller places configurations on workers, for the summary."""
    if is_worker(config) or not getattr(config.option, "numprocesses", None):
        return []
    notes = []
    dist = getattr(config.option, "dist", "no")
    if dist in ("load", "loadgroup", "worksteal"):
        notes.append(Note.of(NoteKind.XDIST_GROUPED, dist=dist))
    groups = {group_of(suite, n) for n in suite.servers}
    if len(groups) > 1 and any(s.gpus is None for s in suite.servers.values()):
        notes.append(Note.of(NoteKind.XDIST_SERIALISED, groups=len(groups), workers=int(config.option.numprocesses)))
    return notes


def worker_options(config: pytest.Config, suite: Suite) -> dict[str, Any]:
    """RunOptions fields for pytest-xdist workers (claims and the launch lock)."""
    wi = getattr(config, "workerinput", None)
    if not wi:
        return {}
    claim_dir = Path(config.rootpath) / ".specguard" / f"xdist-{wi.get('testrunuid', 'run')}"
    out: dict[str, Any] = {"claim_dir": claim_dir, "worker_id": wi.get("workerid", "")}
    if any(s.gpus is None for s in suite.servers.values()):
        out["launch_lock"] = claim_dir / "launch.lock"
    return out


def claim_dir(config: pytest.Config) -> Path | None:
    """The controller's claim directory of this run (removed at the end), if it ran workers."""
    run = config.stash.get(state.TESTRUN, "")
    return Path(config.rootpath) / ".specguard" / f"xdist-{run}" if run else None


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """pytest-xdist controller: remember the run id, whose claim directory is removed at the end."""
    node.config.stash[state.TESTRUN] = node.workerinput.get("testrunuid", "")


def _config_of_id(nodeid: str, suite: Suite) -> str | None:
    """The configuration a cell test id names: `[eagle3-c16]`, `[eagle3-c16-code]` (a category)."""
    m = _CELL_ID.search(nodeid)
    if not m:
        return None
    found = [n for n in suite.servers if re.fullmatch(re.escape(n) + r"-[cr]\d+(-.+)?", m.group(1))]
    return max(found, key=len) if found else None


@pytest.hookimpl(optionalhook=True, tryfirst=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """pytest-xdist controller: every test of a configuration group to one worker."""
    if state.SUITE not in config.stash or getattr(config.option, "dist", "no") not in ("load", "loadgroup", "worksteal"):
        return None
    from xdist.scheduler import LoadScopeScheduling

    suite = config.stash[state.SUITE]

    class ConfigurationGroups(LoadScopeScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            name = _config_of_id(nodeid, suite)
            if name is not None:
                return "specguard:" + group_of(suite, name)
            return nodeid  # other tests: one scope each, as --dist load

    return ConfigurationGroups(config, log)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: Any) -> None:
    """pytest-xdist controller: collect each worker's results document and baseline stage."""
    output = getattr(node, "workeroutput", {})
    if output.get(WORKER_OUTPUT_KEY):
        node.config.stash[state.WORKER_DOCS].append(json.loads(output[WORKER_OUTPUT_KEY]))
    if output.get(WORKER_STAGE_KEY):
        node.config.stash[state.WORKER_STAGES].append(json.loads(output[WORKER_STAGE_KEY]))


def commit_worker_stages(config: pytest.Config, interrupted: bool) -> BaselineOutcome | None:
    """xdist controller: write the workers' staged baselines, all or nothing."""
    stages = config.stash[state.WORKER_STAGES]
    if not stages:
        return None
    suite = get_suite(config)
    return commit_baseline_stages([BaselineStage.from_json(s) for s in stages], BaselineStore(baseline_dir(config, suite)),
                                  suite.tolerances.history_sessions, interrupted=interrupted)
