#!/usr/bin/env python3
"""Generate tests/fixtures/repo-65e213e/: a user's repository as `specguard init` wrote it at
commit 65e213e, with the baselines and the 30 nightly results files that code wrote into it.
Later code must keep working on it unchanged (issue 29, item 7); the fixture's README.md says
what a gate, `specguard compare` and `specguard history` do on it at 65e213e, as measured.

Run by hand, with the specguard of a checkout whose specguard/ and pyproject.toml are 65e213e's
installed in the running venv (the script refuses any other code; 65e213e itself predates this
script, so take it from the branch that added it or from main):

    git worktree add /tmp/sg-65e213e 65e213e && cd /tmp/sg-65e213e
    git show main:tools/make_compat_fixture.py > /tmp/make_compat_fixture.py
    python3 -m venv .venv && .venv/bin/pip install -q -e ".[test,plots]" && .venv/bin/pip install -q --no-deps apache-otava==0.8.0
    .venv/bin/python /tmp/make_compat_fixture.py --out tests/fixtures/repo-65e213e   # about 20 min on 2 cores

In a temporary directory, made a git repository so every results file names its own commit
(the results document's environment.git_commit is `git rev-parse HEAD` of the directory pytest
runs in; its `created` stamp is the wall clock, so the files are in time order as run):

1. `specguard init` (the emulator starter: no --server-url); commit.
2. `pytest perf_tests --update-baselines OVERRIDES`, --baseline-sessions times; commit baselines/.
3. --runs gate sessions, each after an empty commit of its own, as the starter's CI workflow runs
   them: `pytest perf_tests --require-baselines --results-json results/results-NN.json OVERRIDES`;
   from file --slow-from on, eagle3's server runs 8 % slower steps (`--server-args
   eagle3="--emulator-step-scale 1.08"`), an engine regression a history must find.
   OVERRIDES (`--concurrency 1,4`) keep a session short; the levels are no part of the baseline
   fingerprint, the same overrides are given to every session, so every gate decides against the
   recorded baselines, and a later gate must be given them too (c16 has no baseline).
4. Into --out (written whole or not at all): repo/ (every file the repository holds: init's three
   files and baselines/ as written, lock files included, since init writes no .gitignore),
   results-files/results-NN.json.gz (gzip, no name or time in the header) and manifest.json (the
   commands, each session's commit, exit code and wall time).

Exit 0 when the fixture is written; 1 when a session ends other than 0 (ok) or 1 (regression),
or the code is not 65e213e's (one line naming the cause).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path

SOURCE_COMMIT = "65e213e"
OVERRIDES = ["--concurrency", "1,4"]
SLOW_ARGS = ["--server-args", "eagle3=--emulator-step-scale 1.08"]  # the shell's eagle3="--emulator-step-scale 1.08"
# Not part of the user's repository: git's, the server logs, the results (CI artifacts), caches.
NOT_REPOSITORY = {".git", ".specguard", "results", "__pycache__", ".pytest_cache"}
SESSION_TIMEOUT_S = 600


class FixtureError(RuntimeError):
    """Why no fixture was written, in one line."""


@dataclass
class Session:
    file: str
    commit: str
    slowed: bool
    command: str  # as a shell runs it in the repository
    exit_code: int
    wall_s: float


def _run(argv: list[str], cwd: Path, env: dict[str, str], log: Path | None = None) -> subprocess.CompletedProcess[str]:
    out = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=SESSION_TIMEOUT_S)
    if log is not None:
        log.write_text(out.stdout + out.stderr, encoding="utf-8")
    return out


def check_source(commit: str) -> tuple[Path, str]:
    """The checkout the running specguard comes from, and its HEAD; its specguard/ and
    pyproject.toml must be `commit`'s, with nothing uncommitted or untracked there."""
    import specguard

    root = Path(specguard.__file__).resolve().parents[1]
    paths = ["specguard", "pyproject.toml"]
    diff = subprocess.run(["git", "-C", str(root), "diff", "--quiet", commit, "--", *paths], capture_output=True)
    untracked = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--", *paths],
                               capture_output=True, text=True)
    if diff.returncode != 0 or untracked.returncode != 0 or untracked.stdout.strip():
        raise FixtureError(f"{root}: specguard/ or pyproject.toml differ from {commit} (or are not a git checkout); "
                           f"install specguard from a checkout of {commit}")
    head = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, check=True)
    return root, head.stdout.strip()


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("GITHUB_STEP_SUMMARY", "PYTEST_ADDOPTS", "GIT_DIR",
                                                             "GIT_WORK_TREE", "SPECGUARD_DEBUG")}
    env.update(PYTHONDONTWRITEBYTECODE="1", GIT_AUTHOR_NAME="specguard fixture", GIT_AUTHOR_EMAIL="fixture@example.invalid",
               GIT_COMMITTER_NAME="specguard fixture", GIT_COMMITTER_EMAIL="fixture@example.invalid")
    return env


def _shell(argv: list[str]) -> str:
    """The command as typed: `python -m pytest ...`, `specguard init`."""
    head = ["python"] if argv[0] == sys.executable else [Path(argv[0]).name]
    return shlex.join(head + argv[1:])


def _commit(repo: Path, env: dict[str, str], message: str, *paths: str) -> str:
    if paths:
        _run(["git", "add", "--", *paths], repo, env).check_returncode()
    _run(["git", "commit", "-q", "--allow-empty", "-m", message], repo, env).check_returncode()
    return _run(["git", "rev-parse", "HEAD"], repo, env).stdout.strip()


def init_repository(repo: Path, env: dict[str, str], baseline_sessions: int) -> list[list[str]]:
    """`specguard init` and the baselines, each committed; the commands run."""
    _run(["git", "init", "-q"], repo, env).check_returncode()
    init = [str(Path(sys.executable).parent / "specguard"), "init"]
    out = _run(init, repo, env)
    if out.returncode != 0:
        raise FixtureError(f"specguard init exited {out.returncode}: {(out.stderr or out.stdout).strip()}")
    _commit(repo, env, "specguard init", "perf_tests", ".github")
    record = [sys.executable, "-m", "pytest", "perf_tests", "--update-baselines", "-p", "no:cacheprovider", *OVERRIDES]
    logs = repo / ".specguard"
    logs.mkdir(exist_ok=True)
    for n in range(1, baseline_sessions + 1):
        out = _run(record, repo, env, logs / f"update-{n}.log")
        print(f"baselines {n}/{baseline_sessions}: exit {out.returncode}", flush=True)
        if out.returncode != 0:
            raise FixtureError(f"--update-baselines session {n} exited {out.returncode}; see {logs / f'update-{n}.log'}")
    _commit(repo, env, f"baselines: {baseline_sessions} sessions recorded with --update-baselines", "baselines")
    return [init, *([record] * baseline_sessions)]


def gate_sessions(repo: Path, env: dict[str, str], runs: int, slow_from: int) -> list[Session]:
    """The nightly gate sessions, each after a commit of its own; a session that neither passed
    nor found a regression stops the generation (its log is named)."""
    (repo / "results").mkdir()
    sessions = []
    for n in range(1, runs + 1):
        slowed = n >= slow_from
        message = (f"nightly {n:02d}: eagle3 engine build with ~8% slower verify steps" if n == slow_from
                   else f"nightly {n:02d}")
        commit = _commit(repo, env, message)
        name = f"results-{n:02d}.json"
        argv = [sys.executable, "-m", "pytest", "perf_tests", "--require-baselines", "-p", "no:cacheprovider",
                "--results-json", f"results/{name}", *OVERRIDES, *(SLOW_ARGS if slowed else [])]
        started = time.monotonic()
        out = _run(argv, repo, env, repo / ".specguard" / f"gate-{n:02d}.log")
        wall_s = round(time.monotonic() - started, 1)
        print(f"session {n:02d}/{runs}: exit {out.returncode} in {wall_s:.0f} s, commit {commit[:10]}"
              f"{', eagle3 slowed' if slowed else ''}", flush=True)
        if out.returncode not in (0, 1) or not (repo / "results" / name).is_file():
            raise FixtureError(f"gate session {n} exited {out.returncode} without a verdict; see "
                               f"{repo / '.specguard' / f'gate-{n:02d}.log'} (kept with --keep-tmp)")
        sessions.append(Session(name + ".gz", commit, slowed, _shell(argv), out.returncode, wall_s))
    return sessions


def _gzip(source: Path, target: Path) -> None:
    with open(source, "rb") as f, open(target, "wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw,
                                                                           mtime=0, compresslevel=9) as gz:
        shutil.copyfileobj(f, gz)


def stage(repo: Path, staging: Path, manifest: dict[str, object]) -> None:
    """The fixture's files under `staging`: the repository, the results files, the manifest."""
    for path in sorted(repo.rglob("*")):
        rel = path.relative_to(repo)
        if path.is_file() and not (set(rel.parts) & NOT_REPOSITORY):
            (staging / "repo" / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, staging / "repo" / rel)
    (staging / "results-files").mkdir()
    for path in sorted((repo / "results").glob("results-*.json")):
        _gzip(path, staging / "results-files" / (path.name + ".gz"))
    (staging / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n", encoding="utf-8")


def publish(staging: Path, out: Path, force: bool) -> None:
    """Move the staged fixture to `out` (replacing it only with --force), keeping out's README.md."""
    if out.exists():
        if not force:
            raise FixtureError(f"{out} exists; pass --force to replace it")
        readme = out / "README.md"
        if readme.is_file():
            shutil.copy2(readme, staging / "README.md")
        shutil.rmtree(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    shutil.move(str(staging), str(out))


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, default=Path("tests/fixtures/repo-65e213e"))
    p.add_argument("--runs", type=int, default=30, help="gate sessions (results files), default 30")
    p.add_argument("--slow-from", type=int, default=20, help="first session with eagle3 slowed, default 20")
    p.add_argument("--baseline-sessions", type=int, default=3, help="--update-baselines sessions, default 3")
    p.add_argument("--force", action="store_true", help="replace --out (its README.md is kept)")
    p.add_argument("--keep-tmp", action="store_true", help="keep the temporary repository (printed)")
    args = p.parse_args(argv)
    if args.runs < 2 or not 1 < args.slow_from <= args.runs or args.baseline_sessions < 1:
        p.error("need --runs >= 2, 1 < --slow-from <= --runs and --baseline-sessions >= 1")
    return args


def generate(args: argparse.Namespace, work: Path) -> dict[str, object]:
    root, head = check_source(SOURCE_COMMIT)
    from specguard import __version__

    started = time.monotonic()
    repo = work / "repo"
    repo.mkdir()
    env = _env()
    setup = init_repository(repo, env, args.baseline_sessions)
    sessions = gate_sessions(repo, env, args.runs, args.slow_from)
    manifest: dict[str, object] = {
        "source_commit": SOURCE_COMMIT, "source_head": head, "source_checkout": str(root), "specguard_version": __version__,
        "python": platform.python_version(), "generated": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "overrides": OVERRIDES, "slowed": {"config": "eagle3", "args": SLOW_ARGS, "from_file": args.slow_from},
        "setup_commands": [_shell(a) for a in setup],
        "sessions": [asdict(s) for s in sessions],
        "generation_wall_s": round(time.monotonic() - started, 1),
    }
    staging = work / "fixture"
    staging.mkdir()
    stage(repo, staging, manifest)
    publish(staging, args.out, args.force)
    return manifest


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="specguard-compat-"))
    try:
        manifest = generate(args, work)
    except (FixtureError, subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
        print(f"make_compat_fixture: {exc}", file=sys.stderr)
        return 1
    finally:
        if args.keep_tmp:
            print(f"temporary repository kept: {work / 'repo'}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    codes = [s["exit_code"] for s in manifest["sessions"]]  # type: ignore[attr-defined]
    print(f"wrote {args.out}: {len(codes)} results files (exit codes {codes}) in {manifest['generation_wall_s']:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
