"""Run a command and keep its output as a committed piece of evidence (docs/research/evidence/).

    .venv/bin/python tools/record_evidence.py docs/research/evidence/client-capacity.txt -- \
        .venv/bin/python benchmarks/client_capacity.py --concurrency 64 --rounds 2

The file starts with what a reader needs to judge the figures: the exact command, the date, the
machine (CPU model, cores, memory, kernel, Python), the git commit (and whether the tree had
uncommitted changes), the load average before and after, and the exit code; then the command's
output as it printed it. A figure quoted in README.md or docs/ names the file it comes from
(docs/research/evidence/README.md is the index).
"""

from __future__ import annotations

import os
import platform
import shlex
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _mem_gib() -> str:
    try:
        kb = int(Path("/proc/meminfo").read_text().split()[1])
        return f"{kb / 2**20:.1f} GiB"
    except (OSError, ValueError, IndexError):
        return "unknown"


def _git(*args: str) -> str:
    try:
        return subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def machine_lines() -> list[str]:
    """The header lines describing where and when a measurement ran."""
    dirty = _git("status", "--porcelain", "--untracked-files=no")
    load = os.getloadavg()
    return [
        f"date: {datetime.now(timezone.utc).strftime('%Y-%m-%d %H:%M:%S UTC')}",
        f"machine: {_cpu_model()}, {os.cpu_count()} cores, {_mem_gib()}, {platform.system()} {platform.release()}, "
        f"Python {platform.python_version()}",
        f"commit: {_git('rev-parse', '--short', 'HEAD') or 'unknown'}"
        + (" with uncommitted changes in the tree" if dirty else ""),
        f"load average before (1/5/15 min): {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}",
    ]


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--" not in argv or argv.index("--") != 1 or len(argv) < 3:
        print("usage: record_evidence.py OUTPUT_FILE -- COMMAND [ARGS...]", file=sys.stderr)
        return 2
    out, cmd = Path(argv[0]), argv[2:]
    out.parent.mkdir(parents=True, exist_ok=True)
    head = [f"command: {shlex.join(cmd)}", *machine_lines()]
    start = time.monotonic()
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    load = os.getloadavg()
    head += [f"load average after (1/5/15 min): {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}",
             f"elapsed: {time.monotonic() - start:.0f} s, exit code {proc.returncode}"]
    body = proc.stdout + (("\n--- stderr ---\n" + proc.stderr) if proc.stderr.strip() else "")
    out.write_text("\n".join("# " + h for h in head) + "\n\n" + body)
    print(f"{out}: exit {proc.returncode}, {len(body.splitlines())} lines of output")
    return proc.returncode


if __name__ == "__main__":
    raise SystemExit(main())
