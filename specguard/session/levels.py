"""A suite's sweep levels and what each one sends: clients (closed loop) or requests per second
(open loop, `[sweep] request_rate`), the runs' size, the load settings and prompt categories."""

from __future__ import annotations

from dataclasses import replace

from specguard.config import Suite, SweepConfig
from specguard.labels import Level
from specguard.measure.metrics import workload_categories
from specguard.measure.sweep import CellLoad
from specguard.session.options import RunOptions
from specguard.slo import parse_slo
from specguard.workload import Workload

CATEGORY_TEST_KINDS = ("categories", "jsonl", "sharegpt")  # workloads whose categories get their own tests


class SweepLevels:
    """The levels of one session's sweep (the suite's, with --concurrency/--request-rate/--requests applied)."""

    def __init__(self, suite: Suite, options: RunOptions) -> None:
        self._suite = suite
        self._options = options
        self.rate = bool(suite.sweep.request_rate)
        self.values: list[int] = list(suite.sweep.request_rate) if self.rate else list(suite.sweep.concurrency)

    def level(self, value: int) -> Level:
        return Level(value, self.rate)

    def name(self, value: int) -> str:
        """"c16" (closed loop, 16 clients) or "r8" (open loop, 8 req/s): test ids and messages."""
        return self.level(value).name

    def store_key(self, value: int) -> int | str:
        """A level as baseline files key it (baselines.cell_key): 16, or in rate mode "r8"."""
        return self.level(value).store_key

    def sweep_at(self, value: int) -> SweepConfig:
        """The sweep settings of one level (--requests replaces requests_per_worker)."""
        sweep = self._suite.sweep
        if self._options.requests_per_run:
            sweep = replace(sweep, requests_per_worker=max(1, self._options.requests_per_run // value),
                            min_requests_per_run=0)
        return sweep

    def load_at(self, value: int) -> CellLoad:
        """What a cell sends at one level: the level is the concurrency, or in rate mode the
        Poisson rate with `max_concurrency` as the in-flight cap; the SLOs when set."""
        sweep = self._suite.sweep
        slo_ms = parse_slo(sweep.slo, "sweep.slo") if sweep.slo else None
        if self.rate:
            return CellLoad(sweep.rate_cap, request_rate=float(value), burstiness=sweep.burstiness,
                            num_requests=self.sweep_at(value).num_requests(value), slo_ms=slo_ms)
        return CellLoad(value, slo_ms=slo_ms)

    def categories_at(self, value: int, workload: Workload) -> list[str]:
        """The prompt categories a run at this level sends, sorted; [] when its prompts carry fewer
        than two (one category is the whole run: its test would repeat the overall one). Kind
        "text" (the 30 shipped prompts) reports its categories but has no per-category tests:
        suites recorded before them keep their tests and baselines."""
        if self._suite.workload.kind not in CATEGORY_TEST_KINDS:
            return []
        n = self.sweep_at(value).num_requests(value)
        found = sorted({c for c in workload_categories(workload, n) if c})
        return found if len(found) >= 2 else []
