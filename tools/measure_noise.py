"""Record the real sessions behind the gate study's emulator noise presets (docs/research/gate-study.md).

    .venv/bin/python tools/measure_noise.py --label quiet            # 8 sessions, 5 repeats, idle machine
    .venv/bin/python tools/measure_noise.py --label busy --max-load 99   # the same under other jobs' load

Each session is what `pytest perf_tests` does with the default suite (every configuration
launched anew), with `--repeats 5` and an empty baseline directory (so nothing is compared or
written to baselines/), its results JSON kept. Then `study.measure_noise` turns the sessions into
the client's extra spread over the virtual-time model, stalls and real/model means: the numbers
behind `EMULATOR_QUIET` / `EMULATOR_BUSY` in research/study/noise.py and the shipped suite's
`prior_between_sd`.

Everything lands in docs/research/evidence/noise/<label>/: session-N.json (raw results), manifest.json
(command, date, machine, commit, load average before/after each session, exit codes) and
noise.json (measure_noise's report and the derived preset). The study can then be re-run on it:
`python -m research.study --noise-from docs/research/evidence/noise/<label>/session-*.json ...`.

A quiet measurement refuses to start while the 1-minute load average is above --max-load
(default 1.0): shared-machine load is exactly what it must not contain.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tools"))

from record_evidence import machine_lines  # noqa: E402


def session_command(suite: Path, repeats: int, results: Path, baseline_dir: Path, extra: list[str]) -> list[str]:
    return [sys.executable, "-m", "pytest", str(REPO / "perf_tests"), "-q", "-p", "no:cacheprovider", "--suite", str(suite),
            "--repeats", str(repeats), "--baseline-dir", str(baseline_dir), "--results-json", str(results), *extra]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--label", required=True, help="sub-folder of docs/research/evidence/noise/ (e.g. quiet, busy)")
    ap.add_argument("--sessions", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--suite", type=Path, default=REPO / "perf_tests" / "suite.toml")
    ap.add_argument("--out", type=Path, default=None, help="default docs/research/evidence/noise/<label>")
    ap.add_argument("--max-load", type=float, default=1.0, help="refuse to start above this 1-min load average")
    ap.add_argument("--session-timeout-s", type=float, default=1800.0)
    ap.add_argument("pytest_args", nargs="*", help="extra pytest arguments after --, e.g. -- --concurrency 1,4")
    args = ap.parse_args(argv)
    if not args.suite.is_file():
        print(f"--suite {args.suite}: no such file", file=sys.stderr)
        return 2
    load1 = os.getloadavg()[0]
    if load1 > args.max_load:
        print(f"load average {load1:.2f} > --max-load {args.max_load}: the machine is not quiet; wait, or pass "
              f"--max-load to record a busy measurement on purpose", file=sys.stderr)
        return 3
    out = args.out or REPO / "docs" / "research" / "evidence" / "noise" / args.label
    out.mkdir(parents=True, exist_ok=True)
    manifest = {"tool": "tools/measure_noise.py", "argv": sys.argv[1:] if argv is None else argv,
                "header": machine_lines(), "suite": str(args.suite.resolve().relative_to(REPO))
                if args.suite.resolve().is_relative_to(REPO) else str(args.suite), "sessions": []}
    for i in range(1, args.sessions + 1):
        results = out / f"session-{i}.json"
        with tempfile.TemporaryDirectory(prefix="specguard-noise-baselines-") as empty:
            cmd = session_command(args.suite, args.repeats, results, Path(empty), args.pytest_args)
            before, t0 = os.getloadavg(), time.monotonic()
            try:
                proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=args.session_timeout_s)
                code, tail = proc.returncode, (proc.stdout + proc.stderr)[-1500:]
            except subprocess.TimeoutExpired:
                code, tail = "timeout", f"session exceeded {args.session_timeout_s:.0f} s"
        entry = {"session": i, "command": " ".join(cmd), "exit_code": code, "elapsed_s": round(time.monotonic() - t0, 1),
                 "load_before": [round(x, 2) for x in before], "load_after": [round(x, 2) for x in os.getloadavg()],
                 "results_json": results.name if results.exists() else None}
        manifest["sessions"].append(entry)
        (out / "manifest.json").write_text(json.dumps(manifest, indent=1))
        print(f"session {i}/{args.sessions}: exit {code}, {entry['elapsed_s']:.0f} s, load {entry['load_before'][0]:.2f}"
              f" -> {entry['load_after'][0]:.2f}", flush=True)
        if code not in (0, 5) or not results.exists():
            print(f"session {i} did not produce results (exit {code}); last output:\n{tail}", file=sys.stderr)
            return 1

    from research import study
    from specguard.config import load_suite

    docs = [json.loads((out / f"session-{i}.json").read_text(encoding="utf-8")) for i in range(1, args.sessions + 1)]
    noise, report = study.measure_noise(docs, load_suite(args.suite))
    (out / "noise.json").write_text(json.dumps({"report": report, "preset": asdict(noise)}, indent=1, default=str))
    per_c = report["by_concurrency"]
    print("extra between-launch sd by concurrency: "
          + ", ".join(f"c{c} {v['extra_between_sd']:.2%}" for c, v in per_c.items()))
    print("extra within-launch sd by concurrency: "
          + ", ".join(f"c{c} {v['extra_within_sd']:.2%}" for c, v in per_c.items()))
    print(f"stall rate {report['stall_rate']:.1%}; wrote {out}/noise.json and manifest.json")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
