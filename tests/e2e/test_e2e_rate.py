"""Request-rate levels in a suite (issue 16): `[sweep] request_rate` makes every level an open-loop
Poisson rate (cells `eagle3-r16`), baselines are keyed per rate level, the same gates decide, and
`[sweep] slo` records bench_serving's request_goodput per run and per cell.

pytest runs perf_tests in a subprocess against emulator servers on 127.0.0.1 (no HTTP mocked).
Runs are short (requests_per_worker = 1: one second of arrivals per run) to keep the test small.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from emulator_suite import ONE_LAUNCH, emulator_suite_toml
from test_e2e_suite import failed, run_suite

from specguard.report.results import decision_text

pytestmark = pytest.mark.e2e

SUITE = emulator_suite_toml(
    sweep='request_rate = [4, 16]\nslo = "ttft_ms=2000,tpot_ms=200"\nrequests_per_worker = 1\nwarmup = 1\nrepeats = 2\n',
    advanced=ONE_LAUNCH + "max_concurrency = 16\n",
    workload='kind = "random-ids"\ninput_len = 32\noutput_len = 32\n', must_win_up_to=None)


def test_request_rate_levels_record_baselines_per_rate_and_gate_them(tmp_path: Path) -> None:
    suite = tmp_path / "suite.toml"
    suite.write_text(SUITE)
    code, out, res = run_suite(tmp_path, suite, "--update-baselines")
    assert code == 0, out
    assert {f"test_throughput[{n}-r{r}]" for n in ("baseline", "eagle3") for r in (4, 16)} <= set(res), sorted(res)
    assert {"test_accept_length[eagle3-r16]", "test_speculation_beats_reference[eagle3-r4]"} <= set(res), sorted(res)
    stored = json.loads((tmp_path / "baselines" / "eagle3.json").read_text())
    (entry,) = stored["entries"].values()
    assert set(entry["cells"]) == {"r4", "r16"}  # keyed per rate level
    assert entry["fingerprint"]["load"] == "poisson levels, burstiness 1, cap 16"

    results = tmp_path / "results.json"
    code, out, res = run_suite(tmp_path, suite, "--require-baselines", "--results-json", str(results))
    assert code == 0 and not failed(res), out
    doc = json.loads(results.read_text())
    cell = next(c for c in doc["cells"] if c["config"] == "eagle3" and int(c["level"][1:]) == 16)
    assert all(r["load_model"] == "poisson 16 req/s, cap 16" for r in cell["runs"])
    assert all(r["request_goodput"] is not None and r["goodput_slos_ms"] == {"ttft_ms": 2000.0, "tpot_ms": 200.0}
               for r in cell["runs"])
    assert cell["summary"]["load_model"] == "poisson 16 req/s, cap 16" and cell["summary"]["request_goodput"] > 0
    print(f"eagle3 r16: tok/s {cell['summary']['output_throughput']:.1f}, "
          f"goodput {cell['summary']['request_goodput']:.2f} req/s, attainment {cell['summary']['slo_attainment']:.2f}")
    thr = next(d for d in doc["decisions"] if d["gate"] == "throughput" and d["config"] == "eagle3" and int(d["level"][1:]) == 4)
    assert thr["verdict"] in ("pass", "inconclusive") and "throughput eagle3 r4:" in decision_text(thr), decision_text(thr)
    assert "load: open loop, Poisson arrivals at r4, r16 req/s, at most 16 requests in flight" in out
    assert "eagle3 goodput req/s under ttft_ms=2000,tpot_ms=200" in out
