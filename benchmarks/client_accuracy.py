"""Does specguard measure what the server did? (run by hand, not in tests)

    python benchmarks/client_accuracy.py                  # fast and seed-b, C = 1 .. 250
    python benchmarks/client_accuracy.py --cases fast --concurrency 1,64

A deterministic emulator per case (--emulator-jitter-pct 0 --emulator-drift-pct 0
--random-seed 1, --max-running-requests 256, no speculation: its timeline then depends on
nothing but the arrivals), a warmup run, /flush_cache, then one measured closed-loop run with
specguard's load generator at the emulator's modelled speed. Ground truth is the emulator's own
scheduler driven in virtual time with the same settings (ground_truth.py: what a client with
zero overhead would see). Prints the % error of output tok/s, TTFT and ITL p50/p99 against it,
and the client against the server's own per-request latencies from the same run (which
separates what the client adds from what the server's HTTP path and CPU add). The emulator's
CPU use and wait for a CPU are shown per row: on a loaded machine it falls behind real time
and the rows against the simulator measure that, not the client.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

import httpx
import numpy as np
from ground_truth import closed_loop_truth

from specguard.config import ServerConfig
from specguard.emulator.model import SchedulerConfig
from specguard.emulator.profile import load_profile
from specguard.emulator.spec import resolve_settings
from specguard.engines import get_engine
from specguard.measure.generator import LoadGenerator
from specguard.measure.load import LoadSettings
from specguard.measure.metrics import summarize_run
from specguard.server import launch, stop
from specguard.workload import WorkloadSpec, build_workload

SEED = 1
CAP = 256
INPUT_LEN = 128
NUM_PROMPTS = 256


@dataclass(frozen=True)
class Case:
    profile: str
    output_len: int
    levels: tuple[int, ...]
    # A run is max(4, ceil(this x C)) requests. At least 2 waves: the truth has all C first
    # requests arrive at t=0, a real client sends them over ~0.1-1 ms and the server's first
    # prefill starts with the first arrivals only (as SGLang's does), one extra prefill step per
    # run: 1.5 % of a one-wave seed-b run at C=4, half that with two waves (the suite runs 4).
    requests_per_worker: float


CASES = {
    "fast": Case("fast", 256, (1, 4, 16, 64, 128, 250), 2),
    "seed-b": Case("seed-b", 64, (1, 4, 16, 64, 250), 2),
}


def schedstat(pid: int) -> tuple[float, float]:
    """Seconds a process has run on a CPU, and seconds it waited for one (Linux)."""
    run_ns, wait_ns, _ = Path(f"/proc/{pid}/schedstat").read_text().split()
    return int(run_ns) / 1e9, int(wait_ns) / 1e9


def server_view(records) -> dict[str, float]:
    """The client against the server's own per-request numbers (SGLang's first_token_latency and
    e2e_latency): what the HTTP path and the client add to TTFT and e2e, and TPOT's % error."""
    ttft, e2e, tpot = [], [], []
    for r in records:
        if r.server_ttft_s is None or r.server_e2e_s is None:
            continue
        ttft.append(1e3 * ((r.first_token_s - r.send_s) - r.server_ttft_s))
        e2e.append(1e3 * ((r.end_s - r.send_s) - r.server_e2e_s))
        client_decode, server_decode = r.end_s - r.first_token_s, r.server_e2e_s - r.server_ttft_s
        tpot.append(pct(client_decode, server_decode))
    return {"ttft_plus_ms": float(np.median(ttft)), "e2e_plus_ms": float(np.median(e2e)), "tpot_err": float(np.median(tpot))}


def pct(measured: float, truth: float) -> float:
    return 100.0 * (measured / truth - 1.0)


def measure_case(case: Case, levels: list[int], rounds: int) -> list[dict]:
    cfg = ServerConfig(name=f"acc-{case.profile}", engine="emulator", model_path=f"/models/{case.profile}",
                       max_running_requests=CAP, startup_timeout_s=60,
                       args=["--emulator-profile", case.profile, "--random-seed", str(SEED),
                             "--emulator-jitter-pct", "0", "--emulator-drift-pct", "0"])
    profile = load_profile(case.profile)
    sched_cfg = SchedulerConfig(profile, resolve_settings(profile, None, CAP), SEED, jitter_pct=0.0, drift_pct=0.0)
    workload = build_workload(WorkloadSpec(kind="random-ids", input_len=INPUT_LEN, output_len=case.output_len),
                              num_prompts=NUM_PROMPTS)
    rows = []
    handle = launch(cfg, get_engine("emulator"), log_dir=Path("/tmp/specguard-bench-logs"))
    try:
        for c in levels:
            n = max(4, int(np.ceil(case.requests_per_worker * c)))
            truth = closed_loop_truth(sched_cfg, c, n, INPUT_LEN, case.output_len, NUM_PROMPTS)
            settings = LoadSettings(concurrency=c, num_requests=n, run_timeout_s=300)
            for r in range(rounds):
                with LoadGenerator(handle.base_url, settings) as gen:
                    gen.run(workload)  # warmup: connections
                    httpx.post(handle.base_url + "/flush_cache", timeout=30).raise_for_status()
                    log_at = handle.log_path.stat().st_size
                    (cpu0, wait0), t0 = schedstat(handle.process.pid), time.perf_counter()
                    run = gen.run(workload)
                    (cpu1, wait1), wall = schedstat(handle.process.pid), time.perf_counter() - t0
                m = summarize_run(run)
                if m.failed:
                    raise RuntimeError(f"{m.failed} failed requests: {m.errors[:2]}")
                with open(handle.log_path, "rb") as f:
                    f.seek(log_at)
                    lagged = f.read().count(b"behind real time")
                vs_server = server_view(run.requests)
                lat = m.latency_ms
                row = {
                    "profile": case.profile, "c": c, "n": n, "out": case.output_len,
                    "tps": m.output_throughput, "tps_truth": truth.output_throughput,
                    "ttft50": lat["median_ttft_ms"], "ttft50_truth": float(np.median(truth.ttft_ms)),
                    "ttft99": lat["p99_ttft_ms"], "ttft99_truth": float(np.percentile(truth.ttft_ms, 99)),
                    "itl50": lat["median_itl_ms"], "itl50_truth": float(np.median(truth.itl_ms)),
                    "itl99": lat["p99_itl_ms"], "itl99_truth": float(np.percentile(truth.itl_ms, 99)),
                    "busy": m.client_cpu_fraction,
                    **vs_server,
                    "turn50": 1e3 * float(np.median(run.turnaround_s)) if run.turnaround_s else float("nan"),
                    "turn99": 1e3 * float(np.percentile(run.turnaround_s, 99)) if run.turnaround_s else float("nan"),
                    "server_cpu": (cpu1 - cpu0) / wall, "server_wait": (wait1 - wait0) / wall, "lagged": lagged,
                }
                rows.append(row)
                print(f"  {case.profile} c={c} round {r + 1}: tok/s {row['tps']:.1f} vs {row['tps_truth']:.1f} "
                      f"({pct(row['tps'], row['tps_truth']):+.2f}%), ITL p50 {row['itl50']:.2f} vs {row['itl50_truth']:.2f} ms "
                      f"({pct(row['itl50'], row['itl50_truth']):+.2f}%), client busy {row['busy']:.0%}, server cpu "
                      f"{row['server_cpu']:.0%} waited {row['server_wait']:.0%}" + (" LAGGED" if lagged else ""), flush=True)
    finally:
        stop(handle)
    return rows


def report(rows: list[dict]) -> None:
    print("\nspecguard's measurement vs ground truth, % error (median over rounds)")
    print("  vs sim: the emulator's scheduler in virtual time (ground_truth.py); vs server: the server's own per-request")
    print("  first_token_latency / e2e_latency in the same run (what HTTP and the client add, in ms; TPOT % error)")
    print(f"{'profile':<7}{'C':>4}{'reqs':>5}{'out':>5} | {'tok/s':>8} {'sim':>8} {'err%':>6} | "
          f"{'ITL50':>6} {'sim':>6} {'err%':>6} "
          f"{'ITL99':>6} {'err%':>6} | {'TTFT50':>7} {'sim':>6} {'err%':>6} {'TTFT99':>7} {'err%':>6} | {'+TTFT':>6} {'+e2e':>6} "
          f"{'TPOT%':>6} | {'turn':>5} {'p99':>5} | {'busy':>4} {'srv':>4} {'wait':>4}")
    keys = sorted({(r["profile"], r["c"]) for r in rows}, key=lambda k: (k[0] != "fast", k[1]))
    for key in keys:
        rs = [r for r in rows if (r["profile"], r["c"]) == key]
        m = {k: statistics.median(r[k] for r in rs) for k in rs[0] if isinstance(rs[0][k], float)}
        r0 = rs[0]
        print(f"{r0['profile']:<7}{r0['c']:>4}{r0['n']:>5}{r0['out']:>5} | {m['tps']:>8.1f} {m['tps_truth']:>8.1f} "
              f"{pct(m['tps'], m['tps_truth']):>+6.2f} | {m['itl50']:>6.2f} {m['itl50_truth']:>6.2f} "
              f"{pct(m['itl50'], m['itl50_truth']):>+6.2f} {m['itl99']:>6.2f} {pct(m['itl99'], m['itl99_truth']):>+6.1f} | "
              f"{m['ttft50']:>7.1f} {m['ttft50_truth']:>6.1f} {pct(m['ttft50'], m['ttft50_truth']):>+6.1f} {m['ttft99']:>7.1f} "
              f"{pct(m['ttft99'], m['ttft99_truth']):>+6.1f} | {m['ttft_plus_ms']:>6.2f} {m['e2e_plus_ms']:>6.2f} "
              f"{m['tpot_err']:>+6.2f} | {m['turn50']:>5.2f} {m['turn99']:>5.2f} | "
              f"{m['busy']:>4.0%} {m['server_cpu']:>4.0%} {m['server_wait']:>4.0%}"
              + ("  server fell >1 s behind" if any(r["lagged"] for r in rs) else ""))
    print("(turn: client turnaround, last byte of a response in -> next request out on that connection, ms, p50 and p99;\n"
          " busy: client CPU per client process; srv/wait: the emulator's CPU use and its wait for a CPU, per second)")
    meds = [{k: statistics.median(r[k] for r in rows if (r["profile"], r["c"]) == key)
             for k in ("tps", "tps_truth", "itl50", "itl50_truth")}
            for key in keys]
    worst_tps = max(abs(pct(m["tps"], m["tps_truth"])) for m in meds)
    worst_itl = max(abs(pct(m["itl50"], m["itl50_truth"])) for m in meds)
    print(f"max_abs_err_tps_pct={worst_tps:.2f} max_abs_err_itl_p50_pct={worst_itl:.2f}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cases", default="fast,seed-b")
    p.add_argument("--concurrency", default=None, help="override every case's levels, e.g. 1,64")
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--output-len", type=int, default=None, help="override every case's output length, e.g. 32")
    args = p.parse_args(argv)
    rows = []
    for name in args.cases.split(","):
        case = CASES[name]
        if args.output_len:
            case = replace(case, output_len=args.output_len)
        levels = [int(x) for x in args.concurrency.split(",")] if args.concurrency else list(case.levels)
        rows += measure_case(case, levels, args.rounds)
    report(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
