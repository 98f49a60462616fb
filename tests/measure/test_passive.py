"""A passive soak's window (measure/passive.py): the server's own counters between two readings,
on an emulator serving on 127.0.0.1 (its /metrics as SGLang 0.5.23's, --enable-metrics)."""

from __future__ import annotations

import httpx
import pytest

from specguard.engines import get_engine
from specguard.measure.passive import NoMetrics, passive_window, snapshot

pytestmark = pytest.mark.e2e
EAGLE3 = ("--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", "/models/d", "--speculative-num-steps",
          "3", "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4")


def test_a_window_is_the_servers_counters_between_two_readings(emulator):
    url = emulator(*EAGLE3, "--enable-metrics")
    engine = get_engine("sglang")
    with httpx.Client(base_url=url, timeout=30) as client:
        before = snapshot(engine, client)
        assert passive_window(engine, client, before, snapshot(engine, client), 1.0) is None  # no traffic: no window
        for i in range(3):
            r = client.post("/generate", json={"input_ids": [i, 5, 7, 9], "sampling_params": {"max_new_tokens": 20}})
            assert r.status_code == 200
        after = snapshot(engine, client)
        window = passive_window(engine, client, before, after, 2.0)
    assert window is not None and (window.total_output_tokens, window.completed, window.failed) == (60, 3, 0)
    assert window.output_throughput == 30.0 and window.request_throughput == 1.5
    tokens = after["sglang:generation_tokens_total"] - before["sglang:generation_tokens_total"]
    # a counter appears on /metrics at its first verify (as 0.5.23's labelled series do): absent reads 0
    verify = after["sglang:spec_verify_calls_total"] - before.get("sglang:spec_verify_calls_total", 0.0)
    assert window.accept_length == pytest.approx(tokens / verify) and window.accept_length > 1.5
    assert window.concurrency == 0 and window.load_model == "passive: /metrics only, 2 s"


def test_a_server_without_metrics_is_one_line_naming_the_flag(emulator):
    url = emulator(*EAGLE3)
    with httpx.Client(base_url=url, timeout=30) as client, pytest.raises(NoMetrics) as err:
        snapshot(get_engine("sglang"), client)
    assert str(err.value) == ("no /metrics to read sglang:generation_tokens_total from: a passive soak reads only the "
                              "server's counters (start SGLang with --enable-metrics)")
