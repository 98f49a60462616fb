"""`specguard tune` in the emulator's virtual time: each run is the emulator's scheduler (the code
its HTTP server runs) driven by a closed loop, which makes checking the racing against the full
grid over many seeds cheap (``python -m research.tune``, docs/tuning.md)."""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from specguard.emulator.model import BatchScheduler, GenRequest, SchedulerConfig, Step
from specguard.sglang_rules.cuda_graph import decode_graph_batch_sizes
from specguard.tune.grid import ADAPTIVE, LAUNCHED, REFERENCE, Setting
from specguard.tune.race import CellRuns


def _key(seed: int, name: str, level: int, k: int) -> int:
    """A stable RNG seed for (world seed, setting, level, run index)."""
    return int.from_bytes(hashlib.blake2b(f"{seed}/{name}/{level}/{k}".encode(), digest_size=8).digest(), "little")


class _HistogramScheduler(BatchScheduler):
    """The emulator's scheduler, also summing its finished requests' spec_correct_drafts_histogram."""

    def __init__(self, config: SchedulerConfig) -> None:
        super().__init__(config)
        self.histogram: list[int] = []

    def complete(self, step: Step, now_ms: float) -> list[GenRequest]:
        finished = super().complete(step, now_ms)
        hist = self.histogram
        for r in finished:
            h = r.correct_hist
            hist.extend([0] * (len(h) - len(hist)))
            for j, n in enumerate(h):
                hist[j] += n
        return finished


@dataclass
class SimRunner:
    """Virtual-time stand-in for a launch: each run is the emulator's scheduler driven by a closed
    loop (a fresh prefix cache, as after /flush_cache), with per-step jitter and a per-setting
    speed offset; tok/s as a closed-loop client measures it."""

    profile_name: str
    algorithm: str
    input_len: int
    output_len: int
    requests_per_worker: int
    cap: int | None
    seed: int = 0
    min_requests_per_run: int = 0  # the suite's [sweep] floor
    jitter_pct: float = 1.0
    drift_pct: float = 1.0
    speed_factor: float = 1.0
    same_prompt: bool = True
    reference_cap: int | None = None
    adaptive_paths: dict[str, str | None] = field(default_factory=lambda: {"default": None})
    graph_sizes: list[int] | None = None
    launches: int = 0
    # the configuration as the suite launches it: (num_steps, eagle_topk, num_draft_tokens) and its cap
    launched_params: tuple[int | None, int | None, int | None] = (None, None, None)
    launched_cap: int | None = None
    _runs: dict[tuple[Setting, int], int] = field(default_factory=dict)  # measured runs so far per (setting, level)
    progress: Callable[[str], None] = lambda _: None
    mode: str = "simulated (virtual time)"

    def _drift(self, setting: Setting) -> float:
        """This seed's speed offset of a setting's server (mean-one lognormal, sd drift_pct)."""
        rng = np.random.default_rng(_key(self.seed, setting.name, 0, -10**6))
        sd = self.drift_pct / 100.0
        return math.exp(rng.normal(-sd * sd / 2, sd)) if sd > 0 else 1.0

    def measure(self, setting: Setting, levels: Sequence[int], warmup: int, repeats: int) -> dict[int, CellRuns]:
        from specguard.emulator.model import run_closed_loop
        from specguard.emulator.profile import load_profile
        from specguard.emulator.spec import SpecRequest, resolve_settings

        profile = load_profile(self.profile_name)
        self.launches += 1
        if setting.kind == REFERENCE:
            spec, cap = None, self.reference_cap
        elif setting.kind == ADAPTIVE:
            steps = setting.num_steps or None
            spec = SpecRequest(self.algorithm, steps, 1 if steps else None, steps + 1 if steps else None, adaptive=True,
                               adaptive_config=self.adaptive_paths[setting.adaptive_key])
            cap = self.cap
        elif setting.kind == LAUNCHED:
            spec, cap = SpecRequest(self.algorithm, *self.launched_params), self.launched_cap
        else:
            spec = SpecRequest(self.algorithm, setting.num_steps, setting.eagle_topk, setting.num_draft_tokens)
            cap = self.cap
        settings = resolve_settings(profile, spec, cap)
        # the sizes an emulator launched with default flags captures (launch_server.decode_cuda_graph_bs)
        graphs = decode_graph_batch_sizes(min(settings.rank_cap, 512), speculative=settings.spec is not None)
        if settings.spec is not None:
            self.graph_sizes = graphs
        out: dict[int, CellRuns] = {}
        for c in levels:
            cell = CellRuns()
            done = self._runs.get((setting, c), 0)
            for i in range(warmup + repeats):
                # Common random numbers: measured run k of a cell is the same in every plan that
                # measures it (warmups are keyed apart), and a setting keeps its speed offset in
                # this seed's world, so racing and the full grid differ only in what they measured.
                k = done + i - warmup if i >= warmup else -1 - done - i
                run_seed = _key(self.seed, setting.name, c, k)
                config = SchedulerConfig(profile, settings, seed=run_seed, step_scale=self._drift(setting),
                                         speed_factor=self.speed_factor, jitter_pct=self.jitter_pct, drift_pct=0.0,
                                         cuda_graph_bs=graphs)
                scheduler = _HistogramScheduler(config)
                n_requests = max(c, self.requests_per_worker * c, self.min_requests_per_run)
                r = run_closed_loop(scheduler, c, n_requests, self.input_len, self.output_len,
                                    self.same_prompt)
                if i < warmup:
                    continue
                cell.tok_s.append(r.output_throughput)
                if r.accept_length is not None:
                    cell.accept_lengths.append(r.accept_length)
                hist = scheduler.histogram
                cell.histogram += [0] * (len(hist) - len(cell.histogram))
                for j, n in enumerate(hist):
                    cell.histogram[j] += n
            self._runs[(setting, c)] = done + repeats
            out[c] = cell
        return out
