"""Launches of a build on real servers: the session's `ServerPool` per build (launch or attach,
the suite's argument checks, the workload fitted to the model's vocabulary) and `measure_cell`
for every level (flushed cache, warmup, repeats), then the server is stopped, whole process
group, so one server runs at a time. In attach mode a "launch" is one pass over the levels on
the running server, which keeps running."""

from __future__ import annotations

import time
from dataclasses import replace

from specguard.ab.builds import Build
from specguard.ab.rounds import STEP_RATE, LaunchResult, Progress
from specguard.config import Suite
from specguard.labels import ACCEPT_LENGTH, THROUGHPUT
from specguard.measure.sweep import CellMeasurement, RunControl, measure_cell
from specguard.server import ServerHandle
from specguard.session import ConfigUnavailable, RunOptions
from specguard.session.levels import SweepLevels
from specguard.session.servers import ServerPool
from specguard.workload import Workload, build_workload


def build_suite(suite: Suite, build: Build) -> Suite:
    """The suite as this build runs it: every configuration on the build's interpreter."""
    if build.python is None:
        return suite
    return replace(suite, servers={name: replace(cfg, python=build.python) for name, cfg in suite.servers.items()})


def launch_values(cell: CellMeasurement) -> dict[str, list[float]]:
    """A measured cell's per-run series, by what the gates read."""
    return {THROUGHPUT: cell.throughputs, ACCEPT_LENGTH: cell.accept_lengths, STEP_RATE: cell.step_rates}


class ServerLauncher:
    """The ``rounds.Launcher`` on servers: ``launcher(build, configuration, round)``."""

    def __init__(self, suite: Suite, builds: dict[str, Build], levels: list[int], options: RunOptions,
                 progress: Progress | None = None) -> None:
        """``options``: the API key, the log directory (a folder per build under it) and the
        failed requests a cell tolerates; each build adds its servers' URLs or arguments."""
        self._suite = suite
        self._builds = builds
        self._levels = levels
        self._max_failed = options.max_failed_requests
        self._progress = progress or (lambda _line: None)
        workload: Workload = build_workload(suite.workload)
        self._pools: dict[str, ServerPool] = {}
        self._sweep = SweepLevels(suite, RunOptions())
        for key, build in builds.items():
            own = replace(options, server_urls=build.urls, server_args=build.server_args,
                          log_dir=options.log_dir / _slug(build.name))
            self._pools[key] = ServerPool(build_suite(suite, build), own, workload)

    def __call__(self, build: str, config: str, round_no: int) -> LaunchResult:
        result = LaunchResult(build, config, round_no)
        pool = self._pools[build]
        started = time.monotonic()
        name = self._builds[build].name
        self._progress(f"round {round_no}: {config} on {name} ...")
        try:
            handle = pool.get(config)
            for level in self._levels:
                cell = self._measure(pool, config, level, handle)
                if cell.error:
                    result.error = f"{self._sweep.name(level)}: {cell.error.splitlines()[0]}"
                    break
                result.values[level] = launch_values(cell)
        except ConfigUnavailable as exc:
            result.error, result.skipped = exc.line, exc.skip
        finally:
            pool.stop(config)  # a launched server's whole process group; an attached one keeps running
        result.wall_s = time.monotonic() - started
        status = f"error: {result.error}" if result.error else "measured"
        self._progress(f"round {round_no}: {config} on {name}: {status} ({result.wall_s:.0f} s)")
        return result

    def _measure(self, pool: ServerPool, config: str, level: int, handle: ServerHandle) -> CellMeasurement:
        cfg = pool.config(config)
        load = replace(self._sweep.load_at(level), api=handle.engine.choose_api(self._suite.sweep.api),
                       extra_body=handle.engine.request_extra_body(cfg))
        try:
            return measure_cell(handle, pool.workload_for(config), self._sweep.sweep_at(level), load,
                                RunControl(max_failed=self._max_failed))
        except Exception as exc:  # a bug in specguard: not measured, never a verdict
            return CellMeasurement(config=config, concurrency=level,
                                   error=f"internal error while measuring (a specguard bug): {type(exc).__name__}: {exc}")

    def close(self) -> None:
        """Stop every server still running (an interrupted round)."""
        for pool in self._pools.values():
            pool.stop_all()


def _slug(name: str) -> str:
    return "".join(ch if ch.isalnum() else "-" for ch in name)


__all__ = ["ServerLauncher", "build_suite", "launch_values"]
