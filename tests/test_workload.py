"""Workloads are deterministic and need no download."""

import pytest

from specguard.workload import WorkloadError, WorkloadSpec, build_workload


def test_random_ids_are_deterministic_for_a_seed():
    a = build_workload(WorkloadSpec(kind="random-ids", input_len=16, seed=3), num_prompts=4)
    b = build_workload(WorkloadSpec(kind="random-ids", input_len=16, seed=3), num_prompts=4)
    c = build_workload(WorkloadSpec(kind="random-ids", input_len=16, seed=4), num_prompts=4)
    assert a.prompts == b.prompts and a.digest() == b.digest() and a.digest() != c.digest()
    assert all(len(p.input_ids) == 16 for p in a.prompts)


def test_repeated_id_matches_the_seed_a_run():
    w = build_workload(WorkloadSpec(kind="repeated-id", input_len=1000))
    assert w.prompt(7).input_ids == (23066,) * 1000


def test_shipped_text_prompts_cover_three_categories():
    w = build_workload(WorkloadSpec(kind="text"))
    assert {p.category for p in w.prompts} == {"coding", "reasoning", "chat"}
    assert w.prompt(0) == w.prompt(len(w.prompts))


def test_jsonl_errors_name_the_line(tmp_path):
    f = tmp_path / "p.jsonl"
    f.write_text('{"text": "hi"}\n{"input_ids": [1, 2]}\n')
    w = build_workload(WorkloadSpec(kind="jsonl", path=str(f)))
    assert w.prompts[1].input_ids == (1, 2)
    f.write_text('{"text": "hi"}\n{"prompt": 3}\n')
    with pytest.raises(WorkloadError, match=r"p.jsonl:2"):
        build_workload(WorkloadSpec(kind="jsonl", path=str(f)))
    with pytest.raises(WorkloadError, match="cannot read"):
        build_workload(WorkloadSpec(kind="jsonl", path=str(tmp_path / "missing.jsonl")))
