"""Mutation score of specguard's core modules, one module at a time (mutmut 3).

Why per module: each module is mutated in its own throw-away copy of the tree, and only the
test files that exercise it are run (mutmut then narrows further to the tests that reach each
mutated function), so a module's score says what *its* tests catch and a run stays cheap.

    .venv/bin/python tools/mutation.py                      # every core module, the live tree
    .venv/bin/python tools/mutation.py --root /tmp/mut-before --label before
    .venv/bin/python tools/mutation.py --module decide/gates.py --survivors

Each module's result (killed / survived / other, score, surviving mutant names and diffs) goes
to <work>/<label>/results.json; --markdown prints the score table. Run it niced, one job at a
time, on a quiet machine if possible: every mutant re-runs a slice of the tests.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

# module (under specguard/) -> the test files that exercise it. Files missing in a tree (an
# older snapshot) are skipped. e2e / real-engine tests are deselected: they start servers.
# tests/measure/test_properties.py (hypothesis fuzzing, ~30 s a run) is left out: with it a module of
# 500 mutants takes hours on a shared 2-core machine. Scores are therefore what the example-based
# tests kill, a lower bound of the whole suite's.
MODULES: dict[str, list[str]] = {
    "measure/sse.py": ["tests/measure/test_sse.py", "tests/measure/test_client.py"],
    "measure/http1.py": ["tests/measure/test_http1.py", "tests/measure/test_client.py"],
    "measure/metrics.py": ["tests/measure/test_metrics.py", "tests/test_stats.py", "tests/report/test_report.py"],
    "decide/stats.py": ["tests/test_stats.py", "tests/test_gates.py", "tests/test_gate_design.py"],
    "decide/gates.py": ["tests/test_gates.py", "tests/test_stats.py", "tests/test_gate_design.py", "tests/report/test_report.py"],
    "decide/crossover.py": ["tests/decide/test_crossover.py", "tests/report/test_recommend.py", "tests/test_gate_design.py"],
    "decide/baselines.py": ["tests/decide/test_baselines.py"],  # snapshots before store/ (docs/research/mutation.md's runs)
    "store/baseline_file.py": ["tests/store/test_baselines.py", "tests/store/test_store_65e213e.py"],
    "store/baselines.py": ["tests/store/test_baselines.py", "tests/store/test_store_65e213e.py"],
    "store/atomic.py": ["tests/store/test_baselines.py"],
    "store/refresh.py": ["tests/store/test_refresh.py"],
    "report/recommend.py": ["tests/report/test_recommend.py", "tests/decide/test_crossover.py"],
    "emulator/model.py": ["tests/emulator/test_emulator_model.py"],
    "emulator/spec.py": ["tests/emulator/test_emulator_spec.py", "tests/emulator/test_emulator_model.py"],
}
# Tests left out of a module's run (pytest --deselect): the emulator's whole-sweep checks reach every
# function of model.py and spec.py and cost ~10 s per mutant; the fast unit tests in the same files
# (a hand-made linear profile, exact step costs) pin the same code at ~1 s per mutant. The sweep
# checks still run in the normal suite; tests/research/test_calibrate.py (a sweep per table) likewise.
_SWEEPS = [f"tests/emulator/test_emulator_model.py::{t}" for t in (
    "test_seed_a_reproduces_table_a_within_15_percent", "test_seed_b_shape", "test_fast_profile_shape",
    "test_docs_emulator_tables_match_the_simulator")]
DESELECT: dict[str, list[str]] = {"emulator/model.py": _SWEEPS, "emulator/spec.py": _SWEEPS}
KILLED = {"killed", "timeout", "caught by type check", "segfault"}


@dataclass
class ModuleScore:
    module: str
    tests: list[str]
    total: int = 0
    killed: int = 0
    survived: int = 0
    no_tests: int = 0
    other: int = 0
    seconds: float = 0.0
    not_run: int = 0  # outside --sample
    sample: str = ""
    survivors: list[str] = field(default_factory=list)
    error: str = ""

    @property
    def score(self) -> float:
        """Killed share of the mutants that ran (mutants reached by no test count as survivors)."""
        return self.killed / self.total if self.total else float("nan")


def _prepare(root: Path, dest: Path, module: str, tests: list[str]) -> None:
    """A private copy of the tree with a pyproject that mutates one module and runs its tests."""
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    shutil.copytree(root / "specguard", dest / "specguard", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(root / "tests", dest / "tests", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy2(root / "conftest.py", dest / "conftest.py")
    cfg = {
        "source_paths": ["specguard"],
        "only_mutate": [f"specguard/{module}"],
        "also_copy": ["tests", "conftest.py", "pyproject.toml"],
        "pytest_add_cli_args_test_selection": tests,
        "pytest_add_cli_args": ["-m", "not e2e and not real_engine", "-p", "no:cacheprovider",
                                "-p", "no:randomly", "-W", "ignore",
                                *[a for t in DESELECT.get(module, []) for a in ("--deselect", t)]],
        "timeout_multiplier": 10.0,
        "timeout_constant": 5.0,
    }
    lines = ["[tool.mutmut]"] + [f"{k} = {json.dumps(v)}" for k, v in cfg.items()]
    lines += ["", "[tool.pytest.ini_options]", 'testpaths = ["tests"]',
              'markers = ["real_engine: real engine", "e2e: starts an emulator server on 127.0.0.1"]']
    (dest / "pyproject.toml").write_text("\n".join(lines) + "\n")


def _collect(dest: Path, module: str, result: ModuleScore) -> None:
    import fnmatch

    from mutmut.stats import status_by_exit_code  # mutmut's own exit-code meaning

    meta = dest / "mutants" / "specguard" / (module + ".meta")
    if not meta.exists():
        result.error = f"no mutation data ({meta} missing)"
        return
    codes = json.loads(meta.read_text())["exit_code_by_key"]
    for name, code in sorted(codes.items()):
        status = status_by_exit_code[code]
        if status == "not checked" or (result.sample and not fnmatch.fnmatch(name, f"*__mutmut_{result.sample}")):
            result.not_run += 1
            continue
        result.total += 1
        if status in KILLED:
            result.killed += 1
        elif status == "survived":
            result.survived += 1
            result.survivors.append(name)
        elif status == "no tests":
            result.no_tests += 1
            result.survivors.append(name)
        else:
            result.other += 1
            result.survivors.append(f"{name} ({status})")


_DIFFS = """
import sys
from mutmut.mutation.diff_apply import get_diff_for_mutant
path, names = sys.argv[1], sys.argv[2:]
for name in names:
    try:
        print(get_diff_for_mutant(name, path=path))
    except Exception as exc:  # a diff that cannot be rebuilt should not hide the others
        print(f"# {name}: no diff ({exc})")
"""


def run_module(root: Path, work: Path, module: str, max_children: int, show_diffs: bool,
               sample: str = "", reuse: bool = False) -> ModuleScore:
    tests = [t for t in MODULES[module] if (root / t).exists()]
    result = ModuleScore(module, tests, sample=sample)
    if not tests:
        result.error = "no test file"
        return result
    dest = work / module.replace("/", "_").removesuffix(".py")
    if reuse and (dest / "mutants" / "specguard" / (module + ".meta")).exists():
        _collect(dest, module, result)
        _write_diffs(dest, module, result, show_diffs)
        return result
    _prepare(root, dest, module, tests)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH",)}
    start = time.monotonic()
    cmd = ["nice", "-n", "10", sys.executable, "-m", "mutmut", "run", "--max-children", str(max_children)]
    if sample:  # mutmut numbers each function's mutants 1, 2, ...: "*5" keeps 5, 15, 25, ... of every function
        cmd.append(f"specguard.{module.removesuffix('.py').replace('/', '.')}.*__mutmut_{sample}")
    with open(dest / "mutmut.log", "w") as log:
        proc = subprocess.run(cmd, cwd=dest, env=env, stdout=log, stderr=subprocess.STDOUT)
    result.seconds = round(time.monotonic() - start, 1)
    _collect(dest, module, result)
    if proc.returncode != 0 and not result.total:
        result.error = f"mutmut exited {proc.returncode}; see {dest / 'mutmut.log'}"
    _write_diffs(dest, module, result, show_diffs)
    return result


def _write_diffs(dest: Path, module: str, result: ModuleScore, show_diffs: bool) -> None:
    """Every surviving mutant's diff in <dest>/survivors.diff (one process for all of them)."""
    if not show_diffs or not result.survivors:
        return
    names = [n.split(" ")[0] for n in result.survivors]
    with open(dest / "survivors.diff", "w") as out:
        subprocess.run([sys.executable, "-c", _DIFFS, f"specguard/{module}", *names], cwd=dest, stdout=out,
                       stderr=subprocess.STDOUT, timeout=600)


def markdown(results: list[ModuleScore]) -> str:
    rows = ["| module | mutants run | of | killed | survived | not reached | other | score | tests run |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in results:
        score = "n/a" if not r.total else f"{r.score:.1%}"
        of = f"{r.total + r.not_run}" + (f" (sample {r.sample})" if r.sample else "")
        rows.append(f"| {r.module} | {r.total} | {of} | {r.killed} | {r.survived} | {r.no_tests} | {r.other} | {score} | "
                    f"{', '.join(Path(t).name for t in r.tests) or r.error} |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", type=Path, default=REPO, help="tree to mutate (default: this checkout)")
    ap.add_argument("--work", type=Path, default=Path("/tmp/specguard-mutation"), help="scratch folder")
    ap.add_argument("--label", default="live", help="sub-folder of --work for this run")
    ap.add_argument("--module", action="append", choices=sorted(MODULES), help="repeatable; default: all")
    ap.add_argument("--max-children", type=int, default=1, help="parallel mutants (default 1: shared machine)")
    ap.add_argument("--survivors", action="store_true", help="write each module's surviving mutants' diffs")
    ap.add_argument("--markdown", action="store_true", help="print the score table")
    ap.add_argument("--results", default="results.json", help="results file name inside <work>/<label>/")
    ap.add_argument("--reuse", action="store_true", help="collect a module's earlier run in --work instead of re-running")
    ap.add_argument("--sample", default="", metavar="GLOB",
                    help='run only the mutants whose number matches GLOB (e.g. "*5": 5, 15, 25, ...); default all')
    ap.add_argument("--sample-module", action="append", default=[], metavar="MODULE",
                    help="apply --sample to this module only (repeatable; default: every module)")
    args = ap.parse_args(argv)
    if not (args.root / "specguard").is_dir():
        print(f"--root {args.root}: no specguard/ package there", file=sys.stderr)
        return 2
    work = args.work / args.label
    work.mkdir(parents=True, exist_ok=True)
    out = work / args.results
    done = {r["module"]: r for r in json.loads(out.read_text())} if out.exists() else {}
    results = []
    for module in args.module or list(MODULES):
        sample = args.sample if not args.sample_module or module in args.sample_module else ""
        r = run_module(args.root.resolve(), work, module, args.max_children, args.survivors, sample, args.reuse)
        done[module] = {**asdict(r), "score": r.score}
        out.write_text(json.dumps(list(done.values()), indent=1))
        results.append(r)
        print(f"{module}: {r.killed}/{r.total} killed ({r.score:.1%}), {r.seconds:.0f} s {r.error}", flush=True)
    if args.markdown:
        print(markdown(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
