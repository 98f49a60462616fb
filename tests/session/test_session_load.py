"""Request-rate levels and goodput in the session (issue 16): what a rate level sends, how baselines
key it, fingerprints that change only for suites that use the new keys, and the speculation gate
declared on goodput. Unit tests: the session's state is built by hand."""

from __future__ import annotations

from pathlib import Path

import pytest
from emulator_suite import emulator_suite_toml
from session_support import fake_server, run

from specguard.config import ConfigError, load_suite
from specguard.labels import Verdict
from specguard.measure.sweep import CellLoad, CellMeasurement
from specguard.report.verdict_text import message
from specguard.session import GateSession, PlannedTest, RunOptions

ERROR = Verdict.ERROR

RATE_KEYS = 'request_rate = [2, 8]\nslo = "ttft_ms=500,tpot_ms=50"'
RATE_ADVANCED = "max_concurrency = 16\nburstiness = 0.5\n"


def session(tmp_path: Path, sweep_keys: str = "", advanced: str = "") -> GateSession:
    text = emulator_suite_toml(concurrency=(1,))
    if sweep_keys:
        text = text.replace("concurrency = [1]", sweep_keys)
    if sweep_keys.startswith("request_rate"):
        advanced = RATE_ADVANCED + advanced
    text = text.replace("[advanced]", "[advanced]\n" + advanced)
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "suite.toml").write_text(text)
    return GateSession(load_suite(tmp_path / "suite.toml"),
                            RunOptions(baseline_dir=tmp_path / "baselines", log_dir=tmp_path / "logs"))


def test_a_rate_level_is_an_open_loop_run_at_that_rate_under_the_cap(tmp_path):
    sg = session(tmp_path, RATE_KEYS)
    assert sg.levels.rate and sg.levels.values == [2, 8]
    assert (sg.levels.name(8), sg.levels.store_key(8)) == ("r8", "r8")
    assert sg.levels.load_at(8) == CellLoad(16, request_rate=8.0, burstiness=0.5, num_requests=32,
                                            slo_ms={"ttft_ms": 500.0, "tpot_ms": 50.0})
    closed = session(tmp_path / "closed")
    assert not closed.levels.rate and closed.levels.values == [1]
    assert closed.levels.store_key(1) == 1 and closed.levels.name(1) == "c1"
    assert closed.levels.load_at(4) == CellLoad(4)


def test_only_suites_with_request_rate_levels_add_the_load_model_to_the_fingerprint(tmp_path):
    closed = session(tmp_path / "a")
    fake_server(closed, "eagle3")
    with_slo = session(tmp_path / "b", 'concurrency = [1]\nslo = "ttft_ms=500"')
    fake_server(with_slo, "eagle3")
    assert closed.histories.fingerprint("eagle3") == with_slo.histories.fingerprint("eagle3")  # an SLO changes no measurement
    assert "load" not in closed.histories.fingerprint("eagle3").fields
    rate = session(tmp_path / "c", RATE_KEYS)
    fake_server(rate, "eagle3")
    assert rate.histories.fingerprint("eagle3").fields["load"] == "poisson levels, burstiness 0.5, cap 16"


def test_rate_levels_are_stored_under_r_keys_and_gated_as_r(tmp_path):
    sg = session(tmp_path, RATE_KEYS)
    sg.plan([PlannedTest("eagle3", 8, "throughput")])
    fake_server(sg, "eagle3")
    sg.cells.cells[("eagle3", 8)] = CellMeasurement("eagle3", 8, runs=[run(300.0), run(303.0)])
    stage = sg.stage_baselines()
    assert [list(w.cells) for w in stage.writes] == [["r8"]]
    from specguard.store.refresh import BaselineStage
    assert list(BaselineStage.from_json(stage.to_json()).writes[0].cells) == ["r8"]  # xdist round trip
    r = sg.throughput_result("eagle3", 8)
    assert "no baseline for eagle3 r8" in message(r) and "-k 'eagle3 and r8'" in message(r), message(r)
    sg.histories.store.record_many(stage.writes, keep=5)
    r = sg.throughput_result("eagle3", 8)
    assert r.verdict != ERROR and message(r).startswith("throughput eagle3 r8: "), message(r)


def test_the_speculation_gate_can_be_declared_on_goodput(tmp_path):
    sg = session(tmp_path, 'concurrency = [1]\nslo = "ttft_ms=500"', 'speculation_metric = "goodput"')
    sg.plan([PlannedTest("eagle3", 1, "speculation")])
    for name in ("eagle3", "baseline"):
        fake_server(sg, name)

    def cell(name: str, tok_s: float, goodput: list[float]) -> None:
        runs = [run(tok_s) for _ in goodput]
        for r, g in zip(runs, goodput):
            r.request_goodput = g
        sg.cells.cells[(name, 1)] = CellMeasurement(name, 1, runs=runs)

    # faster in tok/s, but fewer requests meet the SLO: the goodput gate sees the loss
    cell("eagle3", 400.0, [2.0, 2.1, 1.9])
    cell("baseline", 300.0, [4.0, 4.1, 3.9])
    r = sg.speculation_result("eagle3", 1, 1)
    assert r.verdict == "fail" and r.estimate.ratio == pytest.approx(0.5, rel=0.02), message(r)
    assert message(r).startswith("speculation (goodput) eagle3 c1: 2 good req/s vs baseline"), message(r)
    cell("baseline", 300.0, [4.0, 0.0, 3.9])
    r = sg.speculation_result("eagle3", 1, 1)
    assert r.verdict == ERROR and "goodput 0 in a run" in message(r)


def test_goodput_needs_slos(tmp_path):
    with pytest.raises(ConfigError, match="goodput needs SLOs"):
        session(tmp_path, "", 'speculation_metric = "goodput"')
    with pytest.raises(ConfigError, match="advanced.speculation_metric = 'tps'"):
        session(tmp_path / "b", "", 'speculation_metric = "tps"')
