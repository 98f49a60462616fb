"""SGLang 0.5.23's adaptive speculation (``--speculative-adaptive``): the config format and the
checks it makes at start-up, when it turns adaptive off, and how a decode batch finds its slot.

Sources: srt/speculative/adaptive_spec_params.py (``DEFAULT_ADAPTIVE_CONFIG``,
``adaptive_unsupported_reason``, ``_load_adaptive_config``, ``resolve_candidate_steps_from_config``,
``AdaptiveStepSlot.__init__``'s defaults, ``AdaptiveSpeculativeParams._route``,
``_pad_to_cuda_graph_bs``, ``_find_closest_bs``) and srt/arg_groups/speculative_hook.py
(``_maybe_disable_adaptive``, ``_init_adaptive_speculative_params``); the error texts are
SGLang's. The runtime (each slot's EMA walking among its candidates) is the emulator's
(specguard/emulator/adaptive.py).
"""

from __future__ import annotations

import bisect
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

# A parsed --speculative-adaptive-config (JSON): batch-size keys ("1", "8", ...) whose entries hold
# candidate_steps and the slot knobs; any other key is a default for every slot.
JsonObject = dict[str, Any]
# {batch size: its entry}
Entries = dict[int, JsonObject]

# DEFAULT_ADAPTIVE_CONFIG (keys are batch sizes): what --speculative-adaptive runs without a config file.
DEFAULT_ADAPTIVE_CONFIG: dict[str, dict[str, Any]] = {
    "1": {"candidate_steps": [1, 3, 5, 7], "up_hysteresis": 0.0, "down_hysteresis": -0.25, "ceiling_coeff": 0},
    "8": {"candidate_steps": [0, 1, 3], "up_hysteresis": 0.0, "down_hysteresis": 0.0, "ceiling_coeff": 0},
    "32": {"candidate_steps": [0, 1], "up_hysteresis": 0.0, "down_hysteresis": 0.0, "ceiling_coeff": 0},
    "64": {"candidate_steps": [0], "up_hysteresis": 0.0, "down_hysteresis": 0.0, "ceiling_coeff": 0},
}
# AdaptiveStepSlot.__init__ defaults of a slot's knobs.
SLOT_DEFAULTS = {
    "ema_alpha": 0.2, "update_interval": 5, "warmup_batches": 10,
    "down_hysteresis": -0.25, "up_hysteresis": 0.0, "ceiling_coeff": 0,
}
# adaptive_unsupported_reason: the algorithms adaptive runs, after the alias (NEXTN arrives as EAGLE).
ADAPTIVE_ALGORITHMS = ("EAGLE", "EAGLE3")


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
    """Why adaptive cannot run (``adaptive_unsupported_reason``, same order); ``algorithm`` after the
    alias (NEXTN -> EAGLE). The platform-worker case (out-of-tree platforms) is not modelled."""
    if algorithm not in ADAPTIVE_ALGORITHMS:
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


# -- routing -----------------------------------------------------------------------------------
def padded_batch(graphs: Sequence[int] | None, batch_size: int) -> int:
    """``_pad_to_cuda_graph_bs``: the smallest captured decode CUDA-graph size >= the batch (the
    batch itself above the largest, or with graphs disabled); ``graphs`` sorted."""
    if not graphs:
        return batch_size
    i = bisect.bisect_left(graphs, batch_size)
    return graphs[i] if i < len(graphs) else batch_size


def slot_key(keys: Sequence[int], graphs: Sequence[int] | None, batch_size: int) -> int:
    """``_route``: the key a decode batch runs: the largest key <= its padded size (the smallest
    key below them all); ``keys`` and ``graphs`` sorted."""
    i = bisect.bisect_right(keys, padded_batch(graphs, batch_size)) - 1
    return keys[max(0, i)]


def slot_starts(graphs: Sequence[int] | None, up_to: int) -> list[int]:
    """The batch sizes <= ``up_to`` at which a slot can start: 1, each captured size + 1, and every
    size above the largest (every size without graphs). A key K routes every batch whose padded
    size is >= K, so its slot starts at (the largest captured size below K) + 1: a key at one of
    these values starts its slot exactly there, any other key up to one graph bucket earlier."""
    gs = sorted(set(graphs or ()))
    top = gs[-1] if gs else 0
    return sorted({1, *(g + 1 for g in gs if g + 1 <= up_to), *range(top + 1, up_to + 1)})
