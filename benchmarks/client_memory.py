"""Peak memory of one big run: C=250, 2048-token outputs, cumulative native events (run by hand).

    python benchmarks/client_memory.py [--concurrency 250] [--output-len 2048] [--requests 1000]

Against a firehose emulator (memory does not depend on the server's speed), in this process:
tracemalloc's peak over the run and over its reduction to metrics, the bytes the per-request
arrays hold, and the process's peak RSS.
"""

from __future__ import annotations

import argparse
import resource
import sys
import time
import tracemalloc
from pathlib import Path

from specguard.config import ServerConfig
from specguard.engines import get_engine
from specguard.measure.generator import LoadGenerator
from specguard.measure.load import LoadSettings
from specguard.measure.metrics import summarize_run
from specguard.server import launch, stop
from specguard.workload import WorkloadSpec, build_workload

MIB = 1024 * 1024


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--concurrency", type=int, default=250)
    p.add_argument("--output-len", type=int, default=2048)
    p.add_argument("--requests", type=int, default=1000, help="4 per closed-loop worker, as the default suite")
    p.add_argument("--no-tracemalloc", action="store_true", help="peak RSS only (tracemalloc slows the run ~3x)")
    args = p.parse_args(argv)
    cfg = ServerConfig(name="firehose-mem", engine="emulator", model_path="/models/specguard-fast",
                       max_running_requests=1024, startup_timeout_s=60,
                       args=["--emulator-profile", "fast", "--emulator-firehose", "4"])
    workload = build_workload(WorkloadSpec(kind="random-ids", input_len=128, output_len=args.output_len))
    settings = LoadSettings(concurrency=args.concurrency, num_requests=args.requests, workers=1, run_timeout_s=600)
    handle = launch(cfg, get_engine("emulator"), log_dir=Path("/tmp/specguard-bench-logs"))
    try:
        with LoadGenerator(handle.base_url, settings) as gen:
            rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
            traced = not args.no_tracemalloc
            if traced:
                tracemalloc.start()
            t0 = time.perf_counter()
            run = gen.run(workload)
            wall = time.perf_counter() - t0
            if traced:
                held, run_peak = tracemalloc.get_traced_memory()
                tracemalloc.reset_peak()
            metrics = summarize_run(run)
            if traced:
                _, summary_peak = tracemalloc.get_traced_memory()
                tracemalloc.stop()
    finally:
        stop(handle)
    events = sum(len(r.event_s) for r in run.requests)
    array_bytes = sum(r.event_s.buffer_info()[1] * r.event_s.itemsize + r.event_tokens.buffer_info()[1] * r.event_tokens.itemsize
                      for r in run.requests)
    rss_peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"C={args.concurrency} requests={len(run.requests)} failed={metrics.failed} output_len={args.output_len} "
          f"events={events} ({wall:.1f} s, {events / wall:.0f} events/s{' with tracemalloc on' if traced else ''})")
    print(f"per-request arrays: {array_bytes / MIB:.1f} MiB ({array_bytes / max(events, 1):.1f} bytes/event)")
    if traced:
        print(f"tracemalloc: held after the run {held / MIB:.1f} MiB, peak during the run {run_peak / MIB:.1f} MiB, "
              f"peak while summarising {summary_peak / MIB:.1f} MiB")
    print(f"ru_maxrss: {rss_before:.0f} MiB before the run, {rss_peak:.0f} MiB peak")
    return 0


if __name__ == "__main__":
    sys.exit(main())
