"""A fixed sample of mutants that the unit tests must kill: a few minutes, fit for CI.

    .venv/bin/python tools/mutation_sample.py            # exit 0: every mutant killed
    .venv/bin/python tools/mutation_sample.py --list

Each mutant is a one-line change an audit found, or one of the bugs that would matter most
(a wrong crossover level, a wrong interval level, a biased variance, a parser that rejects a
stream shape SGLang sends). For each: copy the package and tests to a scratch folder, apply the
change, run only the named test files there; the mutant is killed when they fail. A mutant whose
source line is no longer found is reported as such (exit 2): update the sample with the code.
The full measurement is tools/mutation.py (docs/research/mutation.md).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Mutant:
    name: str
    path: str  # under the repository
    original: str  # must occur exactly once
    mutated: str
    tests: tuple[str, ...]
    why: str


SAMPLE = (
    Mutant("sse-incremental-ids", "specguard/measure/sse.py", "if ids not in (total, last_new):", "if ids != total:",
           ("tests/measure/test_sse.py",), "breaks every --incremental-streaming-output stream (token count mismatch)"),
    Mutant("crossover-first-level", "specguard/decide/crossover.py",
           "next((c for c in reversed(levels) if c < first_behind), None)",
           "next((c for c in levels if c < first_behind), None)", ("tests/decide/test_crossover.py",),
           "names the first level instead of the one before the crossover"),
    Mutant("interval-level", "specguard/decide/gates.py", "return 1 - 2 * alpha_cell", "return 1 - alpha_cell",
           ("tests/decide/test_gates.py",), "the CI no longer matches the one-sided test at the cell's alpha"),
    Mutant("history-spread-ddof", "specguard/decide/stats.py",
           "max(float(means.var(ddof=1)) - _loc_var_factor(n_h) * sw2 / n_h, 0.0)",
           "max(float(means.var(ddof=0)) - _loc_var_factor(n_h) * sw2 / n_h, 0.0)",
           ("tests/decide/test_stats.py",), "underestimates the between-session spread from K sessions"),
    Mutant("welch-ddof", "specguard/decide/stats.py", "va = float(la.var(ddof=1)) if la.size > 1 else 0.0",
           "va = float(la.var(ddof=0)) if la.size > 1 else 0.0", ("tests/decide/test_stats.py",),
           "a narrower speculation interval than the data support"),
    Mutant("inconclusive-policy", "specguard/decide/gates.py",
           'return result.verdict == INCONCLUSIVE and tol.inconclusive == "fail"',
           'return result.verdict == INCONCLUSIVE and tol.inconclusive != "fail"', ("tests/decide/test_gates.py",),
           "inconclusive cells fail under the default policy"),
    Mutant("pass-boundary", "specguard/decide/stats.py",
           "if (self.low if self.pass_low is None else self.pass_low) >= self.threshold:",
           "if (self.low if self.pass_low is None else self.pass_low) > self.threshold:",
           ("tests/decide/test_stats.py",), "an interval starting exactly at the threshold no longer passes"),
)


def run_one(m: Mutant, scratch: Path, timeout_s: float) -> str:
    src = (REPO / m.path).read_text(encoding="utf-8")
    if src.count(m.original) != 1:
        return f"not applied: {m.path} holds {src.count(m.original)} copies of {m.original!r}"
    tree = scratch / m.name
    shutil.copytree(REPO / "specguard", tree / "specguard", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(REPO / "tests", tree / "tests", ignore=shutil.ignore_patterns("__pycache__"))
    for f in ("conftest.py", "pyproject.toml"):
        shutil.copy2(REPO / f, tree / f)
    (tree / m.path).write_text(src.replace(m.original, m.mutated), encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(tree)}  # the mutated copy shadows the installed package
    cmd = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", "-m", "not e2e and not real_engine",
           *m.tests]
    try:
        proc = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return "killed (timeout)"
    if proc.returncode == 1:
        return "killed"
    if proc.returncode == 0:
        return "SURVIVED"
    return f"error: pytest exited {proc.returncode}: {(proc.stdout + proc.stderr)[-400:]}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--list", action="store_true", help="print the sample and exit")
    ap.add_argument("--timeout-s", type=float, default=300.0, help="per mutant")
    args = ap.parse_args(argv)
    if args.list:
        for m in SAMPLE:
            print(f"{m.name}: {m.path}: {m.original!r} -> {m.mutated!r} ({m.why}); tests {', '.join(m.tests)}")
        return 0
    worst = 0
    with tempfile.TemporaryDirectory(prefix="specguard-mutants-") as tmp:
        for m in SAMPLE:
            t0 = time.monotonic()
            outcome = run_one(m, Path(tmp), args.timeout_s)
            print(f"{m.name}: {outcome} ({time.monotonic() - t0:.0f} s)", flush=True)
            if outcome == "SURVIVED" or outcome.startswith("error"):
                worst = max(worst, 1)
            elif outcome.startswith("not applied"):
                worst = max(worst, 2)
    killed = "every mutant killed" if worst == 0 else "see above"
    print(f"mutation sample: {len(SAMPLE)} mutants, {killed}")
    return worst


if __name__ == "__main__":
    raise SystemExit(main())
