"""`specguard ab` and `specguard bisect` (docs/ab.md)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specguard.ab import plan
from specguard.ab.bisect import (
    BAD,
    GOOD,
    UNDECIDED_BUILD,
    BisectResult,
    Step,
    bisect,
    decisions_needed,
    midpoint_verdict,
)
from specguard.ab.builds import Build, BuildFlags, UsageError, ab_builds, read_builds
from specguard.ab.decision import BUILD_A, BUILD_B
from specguard.ab.launcher import ServerLauncher
from specguard.ab.report import AB, BISECT, render_markdown, render_text, results_doc, write_outputs
from specguard.ab.rounds import BuildComparison, Selection
from specguard.ab.schema import AbDoc, BisectDoc
from specguard.config import ConfigError, Suite
from specguard.labels import ExitCode
from specguard.session import RunOptions, api_key_from
from specguard.values import arg_type, positive_ints

DEFAULT_SUITE = "perf_tests/suite.toml"
DEFAULT_MAX_ROUNDS = 4


def _rounds(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"--max-rounds {text!r}: a whole number of rounds >= 1, e.g. 4")
    return value


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--suite", default=DEFAULT_SUITE, help=f"suite file (default {DEFAULT_SUITE})")
    p.add_argument("--concurrency", type=arg_type(positive_ints, "--concurrency"), default=None,
                   help="override the suite's levels, e.g. 1,16")
    p.add_argument("--max-rounds", type=_rounds, default=DEFAULT_MAX_ROUNDS,
                   help=f"launches per build and configuration at most (default {DEFAULT_MAX_ROUNDS})")
    p.add_argument("--results-json", help="write the decisions and every run's figures here (docs/ab.md)")
    p.add_argument("--report-dir", help="write summary.md here (also appended to $GITHUB_STEP_SUMMARY)")
    p.add_argument("--api-key", default=None, help="server API key (or env SPECGUARD_API_KEY); never printed")
    p.add_argument("--max-failed-requests", type=int, default=0, help="failed requests tolerated per cell")
    p.add_argument("--log-dir", default=".specguard/logs/ab", help="server logs (one directory per build)")


def add_parser(sub: Any) -> None:
    """`specguard ab` and `specguard bisect` on the `specguard` command's subparsers."""
    p = sub.add_parser("ab", help="two builds of each configuration, measured interleaved (ABBA), decided per cell")
    _common(p)
    p.add_argument("--config", action="append", default=[], metavar="NAME", help="compare this configuration (repeatable)")
    p.add_argument("--a-python", help="build A's interpreter (a virtual environment's python)")
    p.add_argument("--b-python", help="build B's interpreter")
    p.add_argument("--a-server-args", action="append", default=[], metavar='NAME="ARGS"', help="build A's extra launch flags")
    p.add_argument("--b-server-args", action="append", default=[], metavar='NAME="ARGS"',
                   help='build B\'s extra launch flags, e.g. eagle3="--emulator-step-scale 1.03"')
    p.add_argument("--a-url", action="append", default=[], metavar="[NAME=]URL", help="attach: build A's server")
    p.add_argument("--b-url", action="append", default=[], metavar="[NAME=]URL", help="attach: build B's server")
    p = sub.add_parser("bisect", help="the first bad build of an ordered list, by A/B decisions")
    _common(p)
    p.add_argument("--config", metavar="NAME", help="the configuration whose cells decide (default: the first one "
                   "the builds' args= name, else the suite's first)")
    p.add_argument("--builds", metavar="FILE", help='one build a line: python=PATH and/or args=NAME="ARGS"')
    p.add_argument("--build", action="append", default=[], metavar="SPEC", help="a build, as a line of --builds (repeatable)")


def run(args: argparse.Namespace) -> int:
    try:
        return ab_main(args) if args.command == "ab" else bisect_main(args)
    except (UsageError, ConfigError) as exc:
        print(f"specguard {args.command}: {(str(exc).splitlines() or [''])[0]}", file=sys.stderr)
        return int(ExitCode.USAGE)


def _progress(line: str) -> None:
    print(f"  {line}", file=sys.stderr, flush=True)


def compare(suite: Suite, selection: Selection, a: Build, b: Build, args: argparse.Namespace) -> BuildComparison:
    """One A/B comparison on servers, every server stopped when it ends (or is interrupted)."""
    options = RunOptions(api_key=api_key_from(args.api_key), log_dir=Path(args.log_dir),
                         max_failed_requests=args.max_failed_requests)
    launcher = ServerLauncher(suite, {BUILD_A: a, BUILD_B: b}, selection.levels, options, _progress)
    cmp = BuildComparison(selection, plan.gate_specs(suite), plan.budget_of(suite, args.max_rounds), launcher, _progress)
    try:
        cmp.run()
    finally:
        launcher.close()
    return cmp


def _title(command: str, suite: Suite, cmp: BuildComparison) -> str:
    return (f"specguard {command}: B over A, {suite.path}, {cmp.rounds_run} of at most {cmp.budget.max_rounds} rounds "
            f"(ABBA), family alpha {cmp.budget.family_alpha:g}")


def ab_main(args: argparse.Namespace) -> int:
    suite = plan.load(args.suite, args.concurrency)
    a, b = ab_builds(BuildFlags(args.a_python, args.a_server_args, args.a_url),
                     BuildFlags(args.b_python, args.b_server_args, args.b_url), list(suite.servers))
    selection, notes = plan.select(suite, args.config, [a, b])
    for note in notes:
        print(f"specguard ab: {note}", file=sys.stderr)
    cmp = compare(suite, selection, a, b, args)
    title = _title("ab", suite, cmp)
    print(render_text(cmp, [a, b], title))
    doc = results_doc(cmp, [a, b], suite_path=str(suite.path), mode="attach" if a.attach else "launch", argv=sys.argv[1:])
    doc["notes"] = notes
    write_outputs(render_markdown(cmp, [a, b], title), doc, AB, args.results_json, args.report_dir)
    return cmp.exit_code()


def bisect_config(suite: Suite, name: str | None, builds: Sequence[Build]) -> tuple[str, str]:
    """The configuration whose cells decide, and why that one."""
    if name is not None:
        if name not in suite.servers:
            raise UsageError(f"--config {name}: no configuration {name!r} in {suite.path}; it has {', '.join(suite.servers)}")
        return name, "--config"
    named = [c for c in suite.servers if any(c in b.server_args for b in builds)]
    if named:
        return named[0], "the first configuration the builds' args= change"
    return next(iter(suite.servers)), "the suite's first configuration (the builds change the interpreter)"


@dataclass(frozen=True)
class StepReport:
    """A bisect step's A/B comparison: its results document and its markdown section."""

    doc: AbDoc
    markdown: str


def bisect_main(args: argparse.Namespace) -> int:
    suite = plan.load(args.suite, args.concurrency)
    builds = read_builds(args.builds, args.build, list(suite.servers))
    config, why = bisect_config(suite, args.config, builds)
    selection, _ = plan.select(suite, [config], [], references=False)
    n = len(builds)
    intro = (f"specguard bisect: {n} builds, assuming build 1 is good and build {n} is bad (neither is measured); "
             f"deciding on {config}'s cells ({why}); at most {decisions_needed(n)} A/B decisions")
    print(intro)

    def decide(good: int, candidate: int) -> tuple[str, StepReport]:
        a, b = _as_side(builds[good], "A"), _as_side(builds[candidate], "B")
        cmp = compare(suite, selection, a, b, args)
        verdict = midpoint_verdict(cmp)
        title = f"step: {builds[candidate].name} (B) vs {builds[good].name} (A, good) -> {verdict}"
        print(render_text(cmp, [a, b], title, exit_code=False) + "\n")
        doc = results_doc(cmp, [a, b], suite_path=str(suite.path), mode="launch", argv=sys.argv[1:])
        return verdict, StepReport(doc, render_markdown(cmp, [a, b], title, exit_code=False))

    result = bisect(n, decide)
    lines = bisect_lines(result, builds)
    print("\n".join(lines))
    doc: BisectDoc = {
        "schema": "specguard-bisect", "schema_version": BISECT.version, "suite": str(suite.path), "config": config,
        "assumption": f"build 1 good, build {n} bad (not measured)", "builds": [b.to_json() for b in builds],
        "steps": [{"good": s.good + 1, "candidate": s.candidate + 1, "verdict": s.verdict, "ab": s.detail.doc}
                  for s in result.steps],
        "first_bad": None if result.first_bad is None else result.first_bad + 1, "decisions": len(result.steps)}
    markdown = "\n".join([f"# {intro}", "", *[f"- {line}" for line in lines], "",
                          *[s.detail.markdown for s in result.steps]])
    write_outputs(markdown, doc, BISECT, args.results_json, args.report_dir)
    return int(ExitCode.OK if result.first_bad is not None else ExitCode.NOT_MEASURED)


def _as_side(build: Build, side: str) -> Build:
    """A build as side A or B of one step (named "A: build 3")."""
    return Build(f"{side}: {build.name}", build.python, build.server_args, build.urls)


def bisect_lines(result: BisectResult[Any], builds: Sequence[Build]) -> list[str]:
    """The steps, one line each, and the answer (or which midpoint stopped it)."""
    def step_line(s: Step[Any]) -> str:
        return f"{builds[s.candidate].name} vs {builds[s.good].name}: {s.verdict}"

    lines = [step_line(s) for s in result.steps]
    n = result.n_builds
    if result.first_bad is not None:
        bad = builds[result.first_bad]
        lines.append(f"first bad build: {bad.name} ({bad.describe()}), after {len(result.steps)} A/B decisions "
                     f"(ceil(log2({n - 1})) = {decisions_needed(n)}); assuming build {n} is bad")
    else:
        stop = result.stopped
        assert stop is not None
        hint = ("more --max-rounds, or a wider tolerance, may decide it" if stop.verdict == UNDECIDED_BUILD
                else "its not-measured lines above say why")
        lines.append(f"stopped: {builds[stop.candidate].name} is {stop.verdict} against {builds[stop.good].name}; "
                     f"the first bad build is one of builds {result.good + 2}..{result.bad + 1}; {hint}")
    return lines


__all__ = ["GOOD", "BAD", "add_parser", "ab_main", "bisect_main", "compare", "run"]
