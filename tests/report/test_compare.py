"""specguard compare on synthetic results: verdicts per cell, and clear errors for files that do not fit."""

from __future__ import annotations

import json

import pytest
from synthetic_results import seed_a_doc

from specguard import cli
from specguard.labels import ExitCode
from specguard.report.compare import compare, render_text
from specguard.report.results import ResultsError, load


def _write(tmp_path, name, doc):
    path = tmp_path / name
    path.write_text(json.dumps(doc))
    return path


def test_same_speed_passes_and_a_10pct_drop_fails():
    a = seed_a_doc()
    same = compare(a, seed_a_doc())
    # identical runs: never a failure; within the launch-to-launch prior, tok/s can only be inconclusive
    assert not same.regressed and "fail" not in {c.verdict for c in same.cells}
    assert {c.verdict for c in same.cells if c.metric == "accept_length"} == {"pass"}
    assert {(c.config, c.metric) for c in same.cells} >= {("mtp", "accept_length"), ("baseline", "throughput")}
    slower = compare(a, seed_a_doc(scale=0.9))
    tput = [c for c in slower.cells if c.metric == "throughput"]
    assert slower.regressed and all(c.verdict == "fail" for c in tput)
    assert all(c.estimate.ratio == pytest.approx(0.9) for c in tput)
    text = render_text(slower, "a.json", "b.json")
    assert "FAIL" in text and "12 of 18 cell comparisons regressed" in text


def test_faster_is_marked_and_noise_is_inconclusive():
    faster = compare(seed_a_doc(), seed_a_doc(scale=1.2))
    assert "(faster)" in render_text(faster, "a", "b") and not faster.regressed
    noisy = compare(seed_a_doc(spread=0.2), seed_a_doc(spread=0.2, scale=0.95))
    assert not noisy.regressed and "inconclusive" in {c.verdict for c in noisy.cells}


def test_partial_overlap_and_server_differences_are_noted():
    a, b = seed_a_doc(), seed_a_doc()
    b["cells"] = [c for c in b["cells"] if int(c["level"][1:]) != 128]
    b["servers"]["mtp"]["effective_args"]["engine_version"] = "0.5.24"
    notes = "\n".join(compare(a, b).notes)
    assert "not compared (missing or failed in B): baseline-c128, mtp-c128" in notes
    assert "mtp: engine_version '0.5.23' -> '0.5.24'" in notes


def test_mismatched_and_foreign_files_get_clear_errors(tmp_path, capsys):
    a = _write(tmp_path, "a.json", seed_a_doc())
    other_work = _write(tmp_path, "b.json", seed_a_doc(workload={"kind": "random-ids", "input_len": 128,
                                                                 "output_len": 64, "seed": 0, "repeated_id": 23066,
                                                                 "path": None}))
    assert cli.main(["compare", str(a), str(other_work)]) == ExitCode.USAGE
    err = capsys.readouterr().err
    assert "measured different work" in err and "workload.input_len: 1000 vs 128" in err

    bench = _write(tmp_path, "bench.json", {"schema": "specguard-bench", "schema_version": 1})
    with pytest.raises(ResultsError, match="is not a specguard results file"):
        load(bench)
    newer = _write(tmp_path, "newer.json", {**seed_a_doc(), "schema_version": 99})
    with pytest.raises(ResultsError, match="schema_version 99; this specguard .* reads versions 1, 2, 3, 4, 5, 6, 7: upgrade"):
        load(newer)
    (tmp_path / "junk.json").write_text("<xml/>")
    with pytest.raises(ResultsError, match="is not JSON"):
        load(tmp_path / "junk.json")
    disjoint = seed_a_doc()
    for c in disjoint["cells"]:
        c["config"] = "other"
    with pytest.raises(ResultsError, match="no cell was measured"):
        compare(seed_a_doc(), disjoint)


def test_cli_exit_codes(tmp_path, capsys):
    a = _write(tmp_path, "a.json", seed_a_doc())
    b = _write(tmp_path, "b.json", seed_a_doc(scale=0.8))
    assert cli.main(["compare", str(a), str(a)]) == 0
    assert cli.main(["compare", str(a), str(b)]) == 1
    assert "regressed" in capsys.readouterr().out


def test_performance_relevant_server_args_are_named_when_they_differ():
    # the resolved /server_info arguments the SGLang adapter records (engines/sglang.py PERF_ARG_KEYS)
    a, b = seed_a_doc(), seed_a_doc()
    a["servers"]["mtp"]["effective_args"].update(attention_backend="fa3", attn_dp_size=1, decode_cuda_graph_bs=[1, 2, 4])
    b["servers"]["mtp"]["effective_args"].update(attention_backend="flashinfer", attn_dp_size=2,
                                                 decode_cuda_graph_bs=[1, 2, 4], speculative_adaptive=True)
    notes = compare(a, b).notes
    assert "mtp: attention_backend 'fa3' -> 'flashinfer'" in notes
    assert "mtp: attn_dp_size 1 -> 2" in notes and "mtp: speculative_adaptive None -> True" in notes
    assert not any("decode_cuda_graph_bs" in n for n in notes) and not any(n.startswith("baseline:") for n in notes)
