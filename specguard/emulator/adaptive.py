"""SGLang 0.5.23's adaptive speculation at run time, re-implemented for the emulator: each batch-size
slot's EMA walking among its candidate steps (``AdaptiveStepSlot``), and the worker switching
steps as batches are routed to slots (``AdaptiveSpeculativeParams``; srt/speculative/
adaptive_spec_params.py). The config format, the start-up checks and the routing are SGLang's
rules in specguard/sglang_rules/adaptive.py, shared with `specguard recommend` and `tune`.
Nothing here is copied: it is a fresh implementation of the documented behaviour, tested against
cases from the source.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from specguard.sglang_rules.adaptive import SLOT_DEFAULTS, Entries, JsonObject, slot_key


class StepSlot:
    """One batch-size slot: an EMA of accepted drafts per request that walks among the candidates."""

    __slots__ = ("candidates", "ema_alpha", "update_interval", "warmup_batches", "down_hysteresis",
                 "up_hysteresis", "ceiling_coeff", "steps", "ema", "batches")

    def __init__(self, initial_steps: int, cfg: JsonObject) -> None:
        self.candidates: list[int] = sorted(set(cfg["candidate_steps"]))
        knobs = {k: cfg.get(k, v) for k, v in SLOT_DEFAULTS.items()}
        self.ema_alpha = knobs["ema_alpha"]
        self.update_interval = knobs["update_interval"]
        self.warmup_batches = knobs["warmup_batches"]
        self.down_hysteresis = knobs["down_hysteresis"]
        self.up_hysteresis = knobs["up_hysteresis"]
        self.ceiling_coeff = knobs["ceiling_coeff"]
        if initial_steps in self.candidates:
            self.steps = initial_steps
        else:
            self.steps = self.candidates[len(self.candidates) // 2]
        self.ema = float(self.steps - 1)  # neutral start
        self.batches = 0

    def update(self, correct_drafts: list[int]) -> bool:
        """Fold one verify's per-request accepted drafts (bonus excluded); True when steps changed."""
        if not correct_drafts:
            return False
        if self.steps > 0:  # at 0 steps nothing was drafted: the EMA keeps its value
            self.ema = (1 - self.ema_alpha) * self.ema + self.ema_alpha * (sum(correct_drafts) / len(correct_drafts))
        self.batches += 1
        if self.batches <= self.warmup_batches:
            return False
        if (self.batches - self.warmup_batches) % self.update_interval:
            return False
        return self._retarget()

    def _retarget(self) -> bool:
        c = self.candidates
        old = self.steps
        i = c.index(old)
        if old == 0:  # probe the next candidate up after a no-drafting interval
            i = min(i + 1, len(c) - 1)
            if c[i] > 0 and self.ema < 0:
                self.ema = float(c[i] - 1)
            return self._set(c[i])
        start = i
        while i > 0:
            below = c[i - 1]
            threshold = (0.5 if below == 0 else below - 0.5) + self.down_hysteresis
            if self.ema > threshold:
                break
            i -= 1
        if i == start:
            while i < len(c) - 1 and self.ema > c[i] - 0.5 + self.up_hysteresis:
                i += 1
        target = c[i]
        if self.ceiling_coeff > 0:
            ceiling = max(1, math.ceil(self.ema * self.ceiling_coeff))
            if ceiling < target <= old:
                while i > 0 and c[i] > ceiling:
                    i -= 1
                target = c[i]
        return self._set(target)

    def _set(self, target: int) -> bool:
        changed = target != self.steps
        self.steps = target
        return changed


@dataclass(frozen=True)
class AdaptiveSettings:
    """A resolved adaptive launch: the config as loaded and the start-up steps."""

    config_path: str | None
    config: JsonObject
    entries: Entries
    candidates: list[int]
    initial_steps: int


class AdaptivePolicy:
    """Per batch-size slots; a batch is padded to a CUDA-graph size, then routed to the largest key <= it."""

    def __init__(self, settings: AdaptiveSettings, cuda_graph_bs: list[int] | None) -> None:
        self.keys = sorted(settings.entries)
        cfg = settings.config
        self.slots = {bs: StepSlot(settings.initial_steps, {**cfg, **settings.entries[bs]}) for bs in self.keys}
        self.graph_bs = sorted(cuda_graph_bs) if cuda_graph_bs else None
        self.candidates = settings.candidates
        self.active_steps = settings.initial_steps  # what the worker runs now

    def route(self, batch_size: int) -> StepSlot:
        return self.slots[slot_key(self.keys, self.graph_bs, batch_size)]

    def activate(self, batch_size: int) -> int:
        """Before a decode forward: switch the worker to this batch's slot steps; returns them."""
        self.active_steps = self.route(batch_size).steps
        return self.active_steps

    def on_verify(self, correct_drafts: list[int], batch_size: int) -> None:
        """After a verify: feed the routed slot; a change switches the worker at once."""
        slot = self.route(batch_size)
        if slot.update(correct_drafts):
            self.active_steps = slot.steps
