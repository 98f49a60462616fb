"""How many streamed events per second can each client take? (run by hand, not in tests)

    python benchmarks/client_capacity.py                       # C = 1,16,64,256, native + OpenAI
    python benchmarks/client_capacity.py --concurrency 64 --rounds 5 --apis native

One emulator in firehose mode (`--emulator-firehose`: pre-encoded SGLang streams written as fast
as the sockets drain, one token per event), then, alternating within each round, specguard's
load generator and the bench_serving-style aiohttp reference (reference_client.py), each in its
own process so its CPU time is its own. Medians over rounds. The server's CPU use is read from
/proc during every run: when it is near a full core the server, not the client, set the pace,
and the CPU cost per 1,000 events is the fair comparison (it is printed for every cell).
Ends with `ratio_vs_aiohttp_c64=X ratio_vs_aiohttp_c256=Y` (specguard / reference, native).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

from specguard.config import ServerConfig
from specguard.engines import get_engine
from specguard.measure.client import ROUTES, RequestOptions, build_body
from specguard.server import launch, stop
from specguard.workload import WorkloadSpec, build_workload

CLIENTS = ("specguard", "reference")
SERVER_BOUND_CPU = 0.85  # server CPU seconds per wall second above which the server set the pace
CHILD_TIMEOUT_S = 300.0


def _cpu_s() -> float:
    """This process's CPU seconds plus those of its reaped children (worker processes)."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def _proc_cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _bodies(api: str, n: int, output_len: int) -> list[bytes]:
    workload = build_workload(WorkloadSpec(kind="random-ids", input_len=64, output_len=output_len))
    options = RequestOptions(api=api, output_len=output_len)
    return [build_body(workload.prompt(i), options) for i in range(n)]


def child(args: argparse.Namespace) -> None:
    """One client, one measured run after a short warmup; prints one JSON line."""
    route = ROUTES[args.api]
    n = args.requests
    if args.child == "reference":
        from reference_client import run_reference

        bodies = _bodies(args.api, n, args.output_len)
        asyncio.run(run_reference(args.url, route, bodies[: min(n, 8)], min(args.c, 8), args.api))
        cpu0, t0 = _cpu_s(), time.perf_counter()
        res = asyncio.run(run_reference(args.url, route, bodies, args.c, args.api))
        wall, cpu = time.perf_counter() - t0, _cpu_s() - cpu0
        out = {"events": res.events, "tokens": res.tokens, "failed": res.failed}
    else:
        from specguard.measure.generator import LoadGenerator
        from specguard.measure.load import LoadSettings

        workload = build_workload(WorkloadSpec(kind="random-ids", input_len=64, output_len=args.output_len))
        settings = LoadSettings(concurrency=args.c, num_requests=n, api=args.api, run_timeout_s=CHILD_TIMEOUT_S)
        with LoadGenerator(args.url, settings) as gen:
            gen.run(workload)  # warmup: connections, imports, caches
            cpu0, t0 = _cpu_s(), time.perf_counter()
            run = gen.run(workload)
            wall, cpu = time.perf_counter() - t0, _cpu_s() - cpu0
        ok = [r for r in run.requests if r.ok]
        out = {"events": sum(len(r.event_s) for r in ok), "tokens": sum(r.completion_tokens or 0 for r in ok),
               "failed": len(run.requests) - len(ok)}
        cpu = run.client_cpu_s if getattr(run, "client_cpu_s", None) else cpu
    out.update(wall_s=wall, cpu_s=cpu)
    print(json.dumps(out), flush=True)


def run_child(client: str, url: str, api: str, c: int, n: int, output_len: int, server_pid: int) -> dict:
    cmd = [sys.executable, __file__, "--child", client, "--url", url, "--api", api, "--c", str(c),
           "--requests", str(n), "--output-len", str(output_len)]
    s0 = _proc_cpu_s(server_pid)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=CHILD_TIMEOUT_S)
    elapsed = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"{client} child failed:\n{proc.stderr[-2000:]}")
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    # Server CPU over the child's whole life (warmup included) per second of that life: a lower bound
    # on how busy the server was during the measured run.
    res["server_util"] = (_proc_cpu_s(server_pid) - s0) / elapsed
    return res


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--concurrency", default="1,16,64,256")
    p.add_argument("--apis", default="native,openai")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--output-len", type=int, default=512)
    p.add_argument("--events-per-write", type=int, default=4, help="the emulator's --emulator-firehose N")
    p.add_argument("--child", choices=CLIENTS, help=argparse.SUPPRESS)
    p.add_argument("--url", help=argparse.SUPPRESS)
    p.add_argument("--api", help=argparse.SUPPRESS)
    p.add_argument("--c", type=int, help=argparse.SUPPRESS)
    p.add_argument("--requests", type=int, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        child(args)
        return 0

    levels = [int(x) for x in args.concurrency.split(",")]
    apis = args.apis.split(",")
    cfg = ServerConfig(name="firehose", engine="emulator", model_path="/models/specguard-fast", max_running_requests=1024,
                       args=["--emulator-profile", "fast", "--emulator-firehose", str(args.events_per_write)],
                       startup_timeout_s=60)
    handle = launch(cfg, get_engine("emulator"), log_dir=Path("/tmp/specguard-bench-logs"))
    results: dict[tuple[str, int, str], list[dict]] = {}
    try:
        pid = handle.process.pid
        for api in apis:
            for c in levels:
                n = max(32, 2 * c)
                for r in range(args.rounds):
                    for client in (CLIENTS if r % 2 == 0 else CLIENTS[::-1]):
                        res = run_child(client, handle.base_url, api, c, n, args.output_len, pid)
                        results.setdefault((api, c, client), []).append(res)
                        print(f"  {api:<6} c={c:<4} round {r + 1} {client:<9} {res['events'] / res['wall_s']:>9.0f} ev/s "
                              f"{1e6 * res['cpu_s'] / res['events']:>6.1f} us/ev  server {res['server_util']:.2f} core"
                              + (f"  FAILED {res['failed']}" if res["failed"] else ""), flush=True)
    finally:
        stop(handle)
    return report(results, apis, levels, args)


def report(results: dict, apis: list[str], levels: list[int], args: argparse.Namespace) -> int:
    med = statistics.median
    ratios = {}
    print(f"\nmedians over {args.rounds} rounds; {args.output_len}-token outputs; firehose {args.events_per_write} events/write")
    print(f"{'api':<7}{'C':>5} {'specguard ev/s':>15} {'tok/s':>9} {'us/ev':>6} {'reference ev/s':>15} {'tok/s':>9} "
          f"{'us/ev':>6} {'ratio ev/s':>10} {'ratio cpu':>9} {'server':>7}")
    for api in apis:
        for c in levels:
            s, ref = results[(api, c, "specguard")], results[(api, c, "reference")]
            ev = [med(x["events"] / x["wall_s"] for x in rs) for rs in (s, ref)]
            tok = [med(x["tokens"] / x["wall_s"] for x in rs) for rs in (s, ref)]
            us = [med(1e6 * x["cpu_s"] / x["events"] for x in rs) for rs in (s, ref)]
            util = max(med(x["server_util"] for x in rs) for rs in (s, ref))
            bound = util >= SERVER_BOUND_CPU
            ratios[(api, c)] = (ev[0] / ev[1], us[1] / us[0], bound)
            print(f"{api:<7}{c:>5} {ev[0]:>15.0f} {tok[0]:>9.0f} {us[0]:>6.1f} {ev[1]:>15.0f} {tok[1]:>9.0f} {us[1]:>6.1f} "
                  f"{ev[0] / ev[1]:>10.2f} {us[1] / us[0]:>9.2f} {util:>6.2f}{'*' if bound else ' '}")
    if any(bound for _, _, bound in ratios.values()):
        print("(* the server used most of a core: events/s there is partly the server's limit)")
    picks = []
    for c in (64, 256):
        if ("native", c) not in ratios:
            continue
        ev_ratio, cpu_ratio, bound = ratios[("native", c)]
        if bound:
            print(f"c={c}: the emulator could not outrun both clients on this machine; ratio = reference CPU per event / "
                  f"specguard's ({cpu_ratio:.2f}; events/s ratio {ev_ratio:.2f})")
            picks.append(f"ratio_vs_aiohttp_c{c}={cpu_ratio:.2f}")
        else:
            picks.append(f"ratio_vs_aiohttp_c{c}={ev_ratio:.2f}")
    print(" ".join(picks))
    return 0


if __name__ == "__main__":
    sys.exit(main())
