"""`specguard history`: change points in results histories with a known step (synthetic, fixed
seeds; benchmarks/history_accuracy.py measures the rates over 1000 histories), the per-file value
(median; files whose runs disagree left out), the exit codes, input errors, ordering, --since,
plots and the JSON output."""

from __future__ import annotations

import builtins
import json
from pathlib import Path

import pytest

from specguard.cli import main
from specguard.decide.consistency import RUN_OUTLIER
from specguard.timeline import detect, plot
from specguard.timeline.files import HistoryError, collect_paths, load_files, newest, parse_since
from specguard.timeline.findings import HISTORY
from specguard.timeline.series import METRICS, Series, build_series, cell_level, file_values, robust_value
from specguard.timeline.synthetic import STALL_FACTOR, Step, engine_step, synthetic_history, write_history


def history_dir(tmp_path: Path, n: int = 30, seed: int = 0, step_at: int | None = None, step: float = -0.05) -> Path:
    write_history(tmp_path / "h", synthetic_history(n, seed, steps=engine_step(step_at, step)))
    return tmp_path / "h"


def run_history(capsys, *args: str) -> tuple[int, str, str]:
    code = main(["history", *args])
    out = capsys.readouterr()
    return code, out.out, out.err


def found(directory: Path, **kwargs) -> list[detect.ChangePoint]:
    files = load_files(collect_paths([str(directory)]))
    return [p for s in build_series(files, list(METRICS.values())) for p in detect.change_points(s, **kwargs)]


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_a_5pct_step_is_found_at_its_file(tmp_path, seed):
    points = found(history_dir(tmp_path, seed=seed, step_at=20, step=-0.05))
    tok_s = [p for p in points if p.series.config == "eagle3" and p.series.metric.key == "tok_s"]
    assert len(tok_s) == 1 and abs(tok_s[0].position + 1 - 20) <= 1, [(p.series.name, p.position + 1) for p in points]
    assert tok_s[0].worse and -0.07 < tok_s[0].change < -0.03 and tok_s[0].p_value < 0.001
    # the baseline did not move, nor did eagle3's accept length
    assert not [p for p in points if p.series.config == "baseline" or p.series.metric.key == "accept_length"]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_stationary_histories_have_no_change_point(tmp_path, seed):
    assert found(history_dir(tmp_path, seed=100 + seed)) == []


def test_must_show_history_text_and_exit_0_when_the_step_is_older_than_the_window(tmp_path, capsys):
    code, out, err = run_history(capsys, str(history_dir(tmp_path, step_at=20)))
    assert code == 0 and not err, err
    line = next(x for x in out.splitlines() if "eagle3 c16 tok/s:" in x)
    assert "from file 20/30 nightly-020.json" in line and "engine 0.5.23 -> 0.5.24" in line and "worse" in line
    assert "commit " in line and ".." in line  # the commits of the file before and of the first file after
    assert out.splitlines()[-1].endswith("-> exit 0")


def test_a_worse_step_in_the_newest_window_exits_1_and_a_better_one_0(tmp_path, capsys):
    code, out, _ = run_history(capsys, str(history_dir(tmp_path, step_at=27, step=-0.05)))
    assert code == 1 and "eagle3 c16 tok/s -" in out.splitlines()[-1], out
    code, out, _ = run_history(capsys, str(history_dir(tmp_path / "up", step_at=27, step=+0.05)))
    assert code == 0 and "better" in out and out.splitlines()[-1].endswith("-> exit 0"), out
    # --window 2: the same worse step (file 27) is older than the newest 2 files
    code, out, _ = run_history(capsys, str(history_dir(tmp_path, step_at=27, step=-0.05)), "--window", "2")
    assert code == 0, out


def test_files_are_put_in_time_order_whatever_their_names(tmp_path, capsys):
    docs = synthetic_history(12, 0, steps=engine_step(7, -0.10))
    for i, doc in enumerate(docs):  # names in reverse time order
        (tmp_path / f"z{100 - i}.json").write_text(json.dumps(doc))
    code, out, _ = run_history(capsys, str(tmp_path / "z*.json"), "--metric", "tok_s")
    assert "eagle3 c16 tok/s: from file 7/12 z94.json" in out, out


def test_since_keeps_the_newest_files(tmp_path):
    files = load_files(collect_paths([str(history_dir(tmp_path, n=10))]))
    assert [f.path.name for f in newest(files, parse_since("3"))] == ["nightly-008.json", "nightly-009.json",
                                                                       "nightly-010.json"]
    assert len(newest(files, parse_since("2026-05-06"))) == 5  # files are a day apart from 2026-05-01
    with pytest.raises(HistoryError, match="--since 'last week'"):
        parse_since("last week")


@pytest.mark.parametrize("content, says", [
    ("not json", "is not JSON"),
    ('{"schema": "specguard-recommendation", "schema_version": 1}', "is not a specguard results file"),
])
def test_a_file_that_is_not_a_results_document_is_an_error_never_skipped(tmp_path, capsys, content, says):
    directory = history_dir(tmp_path, n=6)
    (directory / "policy.json").write_text(content)
    code, out, err = run_history(capsys, str(directory))
    assert code == 4 and not out
    assert len(err.strip().splitlines()) == 1 and "policy.json" in err and says in err, err


@pytest.mark.parametrize("args, says", [
    (["nowhere/*.json"], "nowhere/*.json: no such file, directory or matching glob"),
    (["{dir}", "--since", "yesterday"], "--since 'yesterday'"),
    (["{dir}", "--since", "2031-01-01"], "no results file was created since then"),
    (["{dir}", "--window", "0"], "--window 0"),
    (["{dir}", "--max-pvalue", "1.5"], "--max-pvalue 1.5"),
])
def test_bad_input_is_one_line_naming_it_and_exit_4(tmp_path, capsys, args, says):
    directory = str(history_dir(tmp_path, n=6))
    code, out, err = run_history(capsys, *[a.replace("{dir}", directory) for a in args])
    assert code == 4 and len(err.strip().splitlines()) == 1 and says in err, err


def test_an_empty_directory_is_bad_input(tmp_path, capsys):
    code, _, err = run_history(capsys, str(tmp_path))
    assert code == 4 and "no .json results files" in err


def test_no_file_with_the_metric_exits_3(tmp_path, capsys):
    docs = synthetic_history(6, 0)
    for doc in docs:  # files from before step_time_ms was written
        for cell in doc["cells"]:
            for run in cell["runs"]:
                del run["step_time_ms"]
    write_history(tmp_path / "old", docs)
    code, _, err = run_history(capsys, str(tmp_path / "old"), "--metric", "step_time_ms")
    assert code == 3 and "step_time_ms" in err, err
    code, out, _ = run_history(capsys, str(tmp_path / "old"))  # other metrics: go on, and say what is absent
    assert code == 0 and "no file has step time (step_time_ms)" in out, out


def test_plots_one_png_per_cell(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    code, out, _ = run_history(capsys, str(history_dir(tmp_path, step_at=20)), "--plot-dir", str(tmp_path / "plots"))
    pngs = sorted(p.name for p in (tmp_path / "plots").iterdir())
    assert code == 0 and pngs == ["history-baseline-c16.png", "history-eagle3-c16.png"]
    assert (tmp_path / "plots" / pngs[1]).read_bytes().startswith(b"\x89PNG")


def test_without_matplotlib_one_line_and_still_the_text(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(plot, "available", lambda: False)
    real_import = builtins.__import__
    monkeypatch.setattr(builtins, "__import__", lambda name, *a, **k: (_ for _ in ()).throw(ImportError(name))
                        if name.startswith("matplotlib") else real_import(name, *a, **k))
    code, out, err = run_history(capsys, str(history_dir(tmp_path, step_at=20)), "--plot-dir", str(tmp_path / "plots"))
    assert code == 0 and "eagle3 c16 tok/s: from file 20/30" in out
    assert err.strip() == "specguard history: no plots: matplotlib is not installed (pip install 'specguard[plots]')"
    assert not (tmp_path / "plots").exists()


def test_json_output(tmp_path, capsys):
    code, _, _ = run_history(capsys, str(history_dir(tmp_path, step_at=28)), "--json", str(tmp_path / "h.json"))
    doc = HISTORY.load(tmp_path / "h.json")  # checked against its model (HistoryDoc)
    assert code == 1 and doc["schema"] == "specguard-history" and doc["exit_status"] == 1 and len(doc["files"]) == 30
    tok_s = next(p for p in doc["change_points"] if p["config"] == "eagle3" and p["metric"] == "tok_s")
    assert abs(tok_s["position"] - 28) <= 1 and tok_s["worse"] and tok_s["in_window"] and tok_s["engine_version"]


def test_speculation_ratio_is_spec_over_reference_in_the_same_file(tmp_path):
    files = load_files(collect_paths([str(history_dir(tmp_path, n=4))]))
    by_key = {(s.config, s.metric.key): s for s in build_series(files, list(METRICS.values()))}
    doc = files[0].doc
    median = {c["config"]: sorted(r["output_throughput"] for r in c["runs"])[1] for c in doc["cells"]}
    assert by_key[("eagle3", "spec_ratio")].values[0] == pytest.approx(median["eagle3"] / median["baseline"])
    assert ("baseline", "spec_ratio") not in by_key and ("baseline", "accept_length") not in by_key


def test_an_errored_cell_is_a_gap_that_keeps_file_positions(tmp_path):
    docs = synthetic_history(8, 0)
    docs[3]["cells"][1].update(error="server died", runs=[])
    write_history(tmp_path / "g", docs)
    files = load_files(collect_paths([str(tmp_path / "g")]))
    eagle3 = next(s for s in build_series(files, [METRICS["tok_s"]]) if s.config == "eagle3")
    assert eagle3.positions == [0, 1, 2, 4, 5, 6, 7]


def test_short_series_have_no_change_point_and_no_detector_call():
    series = build_series([], [METRICS["tok_s"]])
    assert series == []
    s = Series("eagle3", "c16", METRICS["tok_s"], [0, 1, 2], [1.0, 1.0, 2.0])
    assert detect.change_points(s) == []


def stall(doc: dict, config: str, runs: list[int]) -> None:
    """Runs `runs` of `config`'s cell in `doc` stalled, as the gate study's stalls (0.7x)."""
    cell = next(c for c in doc["cells"] if c["config"] == config)
    for i in runs:
        cell["runs"][i]["output_throughput"] *= STALL_FACTOR
        cell["runs"][i]["step_time_ms"] /= STALL_FACTOR


def test_a_files_value_is_the_median_and_runs_that_disagree_leave_it_out():
    # the gates' rule (decide/consistency.py): the median holds while the runs near the fastest are a majority
    assert robust_value([100.0, 101.0, 103.0]) == 101.0
    assert robust_value([100.0, 101.0, 100.0 * (1 - RUN_OUTLIER) - 0.1]) == 100.0  # one run stalled: the median holds
    assert robust_value([70.0, 70.5, 100.0]) is None  # two stalled: the median alone would be a stalled run
    assert robust_value([70.0, 70.5, 100.0], limit=0.35) == 70.5  # a noisy machine's wider limit: one cluster
    # a stall lengthens a step: two long steps of three disagree, two short ones are the machine at its best
    assert robust_value([14.3, 14.2, 10.0], stall="up") is None
    assert robust_value([10.0, 10.1, 14.3], stall="up") == 10.1
    assert robust_value([2.0, 3.0, 3.1], stall="") == 3.0  # accept length: a stall does not move it, never checked
    assert robust_value([50.0]) == 50.0


def test_a_run_that_accepted_more_keeps_a_speculative_file_s_tok_s_as_the_gates_keep_it():
    # decide/consistency.py StallBasis: tok/s [718, 546, 533] at accept lengths [3.61, 2.72, 2.64]
    # is one fast run of high acceptance, not two stalls: its steps per second agree
    doc = synthetic_history(1, 0)[0]
    cell = next(c for c in doc["cells"] if c["config"] == "eagle3")
    cell["runs"] = [{**cell["runs"][0], "output_throughput": t, "accept_length": a}
                    for t, a in ((718.0, 3.61), (546.0, 2.72), (533.0, 2.64))]
    assert file_values(doc, [METRICS["tok_s"]])[("eagle3", cell["level"], "tok_s")] == 546.0
    for run, accept in zip(cell["runs"], (2.7, 2.7, 2.7), strict=True):  # the same acceptance: two stalls
        run["accept_length"] = accept
    assert file_values(doc, [METRICS["tok_s"]])[("eagle3", cell["level"], "tok_s")] is None


def test_one_stalled_run_in_the_newest_file_keeps_its_median_and_no_alarm(tmp_path, capsys):
    docs = synthetic_history(30, 3)
    stall(docs[-1], "eagle3", [0])
    write_history(tmp_path / "s", docs)
    code, out, err = run_history(capsys, str(tmp_path / "s"))
    assert code == 0 and not err and "runs disagree" not in out, out
    files = load_files(collect_paths([str(tmp_path / "s")]))
    tok_s = next(s for s in build_series(files, [METRICS["tok_s"]]) if s.config == "eagle3")
    runs = sorted(r["output_throughput"] for r in next(c for c in docs[-1]["cells"] if c["config"] == "eagle3")["runs"])
    assert tok_s.left_out == [] and tok_s.positions[-1] == 29 and tok_s.values[-1] == runs[1]


def test_two_stalled_runs_in_the_newest_file_are_left_out_not_an_alarm(tmp_path, capsys):
    docs = synthetic_history(30, 3)
    stall(docs[-1], "eagle3", [0, 2])
    write_history(tmp_path / "s", docs)
    code, out, err = run_history(capsys, str(tmp_path / "s"))
    assert code == 0 and not err, out
    assert "runs disagree (too few near the fastest run: stalls?), files left out: eagle3 c16 30" in out, out
    files = load_files(collect_paths([str(tmp_path / "s")]))
    by_key = {(s.config, s.metric.key): s for s in build_series(files, list(METRICS.values()))}
    assert by_key[("eagle3", "tok_s")].left_out == [29] and 29 not in by_key[("eagle3", "tok_s")].positions
    assert by_key[("eagle3", "spec_ratio")].left_out == [29] and by_key[("baseline", "tok_s")].left_out == []
    assert by_key[("eagle3", "accept_length")].left_out == []  # a stall slows steps, not acceptance


def test_a_step_with_a_stalled_run_at_its_first_file_is_still_found_there(tmp_path):
    docs = synthetic_history(30, 1, steps=engine_step(20, -0.05))
    stall(docs[19], "eagle3", [1])  # one stall of three: file 20 keeps its median, the step is found within one file
    write_history(tmp_path / "h", docs)
    tok_s = [p for p in found(tmp_path / "h") if p.series.config == "eagle3" and p.series.metric.key == "tok_s"]
    assert [p.position + 1 for p in tok_s] in ([20], [21]), [p.position + 1 for p in tok_s]


def test_levels_are_read_by_name_c_for_clients_r_for_request_rates_also_from_schema_2_files():
    from specguard.report.results import validate

    doc = synthetic_history(1, 0)[0]
    assert cell_level(doc, doc["cells"][0]) == "c16"
    old = {**doc, "schema_version": 2, "sweep": {"request_rate": [8], "repeats": 3},  # as 65e213e wrote a rate sweep
           "cells": [{**{k: v for k, v in c.items() if k != "level"}, "concurrency": 8} for c in doc["cells"]]}
    read = validate(old)
    assert {cell_level(read, c) for c in read["cells"]} == {"r8"}


def test_a_drafter_step_moves_accept_length_and_tok_s_not_step_time(tmp_path):
    write_history(tmp_path / "d", synthetic_history(30, 2, steps=(Step("eagle3", 18, -0.05, "drafter"),)))
    points = found(tmp_path / "d")
    moved = {p.series.metric.key: p.position + 1 for p in points if p.series.config == "eagle3"}
    assert moved.keys() >= {"tok_s", "accept_length"} and "step_time_ms" not in moved, moved
    assert all(abs(at - 18) <= 1 for at in moved.values()), moved


def test_json_carries_each_series_and_each_change_points_interval(tmp_path, capsys):
    run_history(capsys, str(history_dir(tmp_path, step_at=20)), "--json", str(tmp_path / "h.json"))
    doc = json.loads((tmp_path / "h.json").read_text())
    eagle3 = next(s for s in doc["series"] if s["config"] == "eagle3" and s["metric"] == "tok_s")
    assert eagle3["positions"] == list(range(1, 31)) and len(eagle3["values"]) == 30 and eagle3["left_out"] == []
    tok_s = next(p for p in doc["change_points"] if p["config"] == "eagle3" and p["metric"] == "tok_s")
    low, high = tok_s["interval"]
    assert low < tok_s["change"] < high < 0 and low < -0.05 < high and ".." in tok_s["commit_range"]  # the truth: -5 %
