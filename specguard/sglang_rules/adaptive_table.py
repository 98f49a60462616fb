"""The one builder of SGLang's ``--speculative-adaptive-config`` from a policy's bands
(`specguard recommend` and `specguard tune` both emit it through ``build_adaptive_config``).

A band runs one step count (0: no drafting) from a batch size on. Each band's key is the batch
size its slot starts at: SGLang pads a decode batch to a captured CUDA-graph size before it looks
the key up (adaptive.slot_key), so only some batch sizes can start a slot exactly
(adaptive.slot_starts); the key is the one of those nearest the band's wanted start that keeps
every measured level on the side of the switch it was measured on. The table is checked with
SGLang's start-up rules (adaptive.check_adaptive_config) before it is returned.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from specguard.sglang_rules.adaptive import AdaptiveConfigError, check_adaptive_config, padded_batch, slot_starts

# The table as the JSON file holds it: {"1": {"candidate_steps": [3]}, "17": {"candidate_steps": [0]}}
AdaptiveTable = dict[str, dict[str, list[int]]]


@dataclass(frozen=True)
class Slot:
    """One band of a policy as a slot of the table: from batch size ``start`` on, run ``steps``;
    ``after``/``until``: the measured levels either side of the switch (the highest that must stay
    below it, the lowest that must run this band; 0 / None where there is none). The first slot
    starts at 1."""

    steps: int
    start: int = 1
    after: int = 0
    until: int | None = None


@dataclass(frozen=True)
class AdaptiveConfig:
    table: AdaptiveTable
    num_steps: int  # --speculative-num-steps: the first slot's steps, else the largest candidate (it must be one)
    notes: list[str] = field(default_factory=list)


def switch_key(start: int, graphs: Sequence[int] | None, after: int = 0, until: int | None = None) -> int:
    """The key of a band wanted from ``start``: the slot start (adaptive.slot_starts) nearest
    ``start`` (the later one on a tie) with ``after`` still routed below it and ``until`` at or
    above it. When no slot start lies between them (both pad to one graph size) the key is the
    start of ``until``'s bucket, which routes ``after`` to the band too."""
    gs = sorted(set(graphs or ()))
    hi = until if until is not None else max(start, (gs[-1] if gs else 0) + 1)
    starts = slot_starts(gs, hi)
    within = [s for s in starts if after < s <= hi]
    if not within:
        return max(s for s in starts if s <= hi)
    return min(within, key=lambda s: (abs(s - start), -s))


def launch_num_steps(table: AdaptiveTable) -> int:
    """--speculative-num-steps for a table: the first slot's steps, else (the first slot drafts
    nothing) the largest candidate; SGLang refuses a value that is no candidate."""
    first = table[min(table, key=int)]["candidate_steps"][0]
    return first if first > 0 else max(s for e in table.values() for s in e["candidate_steps"])


def build_adaptive_config(slots: Sequence[Slot], graphs: Sequence[int] | None) -> AdaptiveConfig:
    """The table of ``slots`` (in order, the first from batch size 1), its launch steps and the
    notes on where the keys fall; raises AdaptiveConfigError with SGLang's message if SGLang 0.5.23
    would refuse to start with it."""
    if not slots:
        raise AdaptiveConfigError("an adaptive config needs at least one slot")
    gs = sorted(set(graphs)) if graphs else None
    table: AdaptiveTable = {}
    notes: list[str] = []
    for i, band in enumerate(slots):
        key = 1 if i == 0 else switch_key(band.start, gs, band.after, band.until)
        if i and band.until is not None and key <= band.after:
            notes.append(f"levels {band.after} and {band.until} pad to the same CUDA-graph size "
                         f"{padded_batch(gs, band.until)}: the later band takes the key {key}")
        elif i and key != band.start:
            notes.append(f"the switch at {band.start} is keyed {key}: batches are padded to the decode CUDA-graph sizes "
                         f"{gs} before the lookup, so {key} is the nearest batch size a key takes effect at"
                         + ("" if key == switch_key(band.start, gs) else
                            f" with {band.after} below it and {band.until} at or above it"))
        table[str(key)] = {"candidate_steps": [band.steps]}
    if gs is None:
        notes.append("decode CUDA-graph sizes unknown: SGLang pads a batch to the next captured size before the lookup, "
                     "so a switch can happen up to one graph bucket before its key (exact with CUDA graphs disabled)")
    num_steps = launch_num_steps(table)
    check_adaptive_config(table, num_steps)
    return AdaptiveConfig(table, num_steps, notes)
