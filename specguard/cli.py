"""The `specguard` command: bench a server, run the emulator, and the tools around the gate."""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import replace
from pathlib import Path
from typing import TypeAlias

from specguard import ab, starter
from specguard.config import ConfigError, ServerConfig, SweepConfig
from specguard.engines import get_engine
from specguard.labels import ExitCode
from specguard.measure.metrics import RunMetrics
from specguard.measure.sweep import CellLoad, measure_cell
from specguard.report import compare, crossovers, export, recommend, results
from specguard.report.bench_doc import BENCH, BENCH_SCHEMA, BENCH_VERSION
from specguard.report.note_text import note_line
from specguard.report.publish import write_report_dir
from specguard.report.recommendation_doc import RECOMMENDATION
from specguard.report.results import ResultsError, run_doc
from specguard.report.schema import BenchLevelDoc
from specguard.server import ServerHandle, ServerStartError, attach, launch, stop
from specguard.session import api_key_from
from specguard.slo import SLOError, parse_slo
from specguard.store.atomic import atomic_write_json
from specguard.timeline import cli as history_cli
from specguard.tune import cli as tune_cli
from specguard.values import arg_type, positive_floats, positive_ints
from specguard.workload import WORKLOAD_KINDS, Workload, WorkloadError, WorkloadSpec, build_workload

# What add_subparsers() returns: each command adds its parser to it
Subcommands: TypeAlias = "argparse._SubParsersAction[_Parser]"


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error exits 4 like pytest's (argparse's own code is 2: "interrupted" here)."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.print_usage(sys.stderr)
        print(f"{self.prog}: error: {message}", file=sys.stderr)
        sys.exit(ExitCode.USAGE)


def _slo(text: str) -> dict[str, float]:
    try:
        return parse_slo(text)
    except SLOError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _bench_parser(sub: Subcommands) -> None:
    p = sub.add_parser("bench", help="closed-loop concurrency sweep against a server (or an emulator it starts)")
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--url", help="a running server that speaks SGLang's API")
    where.add_argument("--emulator", metavar="PROFILE", help="start the embedded emulator with this profile")
    p.add_argument("--concurrency", type=arg_type(positive_ints, "--concurrency"), default=[1, 4, 16])
    p.add_argument("--requests", type=int, default=None, help="requests per run (default 4 x concurrency)")
    p.add_argument("--repeats", type=int, default=1, help="measured runs per level")
    p.add_argument("--warmup", type=int, default=1, help="discarded warmup runs per level")
    p.add_argument("--input-len", type=int, default=256)
    p.add_argument("--output-len", type=int, default=128)
    p.add_argument("--api", choices=("native", "openai", "chat"), default="native")
    p.add_argument("--workload", choices=WORKLOAD_KINDS, default="random-ids")
    p.add_argument("--workload-file",
                   help="JSONL prompts for --workload jsonl; a ShareGPT-format JSON file for --workload sharegpt")
    p.add_argument("--request-rate", type=arg_type(positive_floats, "--request-rate"), default=None, metavar="R[,R...]",
                   help="open loop: seeded Poisson arrivals at each rate (req/s) instead of --concurrency levels")
    p.add_argument("--burstiness", type=float, default=1.0, help="gamma shape of the arrival gaps (1 = Poisson, < 1 burstier)")
    p.add_argument("--max-concurrency", type=int, default=256, help="open loop: cap on requests in flight (default 256)")
    p.add_argument("--slo", type=_slo, default=None, metavar="ttft_ms=..,tpot_ms=..[,e2e_ms=..]",
                   help="report request_goodput: requests/s that met every SLO")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--speculative-algorithm", help="with --emulator: EAGLE3, NEXTN, ...")
    p.add_argument("--emulator-arg", action="append", default=[], help="extra emulator flag (repeatable)")
    p.add_argument("--api-key", default=None, help="server API key (or env SPECGUARD_API_KEY); never printed")
    p.add_argument("--read-timeout", type=float, default=60.0)
    p.add_argument("--json", dest="json_path", help="write every run's metrics here")


def cmd_bench(args: argparse.Namespace) -> int:
    try:
        workload = build_workload(WorkloadSpec(kind=args.workload, input_len=args.input_len, output_len=args.output_len,
                                               seed=args.seed, path=args.workload_file))
    except WorkloadError as exc:
        print(f"specguard bench: {exc}", file=sys.stderr)
        return ExitCode.USAGE
    if args.burstiness <= 0 or args.max_concurrency <= 0:
        print("specguard bench: --burstiness and --max-concurrency must be > 0", file=sys.stderr)
        return ExitCode.USAGE
    try:
        handle = _bench_server(args)
    except ServerStartError as exc:
        text = str(exc)
        print(f"specguard bench: {text}", file=sys.stderr)
        return ExitCode.USAGE if "is not an http(s) URL" in text else ExitCode.NOT_MEASURED
    try:
        rows = _bench_levels(args, handle, workload)
    finally:
        if not handle.attached:
            stop(handle)
    if args.json_path:
        BENCH.save({"schema": BENCH_SCHEMA, "schema_version": BENCH_VERSION,
                    "server": handle.effective.fingerprint_fields(), "levels": rows}, args.json_path)
    return ExitCode.NOT_MEASURED if any(r["error"] for r in rows) else ExitCode.OK


def _bench_server(args: argparse.Namespace) -> ServerHandle:
    """The emulator launched for `--emulator PROFILE`, else the server at `--url`."""
    engine = get_engine("emulator" if args.emulator else "sglang")
    if not args.emulator:
        return attach("bench", args.url, engine, api_key=api_key_from(args.api_key), flag="--url")
    cfg = ServerConfig(name="bench", engine="emulator", model_path=f"/models/{args.emulator}",
                       speculative_algorithm=args.speculative_algorithm,
                       draft_model_path="/models/draft" if args.speculative_algorithm else None,
                       args=["--emulator-profile", args.emulator, *args.emulator_arg], startup_timeout_s=60)
    return launch(cfg, engine, log_dir=Path(".specguard/logs"), api_key=api_key_from(args.api_key))


def _bench_levels(args: argparse.Namespace, handle: ServerHandle, workload: Workload) -> list[BenchLevelDoc]:
    """Measure each level (concurrency, or request rate under the in-flight cap), printing every run."""
    sweep = SweepConfig(concurrency=args.concurrency, requests_per_worker=4, warmup=args.warmup,
                        repeats=args.repeats, api=args.api, read_timeout_s=args.read_timeout)
    eff = handle.effective
    print(f"server {handle.base_url}: {eff.engine_version or '?'} model={eff.model_path} "
          f"spec={eff.speculative_algorithm or 'none'} steps={eff.num_steps} topk={eff.eagle_topk} "
          f"draft_tokens={eff.num_draft_tokens} max_running_requests={eff.max_running_requests}")
    print(f"{'C':>5} {'ok':>5} {'fail':>4} {'tok/s':>10} {'req/s':>7} {'accept':>6} {'TTFT p50':>9} {'TTFT p99':>9} "
          f"{'ITL p50':>8} {'ITL p99':>8} {'TPOT p50':>9}")
    levels = [(None, c) for c in args.concurrency] if args.request_rate is None else \
        [(rate, args.max_concurrency) for rate in args.request_rate]
    rows: list[BenchLevelDoc] = []
    for rate, c in levels:
        s = sweep if args.requests is None else replace(sweep, requests_per_worker=max(1, args.requests // c))
        n = None if rate is None else (args.requests or max(16, round(rate * 8)))  # open loop: ~8 s of arrivals
        cell = measure_cell(handle, workload, s, CellLoad(c, api=args.api, request_rate=rate, burstiness=args.burstiness,
                                                          num_requests=n, slo_ms=args.slo))
        for r in cell.runs:
            _print_bench_run(c, r, bool(args.slo))
        if cell.error:
            print(f"      error: {cell.error}")
        rows.append({"concurrency": c, "request_rate": rate, "load_model": cell.runs[0].load_model if cell.runs else "",
                     "error": cell.error, "runs": [run_doc(r) for r in cell.runs]})
    return rows


def _print_bench_run(c: int, r: RunMetrics, slo: bool) -> None:
    lat = r.latency_ms
    acc = f"{r.accept_length:.2f}" if r.accept_length else "-"
    good = f" goodput {r.request_goodput:.2f} req/s ({r.slo_attainment:.0%} met SLO)" if slo else ""
    print(f"{c:>5} {r.completed:>5} {r.failed:>4} {r.output_throughput:>10.1f} {r.request_throughput:>7.2f} "
          f"{acc:>6} {lat['median_ttft_ms']:>9.1f} {lat['p99_ttft_ms']:>9.1f} {lat['median_itl_ms']:>8.2f} "
          f"{lat['p99_itl_ms']:>8.2f} {lat['median_tpot_ms']:>9.2f}  {r.load_model}{good}")
    for name, cs in r.categories.items():
        cacc = f"{cs.accept_length:.2f}" if cs.accept_length else "-"
        print(f"      {name:<14} {cs.completed:>5} ok {cs.output_throughput:>10.1f} tok/s "
              f"({cs.throughput_share:.0%})  accept {cacc}")
    for n in r.notes:
        print(f"      warning: {note_line(n)}")


def _emulate_parser(sub: Subcommands) -> None:
    # No options of its own: every flag (and --help) goes to the emulator's launch_server parser,
    # so `specguard emulate --help` lists SGLang's flags and the --emulator-* ones.
    sub.add_parser("emulate", add_help=False, prefix_chars="\0",
                   help="run the SGLang-compatible emulator (launch_server flags; --profile NAME = --emulator-profile NAME)")


def cmd_emulate(rest: list[str]) -> int:
    from specguard.emulator.launch_server import build_arg_parser
    from specguard.emulator.launch_server import main as emulator_main

    argv: list[str] = []
    it = iter(rest)
    for item in it:
        if item == "--profile":
            argv += ["--emulator-profile", next(it, "")]
        elif item.startswith("--profile="):
            argv.append("--emulator-profile=" + item.split("=", 1)[1])
        else:
            argv.append(item)
    if not any(a.split("=")[0] == "--emulator-profile" for a in argv):
        argv = ["--emulator-profile", "fast", *argv]
    if "-h" in argv or "--help" in argv:
        parser = build_arg_parser()
        parser.prog = "specguard emulate"
        parser.print_help()
        print("\n--profile NAME is short for --emulator-profile NAME (default: fast).")
        return ExitCode.OK
    return emulator_main(argv)


def _results_parsers(sub: Subcommands) -> None:
    p = sub.add_parser("compare", help="B over A per cell, with the gates' statistics (A, B: --results-json files)")
    p.add_argument("a", help="results file of the accepted state (before)")
    p.add_argument("b", help="results file to judge (after)")
    p = sub.add_parser("recommend", help="crossover concurrency and a speculation policy from a sweep's results")
    p.add_argument("results", help="results file (--results-json) of a sweep with a speculative configuration and its reference")
    p.add_argument("--config", help="the speculative configuration (default: the one with the most draft tokens)")
    p.add_argument("--confidence", type=float, default=crossovers.DEFAULT_CONFIDENCE, help="CI level (default 0.95)")
    p.add_argument("--json", dest="json_path", help="write the recommendation as JSON here")
    p.add_argument("--adaptive-config", help="write SGLang's --speculative-adaptive-config file here (when it applies)")
    p = sub.add_parser("report", help="(re)write the report directory from a results file")
    p.add_argument("results", help="results file (--results-json)")
    p.add_argument("--report-dir", required=True)


def _init_parser(sub: Subcommands) -> None:
    p = sub.add_parser("init", help="start a repository's gate: DIR/suite.toml, DIR/test_speculation.py and a CI workflow")
    p.add_argument("directory", nargs="?", default="perf_tests", help="where the suite and tests go (default perf_tests)")
    p.add_argument("--server-url", help="describe this running SGLang server (its /server_info) instead of the emulator")
    p.add_argument("--api-key", default=None, help="the server's API key (or env SPECGUARD_API_KEY); never written")
    p.add_argument("--force", action="store_true", help="overwrite files that exist")


def cmd_init(args: argparse.Namespace) -> int:
    directory = Path(args.directory)
    try:
        written = starter.init(directory, args.server_url, args.force, api_key_from(args.api_key))
    except starter.InitError as exc:
        print(f"specguard init: {exc}", file=sys.stderr)
        return exc.code
    for path in written:
        print(f"wrote {path}")
    tests = str(directory)
    print(f"next: pytest {tests}                      # first run: no baselines yet, every cell says how to record")
    print(f"      pytest {tests} --update-baselines   # record, review and commit baselines/")
    print(f"      pytest {tests} --require-baselines  # the gate (CI): exit 0 ok, 1 regression, 3 not measured")
    return ExitCode.OK


def cmd_compare(args: argparse.Namespace) -> int:
    try:
        cmp = compare.compare(results.load(args.a), results.load(args.b))
    except results.ResultsError as exc:
        print(f"specguard compare: {exc}", file=sys.stderr)
        return ExitCode.USAGE
    print(compare.render_text(cmp, args.a, args.b))
    return ExitCode.REGRESSION if cmp.regressed else ExitCode.OK


def cmd_recommend(args: argparse.Namespace) -> int:
    if not 0 < args.confidence < 1:
        print(f"specguard recommend: --confidence {args.confidence} must be in (0, 1), e.g. 0.95", file=sys.stderr)
        return ExitCode.USAGE
    try:
        rec = recommend.recommend(results.load(args.results), config=args.config, confidence=args.confidence,
                                  source=args.results)
    except results.ResultsError as exc:
        print(f"specguard recommend: {exc}", file=sys.stderr)
        return ExitCode.USAGE
    except recommend.RecommendError as exc:  # the results cannot support a policy: measure more
        print(f"specguard recommend: {exc}", file=sys.stderr)
        return ExitCode.NOT_MEASURED
    if args.adaptive_config and rec.sglang.get("applies"):
        rec.sglang["launch_flags"][-1] = args.adaptive_config
        atomic_write_json(Path(args.adaptive_config), rec.sglang["speculative_adaptive_config"])
        print(recommend.render_text(rec, args.adaptive_config))
    else:
        print(recommend.render_text(rec))
    if args.json_path:
        RECOMMENDATION.save(recommend.to_json(rec), args.json_path)
    return ExitCode.OK


def cmd_report(args: argparse.Namespace) -> int:
    try:
        doc = results.load(args.results)
    except results.ResultsError as exc:
        print(f"specguard report: {exc}", file=sys.stderr)
        return ExitCode.USAGE
    for path in write_report_dir(doc, Path(args.report_dir)):
        print(path)
    return ExitCode.OK


def main(argv: list[str] | None = None) -> int:
    """Run one command; every error a user can cause is one line on stderr and an exit code
    (docs/ci.md); a Python traceback only with --debug (or SPECGUARD_DEBUG=1)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    debug = "--debug" in argv or os.environ.get("SPECGUARD_DEBUG") == "1"
    argv = [a for a in argv if a != "--debug"]
    try:
        return _main(argv)
    except KeyboardInterrupt:
        print("specguard: interrupted", file=sys.stderr)
        return ExitCode.INTERRUPTED
    except (ConfigError, ResultsError, WorkloadError) as exc:
        if debug:
            raise
        print(f"specguard: {str(exc).splitlines()[0]}", file=sys.stderr)
        return ExitCode.USAGE
    except OSError as exc:
        if debug:
            raise
        print(f"specguard: {exc}", file=sys.stderr)
        user_error = isinstance(exc, (FileNotFoundError, PermissionError, IsADirectoryError))
        return ExitCode.USAGE if user_error else ExitCode.NOT_MEASURED
    except Exception as exc:  # an internal error: not a verdict
        if debug:
            raise
        first = (str(exc).strip().splitlines() or [""])[0]
        print(f"specguard: internal error: {type(exc).__name__}: {first}; rerun with --debug for the traceback",
              file=sys.stderr)
        return ExitCode.NOT_MEASURED


def build_parser() -> argparse.ArgumentParser:
    """Every `specguard` command's parser (``emulate`` passes its flags to the emulator's own)."""
    parser = _Parser(prog="specguard", description=__doc__, epilog="--debug: show Python tracebacks. Exit codes: "
                     "0 ok, 1 regression, 2 interrupted, 3 could not measure, 4 usage or input error (docs/ci.md).")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    _bench_parser(sub)
    _emulate_parser(sub)
    _results_parsers(sub)
    _init_parser(sub)
    ab.add_parser(sub)
    tune_cli.add_parser(sub)
    history_cli.add_parser(sub)
    export.add_parser(sub)
    return parser


def _main(argv: list[str]) -> int:
    if argv and argv[0] == "emulate":
        return cmd_emulate(argv[1:])
    args = build_parser().parse_args(argv)
    commands = {"bench": cmd_bench, "init": cmd_init, "compare": cmd_compare, "recommend": cmd_recommend, "report": cmd_report,
                "tune": tune_cli.run, "history": history_cli.run, "export": export.run, "ab": ab.run, "bisect": ab.run}
    return commands[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
