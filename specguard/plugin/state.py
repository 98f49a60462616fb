"""What the plugin keeps for one pytest run, in pytest's own stash (one key per thing)."""

from __future__ import annotations

from typing import Any

import pytest

from specguard.config import Suite
from specguard.notes import Note
from specguard.plugin.live import LiveLine
from specguard.report.schema import ResultsDoc
from specguard.session import GateSession

SESSION = pytest.StashKey[GateSession]()
SUITE = pytest.StashKey[Suite]()
DOC = pytest.StashKey[ResultsDoc]()
WORKER_DOCS = pytest.StashKey[list[ResultsDoc]]()  # xdist controller: each worker's results document
WORKER_STAGES = pytest.StashKey[list[dict[str, Any]]]()  # xdist controller: each worker's staged baselines
LIVE = pytest.StashKey[LiveLine]()
INTERACTIVE = pytest.StashKey[bool]()
RUN_NOTES = pytest.StashKey[list[Note]]()
TESTRUN = pytest.StashKey[str]()  # xdist controller: the run id (its claim directory is removed at the end)
