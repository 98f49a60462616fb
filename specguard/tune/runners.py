"""Where `specguard tune` measures a setting: one launch of the suite's engine (server.launch), a
sweep of its levels (measure.sweep.measure_cell), then the server stopped."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from specguard.config import ServerConfig, SweepConfig
from specguard.engines import get_engine
from specguard.measure.progress import ProgressEvent
from specguard.measure.sweep import CellLoad, RunControl, measure_cell
from specguard.report.progress import progress_text
from specguard.server import ServerStartError, launch, stop
from specguard.tune.grid import ADAPTIVE, REFERENCE, Setting, server_config_for
from specguard.tune.race import CellRuns
from specguard.workload import Workload


def adaptive_flags(path: str | None) -> list[str]:
    """SGLang's flags for adaptive mode; no path = its DEFAULT_ADAPTIVE_CONFIG."""
    return ["--speculative-adaptive"] + (["--speculative-adaptive-config", str(path)] if path else [])


@dataclass
class ServerRunner:
    """One launch per call, through the suite's engine; the server is stopped before returning."""

    spec_cfg: ServerConfig
    reference_cfg: ServerConfig
    sweep: SweepConfig
    workload: Workload
    cap: int | None
    log_dir: Path
    api_key: str | None = None
    adaptive_paths: dict[str, str | None] = field(default_factory=lambda: {"default": None})
    progress: Callable[[str], None] = lambda _: None
    graph_sizes: list[int] | None = None  # decode CUDA-graph batch sizes a speculative launch reported
    started: list[str] = field(default_factory=list)  # redacted launch commands, in order
    mode: str = "launched"

    def config_for(self, setting: Setting) -> ServerConfig:
        if setting.kind == REFERENCE:
            return self.reference_cfg
        extra = adaptive_flags(self.adaptive_paths[setting.adaptive_key]) if setting.kind == ADAPTIVE else []
        return server_config_for(self.spec_cfg, setting, cap=self.cap, extra_args=extra)

    def _progress_line(self, event: ProgressEvent) -> None:
        self.progress(progress_text(event))

    def measure(self, setting: Setting, levels: Sequence[int], warmup: int, repeats: int) -> dict[int, CellRuns]:
        cfg = self.config_for(setting)
        try:
            handle = launch(cfg, get_engine(cfg.engine), log_dir=self.log_dir, api_key=self.api_key)
        except ServerStartError as exc:
            return {c: CellRuns(error=f"launch failed: {exc}") for c in levels}
        self.started.append(" ".join(handle.command))
        out: dict[int, CellRuns] = {}
        try:
            if setting.kind != REFERENCE and handle.effective.decode_cuda_graph_bs:
                self.graph_sizes = list(handle.effective.decode_cuda_graph_bs)
            sweep = dataclasses.replace(self.sweep, warmup=warmup, repeats=repeats)
            for c in levels:
                cell = measure_cell(handle, self.workload, sweep, CellLoad(c), RunControl(progress=self._progress_line))
                hist: list[int] = []
                for r in cell.runs:
                    h = r.correct_drafts_histogram or []
                    hist += [0] * (len(h) - len(hist))
                    for k, n in enumerate(h):
                        hist[k] += n
                out[c] = CellRuns(cell.throughputs, hist, cell.accept_lengths, cell.error)
        finally:
            stop(handle)
        return out
