"""The named steps of measure/'s larger functions, each pinned on its own: per-run metric
pieces, the SSE parser's read-completes-the-event rule, the HTTP parser's trailers, and how a
cell builds its load and labels its runs."""

from __future__ import annotations

import math
from array import array
from types import SimpleNamespace

import pytest
from test_http1 import body, exchange

from specguard.config import SweepConfig
from specguard.measure.client import RequestRecord
from specguard.measure.load import WORKERS_ENV, RunResult
from specguard.measure.metrics import (
    client_busy_notes,
    completed_output_tokens,
    latency_percentiles_ms,
    requests_accept_length,
    run_accept_length,
    run_duration_s,
    spec_accept_rate,
    tpot_ms,
    ttft_ms,
)
from specguard.measure.sse import StreamParser
from specguard.measure.sweep import CellLoad, cell_load_settings, run_categories
from specguard.notes import Note, NoteKind
from specguard.report.note_text import note_line
from specguard.workload import Prompt, WorkloadSpec, build_workload


def rec(send_s: float = 0.0, events: tuple[float, ...] = (), end_s: float = 0.0, *, tokens: int | None = None,
        verify: int | None = None, error: str | None = None, **fields: object) -> RequestRecord:
    return RequestRecord(index=0, send_s=send_s, end_s=end_s, event_s=array("d", events),
                         event_tokens=array("I", [1] * len(events)), completion_tokens=tokens, spec_verify_ct=verify,
                         error=error, **fields)


# -- metrics -----------------------------------------------------------------------------------
def test_requests_accept_length_is_a_ratio_of_sums_over_the_verified_requests():
    records = [rec(tokens=10, verify=4), rec(tokens=3, verify=1), rec(tokens=7), rec(tokens=5, verify=0)]
    assert requests_accept_length(records) == (13 / 5, 5)  # not the mean of 2.5 and 3.0
    assert requests_accept_length([rec(tokens=7)]) == (None, 0)
    assert requests_accept_length([rec(verify=2)]) == (0.0, 2)  # verified, token count unknown


def test_run_accept_length_uses_the_engines_source_only_when_no_request_was_verified():
    server = {"metrics": 3.25, "server_info": 9.0}
    assert run_accept_length([rec(tokens=6, verify=3)], server, "metrics") == (2.0, 3)
    assert run_accept_length([rec(tokens=6)], server, "metrics") == (3.25, 0)
    assert run_accept_length([rec(tokens=6)], server, None) == (None, 0)
    assert run_accept_length([rec(tokens=6)], None, "metrics") == (None, 0)
    assert run_accept_length([rec(tokens=6)], server, "absent") == (None, 0)


def test_ttft_and_tpot_skip_requests_they_do_not_apply_to():
    five = rec(1.0, (1.2, 1.5), 2.0, tokens=5)
    one = rec(0.0, (0.3,), 0.3, tokens=1)  # a single token: a TTFT, no TPOT
    silent = rec(0.0, (), 0.5, tokens=4)  # no token-bearing event: neither
    unknown = rec(0.0, (0.1,), 0.9)  # no server count: a TTFT, no TPOT
    assert ttft_ms([five, one, silent, unknown]) == pytest.approx([200.0, 300.0, 100.0])
    assert tpot_ms([five, one, silent, unknown]) == pytest.approx([(2.0 - 1.2) * 1e3 / 4])


def test_completed_output_tokens_leaves_out_failed_and_uncounted_requests():
    records = [rec(tokens=5), rec(tokens=7, error="HTTP 500: x"), rec(), rec(tokens=2)]
    assert completed_output_tokens(records) == 7


def test_run_duration_spans_first_send_to_last_byte_else_the_run_window():
    run = RunResult(concurrency=2, requests=[rec(2.0, end_s=3.0), rec(1.5, end_s=2.5)], start_s=0.0, end_s=10.0)
    assert run_duration_s(run) == pytest.approx(1.5)  # the requests' window, not the run's
    assert run_duration_s(RunResult(concurrency=1, start_s=4.0, end_s=6.5)) == pytest.approx(2.5)
    assert run_duration_s(RunResult(concurrency=1, start_s=4.0, end_s=4.0)) == 1e-9  # never a division by 0


def test_spec_accept_rate_counts_each_side_only_where_the_other_is_reported():
    both = rec(spec_num_correct_drafts=3, spec_num_proposed_drafts=6)
    correct_only = rec(spec_num_correct_drafts=5)  # its correct count has no proposed count beside it
    proposed_only = rec(spec_num_proposed_drafts=4)  # its proposed count has no correct count
    zero_correct = rec(spec_num_correct_drafts=0, spec_num_proposed_drafts=2)
    assert spec_accept_rate([both, correct_only, proposed_only, zero_correct]) == pytest.approx(3 / 8)
    assert spec_accept_rate([correct_only, proposed_only]) is None
    assert spec_accept_rate([]) is None


def test_client_busy_warning_starts_above_the_threshold():
    assert client_busy_notes(0.7) == []
    (note,) = client_busy_notes(0.71)
    assert note == Note.of(NoteKind.CLIENT_BUSY, fraction=0.71, workers_env=WORKERS_ENV)
    assert "busy 71% of the run" in note_line(note) and WORKERS_ENV in note_line(note)


def test_latency_percentiles_name_every_metric_and_statistic_nan_without_values():
    latency = latency_percentiles_ms([rec(0.0, (0.1, 0.3), 0.3, tokens=3)])
    assert list(latency) == [f"{stat}_{metric}" for metric in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_latency_ms")
                             for stat in ("mean", "median", "p90", "p99")]
    assert latency["median_ttft_ms"] == pytest.approx(100.0) and latency["p99_itl_ms"] == pytest.approx(200.0)
    assert latency["mean_tpot_ms"] == pytest.approx(100.0) and latency["mean_e2e_latency_ms"] == pytest.approx(300.0)
    assert all(math.isnan(v) for v in latency_percentiles_ms([]).values())
    assert len(latency_percentiles_ms([])) == 16


# -- SSE -----------------------------------------------------------------------------------------
def test_an_event_is_timed_by_the_read_that_brings_its_blank_line():
    p = StreamParser("native")
    p.feed(b'data: {"meta_info":{"completion_tokens":2}}\n', 1.0)  # the line, not yet the event's end
    assert list(p.event_s) == []
    p.feed(b'\ndata: {"meta_info":{"completion_tokens":3}}\n\n', 2.0)
    assert list(p.event_s) == [2.0, 2.0] and list(p.event_tokens) == [2, 1]


def test_line_ending_is_decided_once_a_whole_first_line_has_arrived():
    p = StreamParser("native")
    p.feed(b'data: {"meta_info":{"completion_tokens":1}}', 1.0)  # no line end yet: nothing decided
    p.feed(b'\r\n\r\ndata: {"meta_info":{"completion_tokens":4}}\r\n\r\ndata: [DONE]\r\n\r\n', 2.0)
    assert p.close().done and list(p.event_tokens) == [1, 3]


def test_multi_line_openai_events_are_read_as_their_joined_data_lines():
    p = StreamParser("openai")
    p.feed(b'event: message\ndata: {"choices":[{"text":"ab",\ndata: "token_ids":[7,8]}]}\n\n'
           b'event: message\ndata: {"choices":[],\ndata: "usage":{"prompt_tokens":4,"completion_tokens":2}}\n\n'
           b"data: [DONE]\n\n", 1.0)
    s = p.close()
    assert list(p.event_tokens) == [2] and (s.prompt_tokens, s.completion_tokens) == (4, 2) and s.error is None


# -- HTTP/1.1 ------------------------------------------------------------------------------------
CHUNKED_HEAD = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"


def test_trailer_lines_split_across_reads_end_the_body_at_the_empty_line():
    pieces = [CHUNKED_HEAD + b"3\r\nabc\r\n0\r\nX-One: 1\r\nX-Tw", b"o: 2\r\n", b"\r\n"]
    proto, _, got, outcome = exchange(pieces[:2])
    assert outcome == "pending" and body(got) == b"abc"  # the empty line has not arrived
    proto, _, got, outcome = exchange(pieces)
    assert outcome == "done" and body(got) == b"abc" and proto._pending == b""


@pytest.mark.parametrize("head", [b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", b"HTTP/1.1 204 No Content\r\n\r\n"])
def test_bytes_in_the_read_that_finished_a_bodiless_response_are_ignored(head):
    proto, tr, got, outcome = exchange([head + b"stray"])
    assert outcome == "done" and got == [] and proto.error_body == b"" and not tr.closed


# -- one cell's load -----------------------------------------------------------------------------
def fake_handle(route_fields: dict[str, object] | None, served_model_name: str | None = None) -> SimpleNamespace:
    raw = {"served_model_name": served_model_name} if served_model_name else {}
    engine = SimpleNamespace(route_extra_body=lambda api: route_fields)
    return SimpleNamespace(engine=engine, api_key="k", effective=SimpleNamespace(raw=raw))


def test_cell_load_settings_put_the_callers_fields_over_the_routes():
    workload = build_workload(WorkloadSpec(kind="random-ids", input_len=4, output_len=4, seed=11), num_prompts=2)
    sweep = SweepConfig(api="openai", requests_per_worker=3, read_timeout_s=5.0, run_timeout_s=50.0)
    handle = fake_handle({"return_spec_tokens_details": True, "x": 1}, "served")
    s = cell_load_settings(handle, workload, sweep, CellLoad(4, extra_body={"x": 2}))
    assert s.extra_body == {"return_spec_tokens_details": True, "x": 2}
    assert (s.api, s.num_requests, s.model, s.api_key, s.arrival_seed) == ("openai", 12, "served", "k", 11)
    assert (s.read_timeout_s, s.run_timeout_s) == (5.0, 50.0)
    bare = cell_load_settings(fake_handle(None), workload, sweep,
                              CellLoad(4, api="native", request_rate=2.0, burstiness=0.5, num_requests=7))
    assert (bare.api, bare.extra_body, bare.model, bare.num_requests) == ("native", None, "default", 7)
    assert (bare.request_rate, bare.burstiness) == (2.0, 0.5)


def test_run_categories_are_none_unless_some_prompt_has_one():
    plain = SimpleNamespace(prompt=lambda i: Prompt(text="p"))
    assert run_categories(plain, 3) is None
    mixed = SimpleNamespace(prompt=lambda i: Prompt(text="p", category="code" if i == 1 else ""))
    assert run_categories(mixed, 3) == ["", "code", ""]


def test_a_cell_load_names_its_level_as_ids_do():
    # the progress lines of a request-rate sweep said "c64" (the in-flight cap) for r8 (issue 29)
    assert CellLoad(16).level_name == "c16"
    assert CellLoad(64, request_rate=8.0).level_name == "r8"
    assert CellLoad(4, request_rate=0.5).level_name == "r0.5"  # specguard bench --request-rate 0.5
