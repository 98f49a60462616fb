"""`specguard export`: a results document as Bencher's BMF JSON and as a GitHub check run's output."""

from __future__ import annotations

import json

import pytest
from synthetic_results import as_rate_sweep, seed_a_doc

from specguard.cli import main
from specguard.decide.prior import SpreadSource
from specguard.report import export
from specguard.report.markdown import render_markdown
from specguard.report.results import spread_source_doc, validate


def _speculation(config: str, level: int, ratio: float, low: float, high: float) -> dict:
    estimate = {"ratio": ratio, "low": low, "high": high, "threshold": 1.0, "p_value": 0.5, "dof": 4.0,
                "confidence": 0.95, "between_sd": 0.01, "between_source": spread_source_doc(SpreadSource())}
    return {"gate": "speculation", "config": config, "level": f"c{level}", "verdict": "pass",
            "estimate": estimate, "current": None, "reference": None, "versus": None, "tolerance": 0.0,
            "rule": "significant", "enforced": True, "alpha": 0.01, "launches": 1, "stage": 1, "attribution": None,
            "factors": None, "goodput": False, "problem": None, "drift": None, "notes": []}


@pytest.fixture
def doc():
    d = seed_a_doc()
    d["decisions"].append(_speculation("mtp", 4, 1.4, 1.35, 1.45))
    return validate(d)


def is_bmf(obj) -> bool:
    """Bencher's BMF JSON schema (bencher.dev/bmf.json): benchmark -> measure -> {value (required),
    lower_value, upper_value}, every one a number."""
    return isinstance(obj, dict) and all(
        isinstance(measures, dict) and measures and all(
            isinstance(m, dict) and "value" in m and set(m) <= {"value", "lower_value", "upper_value"}
            and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in m.values())
            for m in measures.values())
        for measures in obj.values())


def test_bencher_names_cells_as_test_ids_and_holds_medians_with_the_runs_range(doc):
    bmf = export.to_bencher(doc)
    assert is_bmf(bmf) and json.loads(json.dumps(bmf)) == bmf
    assert set(bmf) == {f"{name}-c{c}" for name in ("baseline", "mtp") for c in (1, 4, 16, 32, 64, 128)}
    tok_s = bmf["mtp-c16"]["output-tok-s"]
    assert tok_s["value"] == pytest.approx(1209) and tok_s["lower_value"] == pytest.approx(1209 * 0.99)
    assert tok_s["upper_value"] == pytest.approx(1209 * 1.01)
    assert bmf["mtp-c16"]["accept-length"]["value"] == 2.0 and "accept-length" not in bmf["baseline-c16"]
    assert "step-time-ms" not in bmf["mtp-c16"]  # these runs carry no step_time_ms
    assert bmf["mtp-c4"]["speculation-speedup"] == {"value": 1.4, "lower_value": 1.35, "upper_value": 1.45}
    assert "speculation-speedup" not in bmf["mtp-c16"]  # no speculation decision there
    assert bmf["baseline-c1"]["ttft-p50-ms"]["value"] == pytest.approx(50.0)


def test_bencher_leaves_out_cells_that_errored_and_names_rate_levels(doc):
    doc["cells"][0].update(error="server died", runs=[])
    bmf = export.to_bencher(as_rate_sweep(doc))
    assert "baseline-r1" not in bmf and "baseline-r4" in bmf and "mtp-r16" in bmf


def test_github_check_output_is_title_summary_and_the_markdown_summary(doc):
    doc["outcome"] = {"status": "regression", "exit_status": 1,
                      "failed_tests": [{"nodeid": "t::test_throughput[mtp-c4]", "kind": "regression", "message": "x"}]}
    check = export.to_github_check(doc)
    assert set(check) == {"title", "summary", "text"}
    assert check["title"] == "specguard: regression found (1 failed test(s))"
    assert check["text"] == render_markdown(doc, html_name=None)
    assert "exit 1" in check["summary"] and "specguard: regression" in check["summary"]


def test_github_check_text_fits_the_checks_api_limit(doc, monkeypatch):
    monkeypatch.setattr(export, "render_markdown", lambda d, html_name=None: "x" * 70_000)
    text = export.to_github_check(doc)["text"]
    assert len(text) == export.CHECK_TEXT_LIMIT == 65535 and text.endswith("in the job's report)\n")


def test_export_command(doc, tmp_path, capsys):
    path = tmp_path / "results.json"
    path.write_text(json.dumps(doc))
    assert main(["export", str(path), "--format", "bencher"]) == 0
    assert json.loads(capsys.readouterr().out) == export.to_bencher(doc)
    assert main(["export", str(path), "--format", "github-check", "--output", str(tmp_path / "check.json")]) == 0
    assert json.loads((tmp_path / "check.json").read_text()) == export.to_github_check(doc)


def test_export_bad_input_exits_4_with_one_line(tmp_path, capsys):
    (tmp_path / "x.json").write_text("{}")
    assert main(["export", str(tmp_path / "x.json"), "--format", "bencher"]) == 4
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "x.json is not a specguard results file" in err
    with pytest.raises(SystemExit) as exc:
        main(["export", str(tmp_path / "x.json"), "--format", "csv"])
    assert exc.value.code == 4
