"""The one builder of SGLang's --speculative-adaptive-config (specguard/sglang_rules/adaptive_table.py),
against SGLang 0.5.23's routing (srt/speculative/adaptive_spec_params.py: a batch is padded to a
captured CUDA-graph size, ``_pad_to_cuda_graph_bs``, then runs the largest key <= that,
``_find_closest_bs``) and its start-up checks (``_load_adaptive_config``,
speculative_hook.py ``_init_adaptive_speculative_params``)."""

from __future__ import annotations

import random

import pytest

from specguard.sglang_rules.adaptive import (
    AdaptiveConfigError,
    check_adaptive_config,
    padded_batch,
    slot_key,
    slot_starts,
)
from specguard.sglang_rules.adaptive_table import Slot, build_adaptive_config, launch_num_steps, switch_key
from specguard.sglang_rules.cuda_graph import decode_graph_batch_sizes


def test_a_key_starts_its_slot_at_a_graph_size_plus_one_or_above_the_largest():
    graphs = [1, 2, 4, 8, 16, 24, 32, 48, 64]
    # a batch of 33..48 pads to 48: a key 37 would already apply from 33; 33 is the nearest exact start
    assert switch_key(37, graphs) == 33
    assert switch_key(45, graphs) == 49  # nearer 49 (pads to 64 from 49) than 33
    assert switch_key(33, graphs) == 33 and switch_key(1, graphs) == 1
    assert switch_key(100, graphs) == 100  # above the largest graph: no padding
    assert switch_key(37, None) == 37 and switch_key(5, []) == 5
    g = [1, 8, 16]
    assert switch_key(5, g) == 2  # 2 is 3 away, 9 is 4 away
    assert switch_key(6, [1, 9]) == 10  # 2 and 10 both 4 away: the later one
    assert switch_key(9, g) == 9  # exactly one past a graph size
    assert switch_key(16, g) == 17  # the largest size itself is padded: 9 is 7 away, 17 is 1
    assert switch_key(17, g) == 17 and switch_key(200, g) == 200
    assert switch_key(3, [4, 8]) == 5  # no size below: 1 and 5 both 2 away
    assert switch_key(2, [4, 8]) == 1
    assert switch_key(2, [1, 2, 4]) == 2  # 2 pads to 2 and 1 to 1: a key 2 applies exactly at 2
    assert slot_starts([1, 2, 4], 6) == [1, 2, 3, 5, 6]


def test_the_measured_levels_either_side_stay_on_their_side():
    graphs = [1, 2, 4, 8, 16, 24, 32, 40, 48, 64]
    assert switch_key(32, graphs) == 33  # unconstrained: 32 itself pads to 32 and would run the band below
    assert switch_key(32, graphs, after=16, until=32) == 25  # the nearest start that runs 32 in this band
    assert switch_key(46, graphs, after=32, until=64) == 49
    assert switch_key(46, graphs, after=32, until=40) == 33  # 41 and 49 would leave 40 below


def test_levels_in_one_graph_bucket_cannot_be_split_and_the_later_band_takes_the_key():
    built = build_adaptive_config([Slot(2), Slot(1, start=11, after=10, until=12), Slot(0, start=40, after=12, until=64)],
                                  [1, 8, 16, 32, 64])
    assert built.table == {"1": {"candidate_steps": [2]}, "9": {"candidate_steps": [1]}, "33": {"candidate_steps": [0]}}
    assert built.notes[0] == "levels 10 and 12 pad to the same CUDA-graph size 16: the later band takes the key 9"


@pytest.mark.parametrize("seed", range(30))
def test_every_measured_level_routes_to_its_band_and_every_key_starts_exactly_there(seed):
    rng = random.Random(seed)
    graphs = sorted(rng.sample(range(1, 300), rng.randint(1, 12))) if seed % 5 else None
    levels = sorted(rng.sample(range(1, 400), rng.randint(2, 7)))
    steps = [rng.randint(0, 7) for _ in levels]
    slots = [Slot(steps[0])]
    for below, first, s in zip(levels, levels[1:], steps[1:]):
        slots.append(Slot(s, start=rng.randint(below + 1, first), after=below, until=first))
    built = build_adaptive_config(slots, graphs)
    keys = sorted(int(k) for k in built.table)
    if len({padded_batch(graphs, c) for c in levels}) == len(levels):  # no two levels share a graph bucket
        assert [built.table[str(slot_key(keys, graphs, c))]["candidate_steps"] for c in levels] == [[s] for s in steps]
    for k in keys[1:]:
        assert slot_key(keys, graphs, k) == k and slot_key(keys, graphs, k - 1) < k
    assert built.num_steps in check_adaptive_config(built.table, built.num_steps)


def test_launch_steps_are_the_first_slots_unless_it_drafts_nothing():
    assert launch_num_steps({"1": {"candidate_steps": [3]}, "9": {"candidate_steps": [0]}}) == 3
    assert launch_num_steps({"1": {"candidate_steps": [0]}, "9": {"candidate_steps": [1]}, "20": {"candidate_steps": [2]}}) == 2
    assert build_adaptive_config([Slot(0)], None).num_steps == 0


def test_a_table_sglang_would_refuse_is_never_returned():
    with pytest.raises(AdaptiveConfigError, match="candidate_steps must be a list of non-negative ints, got \\[-1\\]"):
        build_adaptive_config([Slot(-1)], None)
    with pytest.raises(AdaptiveConfigError, match="at least one slot"):
        build_adaptive_config([], None)


def test_graph_sizes_are_sglangs_capture_list():
    # cuda_graph_hook.py generate_decode_cuda_graph_batch_sizes: finer under speculation, max_bs always last
    assert decode_graph_batch_sizes(48, speculative=True) == [*range(1, 9), *range(10, 33, 2), 40, 44, 48]
    assert decode_graph_batch_sizes(20, speculative=False) == [1, 2, 4, 8, 12, 16, 20]
    assert decode_graph_batch_sizes(5, speculative=True, padding=False) == [1, 2, 3, 4, 5]
