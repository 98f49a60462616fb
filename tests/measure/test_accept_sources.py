"""Every source of a run's accept length checked against the requests' own, and the one that
disagrees named (specguard/measure/accept_sources.py)."""

from __future__ import annotations

from array import array

import pytest

from specguard.measure.accept_sources import (
    MIN_VERIFY_STEPS,
    OTHER_WINDOW_TOLERANCE,
    REQUESTS,
    SAME_WINDOW_SLACK,
    UNKNOWN_SOURCE_TOLERANCE,
    StreamCount,
    check_accept_sources,
    disagreement_note,
    stream_count,
)
from specguard.measure.client import RequestRecord
from specguard.notes import NoteKind
from specguard.report.note_text import note_line


def test_shipped_bounds_are_the_documented_ones():
    assert SAME_WINDOW_SLACK == 0.005 and UNKNOWN_SOURCE_TOLERANCE == 0.05
    assert OTHER_WINDOW_TOLERANCE == {"server_info": 0.10, "gauge": 0.10}
    assert MIN_VERIFY_STEPS == {"server_info": 1000, "gauge": 200}


def test_the_same_window_bound_is_the_prefill_tokens_share_plus_half_a_percent():
    # 10 requests, 300 verify steps, 3.0 tokens per step: allowed 10/300 + 0.5 % of 3.0 = 0.0483
    ok = check_accept_sources(3.0, 300, 10, {"metrics": 3.048}, None)
    assert ok.suspect is None and ok.readings[0].allowed == pytest.approx(10 / 300 + 0.015)
    off = check_accept_sources(3.0, 300, 10, {"metrics": 3.049}, None)
    assert off.suspect == "requests or metrics"  # two sources, nothing to break the tie


def test_a_doubled_counter_is_named_when_another_source_backs_the_requests():
    stream = StreamCount(steps=300, tokens=900)  # one event per verify step: 3.0 per step
    check = check_accept_sources(3.0, 300, 10, {"metrics": 6.0, "server_info": 3.0}, stream)
    assert check.suspect == "metrics"  # server_info: too few steps (< 1000) to judge, the stream backs the requests
    note = disagreement_note(check)
    assert note is not None and note.kind == NoteKind.ACCEPT_SOURCES_DISAGREE and note["suspect"] == "metrics"
    assert (note["metrics"], note["stream"], note["accept_length"]) == (6.0, 3.0, 3.0)
    assert note_line(note) == ("accept length sources disagree: requests 3.000; metrics 6.000 (allowed +-0.048); stream 3.000 "
                    "(allowed +-0.048): metrics disagrees with the others")


def test_the_requests_are_named_when_every_other_source_agrees_against_them():
    # a server whose meta_info halves spec_verify_ct: requests say 6.0 (900 tokens / 150 steps),
    # the counters and the stream (300 events after the first ones) 3.0
    stream = StreamCount(steps=300, tokens=900)  # more events than the verify steps the requests claim
    check = check_accept_sources(6.0, 150, 10, {"metrics": 3.0}, stream)
    assert check.suspect == REQUESTS
    assert "the requests' own verify counts disagree with the others" in note_line(disagreement_note(check))


def test_two_sides_and_nothing_to_break_the_tie_names_both():
    check = check_accept_sources(3.0, 300, 10, {"metrics": 6.0}, None)
    assert check.suspect == "requests or metrics"
    assert note_line(disagreement_note(check)).endswith(": requests or metrics disagree with the others")
    assert disagreement_note(check_accept_sources(3.0, 300, 10, {"metrics": 3.0}, None)) is None


def test_a_stream_that_merged_steps_is_not_compared_and_says_how_much():
    check = check_accept_sources(3.0, 300, 10, {"metrics": 3.0}, StreamCount(steps=150, tokens=900))
    assert [r.source for r in check.readings] == ["metrics"] and check.suspect is None
    assert check.stream_merged == pytest.approx(0.5)


def test_sources_of_other_windows_are_judged_only_over_long_runs():
    short = check_accept_sources(3.0, 999, 10, {"server_info": 2.0}, None)
    assert short is None  # nothing that can speak to this run
    long = check_accept_sources(3.0, 1000, 10, {"server_info": 2.69, "gauge": 3.29}, None)
    assert long.suspect == "server_info"  # 10 % of 3.0 is 0.3: 2.69 is out, 3.29 in


def test_an_engine_source_that_is_the_runs_figure_is_not_compared_with_itself():
    # vLLM: no request reports verify steps, the accept length is its counters' (metrics)
    check = check_accept_sources(3.0, 0, 0, {"metrics": 3.0, "other": 2.0}, None, own="metrics")
    assert [r.source for r in check.readings] == ["other"] and check.suspect == "metrics or other"
    assert check.readings[0].allowed == pytest.approx(UNKNOWN_SOURCE_TOLERANCE * 3.0)
    assert check_accept_sources(None, 0, 0, {"metrics": 3.0}, None) is None


def _record(events: int, tokens: int, verify: int, estimated: bool = False) -> RequestRecord:
    r = RequestRecord(index=0, send_s=0.0, end_s=1.0, event_s=array("d", [0.1 * i for i in range(events)]),
                      event_tokens=array("I", [1] * events), completion_tokens=tokens, spec_verify_ct=verify)
    r.tokens_estimated = estimated
    return r


def test_the_stream_count_reads_only_requests_with_verify_counts_and_real_events():
    records = [_record(11, 31, 10), _record(21, 61, 20), _record(5, 13, None), _record(9, 25, 8, estimated=True)]
    assert stream_count(records) == StreamCount(steps=30, tokens=92)
    assert stream_count([_record(1, 1, 1)]) is None


# -- against the emulator's double-counting servers ---------------------------------------------------
@pytest.mark.e2e
@pytest.mark.parametrize("fault, named", [
    (None, None),                        # a sound server: no run disagrees
    ("verify-counter", "metrics"),       # spec_verify_calls_total doubled: the counters say half
    ("accept-gauge", "gauge"),           # sglang:spec_accept_length doubled
    ("meta-verify-ct", "requests"),      # meta_info's spec_verify_ct doubled: the requests say half
])
def test_a_double_counting_server_is_caught_in_every_run_naming_its_source(tmp_path, fault, named):
    from specguard.config import ServerConfig, SweepConfig
    from specguard.engines import get_engine
    from specguard.measure.sweep import CellLoad, RunControl, measure_cell
    from specguard.server import launch, stop
    from specguard.workload import WorkloadSpec, build_workload

    args = ["--emulator-profile", "fast", "--enable-metrics"] + (["--emulator-fault-double-count", fault] if fault else [])
    cfg = ServerConfig(name="eagle3", engine="emulator", model_path="/models/specguard-fast",
                       speculative_algorithm="EAGLE3", draft_model_path="/models/specguard-fast-eagle3", num_steps=3,
                       eagle_topk=1, num_draft_tokens=4, max_running_requests=8, startup_timeout_s=30, args=args)
    handle = launch(cfg, get_engine("emulator"), log_dir=tmp_path)
    try:  # 16 requests of 96 tokens a run: ~500 verify steps, enough to judge the gauge's window
        workload = build_workload(WorkloadSpec(kind="random-ids", input_len=16, output_len=96), num_prompts=16)
        sweep = SweepConfig(concurrency=[4], warmup=0, repeats=3, requests_per_worker=4, run_timeout_s=120)
        cell = measure_cell(handle, workload, sweep, CellLoad(4), RunControl(flush_timeout_s=10))
    finally:
        stop(handle)
    assert cell.error is None, cell.error
    for run in cell.runs:
        check = run.accept_check
        assert check is not None and {r.source for r in check.readings} >= {"metrics", "gauge"}, check
        if named is None:
            assert check.suspect is None and not [n for n in run.notes if n.kind == NoteKind.ACCEPT_SOURCES_DISAGREE], check
        else:
            assert check.suspect is not None and named in check.suspect, check
            assert any(n.kind == NoteKind.ACCEPT_SOURCES_DISAGREE for n in run.notes), run.notes
