"""Client worker processes, for concurrency one event loop cannot serve without lagging.

Each worker is `python -m specguard.measure.workers`: its own event loop and kept-alive connections for
its share of the closed-loop workers, alive for all the runs of a cell. For a run it gets its
share of the pre-encoded requests (a contiguous block of indices) and a start time; the records
come back and are merged by index. Times from different processes are comparable because
`time.perf_counter()` is CLOCK_MONOTONIC on Linux, one clock for the whole system. Messages are
length-prefixed pickles over the worker's stdin/stdout; every wait for a worker is bounded.
"""

from __future__ import annotations

import asyncio
import os
import pickle
import select
import struct
import subprocess
import sys
import time
from array import array
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from specguard.measure.http1 import Connection, Endpoint
from specguard.measure.load import LoadSettings, RunResult, run_requests

START_DELAY_S = 0.05  # time for every worker to get its requests before the common start
REPLY_GRACE_S = 30.0  # beyond the run deadline, before a silent worker is declared dead
_LEN = struct.Struct("<Q")


def shares(total: int, parts: int) -> list[int]:
    """`total` split into `parts` sizes differing by at most one, larger first."""
    base, extra = divmod(total, parts)
    return [base + (i < extra) for i in range(parts)]


def merge(parts: list[RunResult], concurrency: int) -> RunResult:
    """One run from the runs of the processes: records in index order, CPU added up."""
    records = sorted((r for p in parts for r in p.requests), key=lambda r: r.index)
    turnaround = array("d")
    for p in parts:
        turnaround.extend(p.turnaround_s)
    return RunResult(concurrency=concurrency, requests=records, start_s=min(p.start_s for p in parts),
                     end_s=max(p.end_s for p in parts), timed_out=any(p.timed_out for p in parts),
                     client_cpu_s=sum(p.client_cpu_s for p in parts), processes=len(parts), turnaround_s=turnaround,
                     load_model=parts[0].load_model if parts else "")


def _send(stream: IO[bytes], obj: object) -> None:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(_LEN.pack(len(data)) + data)
    stream.flush()


def _read_exactly(fd: int, n: int, deadline: float) -> bytes:
    chunks, got = [], 0
    while got < n:
        remaining = None if deadline == float("inf") else deadline - time.monotonic()
        if remaining is not None and (remaining <= 0 or not select.select([fd], [], [], remaining)[0]):
            raise TimeoutError("client worker process did not answer in time")
        chunk = os.read(fd, min(n - got, 1 << 20))
        if not chunk:
            raise EOFError("client worker process exited")
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def _recv(fd: int, deadline: float) -> Any:
    (size,) = _LEN.unpack(_read_exactly(fd, _LEN.size, deadline))
    return pickle.loads(_read_exactly(fd, size, deadline))


@dataclass
class _Worker:
    """One worker process and its pipes: commands in (its stdin), replies out (its stdout)."""

    process: subprocess.Popen[bytes]
    commands: IO[bytes]
    replies: IO[bytes]

    @classmethod
    def start(cls, env: dict[str, str]) -> _Worker:
        proc = subprocess.Popen([sys.executable, "-m", "specguard.measure.workers"], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, env=env)
        assert proc.stdin is not None and proc.stdout is not None  # both are PIPE
        return cls(proc, proc.stdin, proc.stdout)


class WorkerPool:
    """`processes` worker processes sharing the closed-loop workers of one cell."""

    def __init__(self, base_url: str, settings: LoadSettings, processes: int) -> None:
        self.settings = settings
        self.concurrency = shares(settings.concurrency, processes)
        self._workers: list[_Worker] = []
        root = str(Path(__file__).resolve().parent.parent)  # this specguard, whatever the working directory
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")])))
        try:
            for c in self.concurrency:
                worker = _Worker.start(env)
                self._workers.append(worker)
                _send(worker.commands, (base_url, settings, c))
        except BaseException:
            self.close()
            raise

    def run(self, requests: list[bytes]) -> RunResult:
        """Each process runs a contiguous block of requests, sized by its share of the workers (open
        loop: a contiguous stretch of the one arrival schedule, under its share of the cap)."""
        counts = [len(requests) * c // self.settings.concurrency for c in self.concurrency]
        counts[0] += len(requests) - sum(counts)
        start_at = time.perf_counter() + START_DELAY_S
        first = 0
        for worker, count in zip(self._workers, counts):
            _send(worker.commands, ("run", requests[first:first + count], first, start_at))
            first += count
        deadline = time.monotonic() + START_DELAY_S + self.settings.run_timeout_s + REPLY_GRACE_S
        try:
            parts = [_recv(worker.replies.fileno(), deadline) for worker in self._workers]
        except (TimeoutError, EOFError) as exc:
            self.close()
            raise RuntimeError(f"client worker failed: {exc}") from None
        return merge(parts, self.settings.concurrency)

    def close(self) -> None:
        """Ask every worker to stop; kill (by pid) any that does not within a few seconds."""
        for worker in self._workers:
            try:
                _send(worker.commands, ("close",))
                worker.commands.close()
            except (BrokenPipeError, OSError, ValueError):
                pass
        for worker in self._workers:
            try:
                worker.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                worker.process.kill()
                worker.process.wait()
            worker.replies.close()
        self._workers = []


def main() -> None:
    """The worker process: set up once, then run each block of requests it is sent."""
    replies = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # stray prints must not corrupt the replies
    commands = sys.stdin.buffer
    base_url, settings, concurrency = _recv(commands.fileno(), float("inf"))
    loop = asyncio.new_event_loop()
    endpoint = Endpoint.from_url(base_url)
    conns = [Connection(endpoint) for _ in range(concurrency)]
    while True:
        try:
            message = _recv(commands.fileno(), float("inf"))
        except EOFError:
            break
        if message[0] != "run":
            break
        _, requests, first_index, start_at = message
        _send(replies, loop.run_until_complete(run_requests(conns, requests, settings, first_index, start_at)))
    for conn in conns:
        conn.close()
    loop.run_until_complete(asyncio.sleep(0))
    loop.close()


if __name__ == "__main__":
    main()
