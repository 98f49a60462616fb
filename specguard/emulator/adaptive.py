"""SGLang 0.5.23's adaptive speculation (``--speculative-adaptive``), re-implemented for the emulator.

Behaviour follows ``python/sglang/srt/speculative/adaptive_spec_params.py`` of the 0.5.23 wheel
(``_load_adaptive_config``, ``AdaptiveStepSlot``, ``AdaptiveSpeculativeParams``) and
``srt/arg_groups/speculative_hook.py`` (``_maybe_disable_adaptive``,
``_init_adaptive_speculative_params``); the error texts are SGLang's. Nothing here is copied:
it is a fresh implementation of the documented behaviour, tested against cases from the source.

Public entry points:

- ``check_adaptive_config(config, num_steps)``: what SGLang checks at start-up, for a config
  other modules emit (``specguard recommend``/``tune``); raises ``AdaptiveConfigError``.
- ``AdaptivePolicy``: the runtime (per batch-size slot EMA, hysteresis, CUDA-graph padding).
"""

from __future__ import annotations

import bisect
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# A parsed --speculative-adaptive-config (JSON): batch-size keys ("1", "8", ...) whose entries hold
# candidate_steps and the slot knobs; any other key is a default for every slot.
JsonObject = dict[str, Any]
# {batch size: its entry}
Entries = dict[int, JsonObject]

# srt/speculative/adaptive_spec_params.py DEFAULT_ADAPTIVE_CONFIG (keys are batch sizes).
DEFAULT_ADAPTIVE_CONFIG: dict[str, dict[str, Any]] = {
    "1": {"candidate_steps": [1, 3, 5, 7], "up_hysteresis": 0.0, "down_hysteresis": -0.25, "ceiling_coeff": 0},
    "8": {"candidate_steps": [0, 1, 3], "up_hysteresis": 0.0, "down_hysteresis": 0.0, "ceiling_coeff": 0},
    "32": {"candidate_steps": [0, 1], "up_hysteresis": 0.0, "down_hysteresis": 0.0, "ceiling_coeff": 0},
    "64": {"candidate_steps": [0], "up_hysteresis": 0.0, "down_hysteresis": 0.0, "ceiling_coeff": 0},
}

# AdaptiveStepSlot.__init__ defaults.
SLOT_DEFAULTS = {
    "ema_alpha": 0.2, "update_interval": 5, "warmup_batches": 10,
    "down_hysteresis": -0.25, "up_hysteresis": 0.0, "ceiling_coeff": 0,
}


class AdaptiveConfigError(ValueError):
    """A config SGLang 0.5.23 refuses at start-up (the message is SGLang's)."""


def parse_adaptive_config(cfg: Any) -> tuple[JsonObject, Entries]:
    """Validate a parsed config as ``_load_adaptive_config`` does: (whole config, {bs: entry}).

    Keys for which ``str.isdigit()`` holds are batch-size entries; other keys are not entries but
    still act as defaults for every slot. Each entry needs ``candidate_steps``: a non-empty list
    of ints >= 0 (a bool passes, as in Python). No other field is checked.
    """
    if not isinstance(cfg, dict):
        # SGLang calls cfg.items() and fails with an AttributeError.
        raise AdaptiveConfigError(
            f"speculative_adaptive_config must be a JSON object of batch-size keys, got {type(cfg).__name__}"
        )
    entries: Entries = {}
    for key, entry in cfg.items():
        if not key.isdigit():
            continue
        if not isinstance(entry, dict):
            raise AdaptiveConfigError(f"BS {key}: entry must be a JSON object, got {entry!r}")
        steps = entry.get("candidate_steps")
        if not isinstance(steps, list) or not steps or not all(isinstance(s, int) and s >= 0 for s in steps):
            raise AdaptiveConfigError(f"BS {key}: candidate_steps must be a list of non-negative ints, got {steps!r}")
        entries[int(key)] = entry
    if not entries:
        raise AdaptiveConfigError(
            "speculative_adaptive_config must contain at least one integer-string BS key, "
            f'e.g. {{"1": {{"candidate_steps": [1,3,7]}}}}. Got keys: {list(cfg.keys())}'
        )
    return cfg, entries


def load_adaptive_config(path: str | Path | None) -> tuple[JsonObject, Entries]:
    """``--speculative-adaptive-config`` is a file path (not a JSON string); None = the default."""
    if path is None:
        return parse_adaptive_config(DEFAULT_ADAPTIVE_CONFIG)
    try:
        with open(path) as f:
            cfg = json.load(f)
    except OSError as exc:
        raise AdaptiveConfigError(f"--speculative-adaptive-config {path}: {exc.strerror or exc}") from None
    except json.JSONDecodeError as exc:
        raise AdaptiveConfigError(f"--speculative-adaptive-config {path}: not valid JSON ({exc})") from None
    return parse_adaptive_config(cfg)


def candidate_union(entries: Entries) -> list[int]:
    """Sorted union of every slot's candidate_steps (``resolve_candidate_steps_from_config``)."""
    return sorted({s for e in entries.values() for s in e["candidate_steps"]})


def initial_num_steps(candidates: list[int], num_steps: int | None) -> int:
    """Start-up steps under adaptive (``_init_adaptive_speculative_params``).

    Unset: the middle of the union. Set but not a candidate: SGLang refuses to start.
    """
    if num_steps is None:
        return candidates[len(candidates) // 2]
    if num_steps not in candidates:
        raise AdaptiveConfigError(
            f"--speculative-num-steps={num_steps} is not in the adaptive config candidate_steps "
            f"{candidates}. Pass one of those values."
        )
    return num_steps


def check_adaptive_config(config: JsonObject | str | Path | None, num_steps: int | None = None) -> list[int]:
    """Would SGLang 0.5.23 start with this ``--speculative-adaptive-config`` (and steps)?

    ``config``: a parsed dict, a path to the JSON file, or None for the default. Returns the
    candidate-step union; raises ``AdaptiveConfigError`` with SGLang's message otherwise.
    """
    _, entries = parse_adaptive_config(config) if isinstance(config, dict) else load_adaptive_config(config)
    candidates = candidate_union(entries)
    initial_num_steps(candidates, num_steps)
    return candidates


def unsupported_reason(
    algorithm: str | None, topk: int | None, attn_dp: bool, *, multi_layer_eagle: bool = False,
    two_batch_overlap: bool = False, pdmux: bool = False,
) -> str | None:
    """Why adaptive cannot run (``adaptive_unsupported_reason``); ``algorithm`` after NEXTN -> EAGLE.

    The platform-worker check (out-of-tree platforms) never applies to the emulator.
    """
    if algorithm not in ("EAGLE", "EAGLE3"):
        return f"speculative_algorithm={algorithm} (only EAGLE/EAGLE3 are supported)"
    if topk is not None and topk != 1:
        return f"speculative_eagle_topk={topk} (only topk=1 is supported)"
    if attn_dp:
        return "attention DP is not supported (adaptive tier decisions are not synchronized across DP ranks)"
    if multi_layer_eagle:
        return "enable_multi_layer_eagle=True is not supported (MultiLayerEagleWorkerV2 does not implement adaptive)"
    if two_batch_overlap:
        return "enable_two_batch_overlap=True is not supported (adaptive state swap would discard the TboAttnBackend wrapper)"
    if pdmux:
        return "enable_pdmux=True is not supported (adaptive state swap does not update decode_attn_backend_group)"
    return None


def disabled_warning(reason: str) -> str:
    """The warning ``_maybe_disable_adaptive`` logs before falling back to static params."""
    return f"speculative_adaptive disabled: {reason}. Falling back to static speculative params."


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
        self.switches = 0

    def padded(self, batch_size: int) -> int:
        """The CUDA-graph batch size a batch runs as (itself above the largest graph or without graphs)."""
        g = self.graph_bs
        if g is None:
            return batch_size
        i = bisect.bisect_left(g, batch_size)
        return g[i] if i < len(g) else batch_size

    def slot_key(self, batch_size: int) -> int:
        i = bisect.bisect_right(self.keys, self.padded(batch_size)) - 1
        return self.keys[max(0, i)]

    def route(self, batch_size: int) -> StepSlot:
        return self.slots[self.slot_key(batch_size)]

    def activate(self, batch_size: int) -> int:
        """Before a decode forward: switch the worker to this batch's slot steps; returns them."""
        steps = self.route(batch_size).steps
        if steps != self.active_steps:
            self.active_steps = steps
            self.switches += 1
        return steps

    def on_verify(self, correct_drafts: list[int], batch_size: int) -> None:
        """After a verify: feed the routed slot; a change switches the worker at once."""
        slot = self.route(batch_size)
        if slot.update(correct_drafts) and slot.steps != self.active_steps:
            self.active_steps = slot.steps
            self.switches += 1
