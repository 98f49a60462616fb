"""Fitting emulator profiles to measured sweeps: seed figure A, the table forms, results JSON."""

import json

import pytest
from synthetic_results import _run as synthetic_run
from synthetic_results import make_doc

from research import calibrate
from specguard.emulator.model import ClosedLoop, SimLaunch, simulate_closed_loop
from specguard.emulator.profile import load_profile
from specguard.emulator.spec import SpecRequest
from specguard.report.summary import cell_summary

# seed-figures.md table A: concurrency -> (no-MTP tok/s, MTP tok/s); MTP at (1, 1, 2), capped at 48
SEED_A = {1: (108, 121.5), 4: (286, 400.5), 16: (873, 1209), 32: (1359, 1502), 64: (2327, 1571), 128: (2800, 1635)}
MTP = SpecRequest("NEXTN", num_steps=1, topk=1, num_draft_tokens=2)


def seed_a_csv(path):
    head = ("concurrency,baseline_tok_s,spec_tok_s,accept_length,input_len,output_len,cap,algorithm,num_steps,topk,"
            "num_draft_tokens,repeated_prompt")
    rows = [f"{c},{b},{m},2.00" + (",1000,1000,48,NEXTN,1,1,2,true" if i == 0 else "")
            for i, (c, (b, m)) in enumerate(SEED_A.items())]
    path.write_text("\n".join([head, *rows]) + "\n")
    return path


def test_seed_a_table_is_reproduced_within_10_percent(tmp_path, capsys):
    out = tmp_path / "seed-a-fit.toml"
    assert calibrate.main([str(seed_a_csv(tmp_path / "a.csv")), "--out", str(out)]) == 0
    assert "| NEXTN | tok/s | 64 |" in capsys.readouterr().out
    profile = load_profile(out)  # the file as written
    for c, (want_base, want_mtp) in SEED_A.items():
        base = simulate_closed_loop(profile, None, ClosedLoop(c, 2 * c, 1000, 1000))
        mtp = simulate_closed_loop(profile, MTP, ClosedLoop(c, 2 * c, 1000, 1000), SimLaunch(max_running_requests=48))
        assert base.output_throughput == pytest.approx(want_base, rel=0.10), c
        assert mtp.output_throughput == pytest.approx(want_mtp, rel=0.10), c
        assert mtp.accept_length == pytest.approx(2.0, abs=0.01)
    assert profile.drafts["NEXTN"].default_params == (1, 1, 2)


def test_json_table_reads_like_the_csv(tmp_path):
    rows = [{"concurrency": c, "baseline_tok_s": b, "spec_tok_s": m, "accept_length": 2.0} for c, (b, m) in SEED_A.items()]
    doc = {"input_len": 1000, "output_len": 1000, "cap": 48, "algorithm": "NEXTN", "num_steps": 1, "topk": 1,
           "num_draft_tokens": 2, "repeated_prompt": True, "rows": rows}
    (tmp_path / "a.json").write_text(json.dumps(doc))
    from_json = calibrate.read_measurements(tmp_path / "a.json")
    from_csv = calibrate.read_measurements(seed_a_csv(tmp_path / "a.csv"))
    assert from_json == from_csv
    assert from_json.specs[0].cap == 48 and from_json.same_prompt and from_json.base_tok_s[128] == 2800


def test_table_without_lengths_is_refused(tmp_path, capsys):
    (tmp_path / "t.csv").write_text("concurrency,baseline_tok_s\n1,100\n")
    assert calibrate.main([str(tmp_path / "t.csv"), "--out", str(tmp_path / "p.toml")]) == 4
    assert "input_len" in capsys.readouterr().err


def _results_doc():
    """A results JSON as `pytest perf_tests --results-json` writes it (schema 3: levels by name),
    its runs simulated from the fast profile."""
    fast = load_profile("fast")
    eagle = SpecRequest("EAGLE3", 3, 1, 4)
    doc = make_doc({"baseline": {1: 1.0}, "eagle3": {1: 1.0}}, {"eagle3": {"speculative_algorithm": "EAGLE3"}},
                   workload={"kind": "random-ids", "input_len": 128, "output_len": 64, "seed": 0, "path": None})
    effective = {
        "baseline": {"speculative_algorithm": None, "max_running_requests": 128, "model_path": "/m"},
        "eagle3": {"speculative_algorithm": "EAGLE3", "num_steps": 3, "eagle_topk": 1, "num_draft_tokens": 4,
                   "max_running_requests": 128, "model_path": "/m"},
    }
    for name, args in effective.items():
        doc["servers"][name]["effective_args"] = args
    cells = []
    for name, spec in (("baseline", None), ("eagle3", eagle)):
        for c in (1, 4, 16):
            runs = []
            for seed in range(2):
                r = simulate_closed_loop(fast, spec, ClosedLoop(c, 4 * c, 128, 64, same_prompt=False), SimLaunch(max_running_requests=128, seed=seed))
                runs.append({**synthetic_run(r.output_throughput, c, r.accept_length), "num_requests": 4 * c})
            cells.append({"config": name, "level": f"c{c}", "error": None, "notes": [], "wall_s": 1.0,
                          "summary": cell_summary(runs), "runs": runs, "warmup_runs": []})
    doc["cells"] = cells
    return doc


def test_results_json_is_fitted_from_its_runs_and_effective_args(tmp_path, capsys):
    path = tmp_path / "results.json"
    path.write_text(json.dumps(_results_doc()))
    sweep = calibrate.read_measurements(path)
    assert sweep.base_cap == 128 and sweep.num_requests[16] == 64 and not sweep.same_prompt
    (spec,) = sweep.specs
    assert spec.request == SpecRequest("EAGLE3", 3, 1, 4) and spec.cap == 128
    out = tmp_path / "fast-fit.toml"
    assert calibrate.main([str(path), "--out", str(out)]) == 0
    points = calibrate.fit_errors(load_profile(out), sweep)
    assert max(abs(p.error) for p in points if p.metric == "tok/s") < 0.01
    assert "--max-running-requests 128" in capsys.readouterr().out
