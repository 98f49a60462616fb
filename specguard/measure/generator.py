"""The runs of one cell, in this process or spread over worker processes (load.py is the
in-process loop; workers.py runs it in other processes; this module picks one)."""

from __future__ import annotations

import asyncio
from typing import Protocol

from specguard.measure.http1 import Connection, Endpoint
from specguard.measure.load import LoadSettings, RunResult, client_processes, encode_requests, run_requests
from specguard.measure.workers import WorkerPool
from specguard.workload import Workload


class _Runs(Protocol):
    """Where a cell's runs are sent from: this process, or worker processes (WorkerPool)."""

    def run(self, requests: list[bytes]) -> RunResult: ...

    def close(self) -> None: ...


class _InProcessRuns:
    """A private event loop and one kept-alive connection per closed-loop worker."""

    def __init__(self, base_url: str, settings: LoadSettings) -> None:
        self._settings = settings
        self._loop = asyncio.new_event_loop()
        endpoint = Endpoint.from_url(base_url)
        self._conns = [Connection(endpoint) for _ in range(settings.concurrency)]

    def run(self, requests: list[bytes]) -> RunResult:
        return self._loop.run_until_complete(run_requests(self._conns, requests, self._settings))

    def close(self) -> None:
        # A run stopped by Ctrl-C leaves its request tasks pending: cancel and await them, as
        # asyncio.run does, so that closing the loop does not print one warning per task.
        pending = asyncio.all_tasks(self._loop)
        for task in pending:
            task.cancel()
        if pending:
            self._loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        for conn in self._conns:
            conn.close()
        self._loop.run_until_complete(asyncio.sleep(0))  # let the transports finish closing
        self._loop.close()


class LoadGenerator:
    """The runs of one cell: a private event loop and one connection per closed-loop worker,
    or worker processes that each have those (synchronous API, so pytest-benchmark can time
    each run)."""

    def __init__(self, base_url: str, settings: LoadSettings) -> None:
        self.base_url = base_url
        self.settings = settings
        self.processes = client_processes(settings)
        self._runs: _Runs
        if self.processes > 1:
            self._runs = WorkerPool(base_url, settings, self.processes)
        else:
            self._runs = _InProcessRuns(base_url, settings)

    def run(self, workload: Workload) -> RunResult:
        return self._runs.run(encode_requests(self.base_url, workload, self.settings))

    def close(self) -> None:
        self._runs.close()

    def __enter__(self) -> LoadGenerator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def run_once(base_url: str, workload: Workload, settings: LoadSettings) -> RunResult:
    """A single run with its own loop and connections (tools and tests)."""
    with LoadGenerator(base_url, settings) as gen:
        return gen.run(workload)
