"""Speculation's own cells decided (issue 23): the engine's step time measured per run and gated
against its history, a speculative cell's tok/s verdict naming which half moved (the engine's
step time or the drafter's accept length), speculation that silently stopped, and acceptance
that drifts within a session."""

from __future__ import annotations

from array import array
from pathlib import Path

import pytest
from gate_support import step_gate
from session_support import fake_server, make_suite

from specguard.config import ConfigError, load_suite
from specguard.decide.gates import attribution
from specguard.decide.prior import SpreadSource
from specguard.decide.result import Why
from specguard.decide.stats import RatioEstimate, downward_trend
from specguard.labels import Verdict
from specguard.measure.client import RequestRecord
from specguard.measure.load import RunResult
from specguard.measure.metrics import RunMetrics, step_time_ms, summarize_run
from specguard.measure.sweep import CellMeasurement
from specguard.notes import Note, NoteKind
from specguard.report.note_text import note_line
from specguard.report.verdict_text import attribution_text, message
from specguard.session import GateSession, PlannedTest, RunOptions
from specguard.store.baseline_file import RunSample, StoredSession
from specguard.store.baselines import BaselineStore

FAIL, PASS = Verdict.FAIL, Verdict.PASS

# -- the measurement ---------------------------------------------------------------------------


def rec(index: int, first: float, end: float, tokens: int, verify: int | None) -> RequestRecord:
    return RequestRecord(index=index, send_s=0.0, end_s=end, event_s=array("d", [first, end]),
                         event_tokens=array("d", [1, tokens - 1]), prompt_tokens=8, completion_tokens=tokens,
                         spec_verify_ct=verify)


def test_step_time_is_decode_time_over_verify_steps_a_ratio_of_sums():
    # a: 0.4 s of decode over 4 verify steps; b: 0.9 s over 6: (0.4 + 0.9) / (4 + 6) = 130 ms
    records = [rec(0, 0.1, 0.5, 13, 4), rec(1, 0.1, 1.0, 19, 6)]
    assert step_time_ms(records) == pytest.approx(130.0)
    m = summarize_run(RunResult(concurrency=2, requests=records))
    assert m.step_time_ms == pytest.approx(130.0) and m.accept_length == pytest.approx(32 / 10)


def test_without_verify_counts_a_step_is_a_token_less_the_drafts_the_server_accepted():
    plain = [rec(0, 0.1, 1.1, 11, None)]  # 10 tokens after the first in 1 s: one per step
    assert step_time_ms(plain) == pytest.approx(100.0)
    # vLLM: the same 10 tokens in 4 steps when its counters say 6 drafts were accepted
    assert step_time_ms(plain, server_accepted_drafts=6.0) == pytest.approx(250.0)
    assert step_time_ms([rec(0, 0.1, 0.1, 1, None)]) is None  # one token: no decode step
    # every token in one read (vLLM's baseline c1 run, 3 requests): unmeasured and said, never 0
    one_read = [rec(0, 0.4, 0.4, 64, None)]
    assert step_time_ms(one_read) is None
    m = summarize_run(RunResult(concurrency=1, requests=one_read))
    assert m.step_time_ms is None and Note.of(NoteKind.STEP_TIME_UNMEASURED) in m.notes, m.notes
    assert note_line(m.notes[0]).startswith("step time unmeasured: every request's tokens arrived in one read")


# -- the gates ----------------------------------------------------------------------------------
def rates(ms: list[float]) -> list[float]:
    return [1e3 / x for x in ms]


HIST = [rates([10.0, 10.02, 9.98]) for _ in range(5)]


def test_a_slower_engine_fails_the_step_time_gate_in_milliseconds():
    slower = step_gate("eagle3", 1, [rates([10.8, 10.82, 10.79])], HIST, tolerance=0.03, prior_between_sd=0.005,
                            alpha_cell=0.01 / 40, rule="significant")
    assert slower.verdict == FAIL and str(slower.gate) == "step_time"
    assert slower.current == pytest.approx(10.8, rel=1e-3) and slower.reference == pytest.approx(10.0, rel=1e-3)
    assert message(slower).startswith("step_time eagle3 c1: 10.8 ms vs baseline (5 sessions) 10 ms, engine step time +8.0% [")
    assert "tolerance 3% slower" in message(slower) and message(slower).endswith("-> FAIL")
    same = step_gate("eagle3", 1, [rates([10.0, 10.01, 9.99])], HIST, tolerance=0.03, prior_between_sd=0.005,
                          alpha_cell=0.01 / 40, rule="significant")
    assert same.verdict == PASS


def est(ratio: float, low: float, high: float) -> RatioEstimate:
    return RatioEstimate(ratio, low, high, 1.0, 0.5, 10.0, 0.95, 0.01, SpreadSource())


@pytest.mark.parametrize("step,accept,half", [
    (est(0.94, 0.92, 0.96), est(1.0, 0.995, 1.005), "engine"),  # steps slower (rate down), acceptance level
    (est(1.0, 0.99, 1.01), est(0.92, 0.91, 0.93), "drafter"),
    (est(0.94, 0.92, 0.96), est(0.92, 0.91, 0.93), "both"),
    (est(0.99, 0.97, 1.01), est(1.0, 0.99, 1.01), ""),
])
def test_attribution_names_the_half_whose_interval_excludes_no_change(step, accept, half):
    got = attribution(step, accept)
    assert got.half == half
    assert attribution_text(got).startswith("; engine step time ") and ", accept length " in attribution_text(got)


def test_engine_step_time_is_shown_as_a_time_change_with_its_interval():
    text = attribution_text(attribution(est(0.94, 0.92, 0.96), None))
    assert text == "; engine step time +6.4% [+4.2%, +8.7%] (the engine moved)"


def test_a_downward_trend_needs_four_runs_and_noise_to_compare_with():
    assert downward_trend([3.0, 2.9, 2.8]) is None and downward_trend([3.0] * 6) is None
    falling = downward_trend([3.07, 3.02, 2.96, 2.91, 2.85, 2.8])
    assert falling is not None and falling.p_value < 1e-4 and falling.change == pytest.approx(-0.088, abs=0.005)
    level = downward_trend([3.0, 3.02, 2.98, 3.01, 2.99, 3.0])
    assert level is not None and level.p_value > 0.1


# -- the session --------------------------------------------------------------------------------
def metrics(tok: float, accept: float | None, step_ms: float | None) -> RunMetrics:
    return RunMetrics(concurrency=1, num_requests=4, completed=4, failed=0, duration_s=1.0, total_input_tokens=128,
                      total_output_tokens=int(tok), output_throughput=tok, request_throughput=4.0,
                      accept_length=accept, total_verify_ct=40, step_time_ms=step_ms)


def stored(sid: str, tok: float, accept: float, step_ms: float) -> StoredSession:
    return StoredSession(sid, "2026-11-29T00:00:00+00:00", {}, [
        RunSample(i, "L0", tok * f, 100, 1.0, 4, 0, accept, 40, step_time_ms=step_ms / f)
        for i, f in enumerate((1.0, 1.002, 0.998))])


def quiet_suite(tmp_path: Path, **kwargs):
    """The e2e suite with a GPU-like 0.5 % launch prior (its own is wide, for a shared CPU)."""
    from dataclasses import replace
    suite = make_suite(tmp_path, **kwargs)
    return replace(suite, tolerances=replace(suite.tolerances, prior_between_sd=0.005))


def session_with_history(tmp_path: Path, forced: int | None = None, **options) -> GateSession:
    from dataclasses import replace
    suite = quiet_suite(tmp_path)
    if forced is not None:
        suite = replace(suite, servers={**suite.servers,
                                        "eagle3": replace(suite.servers["eagle3"], simulate_accept_length=forced)})
    sg = GateSession(suite, RunOptions(baseline_dir=tmp_path / "b", log_dir=tmp_path / "l", **options))
    fake_server(sg, "eagle3")
    store = BaselineStore(tmp_path / "b")
    fp = sg.histories.fingerprint("eagle3")
    for k in range(5):
        store.record_sessions("eagle3", fp, {1: stored(f"s{k}", 600.0 * (1 + 0.002 * k), 3.0, 5.0)}, keep=5)
    sg.plan([PlannedTest("eagle3", 1, g) for g in ("throughput", "step_time", "accept_length")])
    return sg


def measured(sg: GateSession, runs: list[RunMetrics]) -> None:
    sg.cells.add("eagle3", 1, "L1", CellMeasurement(config="eagle3", concurrency=1, runs=runs))


def test_a_slower_engine_reads_engine_in_the_throughput_verdict(tmp_path):
    sg = session_with_history(tmp_path)
    measured(sg, [metrics(600 / 1.06 * f, 3.0, 5.0 * 1.06 / f) for f in (1.0, 1.001, 0.999)])
    tput = sg.throughput_result("eagle3", 1)
    assert tput.verdict == FAIL and tput.attribution.half == "engine", message(tput)
    assert "engine step time +6.0% [" in message(tput) and "accept length +0.0% [" in message(tput)
    assert "(the engine moved) -> FAIL" in message(tput)
    step = sg.step_time_result("eagle3", 1)
    assert step.verdict == FAIL and message(step).startswith("step_time eagle3 c1: 5.3 ms vs baseline (5 sessions) 5 ms")


def test_a_weaker_drafter_reads_drafter(tmp_path):
    sg = session_with_history(tmp_path)
    measured(sg, [metrics(600 * 0.92 * f, 3.0 * 0.92, 5.0 / f) for f in (1.0, 1.001, 0.999)])
    tput = sg.throughput_result("eagle3", 1)
    assert tput.verdict == FAIL and tput.attribution.half == "drafter" and "(the drafter moved)" in message(tput)
    assert sg.step_time_result("eagle3", 1).verdict == PASS


@pytest.mark.parametrize("accept,server_algorithm,expected", [
    (1.0, "EAGLE3", "accept length 1.000 <= min_accept_length 1.05: the verify steps keep almost no draft"),
    (None, "EAGLE3", "speculation is not running: the server runs EAGLE3 but its requests carry no verify counts"),
])
def test_speculation_that_stopped_fails_by_name_with_or_without_a_baseline(tmp_path, accept, server_algorithm, expected):
    for history in (True, False):
        where = tmp_path / str(history)
        sg = session_with_history(where) if history else GateSession(
            make_suite(where), RunOptions(baseline_dir=where / "b", log_dir=where / "l"))
        if not history:
            fake_server(sg, "eagle3")
        measured(sg, [metrics(400.0, accept, 5.0) for _ in range(3)])
        r = sg.accept_length_result("eagle3", 1)
        assert r.verdict == FAIL and expected in message(r) and "\n" not in message(r), message(r)


def test_the_floor_is_per_configuration_and_ngram_s_default_is_one(tmp_path):
    from dataclasses import replace
    suite = make_suite(tmp_path)
    eagle = suite.servers["eagle3"]
    assert eagle.accept_length_floor == 1.05
    assert replace(eagle, speculative_algorithm="NGRAM").accept_length_floor == 1.0
    assert replace(eagle, min_accept_length=1.5).accept_length_floor == 1.5
    text = (tmp_path / "suite.toml").read_text().replace('reference = "baseline"',
                                                         'reference = "baseline"\nmin_accept_length = 0.5')
    (tmp_path / "bad.toml").write_text(text)
    with pytest.raises(ConfigError, match=r"servers.eagle3.min_accept_length = 0.5: .* >= 1"):
        load_suite(tmp_path / "bad.toml")


@pytest.mark.parametrize("mode", ["warn", "fail"])
def test_acceptance_falling_within_the_session_is_reported_or_fails(tmp_path, mode):
    sg = session_with_history(tmp_path)
    if mode == "fail":
        sg = GateSession(quiet_suite(tmp_path / "f", advanced='relaunch = "on-suspicion"\naccept_drift = "fail"\n'),
                         sg.options)
        fake_server(sg, "eagle3")
    falling = [3.07, 3.02, 2.96, 2.91, 2.85, 2.8]
    measured(sg, [metrics(600.0, a, 5.0) for a in falling])
    r = sg.accept_length_result("eagle3", 1)
    assert "accept length fell -8.9% across the cell's 6 runs in time order" in message(r), message(r)
    if mode == "fail":
        assert r.verdict == FAIL and 'advanced.accept_drift = "fail"' in message(r)
    else:
        assert "\n  notes: accept length fell" in message(r)


GOOD_HEAD = [10, 20, 30, 40]  # verify steps accepting exactly 0..3 drafts: accept length 3.0
# The same mean within 3 % (1.92 correct drafts a step) with position 3 collapsed: the later
# positions stopped agreeing (seed 001's head fed other layers' hidden states)
MISWIRED = [10, 10, 58, 22]


def _accept(hist: list[int]) -> float:
    return 1 + sum(k * n for k, n in enumerate(hist)) / sum(hist)


def session_with_positions(tmp_path: Path) -> GateSession:
    sg = GateSession(quiet_suite(tmp_path), RunOptions(baseline_dir=tmp_path / "b", log_dir=tmp_path / "l"))
    fake_server(sg, "eagle3")
    store, fp = BaselineStore(tmp_path / "b"), sg.histories.fingerprint("eagle3")
    for k in range(5):
        runs = []
        for i, d in enumerate((0, 1, -1)):
            hist = [GOOD_HEAD[0] - d, GOOD_HEAD[1] + d, GOOD_HEAD[2] - d, GOOD_HEAD[3] + d]
            runs.append(RunSample(i, "L0", 600.0, 100, 1.0, 4, 0, _accept(hist), 100, step_time_ms=5.0,
                                  correct_drafts_histogram=hist))
        store.record_sessions("eagle3", fp, {1: StoredSession(f"s{k}", "2026-11-29T00:00:00+00:00", {}, runs)}, keep=5)
    sg.plan([PlannedTest("eagle3", 1, "accept_length")])
    return sg


def run_with(hist: list[int]) -> RunMetrics:
    m = metrics(600.0, _accept(hist), 5.0)
    m.correct_drafts_histogram = list(hist)
    return m


def test_a_drop_at_one_draft_position_fails_by_name_while_the_accept_length_holds(tmp_path):
    # cell_gates.CellGates._positions: RunSeries.position_shares(k) per run, against the stored
    # sessions', alpha split over the positions the baseline reached
    sg = session_with_positions(tmp_path / "bad")
    bad = [[h + d for h in MISWIRED] for d in (0, 1, -1)]
    measured(sg, [run_with(h) for h in bad])
    r = sg.accept_length_result("eagle3", 1)
    assert r.verdict == FAIL and r.problem is not None and r.problem.count == 3, message(r)
    assert [s.position for s in r.positions] == [1, 2, 3] and r.positions[2].verdict == FAIL
    assert r.estimate is not None and r.estimate.ratio > 0.97  # the mean alone would have passed
    text = message(r)
    assert text.startswith("accept_length eagle3 c1: acceptance at draft position 3 fell: 0.22") and "-> FAIL" in text
    assert "\n  notes: acceptance per draft position (share of verify steps accepting >= k drafts, vs baseline): " \
           "1 0.900 " in text
    good = session_with_positions(tmp_path / "good")
    measured(good, [run_with(list(GOOD_HEAD)) for _ in range(3)])
    ok = good.accept_length_result("eagle3", 1)
    assert ok.verdict == PASS and all(s.verdict == PASS for s in ok.positions), message(ok)


def test_a_position_no_step_reached_fails_and_a_baseline_without_histograms_has_no_positions(tmp_path):
    sg = session_with_positions(tmp_path / "zero")
    measured(sg, [run_with([10, 20, 70, 0]) for _ in range(3)])
    r = sg.accept_length_result("eagle3", 1)
    assert r.verdict == FAIL and r.positions[2].estimate is None and "fell to 0" in message(r), message(r)
    plain = session_with_history(tmp_path / "plain")  # stored before histograms were
    measured(plain, [run_with(list(GOOD_HEAD)) for _ in range(3)])
    assert plain.accept_length_result("eagle3", 1).positions == ()


def forced_session(tmp_path: Path, length: int = 3) -> GateSession:
    from dataclasses import replace
    suite = quiet_suite(tmp_path)
    servers = {**suite.servers, "eagle3": replace(suite.servers["eagle3"], simulate_accept_length=length)}
    sg = GateSession(replace(suite, servers=servers), RunOptions(baseline_dir=tmp_path / "b", log_dir=tmp_path / "l"))
    fake_server(sg, "eagle3")
    sg.plan([PlannedTest("eagle3", 1, g) for g in ("throughput", "accept_length")])
    return sg


def forced_run(tokens: int, requests: int, verify: int) -> RunMetrics:
    m = metrics(600.0, tokens / verify, 5.0)
    m.total_output_tokens, m.completed, m.num_requests, m.total_verify_ct = tokens, requests, requests, verify
    return m


def test_forced_acceptance_is_checked_against_the_forced_length_without_a_baseline(tmp_path):
    # 4 requests of 100 tokens at 3 a step: 1 prefill token + 33 steps each = 132 steps, 400 / 132 = 3.03
    sg = forced_session(tmp_path / "held")
    measured(sg, [forced_run(400, 4, 132) for _ in range(3)])
    r = sg.accept_length_result("eagle3", 1)
    assert r.verdict == PASS and r.reference == 3.0 and r.current == pytest.approx(400 / 132), message(r)
    assert message(r).startswith("accept_length eagle3 c1: acceptance forced to 3 tokens per verify step "
                                 "(simulate_accept_length): every run holds it"), message(r)
    # the server ignored the variable: the drafter's own 2.4 tokens a step
    off = forced_session(tmp_path / "ignored")
    measured(off, [forced_run(400, 4, 132), forced_run(400, 4, 167), forced_run(400, 4, 132)])
    r = off.accept_length_result("eagle3", 1)
    assert r.verdict == FAIL and r.problem is not None and r.problem.count == 1, message(r)
    assert "but 1 run read otherwise (farthest 2.395)" in message(r) and message(r).endswith("-> FAIL")


def test_a_forced_configuration_s_tok_s_change_is_the_engine_s_alone(tmp_path):
    sg = session_with_history(tmp_path, forced=3)
    measured(sg, [metrics(600 / 1.06 * f, 3.0, 5.0 * 1.06 / f) for f in (1.0, 1.001, 0.999)])
    tput = sg.throughput_result("eagle3", 1)
    assert tput.verdict == FAIL and tput.attribution is not None and tput.attribution.half == "engine-only"
    assert "(acceptance forced: the engine alone) -> FAIL" in message(tput) and "accept length" not in message(tput)


# -- the summary ----------------------------------------------------------------------------------
def _decision(gate: str, config: str, level: int, verdict: str, attribution: str = "", low: float = 0.9,
              high: float = 0.98) -> dict:
    return {"gate": gate, "config": config, "level": f"c{level}", "verdict": verdict, "enforced": True,
            "attribution": {"half": attribution, "step_rate": None, "accept": None} if attribution else None,
            "estimate": {"ratio": (low + high) / 2, "low": low, "high": high, "threshold": 0.97}}


def test_the_summary_names_engine_and_drafter_regressions_apart():
    from specguard.report.terminal import regression_halves
    doc = {"sweep": {"request_rate": []}, "decisions": [
        _decision("throughput", "eagle3", 1, "fail", "engine"), _decision("step_time", "eagle3", 4, "fail"),
        _decision("throughput", "mtp", 16, "fail", "drafter"), _decision("accept_length[code]", "mtp", 16, "fail"),
        _decision("throughput", "mtp", 64, "pass", "engine"),  # a pass names nothing
        _decision("throughput", "eagle3", 64, "fail", "both")]}
    assert regression_halves(doc) == ["engine regressions (step time): eagle3 c1, c4, c64",
                                      "drafter regressions (accept length): mtp c16; eagle3 c64"]


def test_an_attach_mode_summary_states_the_drop_each_cell_catches():
    from specguard.report.resolution import attach_lines
    doc = {"sweep": {"request_rate": []}, "options": {"attached": True}, "tolerances": {"fail_rule": "significant"},
           "decisions": [_decision("throughput", "eagle3", 1, "inconclusive", low=0.95, high=1.05)]}
    (line,) = attach_lines(doc)
    # no level or dof in this estimate: its interval read as about 95 % (se = half-width / 2)
    assert line.startswith("attach mode (one launch, nothing relaunched): the tok/s drop each cell fails for 9 times "
                           "in 10: eagle3 c1 >=7.9%")
    assert attach_lines({**doc, "options": {"attached": False}}) == []


def test_the_speculation_line_names_the_drafter_and_the_engine_factor_against_the_reference(tmp_path):
    # a weak draft: 1.25 tokens per verify step that costs 1.6x the reference's decode step loses
    sg = GateSession(quiet_suite(tmp_path), RunOptions(baseline_dir=tmp_path / "b", log_dir=tmp_path / "l"))
    fake_server(sg, "eagle3")
    sg.plan([PlannedTest("eagle3", 1, "speculation")])
    sg.cells.add("baseline", 1, "L1", CellMeasurement(config="baseline", concurrency=1, runs=[
        metrics(200 * f, None, 5.0 / f) for f in (1.0, 1.001, 0.999)]))
    measured(sg, [metrics(200 * 1.25 / 1.6 * f, 1.25, 8.0 / f) for f in (1.0, 1.001, 0.999)])
    r = sg.speculation_result("eagle3", 1, 16)
    assert r.verdict == FAIL, message(r)
    assert ("the drafter's accept length 1.25 x the engine's step time ratio 0.62 (5 ms the reference's decode step / "
            "8 ms the verify step) = 0.78") in message(r)


def test_a_half_is_named_only_for_an_effect_of_its_own():
    # a drafter-only drop of 10 %: fewer tokens per verify step shorten the step by ~1.3 %, which
    # three launches resolve; the engine is not named for it (gate audit, section 5)
    side_effect, fell, tok_s = est(1.013, 1.011, 1.015), est(0.89, 0.88, 0.90), est(0.90, 0.89, 0.91)
    assert attribution(side_effect, fell, tok_s).half == "drafter"
    assert attribution(side_effect, fell).half == "both"  # beyond 1 % alone it would count: the share rule decides
    # an engine-only slowdown of 5 %: the step share is the whole change
    slower = est(0.95, 0.94, 0.96)
    assert attribution(slower, est(1.0, 0.995, 1.005), est(0.95, 0.94, 0.96)).half == "engine"
    # a step change confidently nonzero but inside 1 %: nobody's
    assert attribution(est(0.995, 0.993, 0.997), est(1.0, 0.999, 1.001)).half == ""


def test_a_head_whose_every_draft_is_rejected_fails_at_the_floor_with_its_positions(tmp_path):
    # seed 001 on real SGLang (tests/real: eagle3-miswired): every verify step rejects its first
    # draft, accept length ~1.02. The floor decides (cell_gates.CellGates._before_history), and the
    # per-position shares against the stored sessions say where the drafts stopped agreeing.
    sg = session_with_positions(tmp_path)
    measured(sg, [run_with([100, 0, 0, 0]) for _ in range(3)])
    r = sg.accept_length_result("eagle3", 1)
    assert r.verdict == FAIL and r.problem is not None and r.problem.why == Why.ACCEPT_AT_FLOOR, message(r)
    assert r.positions and r.positions[0].position == 1 and r.positions[0].verdict == FAIL
    text = message(r)
    assert "accept length 1.000 <= min_accept_length 1.05: the verify steps keep almost no draft" in text, text
    assert "acceptance per draft position (share of verify steps accepting >= k drafts, vs baseline): 1 0.000" in text
