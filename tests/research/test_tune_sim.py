"""`specguard tune` in the emulator's virtual time (research/tune/): the shipped command's search,
outputs and verify session on the emulator's scheduler, and racing checked against the full grid."""

from __future__ import annotations

import json

import pytest
from tune_support import SIM_SUITE

from research.tune.cli import main
from specguard.sglang_rules.adaptive import load_adaptive_config
from specguard.tune.schema import TUNE


def test_cli_tune_simulated_with_verify_writes_every_file(tmp_path, capsys):
    suite = tmp_path / "suite.toml"
    suite.write_text(SIM_SUITE)
    out = tmp_path / "out"
    code = main(["--suite", str(suite), "--out", str(out), "--verify", "--steps", "1,2,3,5"])
    assert code == 0, capsys.readouterr()
    doc = TUNE.load(out / "tune.json")  # the file as its model says
    adaptive = [p for p in out.iterdir() if "adaptive" in p.name]
    assert len(adaptive) == 1
    load_adaptive_config(adaptive[0])  # SGLang's parser rules accept it
    assert (out / "launch-flags.txt").read_text().split()[-2:] == ["--max-running-requests", "64"]
    assert "[servers.mtp-tuned]" in (out / "suite-snippet.toml").read_text()
    assert [r["concurrency"] for r in doc["table"]] == [1, 16, 64]
    assert {"concurrency", "tuned_tok_s", "default_adaptive_tok_s", "best_fixed_tok_s", "no_speculation_tok_s",
            "verdicts"} <= set(doc["verify"][0])
    assert doc["table"][-1]["best"]["name"] == "reference"  # seed-A: speculation loses at 64
    # seed-A's acceptance (profile accept_prob 1.0, 0.85, 0.7, 0.7 ...) read back from the histogram;
    # a request's last verify is cut at its remaining tokens, which lowers it a little at 40 tokens
    assert doc["acceptance_by_position"][:3] == pytest.approx([1.0, 0.85, 0.85 * 0.7], abs=0.07)
    assert doc["cost"]["search_runs"] < doc["cost"]["full_grid_runs"]
    # the one speculative setting a deployment would otherwise run everywhere, measured at every
    # level in the verify session: the tuned config's total beats it (speculation loses at 64)
    spec = doc["verify_summary"]["best_single_fixed_speculative_measured_everywhere"]
    assert spec["setting"].startswith("steps") and spec["tuned_over_it"] > 0
    single = doc["verify_summary"]["best_single_fixed_measured_everywhere"]
    assert single["tok_s"] >= spec["tok_s"]  # no speculation counted among the fixed settings
    printed = capsys.readouterr().out
    assert "verify C=64" in printed and f"over the best single fixed speculative setting ({spec['setting']}" in printed


def test_seeds_compare_racing_with_the_full_grid_on_the_same_virtual_world(tmp_path, capsys):
    suite = tmp_path / "suite.toml"
    suite.write_text(SIM_SUITE)
    out = tmp_path / "out"
    assert main(["--suite", str(suite), "--out", str(out), "--seeds", "2", "--steps", "1,2", "--tree-topk", "1"]) == 0
    doc = json.loads((out / "seeds.json").read_text())
    assert [r["seed"] for r in doc["seeds"]] == [0, 1]
    assert doc["same_choices"] == sum(r["same_choices"] for r in doc["seeds"])
    assert all(r["race_runs"] <= r["full_runs"] for r in doc["seeds"])
    printed = capsys.readouterr().out
    assert f"racing chose what the full grid chose in {doc['same_choices']} of 2 seeds" in printed


def test_virtual_time_needs_an_emulator_configuration(tmp_path, capsys):
    suite = tmp_path / "suite.toml"
    suite.write_text(SIM_SUITE.replace('engine = "emulator"', 'engine = "sglang"'))
    assert main(["--suite", str(suite), "--out", str(tmp_path / "o")]) == 4
    err = capsys.readouterr().err
    assert "needs an emulator configuration" in err and len(err.strip().splitlines()) == 1
