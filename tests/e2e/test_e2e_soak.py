"""test_soak end to end on the emulator (issue 32): a server whose acceptance decays mid-soak
(`--emulator-fault-accept-decay`, specguard/emulator/decay.py) fails naming the drafter and the
window the slide began; the same soak on an unchanged server passes. The soak is short (45 s of
5 s windows) so CI can afford it; benchmarks and the docs hold the long ones."""

from __future__ import annotations

import json
import threading

import httpx
import pytest
from e2e.test_e2e_suite import run_suite
from emulator_suite import write_emulator_suite

pytestmark = [pytest.mark.e2e, pytest.mark.soak]

SOAK = "\n[soak]\nduration_s = 45\nwindow_s = 5\nconcurrency = 4\nwarmup_windows = 1\n"
# 12 % less acceptance from 20 s of serving on, at once: windows 4 or 5 of 5 s each
DECAY = ', "--emulator-fault-accept-decay", "0.12", "--emulator-fault-decay-start-s", "20", ' \
        '"--emulator-fault-decay-over-s", "0"'


def soak_suite(tmp_path, decay: bool):
    suite = write_emulator_suite(tmp_path / "suite.toml", concurrency=(1,))
    text = suite.read_text() + SOAK
    if decay:
        text = text.replace('reference = "baseline"\nspeculation_must_win_up_to = 4\nargs = ["--emulator-profile", "fast"',
                            'reference = "baseline"\nspeculation_must_win_up_to = 4\nargs = ["--emulator-profile", "fast"'
                            + DECAY)
        assert DECAY in text
    suite.write_text(text)
    return suite


def soak_of(tmp_path, results) -> tuple[dict, list[dict]]:
    """The soak's decision and windows from the results file, after checking that the windows
    were on disk, one JSON line each, as each closed (soak-eagle3.jsonl under --server-log-dir)."""
    doc = json.loads(results.read_text())
    (decision,) = [d for d in doc["decisions"] if d["gate"] == "soak"]
    windows = doc["soaks"]["eagle3"]["windows"]
    logged = [json.loads(line) for line in (tmp_path / "logs" / "soak-eagle3.jsonl").read_text().splitlines()]
    assert [w["window"] for w in logged] == list(range(len(windows)))
    assert [w["accept_length"] for w in logged] == [w["accept_length"] for w in windows]
    return decision, windows


@pytest.mark.parametrize("decay", [True, False], ids=["decaying", "unchanged"])
def test_a_decaying_server_fails_its_soak_naming_the_drafter_and_an_unchanged_one_passes(tmp_path, decay):
    results = tmp_path / "results.json"
    code, out, res = run_suite(tmp_path, soak_suite(tmp_path, decay), "-k", "soak", "--results-json", str(results))
    assert res == {"test_soak[eagle3-c4]": "failure" if decay else "passed"}, out
    assert code == (1 if decay else 0), out
    decision, windows = soak_of(tmp_path, results)
    assert decision["soak"]["windows"] == len(windows) - 1 >= 5, decision  # one warm-up window
    shifts = {s["metric"]: s for s in decision["soak"]["shifts"]}
    if decay:
        accept = shifts["accept_length"]
        assert decision["soak"]["half"] == "drafter" and 3 <= accept["window"] <= 6, decision
        assert 0.84 < accept["after"] / accept["before"] < 0.92, accept
        assert "test_soak[eagle3-c4]" in out and "accept length -1" in out and "(the drafter moved) -> FAIL" in out
    else:
        assert "accept_length" not in shifts and "step_time_ms" not in shifts, decision


# -- passive mode: no load of its own, the server's /metrics read every window ------------------
PASSIVE = '\n[soak]\nmode = "passive"\nduration_s = 30\nwindow_s = 3\nwarmup_windows = 1\n'
EAGLE3 = ("--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", "/models/d", "--speculative-num-steps",
          "3", "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4", "--max-running-requests", "64",
          "--enable-metrics")
# 12 % less acceptance from 18 s after the fleet's first request on: the soak starts a few seconds
# after that (pytest's start-up), so the step falls mid-soak, with windows on both sides
PASSIVE_DECAY = ("--emulator-fault-accept-decay", "0.12", "--emulator-fault-decay-start-s", "18",
                 "--emulator-fault-decay-over-s", "0")
TRAFFIC_CLIENTS, TRAFFIC_MAX_REQUESTS = 2, 5000  # the fleet's own users, bounded in count (and by the test's end)


def fleet_traffic(url: str, stop: threading.Event) -> list[threading.Thread]:
    """Closed-loop users of a serving server, as a production fleet has: specguard sends nothing."""
    def user(seed: int) -> None:
        with httpx.Client(base_url=url, timeout=30) as client:
            for i in range(TRAFFIC_MAX_REQUESTS):
                if stop.is_set():
                    return
                client.post("/generate", json={"input_ids": [seed, i % 97, 5, 7] * 8,
                                               "sampling_params": {"max_new_tokens": 48, "temperature": 0}})

    threads = [threading.Thread(target=user, args=(k,), daemon=True) for k in range(TRAFFIC_CLIENTS)]
    for t in threads:
        t.start()
    return threads


@pytest.mark.parametrize("decay", [True, False], ids=["decaying", "unchanged"])
def test_a_passive_soak_watches_a_serving_servers_own_traffic(tmp_path, emulator, decay):
    url = emulator(*EAGLE3, *(PASSIVE_DECAY if decay else ()))
    suite = write_emulator_suite(tmp_path / "suite.toml", concurrency=(1,))
    suite.write_text(suite.read_text() + PASSIVE)
    stop = threading.Event()
    users = fleet_traffic(url, stop)
    try:
        results = tmp_path / "results.json"
        code, out, res = run_suite(tmp_path, suite, "--server-url", url, "-k", "soak", "--results-json", str(results))
    finally:
        stop.set()
        for t in users:
            t.join(timeout=60)
    assert res == {"test_soak[eagle3-passive]": "failure" if decay else "passed"}, out
    decision, windows = soak_of(tmp_path, results)
    assert all(w["load_model"].startswith("passive: /metrics only") and w["total_input_tokens"] == 0 for w in windows)
    assert decision["soak"]["windows"] == len(windows) - 1 >= 6, decision
    shifts = {s["metric"]: s for s in decision["soak"]["shifts"]}
    assert set(shifts) <= {"accept_length"}, decision  # tok/s follows the traffic: never decided passively
    if decay:
        assert decision["soak"]["half"] == "drafter" and 0.84 < shifts["accept_length"]["after"] / \
            shifts["accept_length"]["before"] < 0.92, decision
    else:
        assert code == 0 and not shifts, out
