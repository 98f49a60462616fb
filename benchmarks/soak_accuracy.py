"""The soak detector (specguard/decide/soak.py) on simulated soaks: how often it catches an
acceptance decay and a step-time rise, where it places them, which half it names, and how often
an unchanged soak fails. Run by hand; its output is quoted in docs and notes:

    python benchmarks/soak_accuracy.py [--soaks 1000] [--windows 20] [--seed 0]

A soak is `windows` windows (10 minutes of 30 s windows by default) plus one warm-up window.
Noise per window, log scale: accept length 0.3 % (a window's runs average thousands of verify
steps), step time 0.5 %, tok/s their combination plus 0.5 % of its own; stalls as in the gate
study: 1 window in 50 at 0.7x tok/s (its step time 1/0.7x, accept length untouched). Scenarios:
- decay: accept length falls 10 % linearly from a third of the way in to the end (tok/s with it);
- engine: step time rises 5 % at a third of the way in and stays (tok/s falls with it);
- unchanged.
"Placed" counts a caught soak whose first change point the worse way on the scenario's metric
starts within 2 windows of the truth (the first degraded window).
"""

from __future__ import annotations

import argparse

import numpy as np

from specguard.decide.result import Half, SoakMetric
from specguard.decide.soak import SoakSettings, decide_soak
from specguard.labels import Verdict

SD = {SoakMetric.ACCEPT_LENGTH: 0.003, SoakMetric.STEP_TIME: 0.005, SoakMetric.THROUGHPUT: 0.005}
STALL_RATE, STALL_FACTOR = 1 / 50, 0.7


def simulate(kind: str, windows: int, rng: np.random.Generator) -> tuple[dict[SoakMetric, list[float | None]], int]:
    n = windows + 1  # one warm-up window first
    start = 1 + windows // 3
    accept = np.full(n, 3.0)
    step = np.full(n, 5.0)
    if kind == "decay":
        ramp = np.clip((np.arange(n) - start + 1) / (n - start), 0, 1)
        accept *= 1 - 0.10 * ramp
    elif kind == "engine":
        step[start:] *= 1.05
    accept *= np.exp(rng.normal(0, SD[SoakMetric.ACCEPT_LENGTH], n))
    step *= np.exp(rng.normal(0, SD[SoakMetric.STEP_TIME], n))
    stalled = rng.random(n) < STALL_RATE
    step = np.where(stalled, step / STALL_FACTOR, step)
    tok = 600.0 * (accept / 3.0) * (5.0 / step) * np.exp(rng.normal(0, SD[SoakMetric.THROUGHPUT], n))
    series: dict[SoakMetric, list[float | None]] = {
        SoakMetric.ACCEPT_LENGTH: list(accept), SoakMetric.STEP_TIME: list(step), SoakMetric.THROUGHPUT: list(tok),
        SoakMetric.ITL_P99: [20.0] * n}
    return series, start


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--soaks", type=int, default=1000)
    p.add_argument("--windows", type=int, default=20)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    settings = SoakSettings(warmup_windows=1, alpha=0.001, min_change=0.03)
    rng = np.random.default_rng(args.seed)
    print(f"{args.soaks} simulated soaks per scenario, {args.windows} windows + 1 warm-up, stalls 1 in 50 at 0.7x")
    print("| scenario | failed | placed within 2 windows | named | first change window (median) |")
    print("|---|---|---|---|---|")
    for kind, metric, half in (("decay", SoakMetric.ACCEPT_LENGTH, Half.DRAFTER),
                               ("engine", SoakMetric.STEP_TIME, Half.ENGINE), ("unchanged", None, None)):
        failed = placed = named = 0
        where = []
        for _ in range(args.soaks):
            series, truth = simulate(kind, args.windows, rng)
            verdict, soak = decide_soak(series, settings)
            if verdict != Verdict.FAIL:
                continue
            failed += 1
            shift = next((s for s in soak.shifts if s.metric == metric), None)
            if shift is not None:
                where.append(shift.window)
                placed += abs(shift.window - truth) <= 2
            named += half is not None and soak.half == half
        median = f"{np.median(where):.0f} (truth {1 + args.windows // 3})" if where else "-"
        named_text = f"{named / args.soaks:.3f} {half.value}" if half else "-"
        placed_text = f"{placed / args.soaks:.3f}" if metric else "-"
        print(f"| {kind} | {failed / args.soaks:.3f} | {placed_text} | {named_text} | {median} |")


if __name__ == "__main__":
    main()
