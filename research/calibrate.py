"""Fit an emulator profile to a measured sweep, so the emulator reproduces a real server.

Input: a results JSON (``pytest perf_tests --results-json``) or a typed-in table of
concurrency, baseline tok/s, speculative tok/s and accept length. The fit is the simulator in
the loop: a first guess from step time = running requests / tok/s, then every table point is
corrected by the ratio of simulated to measured tok/s until ``simulate_closed_loop`` gives
the measured figures. Baseline points fix ``forward_ms`` (tokens in the batch = running
requests); speculative points then fix the drafter's ``draft_ms`` (verify cost = forward_ms of
running requests x draft tokens, which the baseline fit already gives).
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, cast

import numpy as np

from specguard.emulator.model import ClosedLoop, SimLaunch, SimulationResult, simulate_closed_loop
from specguard.emulator.profile import DraftProfile, EmulatorProfile, PiecewiseLinear, load_profile
from specguard.emulator.spec import SpecRequest, resolve_settings, uniform_accept_prob
from specguard.labels import ExitCode, Level
from specguard.report.results import validate

UNCAPPED = 1024  # the profile's cap when the baseline's running requests were not limited
ITERATIONS = 60
CONVERGED = 1e-3  # largest correction (simulated / measured - 1 per knot) that stops the iteration


@dataclass(frozen=True)
class SpecSeries:
    """One speculative configuration's measured curve."""

    request: SpecRequest  # as launched (unset fields resolve as SGLang does)
    cap: int | None  # its running-request cap (None: SGLang's 48 under speculation)
    tok_s: dict[int, float]
    accept_length: dict[int, float]
    accept_length_by_category: dict[str, float] = field(default_factory=dict)  # over all its runs

    @property
    def algorithm(self) -> str:
        """The speculative algorithm as launched (every series is read with one)."""
        if self.request.algorithm is None:
            raise ValueError("a speculative series needs its --speculative-algorithm")
        return self.request.algorithm


def category_accept_lengths(cells: list[dict[str, Any]]) -> dict[str, float]:
    """Per prompt category, the accept length over every run of `cells` (ratio of sums: each run's
    category accept length weighted by its verify steps), from the runs' "categories" summaries."""
    tokens: dict[str, float] = {}
    steps: dict[str, float] = {}
    for cell in cells:
        for run in cell["runs"]:
            for name, cat in (run.get("categories") or {}).items():
                if cat.get("accept_length") and cat.get("total_verify_ct"):
                    tokens[name] = tokens.get(name, 0.0) + cat["accept_length"] * cat["total_verify_ct"]
                    steps[name] = steps.get(name, 0.0) + cat["total_verify_ct"]
    return {name: tokens[name] / steps[name] for name in sorted(steps)}


@dataclass(frozen=True)
class MeasuredSweep:
    """What a fit needs: the workload, the baseline curve, and the speculative curves."""

    input_len: int
    output_len: int
    same_prompt: bool  # every request the same prompt (prefix-cache hits, as in seed figure A)
    base_tok_s: dict[int, float]
    specs: list[SpecSeries]
    base_cap: int | None = None  # None: not limited at the measured concurrencies
    num_requests: dict[int, int] = field(default_factory=dict)  # per level; default 2 x concurrency
    model_path: str = "/models/fitted"
    skipped: list[str] = field(default_factory=list)  # configurations not fitted, with the reason

    def requests(self, c: int) -> int:
        return self.num_requests.get(c, 2 * c)


# -- reading measurements ------------------------------------------------------------------------
def _clients(cell: dict[str, Any]) -> int:
    """A cell's concurrency from its level's name; a request-rate sweep has none to fit."""
    level = Level.parse(cell["level"])
    if level.rate:
        raise ValueError(f"cell {cell['config']} {level}: a request-rate sweep; calibrate fits closed-loop concurrency")
    return level.value


def from_results(doc: dict[str, Any]) -> MeasuredSweep:
    """A specguard results JSON: run means per cell, caps and speculative flags from the servers'
    effective args, the workload from the suite."""
    doc = cast(dict[str, Any], validate(doc, "results"))  # an older schema upgraded: levels by name ("c16")
    servers, cells = doc["servers"], [c for c in doc["cells"] if c["runs"] and not c.get("error")]

    def curve(name: str, key: str) -> dict[int, float]:
        return {_clients(c): float(np.mean([r[key] for r in c["runs"] if r.get(key)]))
                for c in cells if c["config"] == name and any(r.get(key) for r in c["runs"])}

    base_name = next((n for n, s in servers.items() if not (s.get("effective_args") or {}).get("speculative_algorithm")), None)
    if base_name is None:
        raise ValueError("the results have no non-speculative configuration to fit forward_ms to")
    specs: list[SpecSeries] = []
    seen: dict[str, str] = {}  # algorithm -> the configuration it was fitted from
    skipped: list[str] = []
    for name, server in servers.items():
        args = server.get("effective_args") or {}
        algo = args.get("speculative_algorithm")
        if not algo:
            continue
        if algo in seen:  # a profile holds one drafter per algorithm
            skipped.append(f"{name}: {algo} is already fitted from {seen[algo]}")
            continue
        seen[algo] = name
        specs.append(SpecSeries(SpecRequest(algo, args.get("num_steps"), args.get("eagle_topk"), args.get("num_draft_tokens")),
                                args.get("max_running_requests"), curve(name, "output_throughput"),
                                curve(name, "accept_length"),
                                category_accept_lengths([c for c in cells if c["config"] == name])))
    workload = doc["workload"]
    requests = {_clients(c): c["runs"][0]["num_requests"] for c in cells}
    base_args = servers[base_name].get("effective_args") or {}
    return MeasuredSweep(workload["input_len"], workload["output_len"], workload["kind"] == "repeated-id",
                         curve(base_name, "output_throughput"), specs, base_args.get("max_running_requests"), requests,
                         base_args.get("model_path") or "/models/fitted", skipped)


TABLE_SCALARS = ("input_len", "output_len", "cap", "baseline_cap", "algorithm", "num_steps", "topk",
                 "num_draft_tokens", "repeated_prompt", "model_path")


def from_table(rows: list[dict[str, Any]], scalars: dict[str, Any]) -> MeasuredSweep:
    """A typed-in table: rows of concurrency, baseline_tok_s, spec_tok_s, accept_length
    (num_requests optional); the scalars (TABLE_SCALARS) once, or as columns of any row."""
    for row in rows:
        for key in TABLE_SCALARS:
            if row.get(key) not in (None, "") and key not in scalars:
                scalars[key] = row[key]
    for key in ("input_len", "output_len"):
        if key not in scalars:
            raise ValueError(f"the table needs {key}")

    def num(row: dict[str, Any], key: str) -> float | None:
        v = row.get(key)
        return None if v in (None, "") else float(v)

    def opt_int(key: str) -> int | None:
        v = scalars.get(key)
        return None if v in (None, "") else int(v)

    points = [(int(r["concurrency"]), num(r, "baseline_tok_s"), num(r, "spec_tok_s"), num(r, "accept_length"),
               num(r, "num_requests")) for r in rows]
    specs = []
    if any(p[2] for p in points):
        request = SpecRequest(str(scalars.get("algorithm") or "EAGLE3").upper(), opt_int("num_steps"), opt_int("topk"),
                              opt_int("num_draft_tokens"))
        specs.append(SpecSeries(request, opt_int("cap"), {c: s for c, _, s, _, _ in points if s},
                                {c: a for c, _, _, a, _ in points if a}))
    repeated = str(scalars.get("repeated_prompt", "false")).lower() in ("1", "true", "yes")
    return MeasuredSweep(int(scalars["input_len"]), int(scalars["output_len"]), repeated,
                         {c: b for c, b, _, _, _ in points if b}, specs, opt_int("baseline_cap"),
                         {c: int(n) for c, _, _, _, n in points if n}, str(scalars.get("model_path") or "/models/fitted"))


def read_measurements(path: Path) -> MeasuredSweep:
    """Results JSON, table JSON ({"rows": [...], scalars...}) or CSV (header row, scalars as columns)."""
    text = path.read_text(encoding="utf-8")
    if path.suffix.lower() == ".csv":
        return from_table(list(csv.DictReader(text.splitlines())), {})
    doc = json.loads(text)
    if "cells" in doc and "servers" in doc:
        return from_results(doc)
    if "rows" in doc:
        return from_table(doc["rows"], {k: v for k, v in doc.items() if k in TABLE_SCALARS})
    raise ValueError(f"{path}: neither a specguard results JSON (cells, servers) nor a table ({{\"rows\": [...]}})")


# -- fitting -----------------------------------------------------------------------------------
def _table(knots: dict[int, float]) -> PiecewiseLinear:
    xs = sorted(knots)
    return PiecewiseLinear(tuple(float(x) for x in xs), tuple(knots[x] for x in xs))


def _geomean(xs: list[float]) -> float:
    return math.exp(sum(math.log(x) for x in xs) / len(xs))


def _converged(ratios: dict[int, list[float]]) -> bool:
    """Every knot's correction is done (points sharing a knot, e.g. above the cap, can stay apart)."""
    return max(abs(_geomean(rs) - 1) for rs in ratios.values()) < CONVERGED


def _skeleton(sweep: MeasuredSweep, name: str, description: str) -> EmulatorProfile:
    levels = [*sweep.base_tok_s, *(c for s in sweep.specs for c in s.tok_s)]
    return EmulatorProfile(
        name=name, description=description, model_path=sweep.model_path,
        context_length=max(32768, 2 * (sweep.input_len + sweep.output_len)),
        max_running_requests=sweep.base_cap or max(UNCAPPED, max(levels)),
        forward_ms=PiecewiseLinear((1.0,), (1.0,)), attention_ms_per_ktok=0.0, prefill_ms_per_ktok=0.0)


def _simulate(profile: EmulatorProfile, sweep: MeasuredSweep, spec: SpecSeries | None, c: int) -> SimulationResult:
    loop = ClosedLoop(c, sweep.requests(c), sweep.input_len, sweep.output_len, same_prompt=sweep.same_prompt)
    return simulate_closed_loop(profile, spec.request if spec else None, loop,
                                SimLaunch(max_running_requests=spec.cap if spec else None))


def _fit_forward(profile: EmulatorProfile, sweep: MeasuredSweep) -> EmulatorProfile:
    """forward_ms at tokens = running requests, from the baseline: one token per request per step."""
    if not sweep.base_tok_s:
        raise ValueError("no baseline (non-speculative) tok/s to fit forward_ms to")
    cap = profile.max_running_requests
    knots: dict[int, list[float]] = {}
    for c, tok in sweep.base_tok_s.items():
        knots.setdefault(min(c, cap), []).append(1000.0 * min(c, cap) / tok)
    forward = {b: float(np.mean(v)) for b, v in knots.items()}
    for _ in range(ITERATIONS):
        profile = replace(profile, forward_ms=_table(forward))
        ratios: dict[int, list[float]] = {}
        for c, want in sweep.base_tok_s.items():
            ratios.setdefault(min(c, cap), []).append(_simulate(profile, sweep, None, c).output_throughput / want)
        if _converged(ratios):
            break
        forward = {b: ms * _geomean(ratios[b]) for b, ms in forward.items()}
    return profile


def _fit_draft(profile: EmulatorProfile, sweep: MeasuredSweep, series: SpecSeries) -> EmulatorProfile:
    """draft_ms at the running requests of each speculative point, accept_prob from the accept length."""
    if not series.accept_length:
        raise ValueError(f"{series.request.algorithm}: no accept length measured; it is needed to fit the drafter")
    algo = series.algorithm
    placeholder = DraftProfile(PiecewiseLinear((1.0,), (0.0,)), (0.5,))
    settings = resolve_settings(replace(profile, drafts={**profile.drafts, algo: placeholder}), series.request, series.cap)
    spec, cap = settings.spec, settings.max_running_requests
    if spec is None:  # resolve_settings gives a speculative server whenever an algorithm is named
        raise ValueError(f"{algo}: resolved without speculation")
    accept = float(np.mean(list(series.accept_length.values())))
    prob = (uniform_accept_prob(accept, spec.num_steps),)
    by_category: dict[str, tuple[float, ...]] = {
        c: (uniform_accept_prob(a, spec.num_steps),) for c, a in series.accept_length_by_category.items()}
    params = (spec.num_steps, spec.topk, spec.num_draft_tokens)
    verify_tokens = spec.num_draft_tokens

    def verify_ms(b: int) -> float:
        return profile.forward_ms(b * verify_tokens)

    draft: dict[int, float] = {}
    for c, tok in series.tok_s.items():
        b = min(c, cap)
        draft[b] = max((1000.0 * b * accept / tok - verify_ms(b)) / spec.num_steps, 0.0)
    for _ in range(ITERATIONS):
        fitted = replace(profile, drafts={**profile.drafts, algo: DraftProfile(_table(draft), prob, params, by_category)})
        ratios: dict[int, list[float]] = {}
        for c, want in series.tok_s.items():
            ratios.setdefault(min(c, cap), []).append(_simulate(fitted, sweep, series, c).output_throughput / want)
        if _converged(ratios):
            break
        for b, ms in draft.items():
            step_ms = verify_ms(b) + spec.num_steps * ms
            draft[b] = max(ms + step_ms * (_geomean(ratios[b]) - 1) / spec.num_steps, 0.0)
    return fitted


def fit_profile(sweep: MeasuredSweep, name: str = "fitted", description: str = "") -> EmulatorProfile:
    """A deterministic profile (no jitter, no drift) whose simulated sweep is the measured one."""
    profile = _fit_forward(_skeleton(sweep, name, description), sweep)
    for series in sweep.specs:
        profile = _fit_draft(profile, sweep, series)
    return profile


# -- checking the fit --------------------------------------------------------------------------
@dataclass(frozen=True)
class FitPoint:
    series: str  # "baseline" or the speculative algorithm
    metric: str  # "tok/s" or "accept length"
    concurrency: int
    measured: float
    simulated: float

    @property
    def error(self) -> float:
        return self.simulated / self.measured - 1


def fit_errors(profile: EmulatorProfile, sweep: MeasuredSweep) -> list[FitPoint]:
    """Every measured point against ``simulate_closed_loop`` of the profile."""
    out = [FitPoint("baseline", "tok/s", c, want, _simulate(profile, sweep, None, c).output_throughput)
           for c, want in sorted(sweep.base_tok_s.items())]
    for s in sweep.specs:
        for c in sorted(set(s.tok_s) | set(s.accept_length)):
            sim = _simulate(profile, sweep, s, c)
            if c in s.tok_s:
                out.append(FitPoint(s.algorithm, "tok/s", c, s.tok_s[c], sim.output_throughput))
            if c in s.accept_length and sim.accept_length is not None:
                out.append(FitPoint(s.algorithm, "accept length", c, s.accept_length[c], sim.accept_length))
    return out


def render_fit(points: list[FitPoint]) -> str:
    lines = ["| series | metric | C | measured | simulated | error |", "|---|---|---:|---:|---:|---:|"]
    lines += [f"| {p.series} | {p.metric} | {p.concurrency} | {p.measured:.4g} | {p.simulated:.4g} | {p.error:+.1%} |"
              for p in points]
    return "\n".join(lines)


# -- writing the profile -----------------------------------------------------------------------
def _pairs(table: PiecewiseLinear) -> str:
    return "[" + ", ".join(f"[{x:g}, {y:.4f}]" for x, y in zip(table.xs, table.ys)) + "]"


def profile_toml(profile: EmulatorProfile, header: str) -> str:
    """The profile in ``specguard/emulator/profiles/*.toml`` format."""
    lines = [f"# {line}" for line in header.splitlines()]
    lines += [f"name = {json.dumps(profile.name)}", f"description = {json.dumps(profile.description)}",
              f"model_path = {json.dumps(profile.model_path)}", f"context_length = {profile.context_length}",
              f"architectures = {json.dumps(list(profile.architectures))}",
              f"max_running_requests = {profile.max_running_requests}", "",
              f"forward_ms = {_pairs(profile.forward_ms)}",
              f"attention_ms_per_ktok = {profile.attention_ms_per_ktok:g}",
              f"prefill_ms_per_ktok = {profile.prefill_ms_per_ktok:g}", "jitter_pct = 0.0", "drift_pct = 0.0"]
    for algo, d in profile.drafts.items():
        lines += ["", f"[draft.{algo}]", f"draft_ms = {_pairs(d.draft_ms)}",
                  "accept_prob = [" + ", ".join(f"{p:.6f}" for p in d.accept_prob) + "]"]
        if d.default_params is not None:  # unset: SGLang's own choice by architecture
            lines.append(f"default_params = {list(d.default_params)}")
        if d.accept_prob_by_category:  # fitted from the runs' per-category accept lengths
            lines += ["", f"[draft.{algo}.accept_prob_by_category]"]
            lines += [f"{json.dumps(c)} = [" + ", ".join(f"{p:.6f}" for p in probs) + "]"
                      for c, probs in d.accept_prob_by_category.items()]
    return "\n".join(lines) + "\n"


def launch_flags(sweep: MeasuredSweep) -> list[str]:
    """What the emulator needs on its command line to be the measured speculative servers."""
    out = []
    for s in sweep.specs:
        r = s.request
        flags = [f"--speculative-algorithm {r.algorithm}"]
        flags += [f"{k} {v}" for k, v in (("--speculative-num-steps", r.num_steps), ("--speculative-eagle-topk", r.topk),
                                          ("--speculative-num-draft-tokens", r.num_draft_tokens)) if v is not None]
        if s.cap is not None:
            flags.append(f"--max-running-requests {s.cap}")
        out.append(" ".join(flags))
    return out


# -- command line ------------------------------------------------------------------------------
PROG = "python -m research.calibrate"


def build_parser() -> argparse.ArgumentParser:
    """`python -m research.calibrate`: fit an emulator profile to a measured sweep."""
    p = argparse.ArgumentParser(prog=PROG, description="fit an emulator profile to measured tok/s and accept lengths "
                                                       "(docs/research/calibration.md)")
    p.add_argument("measurements", type=Path,
                   help="results JSON (--results-json), or a table: CSV or JSON {\"rows\": [...]} with concurrency, "
                        "baseline_tok_s, spec_tok_s, accept_length and input_len, output_len, cap, algorithm, ...")
    p.add_argument("--out", type=Path, required=True, help="profile TOML to write")
    p.add_argument("--name", help="profile name (default: the output file's stem)")
    p.add_argument("--max-error-pct", type=float, default=10.0, help="exit 1 if a tok/s point is off by more")
    return p


def run(args: argparse.Namespace) -> int:
    try:
        sweep = read_measurements(args.measurements)
        name = args.name or args.out.stem
        profile = fit_profile(sweep, name, f"fitted to {args.measurements.name} by {PROG}")
    except (OSError, ValueError, KeyError) as exc:
        print(f"{PROG}: {args.measurements}: {exc}", file=sys.stderr)
        return ExitCode.USAGE
    flags = launch_flags(sweep)
    header = (f"Fitted by `{PROG} {args.measurements.name}` (docs/research/calibration.md).\n"
              f"Workload: {sweep.input_len} input / {sweep.output_len} output tokens"
              f"{', one repeated prompt' if sweep.same_prompt else ''}. Speculative launches: "
              + ("; ".join(flags) or "none"))
    args.out.write_text(profile_toml(profile, header), encoding="utf-8")
    points = fit_errors(load_profile(args.out), sweep)  # the file as written, read back and simulated
    print(render_fit(points))
    for note in sweep.skipped:
        print(f"not fitted: {note}")
    print(f"wrote {args.out}; launch with --emulator-profile {args.out} " + (f"and {' / '.join(flags)}" if flags else ""))
    worst = max((p for p in points if p.metric == "tok/s"), key=lambda p: abs(p.error))
    if abs(worst.error) * 100 > args.max_error_pct:
        print(f"fit error {worst.error:+.1%} at {worst.series} c{worst.concurrency} exceeds {args.max_error_pct:g}%",
              file=sys.stderr)
        return ExitCode.REGRESSION
    return ExitCode.OK


def main(argv: list[str] | None = None) -> int:
    return run(build_parser().parse_args(sys.argv[1:] if argv is None else argv))


if __name__ == "__main__":
    sys.exit(main())
