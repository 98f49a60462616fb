"""`specguard history`: change points in results histories with a known step (synthetic, fixed
seeds; benchmarks/history_accuracy.py measures the rates over 200 histories), the exit codes,
input errors, ordering, --since, plots and the JSON output."""

from __future__ import annotations

import builtins
import importlib
import json
from pathlib import Path

import pytest

from specguard.cli import main
from specguard.timeline import detect, plot
from specguard.timeline.files import HistoryError, collect_paths, load_files, newest, parse_since
from specguard.timeline.series import METRICS, Series, build_series
from specguard.timeline.synthetic import synthetic_history, write_history

pytest.importorskip("otava.analysis", reason="apache-otava: pip install --no-deps apache-otava==0.8.0 (docs/history.md)")


def history_dir(tmp_path: Path, n: int = 30, seed: int = 0, **kwargs) -> Path:
    write_history(tmp_path / "h", synthetic_history(n, seed, **kwargs))
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
    docs = synthetic_history(12, 0, step_at=7, step=-0.10)
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


def test_missing_otava_is_one_line_with_the_install_command(tmp_path, capsys, monkeypatch):
    real_import = importlib.import_module

    def no_otava(name, *args):
        if name.startswith("otava"):
            raise ImportError(name)
        return real_import(name, *args)

    monkeypatch.setattr(importlib, "import_module", no_otava)
    code, _, err = run_history(capsys, str(history_dir(tmp_path, n=6)))
    assert code == 4 and err.strip().endswith("(docs/history.md)")
    assert "pip install --no-deps apache-otava==0.8.0" in err and len(err.strip().splitlines()) == 1


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
    doc = json.loads((tmp_path / "h.json").read_text())
    assert code == 1 and doc["schema"] == "specguard-history" and doc["exit_status"] == 1 and len(doc["files"]) == 30
    tok_s = next(p for p in doc["change_points"] if p["config"] == "eagle3" and p["metric"] == "tok_s")
    assert abs(tok_s["position"] - 28) <= 1 and tok_s["worse"] and tok_s["in_window"] and tok_s["engine_version"]


def test_speculation_ratio_is_spec_over_reference_in_the_same_file(tmp_path):
    files = load_files(collect_paths([str(history_dir(tmp_path, n=4))]))
    by_key = {(s.config, s.metric.key): s for s in build_series(files, list(METRICS.values()))}
    doc = files[0].doc
    mean = {c["config"]: sum(r["output_throughput"] for r in c["runs"]) / 3 for c in doc["cells"]}
    assert by_key[("eagle3", "spec_ratio")].values[0] == pytest.approx(mean["eagle3"] / mean["baseline"])
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
    assert detect.change_points(s, analysis=object()) == []  # never reaches the detector
