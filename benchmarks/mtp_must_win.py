"""The speculation gate's must-win decision for MTP (NEXTN) on real SGLang, repeated: how often an
unchanged MTP configuration passes its declared must-win level, and how often one made slower
fails it. Run by hand (it needs the SGLang venv and the tiny models; each session launches two
servers); its output is quoted in docs/research/sglang-cpu.md and notes:

    export SPECGUARD_SGLANG_PYTHON=~/.cache/specguard/sglang-venv/bin/python
    export SPECGUARD_SGLANG_MODELS=~/.cache/specguard/tiny-models-sglang
    python benchmarks/mtp_must_win.py [--runs 10] [--level 1] [--delay-ms 100]

Each session is perf_tests/suites/sglang-cpu-mtp.toml swept at one level only, with
`speculation_must_win_up_to` = that level on the mtp configuration. "Slower" is the same MTP
served by a wrapper of the SGLang python that sets SPECGUARD_SGL_VERIFY_DELAY_MS: the stand-in
verify op (tools/sgl_kernel_standin/specguard_sgl_cpu_ops.py) sleeps that long per verify step, and
the reference never verifies. The sessions alternate unchanged and slower, so the machine's load
meets both alike. Per session: the speculation verdict at the level, the spec/reference ratio and
the wall time; then the share of unchanged sessions that passed (not failed, exit 0: an inconclusive
must-win verdict does not fail the gate; those confidently ahead counted apart) and of slower ones
that failed.

Why one level and a large slowdown: with one launch per configuration the gate's interval on the
spec/reference ratio rests on the suite's between-launch prior (perf_tests/suites/sglang-cpu-mtp.toml
says how it was measured) at the must-win test's share of the family alpha, so only a ratio well
below 1 is confidently behind; the level is the lowest, where MTP's win is largest and cheapest to
measure.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SUITE = REPO / "perf_tests" / "suites" / "sglang-cpu-mtp.toml"
SESSION_TIMEOUT_S = 600


def suite_text(level: int, python: str) -> str:
    """The MTP suite at one level, mtp must win up to it and served by ``python``."""
    text = SUITE.read_text()
    text = re.sub(r"(?m)^concurrency = \[.*\]", f"concurrency = [{level}]", text)
    mtp = text.index("[servers.mtp]")
    head, tail = text[:mtp], text[mtp:]
    tail = tail.replace('python = "$SPECGUARD_SGLANG_PYTHON"', f'python = "{python}"', 1)
    tail = tail.replace('reference = "reference"', f'reference = "reference"\nspeculation_must_win_up_to = {level}', 1)
    return head + tail


def session(work: Path, name: str, suite: str) -> dict:
    """One `pytest perf_tests` session of ``suite``: its speculation decision and ratio."""
    suite_file, results = work / f"{name}.toml", work / f"{name}.json"
    suite_file.write_text(suite)
    cmd = [sys.executable, "-m", "pytest", str(REPO / "perf_tests"), "-p", "no:cacheprovider", "-q",
           "--suite", str(suite_file), "--baseline-dir", str(work / f"{name}-baselines"), "--update-baselines",
           "--results-json", str(results), "--server-log-dir", str(work / f"{name}-logs"), "--benchmark-disable"]
    started = time.monotonic()
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=SESSION_TIMEOUT_S)
    wall_s = time.monotonic() - started
    if not results.exists():
        return {"verdict": "no results", "ratio": None, "wall_s": wall_s, "exit": proc.returncode,
                "tail": proc.stdout[-800:]}
    doc = json.loads(results.read_text())
    (spec,) = [d for d in doc["decisions"] if d["gate"] == "speculation" and d["config"] == "mtp"]
    ratio = (spec.get("estimate") or {}).get("ratio")
    failed = [t["nodeid"].split("::")[-1] for t in (doc.get("outcome") or {}).get("failed_tests") or []]
    return {"verdict": spec["verdict"], "ratio": ratio, "wall_s": wall_s, "exit": proc.returncode, "failed": failed}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=10, help="sessions of each kind (default %(default)s)")
    ap.add_argument("--level", type=int, default=1, help="the must-win concurrency (default %(default)s)")
    ap.add_argument("--delay-ms", type=float, default=100.0, help="the slower build's verify delay (default %(default)s)")
    args = ap.parse_args(argv)
    python = os.environ.get("SPECGUARD_SGLANG_PYTHON")
    if not python or not Path(python).is_file() or not os.environ.get("SPECGUARD_SGLANG_MODELS"):
        print("mtp_must_win: set SPECGUARD_SGLANG_PYTHON and SPECGUARD_SGLANG_MODELS (docs/research/sglang-cpu.md)",
              file=sys.stderr)
        return 4
    with tempfile.TemporaryDirectory(prefix="mtp-must-win-") as tmp:
        work = Path(tmp)
        slower = work / "slower-python"
        slower.write_text(f"#!/bin/sh\nexport SPECGUARD_SGL_VERIFY_DELAY_MS={args.delay_ms:g}\nexec '{python}' \"$@\"\n")
        slower.chmod(0o755)
        kinds = {"unchanged": suite_text(args.level, "$SPECGUARD_SGLANG_PYTHON"),
                 "slower": suite_text(args.level, str(slower))}
        seen: dict[str, list[dict]] = {k: [] for k in kinds}
        for i in range(args.runs):
            for kind, suite in kinds.items():
                got = session(work, f"{kind}-{i}", suite)
                seen[kind].append(got)
                ratio = f"{got['ratio']:.3f}" if got["ratio"] is not None else "-"
                failed = f", failed {', '.join(got['failed'])}" if got.get("failed") else ""
                print(f"{kind:9s} {i + 1:2d}/{args.runs}: c{args.level} speculation {got['verdict']:12s} "
                      f"spec/ref {ratio}  ({got['wall_s']:.0f} s, exit {got['exit']}{failed})", flush=True)
                if "tail" in got:
                    print(got["tail"], flush=True)
    # the gate passes a must-win test it does not fail: "inconclusive" exits 0, as a user sees it
    passed = sum(g["verdict"] != "fail" and g["exit"] == 0 for g in seen["unchanged"])
    confident = sum(g["verdict"] == "pass" for g in seen["unchanged"])
    failed = sum(g["verdict"] == "fail" for g in seen["slower"])
    ratios = {k: [g["ratio"] for g in v if g["ratio"] is not None] for k, v in seen.items()}
    print(f"unchanged passed {passed}/{args.runs} ({confident} confidently ahead; median spec/ref "
          f"{statistics.median(ratios['unchanged']) if ratios['unchanged'] else float('nan'):.3f}); "
          f"slower (verify +{args.delay_ms:g} ms) failed {failed}/{args.runs} (median spec/ref "
          f"{statistics.median(ratios['slower']) if ratios['slower'] else float('nan'):.3f}); "
          f"sessions {statistics.median(g['wall_s'] for v in seen.values() for g in v):.0f} s median")
    return 0


if __name__ == "__main__":
    sys.exit(main())
