"""Run the suite once per emulator fault and print what it reported, how long it took and what
it wrote. Every row must end in a non-pass verdict in bounded time with nothing half-written.

    python tools/fault_matrix.py            # about two minutes on two cores

Each row is a real `pytest perf_tests --update-baselines` in a subprocess against a tiny
emulator suite whose `baseline` configuration carries the fault (the `eagle3` one is healthy,
to show the other configurations continue).
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SUITE = """
[sweep]
concurrency = [1, 4]
requests_per_worker = 4
warmup = 1
repeats = 2
read_timeout_s = 3
run_timeout_s = 30
session_timeout_s = 600

[workload]
input_len = 32
output_len = 48

[servers.baseline]
engine = "emulator"
model_path = "/models/specguard-fast"
max_running_requests = 64
args = ["--emulator-profile", "fast", "--enable-metrics", "--random-seed", "3", {fault}]
startup_timeout_s = {startup}

[servers.eagle3]
engine = "emulator"
model_path = "/models/specguard-fast"
speculative_algorithm = "EAGLE3"
draft_model_path = "/models/d"
num_steps = 3
eagle_topk = 1
num_draft_tokens = 4
max_running_requests = 64
reference = "baseline"
args = ["--emulator-profile", "fast"]
"""

FAULTS = [
    ("5xx on 20% of requests", '"--emulator-fault-error-rate", "0.2"', 60),
    ("503 on 20% of requests", '"--emulator-fault-error-rate", "0.2", "--emulator-fault-error-status", "503"', 60),
    ("stream cut mid-way (20%)", '"--emulator-fault-cut-rate", "0.2"', 60),
    ("stall 60 s mid-stream (20%)", '"--emulator-fault-stall-rate", "0.2", "--emulator-fault-stall-s", "60"', 60),
    ("malformed SSE / invalid JSON (20%)", '"--emulator-fault-malformed-rate", "0.2"', 60),
    ("wrong final token count (50%)", '"--emulator-fault-bad-count-rate", "0.5"', 60),
    ("missing token counts (20%)", '"--emulator-fault-no-count-rate", "0.2"', 60),
    ("slow start (5 s)", '"--emulator-startup-s", "5"', 60),
    ("never ready", '"--emulator-fault-never-ready"', 10),
    ("exit during start-up", '"--emulator-fault-exit-during-startup-s", "1", "--emulator-startup-s", "30"', 60),
    ("crash after 10 requests", '"--emulator-fault-crash-after-requests", "10"', 60),
    ("old /server_info (missing fields)", '"--emulator-fault-old-server-info"', 60),
]


def run(fault: str, startup_s: int, workdir: Path) -> dict:
    suite = workdir / "suite.toml"
    suite.write_text(SUITE.replace("{fault}", fault).replace("{startup}", str(startup_s)))
    junit, results, baselines = workdir / "junit.xml", workdir / "results.json", workdir / "baselines"
    cmd = [sys.executable, "-m", "pytest", str(REPO / "perf_tests"), "-q", "-p", "no:cacheprovider", "-k", "throughput",
           "--suite", str(suite), "--baseline-dir", str(baselines), "--update-baselines", "--benchmark-disable",
           "--results-json", str(results), "--junitxml", str(junit), "--server-log-dir", str(workdir / "logs")]
    started = time.monotonic()
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600)
    elapsed = time.monotonic() - started
    outcomes: dict[str, str] = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        kind = next((c.tag for c in case if c.tag in ("failure", "error", "skipped")), "passed")
        outcomes[case.get("name")] = kind
        if kind in ("failure", "error"):
            message = next(c for c in case if c.tag in ("failure", "error")).get("message", "")
            outcomes.setdefault("_first", message.replace("\n", " ")[:110])
    baseline_cells = [o for name, o in outcomes.items() if "[baseline-" in name]
    try:
        json.loads(results.read_text())
        results_ok = "complete"
    except (OSError, ValueError):
        results_ok = "MISSING/INVALID"
    return {
        "exit": proc.returncode, "elapsed_s": elapsed,
        "baseline cells": ",".join(sorted(set(baseline_cells))) or "-",
        "eagle3 cells": ",".join(sorted({o for n, o in outcomes.items() if "[eagle3-" in n})) or "-",
        "written": ", ".join(sorted(p.name for p in baselines.glob("*.json"))) or "nothing",
        "results": results_ok,
        "why": outcomes.get("_first", "") or ("(passed)" if proc.returncode == 0 else proc.stdout[-200:]),
        "tmp files": len(list(workdir.rglob("*.tmp"))),
    }


def main() -> int:
    print(f"{'fault':<36} {'exit':>4} {'time s':>7} {'baseline cells':<15} {'eagle3':<8} {'baselines written':<19} "
          "results   what the suite said")
    bad = 0
    for name, fault, startup in FAULTS:
        with tempfile.TemporaryDirectory() as d:
            row = run(fault, startup, Path(d))
        healthy = name.startswith(("slow start", "old /server_info"))
        ok = (row["exit"] == 0) if healthy else (row["exit"] != 0 and "baseline.json" not in row["written"])
        ok = ok and row["tmp files"] == 0 and row["results"] == "complete"
        bad += not ok
        print(f"{name:<36} {row['exit']:>4} {row['elapsed_s']:>7.1f} {row['baseline cells']:<15} {row['eagle3 cells']:<8} "
              f"{row['written']:<19} {row['results']:<9} {row['why']}{'' if ok else '   <-- UNEXPECTED'}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
