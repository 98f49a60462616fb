"""The results document (schema), the terminal table, markdown, HTML and the report directory."""

from __future__ import annotations

import html
import json
import math
from pathlib import Path

import numpy as np
import pytest
from gate_support import result
from synthetic_results import as_rate_sweep, seed_a_doc

from specguard import cli
from specguard.config import parse_suite
from specguard.decide.prior import HistoryOf, Origin, SpreadSource
from specguard.decide.result import Against, Versus
from specguard.decide.stats import RatioEstimate
from specguard.measure.metrics import RunMetrics
from specguard.measure.sweep import CellMeasurement
from specguard.notes import Note, NoteKind
from specguard.report import plots
from specguard.report.html_page import render_html
from specguard.report.markdown import render_markdown
from specguard.report.merge import merge_documents
from specguard.report.publish import NO_PLOTS, write_report_dir
from specguard.report.results import (
    SCHEMA,
    SCHEMA_VERSION,
    ResultsError,
    decision_dict,
    load,
    spread_source,
    spread_source_doc,
    validate,
    write_results,
)
from specguard.report.schema import CellDoc, ResultsDoc
from specguard.report.terminal import render_summary
from specguard.session import GateSession, RunOptions
from specguard.session.results import build_results

SUITE = {
    "sweep": {"concurrency": [1, 4], "repeats": 2},
    "workload": {"kind": "random-ids", "input_len": 16, "output_len": 8},
    "servers": {
        "baseline": {"engine": "emulator", "model_path": "/m", "max_running_requests": 64},
        "mtp": {"engine": "emulator", "model_path": "/m", "speculative_algorithm": "NEXTN", "num_steps": 1,
                "eagle_topk": 1, "num_draft_tokens": 2, "reference": "baseline", "args": ["--api-key", "k3y"]},
    },
}


def _run(tok_s: float, accept: float | None) -> RunMetrics:
    return RunMetrics(concurrency=1, num_requests=4, completed=4, failed=0, duration_s=1.0, total_input_tokens=64,
                      total_output_tokens=32, output_throughput=tok_s, request_throughput=4.0,
                      latency_ms={"median_ttft_ms": 5.0, "p99_ttft_ms": 9.0, "median_itl_ms": 2.0,
                                  "p99_itl_ms": math.nan, "median_e2e_latency_ms": 20.0},
                      accept_length=accept)


def _estimate(ratio: float) -> RatioEstimate:
    return RatioEstimate(ratio, ratio * 0.95, ratio * 1.05, 0.97, 0.5, 4.0, 0.99, 0.01, SpreadSource(), pass_low=ratio * 0.97,
                         pass_confidence=0.95)


@pytest.fixture
def session(tmp_path: Path) -> GateSession:
    """A session with measured cells and decisions, as if pytest had run it (no servers)."""
    sg = GateSession(parse_suite(SUITE, tmp_path / "suite.toml"), RunOptions(baseline_dir=tmp_path / "b"))
    for name, tok, acc in (("baseline", 100.0, None), ("mtp", 150.0, 2.0)):
        for c in (1, 4):
            sg.cells.cells[(name, c)] = CellMeasurement(name, c, runs=[_run(tok * c, acc), _run(tok * c * 1.02, acc)])
    sg.cells[("mtp", 4)].error = "3 failed requests (allowed 0); first: request 1: server error 500"
    sg.verdicts.results[:] = [
        result("throughput", "baseline", 1, "fail", _estimate(0.83), current=100.0, reference=120.0,
               versus=Versus(Against.BASELINE, sessions=1), tolerance=0.03, rule="significant", notes=(Note.text(NoteKind.TEXT, "a | pipe"),)),
        result("speculation", "mtp", 1, "pass", _estimate(1.5), current=150.0, reference=100.0,
               versus=Versus(Against.REFERENCE, "baseline"), tolerance=0.0, rule="significant", enforced=False),
    ]
    return sg


def test_document_has_every_documented_key_and_round_trips(session, tmp_path):
    doc = build_results(session)
    assert doc["schema"] == SCHEMA == "specguard-results" and doc["schema_version"] == SCHEMA_VERSION == 7
    assert set(ResultsDoc.__required_keys__) <= set(doc) and validate(doc) is doc
    assert [c["name"] for c in doc["configs"]] == ["baseline", "mtp"]
    mtp = doc["configs"][1]
    assert (mtp["speculative_algorithm"], mtp["num_steps"], mtp["reference"]) == ("NEXTN", 1, "baseline")
    assert "k3y" not in json.dumps(doc)  # launch args are redacted like server commands
    cell = next(c for c in doc["cells"] if c["config"] == "mtp" and int(c["level"][1:]) == 1)
    assert set(CellDoc.__required_keys__) <= set(cell) and cell["summary"]["output_throughput"] == pytest.approx(151.5)
    assert cell["summary"]["accept_length"] == 2.0 and cell["summary"]["p99_itl_ms"] is None  # NaN -> null
    assert doc["decisions"][0]["estimate"]["ratio"] == pytest.approx(0.83)
    assert doc["crossovers"] == {}  # one level measured with its reference: no crossover to speak of
    path = tmp_path / "r.json"
    write_results(doc, path)
    assert load(path)["cells"] == json.loads(json.dumps(doc))["cells"]


def test_validate_rejects_damaged_documents(session):
    doc = build_results(session)
    del doc["decisions"]
    with pytest.raises(ResultsError, match="lacks decisions"):
        validate(doc, "x.json")
    doc = build_results(session)
    del doc["cells"][0]["summary"]
    with pytest.raises(ResultsError, match="lacks summary"):
        validate(doc)


def test_terminal_table_has_the_key_figures_and_the_outcome(session):
    doc = build_results(session)
    doc["outcome"] = {"status": "regression", "exit_status": 1,
                      "failed_tests": [{"nodeid": "t::test_throughput[baseline-c1]", "kind": "regression", "message": "m"},
                                       {"nodeid": "t::test_throughput[mtp-c4]", "kind": "not-measured", "message": "m"}]}
    text = render_summary(doc)
    head, _, *rows = text.splitlines()
    for column in ("tok/s", "vs baseline (bound)", "caught 90%", "accept", "step ms", "TTFT p50/p99 ms",
                   "ITL p50/p99 ms", "spec/ref (bound)", "verdict"):
        assert column in head
    assert rows[0].split()[:3] == ["baseline", "1", "101.0"] and "-17.0% (>=-19.5%, 95%)" in rows[0]
    assert rows[0].endswith("FAIL: tput")
    assert "+50.0% (>=+45.5%, 95%)" in rows[2] and rows[2].endswith("pass")
    assert "ERROR: 3 failed requests" in rows[3]
    assert text.splitlines()[-1] == "specguard: regression (1 regression(s), 1 test(s) not measured), exit 1"
    assert max(len(line) for line in text.splitlines()[:6]) < 180  # readable in a CI log (the bounds say their level)


def test_markdown_summary(session):
    doc = build_results(session)
    doc["outcome"] = {"status": "regression", "exit_status": 1, "failed_tests": [
        {"nodeid": "perf_tests/test_speculation.py::test_throughput[baseline-c1]", "kind": "regression",
         "message": "throughput baseline c1: a | b"}]}
    md = render_markdown(doc)
    assert md.startswith("### specguard: ❌ regression found (exit 1)")
    assert "| config | C | tok/s | vs baseline (bound) |" in md and "| baseline | 1 | 101.0 |" in md
    assert "<details><summary>1 failed test(s)</summary>" in md and "a \\| b" in md
    assert "`specguard: regression (1 regression(s)), exit 1`" in md and "report.html" in md


def test_html_is_self_contained_with_embedded_plots(session):
    doc = build_results(session)
    page = render_html(doc, {"throughput": b"\x89PNG fake"}, None)
    assert "data:image/png;base64,iVBORyBmYWtl" in page and "<script" not in page and "src='http" not in page
    assert "throughput baseline c1: 100 tok/s vs baseline (1 session) 120 tok/s, ratio 0.830 [" in page
    assert "-&gt; FAIL\n  notes: a | pipe" in page
    assert html.escape(NO_PLOTS) in render_html(doc, {}, NO_PLOTS)


def test_report_dir_with_and_without_matplotlib(tmp_path, monkeypatch):
    doc = seed_a_doc()
    summary = tmp_path / "step-summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    written = {p.name for p in write_report_dir(doc, tmp_path / "r")}
    assert {"summary.md", "report.html"} <= written
    assert summary.read_text() == (tmp_path / "r" / "summary.md").read_text() + "\n"
    if plots.available():
        assert {"throughput.png", "speculation_ratio.png", "accept_length.png", "latency.png"} <= written
        assert (tmp_path / "r" / "throughput.png").read_bytes()[:4] == b"\x89PNG"
    monkeypatch.setattr(plots, "available", lambda: False)
    monkeypatch.delenv("GITHUB_STEP_SUMMARY")
    written = {p.name for p in write_report_dir(doc, tmp_path / "plain")}
    assert written == {"summary.md", "report.html"}
    assert "specguard[plots]" in (tmp_path / "plain" / "report.html").read_text()


def test_merging_xdist_workers_keeps_every_cell_and_reapplies_holm(session):
    a = build_results(session)
    b = json.loads(json.dumps(a))
    a["cells"] = [c for c in a["cells"] if c["config"] == "baseline"]
    b["cells"] = [c for c in b["cells"] if c["config"] == "mtp"]
    b["decisions"] = []
    est = {**a["decisions"][0]["estimate"], "p_value": 0.001}
    a["decisions"] = [{**a["decisions"][0], "verdict": "pass", "estimate": est}]
    merged = merge_documents([a, b])
    assert {(c["config"], int(c["level"][1:])) for c in merged["cells"]} == {(n, c) for n in ("baseline", "mtp") for c in (1, 4)}
    assert merged["merged_from"] == 2 and len(merged["holm_failures"]) == 1
    validate(merged)


def test_report_command_rebuilds_the_directory_from_a_results_file(tmp_path, monkeypatch):
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    results = tmp_path / "results.json"
    results.write_text(json.dumps(seed_a_doc()))
    assert cli.main(["report", str(results), "--report-dir", str(tmp_path / "r")]) == 0
    assert (tmp_path / "r" / "report.html").exists() and (tmp_path / "r" / "summary.md").exists()
    (tmp_path / "bench.json").write_text(json.dumps({"schema": "specguard-bench", "schema_version": 1}))
    assert cli.main(["report", str(tmp_path / "bench.json"), "--report-dir", str(tmp_path / "x")]) == 4  # usage or input error (docs/ci.md)


# -- one source of truth: every output says the same about every cell -------------------------------
def _decision(gate: str, config: str, c: int, verdict: str, ratio: float, low: float, high: float,
              enforced: bool = True, p: float = 0.2) -> dict:
    est = {"ratio": ratio, "low": low, "high": high, "threshold": 0.97, "p_value": p, "dof": 4.0, "confidence": 0.998,
           "between_sd": 0.022, "between_source": SpreadSource(history=Origin(HistoryOf.SESSIONS, 5)), "test_at": 1.0}
    return decision_dict(result(gate, config, c, verdict, RatioEstimate(**est), current=1.0, reference=1.0,
                                versus=Versus(Against.BASELINE, sessions=5), tolerance=0.03, rule="significant",
                                enforced=enforced, alpha=0.001))


def _test(nodeid: str, config: str | None, c: int | None, gate: str, outcome: str, kind: str | None = None,
          verdict: str | None = None) -> dict:
    return {"nodeid": nodeid, "config": config, "level": None if c is None else f"c{c}", "gate": gate, "outcome": outcome,
            "verdict": verdict,
            "enforced": True, "kind": kind, "message": "m"}


def agreement_doc() -> dict:
    """A session with every kind of outcome: a regression, a Holm-only failure, a test that could
    not gate (no baseline under --require-baselines), a skip, an inconclusive pass, plain passes."""
    doc = seed_a_doc()
    doc["decisions"] = [
        _decision("throughput", "baseline", 1, "fail", 0.90, 0.86, 0.94, p=1e-5),        # FAIL (regression)
        _decision("throughput", "baseline", 4, "inconclusive", 0.975, 0.95, 1.00, p=2e-3),  # Holm fails it
        _decision("throughput", "baseline", 16, "inconclusive", 0.99, 0.95, 1.03),        # inconclusive, passes
        {**_decision("throughput", "mtp", 1, "skip", 1, 1, 1), "estimate": None},          # no baseline, required
        {**_decision("throughput", "mtp", 4, "skip", 1, 1, 1), "estimate": None},          # skipped
        _decision("throughput", "mtp", 16, "pass", 1.01, 0.99, 1.03, p=0.9),
    ]
    doc["holm_failures"] = [doc["decisions"][1]]
    t = "perf_tests/test_speculation.py::test_throughput"
    doc["tests"] = [
        _test(f"{t}[baseline-c1]", "baseline", 1, "throughput", "failed", "regression", "fail"),
        _test(f"{t}[baseline-c4]", "baseline", 4, "throughput", "passed", verdict="inconclusive"),
        _test(f"{t}[baseline-c16]", "baseline", 16, "throughput", "passed", verdict="inconclusive"),
        _test(f"{t}[mtp-c1]", "mtp", 1, "throughput", "failed", "not-measured", "skip"),
        _test(f"{t}[mtp-c4]", "mtp", 4, "throughput", "skipped", verdict="skip"),
        _test(f"{t}[mtp-c16]", "mtp", 16, "throughput", "passed", verdict="pass"),
        _test("specguard::family_holm", None, None, "family_holm", "failed", "regression", "fail"),
    ]
    failed = [x for x in doc["tests"] if x["outcome"] == "failed"]
    doc["outcome"] = {"status": "regression", "exit_status": 1,
                      "failed_tests": [{"nodeid": x["nodeid"], "kind": x["kind"], "message": "m"} for x in failed],
                      "counts": {"passed": 3, "failed": 3, "skipped": 1}}
    return doc


def _verdicts(rows: list[list[str]]) -> dict[str, str]:
    return {f"{r[0]}-c{r[1]}": r[-1] for r in rows}


def test_every_output_counts_the_same(tmp_path):
    doc = agreement_doc()
    term = render_summary(doc)
    md = render_markdown(doc)
    page = html.unescape(render_html(doc, {}))
    write_results(doc, tmp_path / "r.json")
    back = load(tmp_path / "r.json")

    # The table's verdicts follow the tests: the cell that failed under --require-baselines is ERROR, not skip.
    term_rows = [ln.split() for ln in term.splitlines()[2:] if ln.split() and ln.split()[0] in ("baseline", "mtp")]
    term_v = {f"{r[0]}-c{r[1]}": " ".join(r[r.index(next(x for x in r if x in ("pass", "FAIL:", "ERROR:", "skip:",
                                                                                    "inconclusive:"))):])
              for r in term_rows if int(r[1]) in (1, 4, 16)}
    assert term_v["baseline-c1"] == "FAIL: tput" and term_v["mtp-c1"] == "ERROR: tput"
    assert term_v["mtp-c4"] == "skip: tput" and term_v["baseline-c4"] == "inconclusive: tput"
    assert term_v["mtp-c16"] == "pass"

    # Failed tests = FAIL/ERROR gate labels in the table + the failed family row, in every output.
    n_failed = back["outcome"]["counts"]["failed"]
    for text in (term, md, page):
        assert text.count("FAIL: tput") + text.count("ERROR: tput") + text.count("FAIL: baseline-c4") == n_failed, text
        assert "specguard: regression (2 regression(s), 1 test(s) not measured; 3 failed, 3 passed, 1 skipped), exit 1" in text
        assert "FAIL (Holm" not in text
    for text in (term, md):  # the HTML page also lists every decision's own line, "-> INCONCLUSIVE" included
        assert "-> INCONCLUSIVE" not in text
    assert len(back["outcome"]["failed_tests"]) == n_failed == sum(t["outcome"] == "failed" for t in back["tests"])
    # The Holm test and its row say the same cell.
    assert "family_holm FAILED" in term and "FAIL: baseline-c4 tput" in term
    # Why cells are inconclusive, and what they can resolve.
    assert "2 gate(s) inconclusive: baseline history spread up to 2.2% (prior + history of 5 sessions)" in term
    assert "re-record the baselines on a quiet machine or add sessions" in term
    # The HTML headline has no emoji (headless Chromium draws a box without an emoji font).
    assert "❌" not in render_html(doc, {}) and "❌" in md


def test_the_pass_bound_is_what_the_table_shows_with_its_level():
    from specguard.report.terminal import pct_ci
    est = {"ratio": 1.004, "low": 0.956, "high": 1.053, "threshold": 0.97, "confidence": 0.99947, "dof": 20.0,
           "pass_low": 0.983, "pass_confidence": 0.95}
    assert pct_ci(est) == "+0.4% (>=-1.7%, 95%)"
    assert pct_ci(None, "error") == "error"
    # a file written before the pass had its own level: the two-sided interval, labelled with its level
    old = {k: v for k, v in est.items() if not k.startswith("pass_")}
    assert pct_ci(old) == "+0.4% [-4.4,+5.3] 99.9%"


def test_detectable_drop_is_the_drop_caught_nine_times_in_ten():
    from scipy import stats

    from specguard.report.results import detectable_drop
    # a 99 % two-sided interval of half-width 0.05 on the log scale with 10 dof: se = 0.05 / t
    est = {"ratio": 1.0, "low": math.exp(-0.05), "high": math.exp(0.05), "threshold": 0.97, "confidence": 0.99,
           "dof": 10.0}
    se = 0.05 / stats.t.ppf(0.995, 10)
    drop = detectable_drop(est)
    assert drop == pytest.approx(1 - math.exp(-(0.05 + stats.norm.ppf(0.9) * se)))
    # the same cell simulated: a true drop of that size fails (upper bound below 1, estimate below
    # the threshold) in 90 % of sessions
    rng = np.random.default_rng(0)
    d = math.log(1 - drop) + rng.normal(0, se, 200_000)
    caught = np.mean((d + 0.05 < 0) & (d < math.log(0.97)))
    assert caught == pytest.approx(0.9, abs=0.01)
    # a narrow interval: the estimate must still fall below the threshold 9 times in 10
    narrow = {**est, "low": math.exp(-0.005), "high": math.exp(0.005)}
    se_n = 0.005 / stats.t.ppf(0.995, 10)
    assert detectable_drop(narrow) == pytest.approx(1 - 0.97 * math.exp(-stats.norm.ppf(0.9) * se_n))
    assert detectable_drop(est, "beyond-tolerance") == pytest.approx(
        1 - 0.97 * math.exp(-(0.05 + stats.norm.ppf(0.9) * se)))


def test_the_inconclusive_line_advises_re_recording_only_when_the_history_is_noisier_than_the_prior():
    from specguard.report.resolution import resolution_note

    def doc(between_sd: float, gate: str = "throughput") -> dict:
        est = {"ratio": 0.99, "low": 0.95, "high": 1.03, "threshold": 0.97, "between_sd": between_sd,
               "between_source": spread_source_doc(SpreadSource(history=Origin(HistoryOf.SESSIONS, 5)))}
        return {"tolerances": {"fail_rule": "significant", "prior_between_sd": 0.012, "prior_between_sd_accept": 0.003},
                "decisions": [{"verdict": "inconclusive", "enforced": True, "estimate": est, "gate": gate,
                               "config": "eagle3", "level": "c16"}], "tests": []}

    quiet = resolution_note(doc(0.013))  # the prior's own spread: re-recording cannot help, launches can
    assert quiet.startswith("1 gate(s) inconclusive: baseline history spread up to 1.3%"), quiet
    assert "re-recording will not narrow them; advanced.launches = 2 will" in quiet and "quiet machine" not in quiet
    noisy = resolution_note(doc(0.022))  # a disturbed recording: 1.8x the prior
    assert noisy.endswith("re-record the baselines on a quiet machine or add sessions (more --update-baselines runs)")
    # accept length is judged against its own prior (0.3 %), not the tok/s one
    assert "quiet machine" in resolution_note(doc(0.008, "accept_length[code]"))
    assert "quiet machine" not in resolution_note(doc(0.0035, "accept_length"))


def test_numbers_never_print_in_exponent_form():
    from specguard.report.terminal import fmt_num, shorten
    assert fmt_num(14712.34) == "14712.3" and fmt_num(98.414) == "98.41" and fmt_num(2.8734) == "2.873"
    cut = shorten("server 'eagle3' exited (code 1) during the sweep; log tail follows", 40)
    assert cut.endswith(" ...") and all(w in "server 'eagle3' exited (code 1) during the sweep; log tail follows"
                                        for w in cut[:-4].split())


def test_recommend_prints_the_adaptive_config_file_it_wrote(tmp_path, capsys):
    doc = seed_a_doc()
    write_results(doc, tmp_path / "r.json")
    target = tmp_path / "my-adaptive.json"
    assert cli.main(["recommend", str(tmp_path / "r.json"), "--adaptive-config", str(target)]) == 0
    out = capsys.readouterr().out
    # seed A's MTP (NEXTN) applies: the printed flags and sentence name the file written
    assert target.exists() and f"--speculative-adaptive-config {target} where {target} is" in out, out
    assert "speculative_adaptive.json" not in out


def test_a_reference_the_attached_server_cannot_serve_reads_not_measured_with_the_fix():
    """A bare --server-url on an EAGLE3 server: `baseline` is skipped (the server speculates), which
    is not an error of the server; the note says how to measure it as eagle3's reference."""
    from specguard.report.terminal import notes
    doc = seed_a_doc()
    doc["configs"] = [{"name": "baseline", "reference": None}, {"name": "eagle3", "reference": "baseline"}]
    doc["servers"] = {
        "baseline": {"checks": [], "mode": "", "failure": "server runs EAGLE3; config baseline needs no speculation",
                     "failure_skipped": True},
        "eagle3": {"checks": [], "mode": "attached", "failure": None},
    }
    lines = notes(doc)
    assert ("baseline: not measured (server runs EAGLE3; config baseline needs no speculation); eagle3 needs it as "
            "reference: give it its own server with --server-url baseline=URL") in lines
    assert not any("ERROR" in line for line in lines)
    doc["servers"]["baseline"]["failure_skipped"] = False  # a real failure stays an error
    assert "baseline: ERROR: server runs EAGLE3; config baseline needs no speculation" in notes(doc)
    # a file that stores the reason as data: the line is worded from it, not cut from `failure`
    doc["servers"]["baseline"]["failure_reason"] = Note.of(NoteKind.SERVER_EXITED, config="baseline", code=-9).to_json()
    assert "baseline: ERROR: server 'baseline' exited (code -9) during the sweep" in notes(doc)


def test_the_crossover_sentence_names_request_rates_in_a_rate_sweep():
    # the results file's crossover text (every output prints it) words levels as recommend does
    from specguard.report.crossovers import crossover_line, crossovers

    doc = seed_a_doc()
    closed = crossovers(doc)
    text = crossover_line(next(iter(closed.values())))
    assert " at c~" in text and "between measured c" in text, text
    open_loop = crossover_line(next(iter(crossovers(as_rate_sweep(doc)).values())), "request_rate")
    assert " at r~" in open_loop and " req/s (" in open_loop and "between measured r" in open_loop, open_loop
    assert " c~" not in open_loop and " c1" not in open_loop


def test_the_crossover_line_is_rendered_from_its_fields_and_an_older_file_keeps_its_own():
    # report/crossovers.py crossover_line: the results file stores the crossover as data (schema 4);
    # a schema-3 file's worded line comes back as legacy_text (report/upgrade.py _v3_to_v4)
    from specguard.report.crossovers import crossover_line
    from specguard.report.upgrade import upgrade

    base = {"reference": "baseline", "estimate": None, "low": None, "high": None, "last_win": None, "first_loss": None,
            "confident": False, "confidence": 0.95, "below_range": False, "measured": [1, 64]}
    assert crossover_line({**base, "below_range": True, "first_loss": 1}) == \
        "behind baseline from the lowest measured concurrency (c1)"
    assert crossover_line(base) == "ahead of baseline at every measured concurrency (c1-c64); no crossover in range"
    crossing = {**base, "estimate": 36.8, "low": 33.0, "high": None, "last_win": 32, "first_loss": 64, "confident": True}
    assert crossover_line(crossing) == "crossover vs baseline at c~36.8 (95% CI 33-beyond c64), between measured c32 and c64"
    assert crossover_line({**crossing, "confident": False}, "request_rate").endswith(
        "between measured r32 and r64, not confidently resolved")
    old = {"schema_version": 3, "crossovers": {"eagle3": {**base, "text": "crossover vs baseline at c~20.0 (worded then)"}}}
    (x,) = upgrade(old, 3)["crossovers"].values()
    assert "text" not in x and crossover_line(x) == "crossover vs baseline at c~20.0 (worded then)"


def test_a_spread_source_is_worded_from_its_fields_and_an_older_file_keeps_its_phrase():
    # report/verdict_text.py spread_source_text: decide/prior.py returns where a spread came from as
    # data (SpreadSource, schema 5); a schema-4 file's phrase comes back as legacy_text (_v4_to_v5)
    from specguard.report.upgrade import upgrade
    from specguard.report.verdict_text import spread_source_text

    five, three = Origin(HistoryOf.SESSIONS, 5), Origin(HistoryOf.CONFIGURATIONS, 3)
    assert spread_source_text(SpreadSource()) == "prior"
    assert spread_source_text(SpreadSource(history=five, launches=(2,))) == "prior + history of 5 sessions, 2 launches"
    assert spread_source_text(SpreadSource(widened=2.0, launches=(1,))) == "prior (x2: too few stored sessions to check it)"
    assert spread_source_text(SpreadSource(prior=False, history=three, dropped_prior_sd=0.015)) == \
        "3 configurations' histories (the prior 1.50% contradicted, dropped)"
    assert spread_source_text(SpreadSource(history=Origin(HistoryOf.CELLS, 4), launches=(1, 2))) == \
        "prior + 4 cells' histories; 1+2 launches"
    others = Origin(HistoryOf.LAUNCHES, 6, ("mtp", "ref"))
    assert spread_source_text(SpreadSource(prior=False, history=others, launches=(3, 3), levels_pooled=True)) == (
        "this run's launches of mtp, ref (pooled over the levels) and both builds' own launches")
    est = {"ratio": 1.0, "low": 0.9, "high": 1.1, "threshold": 0.97, "p_value": 0.5, "dof": 4.0, "confidence": 0.99,
           "between_sd": 0.02}
    old = {"schema_version": 4, "decisions": [{"estimate": {**est, "between_source": "prior + history of 5 sessions"},
                                               "attribution": {"half": "engine", "accept": None,
                                                               "step_rate": {**est, "between_source": "prior"}}}]}
    (d,) = upgrade(old, 4)["decisions"]
    source, step = d["estimate"]["between_source"], d["attribution"]["step_rate"]["between_source"]
    assert source["legacy_text"] == "prior + history of 5 sessions" and source["history"] is not None
    assert step["legacy_text"] == "prior" and step["history"] is None
    stored = SpreadSource(prior=False, history=others, dropped_prior_sd=0.01, widened=2.0, launches=(3, 3))
    assert spread_source({**est, "between_source": spread_source_doc(stored)}) == stored  # round trip


def test_notes_are_stored_as_data_worded_in_report_and_an_older_files_sentences_stay_as_written():
    # specguard/notes.py: measure/ and engines/ record a note's kind and figures; report/note_text.py
    # words it; a schema-5 file's `warnings` and decision `notes` were sentences (_v5_to_v6)
    from specguard.report.note_text import note_line
    from specguard.report.results import note_doc
    from specguard.report.upgrade import upgrade

    outlier = Note.of(NoteKind.OUTLIER_RUN, run=2, tok_s=812.46)
    assert note_doc(outlier) == {"kind": "outlier_run", "run": 2, "tok_s": 812.46}
    assert Note.from_json(note_doc(outlier)) == outlier
    assert note_line(outlier) == "run 2 tok/s 812.5 is > 5 MADs from the median (kept)"
    assert note_line(Note.of(NoteKind.SERVER_BUSY, running=3, waiting=1)).startswith(
        "the server already has 3 running and 1 waiting requests that specguard did not send")
    old = {"schema_version": 5,
           "cells": [{"config": "eagle3", "level": "c4", "warnings": ["run 1 tok/s 1.0 is > 5 MADs from the median (kept)"],
                      "runs": [{"warnings": ["step time unmeasured: ..."]}], "warmup_runs": [{"warnings": []}]}],
           "decisions": [{"notes": ["max_running_requests: suite file says 64, server runs 256"]}],
           "holm_failures": [], "servers": {"eagle3": {"differences": [
               {"field": "num_steps", "suite": 3, "server": 5, "message": "num_steps: suite file says 3, server runs 5"}]}}}
    new = upgrade(old, 5)
    (cell,) = new["cells"]
    assert new["schema_version"] == 7 and "warnings" not in cell and "warnings" not in cell["runs"][0]
    assert cell["notes"] == [{"kind": "text", "text": "run 1 tok/s 1.0 is > 5 MADs from the median (kept)"}]
    assert cell["runs"][0]["notes"] == [{"kind": "text", "text": "step time unmeasured: ..."}]
    assert cell["warmup_runs"][0]["notes"] == []
    assert new["servers"]["eagle3"]["differences"] == [{"field": "num_steps", "suite": 3, "server": 5}]
    (note,) = [Note.from_json(n) for n in new["decisions"][0]["notes"]]
    assert note.kind == NoteKind.TEXT and note_line(note) == "max_running_requests: suite file says 64, server runs 256"


def test_a_schema_6_files_server_checks_and_server_notes_are_read_as_worded():
    # report/upgrade.py _v6_to_v7: schema 6 stored a server's checks as {message, blocking} and an
    # engine's non-blocking checks as {"kind": "server", "text": ...} notes
    from specguard.report.note_text import note_line
    from specguard.report.terminal import server_lines
    from specguard.report.upgrade import upgrade

    said = "asked for num_steps=5, server runs 3"
    old = {"schema_version": 6, "run_notes": [{"kind": "server", "text": "x"}],
           "cells": [{"notes": [{"kind": "server", "text": said}], "runs": [{"notes": [{"kind": "outlier_run", "run": 1,
                                                                                     "tok_s": 2.0}]}], "warmup_runs": []}],
           "decisions": [{"notes": [{"kind": "server", "text": said}]}], "holm_failures": [],
           "servers": {"eagle3": {"checks": [{"message": said + " (--strict-server-args)", "blocking": True}],
                                  "differences": [], "failure": None, "failure_skipped": False}}}
    new = upgrade(old, 6)
    assert new["schema_version"] == 7 and new["run_notes"] == [{"kind": "text", "text": "x"}]
    (cell,) = new["cells"]
    assert [note_line(Note.from_json(n)) for n in cell["notes"] + new["decisions"][0]["notes"]] == [said, said]
    assert cell["runs"][0]["notes"] == [{"kind": "outlier_run", "run": 1, "tok_s": 2.0}]  # data already: kept
    assert new["servers"]["eagle3"]["checks"] == [{"note": {"kind": "text", "text": said + " (--strict-server-args)"},
                                                   "blocking": True, "strict": False}]
    assert server_lines({**new, "configs": []}) == [f"eagle3: ERROR: {said} (--strict-server-args)"]


def test_every_note_kind_has_its_wording():
    import json

    from specguard.notes import RewriteCause
    from specguard.report.note_text import _WORDING, note_line

    assert set(_WORDING) == set(NoteKind)
    for cause in RewriteCause:  # each rewrite's reason is worded, and reads back from JSON as it was
        note = Note.of(NoteKind.ARG_REWRITTEN, setting="num_steps", asked=5, runs=3, cause=cause)
        stored = Note.from_json(json.loads(json.dumps(note.to_json())))
        assert stored == note and note_line(stored).startswith("asked for num_steps=5, ")


# Why a configuration was not measured (session.ConfigUnavailable's reason, a soak's problem): each
# kind with the line the session wrote as text before reasons were data, so the wording is unchanged.
_REASON_LINES = [
    (Note.of(NoteKind.DEADLINE_REACHED, config="eagle3", level="c16", deadline_s=3600.0, elapsed_s=3601.4),
     "session deadline of 3600s reached (3601s elapsed); eagle3 c16 not measured"),
    (Note.of(NoteKind.NOT_MEASURED, config="eagle3", level="r8"), "eagle3 r8 not measured"),
    (Note.of(NoteKind.NO_SERVER, config="mtp"), "mtp: no server was started, so its environment is unknown"),
    (Note.of(NoteKind.NOT_ATTACHED, config="mtp", attached="eagle3, baseline"),
     "mtp: not attached: --server-url names a server for eagle3, baseline only; add --server-url mtp=URL to measure it"),
    (Note.of(NoteKind.NOT_ATTACHED, config="mtp", attached=""),
     "mtp: not attached: --server-url names a server for other configurations only; add --server-url mtp=URL to measure it"),
    (Note.of(NoteKind.NOT_AS_CONFIGURED, config="eagle3", checks="a; b"), "configuration 'eagle3' does not run as configured: a; b"),
    (Note.of(NoteKind.ATTACH_REFUSED, named="eagle3", mismatch="server runs no speculation"),
     "--server-url eagle3=...: server runs no speculation"),
    (Note.of(NoteKind.ATTACH_REFUSED, named="", mismatch="server runs no speculation"), "server runs no speculation"),
    (Note.of(NoteKind.VOCAB_UNFIT, config="eagle3", error="input_len 9 > 8", source="config.json"),
     "eagle3: input_len 9 > 8 (vocabulary from config.json)"),
    (Note.of(NoteKind.NO_RESTART_COMMAND, config="eagle3"),
     "eagle3: an attached server cannot be relaunched without servers.eagle3.restart_command"),
    (Note.of(NoteKind.RESTART_TIMEOUT, config="eagle3", timeout_s=600.0),
     "eagle3: restart_command did not finish in 600s (servers.eagle3.startup_timeout_s)"),
    (Note.of(NoteKind.RESTART_EXITED, config="eagle3", code=2, output="no such unit"),
     "eagle3: restart_command exited 2: no such unit"),
    (Note.of(NoteKind.SERVER_UNRESPONSIVE, config="eagle3", path="/health_generate"),
     "server 'eagle3' stopped answering /health_generate during the sweep"),
    (Note.of(NoteKind.SERVER_EXITED, config="eagle3", code=-9), "server 'eagle3' exited (code -9) during the sweep"),
    (Note.of(NoteKind.SERVER_EXITED, config="eagle3", code=""), "server 'eagle3' exited (code None) during the sweep"),
    (Note.of(NoteKind.SOAK_WINDOW_FAILED, config="eagle3", window=3, error=""), "soak eagle3 window 3: no run"),
    (Note.of(NoteKind.SOAK_TOO_QUIET, config="eagle3", windows=2, planned=6, idle=4, needed=5),
     "passive soak eagle3: 2 of 6 windows saw traffic (4 idle); a passive soak watches a serving server's own "
     "requests (--server-url) and needs 5"),
]


@pytest.mark.parametrize("reason,line", _REASON_LINES, ids=[str(n.kind) for n, _ in _REASON_LINES])
def test_a_reason_is_worded_as_the_session_wrote_it_and_reads_back_from_json(reason, line):
    from specguard.report.note_text import note_line

    assert note_line(reason) == line
    assert Note.from_json(json.loads(json.dumps(reason.to_json()))) == reason
