"""`specguard ab` on simulated launches: its false fails and its power for a tok/s drop, through
the comparison's own rounds and decisions (``ab.rounds.BuildComparison`` with a synthetic
``Launcher``), on the default suite's configurations, levels and gates (issue 26;
`python -m research.study.ab_power`, docs/ab.md quotes it).

A simulated A/B run is one session on one machine: the study's gpu noise, a day offset shared by
every launch of the run (it cancels between the builds, as the ABBA design intends), each launch
its own offset (the launch part of the 1 % between-session spread) and each run 0.5 %. Accept
length is deterministic per request (SGLang at temperature 0): one run of it varies by 0.1 %.
Build B changes one configuration's engine: every verify step ``1 / (1 - drop)`` longer, so its
tok/s and step rate fall by ``drop`` at every level and its accept length stays.
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass, replace

import numpy as np

from research.study.cell_rates import CellCase, cell_rates
from research.study.noise import GPU_DAY_SHARE, GPU_WITHIN
from specguard.ab.plan import budget_of, gate_specs, levels_of
from specguard.ab.rounds import STEP_RATE, BuildComparison, LaunchResult, Selection
from specguard.config import Suite, load_suite
from specguard.labels import ACCEPT_LENGTH, THROUGHPUT

ACCEPT_RUN_SD = 0.001
BASE_TOK_S, BASE_ACCEPT = 1000.0, 3.0


@dataclass(frozen=True)
class AbCase:
    """One setting: the total between-session spread (as the study's gpu presets), the changed
    configuration and its true tok/s drop, the launches per build at most, and a slow drift of
    the machine (a random walk on the log scale, one step of ``drift`` sd per launch: a warming
    or filling machine, which the ABBA order meets on both builds)."""

    spread: float = 0.01
    config: str = "eagle3"
    drop: float = 0.0
    max_rounds: int = 4
    drift: float = 0.0


class SyntheticLauncher:
    """(build, configuration, round) -> one launch's runs at every level, with a fresh offset."""

    def __init__(self, suite: Suite, case: AbCase, rng: np.random.Generator, runs: int) -> None:
        self._suite, self._case, self._rng, self._runs = suite, case, rng, runs
        self._day = rng.normal(0.0, case.spread * GPU_DAY_SHARE)
        self._launch_sd = case.spread * math.sqrt(1 - GPU_DAY_SHARE**2)
        self._walk = 0.0

    def __call__(self, build: str, config: str, round_no: int) -> LaunchResult:
        changed = build == "B" and config == self._case.config
        speculative = self._suite.servers[config].speculative
        values: dict[int, dict[str, list[float]]] = {}
        self._walk += self._rng.normal(0.0, self._case.drift) if self._case.drift > 0 else 0.0
        # one offset per launch, shared by its levels (one server process)
        offset = (self._day + self._walk + self._rng.normal(0.0, self._launch_sd)
                  + (math.log(1 - self._case.drop) if changed else 0))
        for level in levels_of(self._suite):
            step = np.exp(offset + self._rng.normal(0.0, GPU_WITHIN, self._runs))
            accept = np.ones(self._runs)
            if speculative:
                accept = BASE_ACCEPT * np.exp(self._rng.normal(0.0, ACCEPT_RUN_SD, self._runs))
            tok_s = BASE_TOK_S * step * accept
            values[level] = {THROUGHPUT: list(tok_s), STEP_RATE: list(200 * step)}
            if speculative:
                values[level][ACCEPT_LENGTH] = list(accept)
        return LaunchResult(build, config, round_no, values)


def selection_of(suite: Suite) -> Selection:
    speculative = frozenset(n for n, s in suite.servers.items() if s.speculative)
    refs = {n: s.reference for n, s in suite.servers.items() if s.speculative and s.reference}
    return Selection(list(suite.servers), levels_of(suite), speculative, refs)


def ab_run(suite: Suite, case: AbCase, rng: np.random.Generator) -> BuildComparison:
    """One simulated `specguard ab` of every configuration of ``suite``."""
    cmp = BuildComparison(selection_of(suite), gate_specs(suite), budget_of(suite, case.max_rounds),
                     SyntheticLauncher(suite, case, rng, suite.sweep.repeats))
    cmp.run()
    return cmp


def _worse(cmp: BuildComparison) -> set[tuple[str, str]]:
    """(configuration, gate) of every cell or group of levels decided "different" for the worse."""
    return {(c.config, c.gate) for c in cmp.regressions()} | {(g.config, g.gate) for g in cmp.group_regressions()}


def ab_rates(suite: Suite, case: AbCase, n: int, seed: int = 0) -> dict[str, float]:
    """Over ``n`` runs: the share with a regression (any cell, or any configuration across its
    levels, "different" for the worse), with the changed configuration's tok/s among them (a cell
    of it or all its levels), and the launches per build and configuration the runs took (mean over
    configurations and runs)."""
    rng = np.random.default_rng(seed)
    failed = caught = 0
    launches: list[float] = []
    for _ in range(n):
        cmp = ab_run(suite, case, rng)
        worse = _worse(cmp)
        failed += bool(worse)
        caught += (case.config, THROUGHPUT) in worse
        per = [sum(1 for x in cmp.launches if x.build == "A" and x.config == c) for c in suite.servers]
        launches.append(float(np.mean(per)))
    return {"fail_rate": failed / n, "tok_s_caught": caught / n, "launches_per_build": float(np.mean(launches))}


def ab_gate_rates(suite: Suite, case: AbCase, n: int, seed: int = 0) -> dict[tuple[str, str], tuple[float, float]]:
    """Per (configuration, gate): the share of ``n`` runs that called it worse (a cell or its group
    of levels) and its group's alpha: each family member against its own share."""
    rng = np.random.default_rng(seed)
    counts: dict[tuple[str, str], int] = {}
    alphas: dict[tuple[str, str], float] = {}
    for _ in range(n):
        cmp = ab_run(suite, case, rng)
        alphas.update({(g.config, g.gate): g.alpha for g in cmp.groups})
        for key in _worse(cmp):
            counts[key] = counts.get(key, 0) + 1
    return {key: (counts.get(key, 0) / n, alpha) for key, alpha in sorted(alphas.items())}


AB_HEADLINE_DROP, AB_HEADLINE_ROUNDS, AB_TARGET_POWER, AB_MAX_SEARCH = 0.03, 4, 0.9, 8


def ab_headline(suite: Suite, runs: int, seed: int = 0) -> dict[str, float | int | None]:
    """The A/B keys of gate-study.json: eagle3 tok/s -3 % caught with at most 4 launches per
    build (1 % launch spread, no drift), and the fewest launches per build that catch it 9 times
    in 10 (None: more than AB_MAX_SEARCH)."""
    power = ab_rates(suite, AbCase(drop=AB_HEADLINE_DROP, max_rounds=AB_HEADLINE_ROUNDS), runs, seed)["tok_s_caught"]
    needs, rounds = (AB_HEADLINE_ROUNDS if power >= AB_TARGET_POWER else None), AB_HEADLINE_ROUNDS
    while needs is None and rounds < AB_MAX_SEARCH:
        rounds += 1
        if ab_rates(suite, AbCase(drop=AB_HEADLINE_DROP, max_rounds=rounds), runs, seed)["tok_s_caught"] >= AB_TARGET_POWER:
            needs = rounds
    return {"power_ab_tok_s_3pct": power, "ab_launches_per_build": needs, "ab_runs": runs}


def merge_into(path: str, keys: dict[str, float | int | None]) -> None:
    """Add ``keys`` to an existing gate-study.json and each of its other acceptance models' documents
    (A/B has no acceptance model: the same keys), all or nothing, leaving the rest as it was."""
    import json
    from pathlib import Path

    from specguard.store.atomic import atomic_write_json

    doc = json.loads(Path(path).read_text())
    others = {name: {**other, **keys} for name, other in (doc.get("other_acceptance") or {}).items()}
    atomic_write_json(Path(path), {**doc, **keys, "other_acceptance": others})


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m research.study.ab_power", description=__doc__)
    p.add_argument("--suite", default="perf_tests/suite.toml")
    p.add_argument("--runs", type=int, default=400, help="simulated A/B runs per case")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", dest="json_path", help="only measure power_ab_tok_s_3pct and ab_launches_per_build "
                   "(--runs each) and add them to this gate-study.json")
    p.add_argument("--per-gate", action="store_true", help="only each configuration and gate's rate of \"worse\" "
                   "against its alpha: unchanged builds at 1 %% and 2 %% spread, and eagle3 tok/s -3 %%")
    args = p.parse_args(argv)
    suite = load_suite(args.suite)
    if args.per_gate:
        for case in (AbCase(), AbCase(spread=0.02), AbCase(drop=0.03), AbCase(drop=0.03, drift=0.003)):
            gate_rates = ab_gate_rates(suite, case, args.runs, args.seed)
            print(f"A/B, spread {case.spread:.0%}, drift {case.drift:.1%}/launch, {case.config} tok/s {-case.drop:+.0%}, "
                  f"{args.runs} runs, seed {args.seed}, worse / alpha per configuration and gate: "
                  + ", ".join(f"{c} {g} {r:.4f}/{a:.5f}" for (c, g), (r, a) in gate_rates.items()), flush=True)
        return 0
    if args.json_path:
        keys = ab_headline(suite, args.runs, args.seed)
        merge_into(args.json_path, keys)
        print(f"{args.json_path}: power_ab_tok_s_3pct={keys['power_ab_tok_s_3pct']:.3f} "
              f"ab_launches_per_build={keys['ab_launches_per_build']} ({args.runs} runs each)", flush=True)
        return 0
    tol = suite.tolerances
    # the prior at half a 1 % truth: A/B learns the launch spread from the run, so it should not matter
    half = replace(suite, tolerances=replace(tol, prior_between_sd=0.005, prior_day_sd=0.0025))
    cases = ((suite, AbCase()), (suite, AbCase(spread=0.02)), (suite, AbCase(drift=0.003)),
             (suite, AbCase(drop=0.03)), (suite, AbCase(drop=0.03, drift=0.003)), (suite, AbCase(drop=0.04)),
             (suite, AbCase(drop=0.04, drift=0.003)), (suite, AbCase(drop=0.05)), (suite, AbCase(drop=0.03, max_rounds=5)),
             (suite, AbCase(drop=0.03, max_rounds=6)), (suite, AbCase(spread=0.02, drop=0.03)),
             (half, AbCase()), (half, AbCase(spread=0.02)), (half, AbCase(drop=0.03)))
    power_3pct, needs = float("nan"), None
    for s, case in cases:
        r = ab_rates(s, case, args.runs, args.seed)
        print(f"A/B, prior {s.tolerances.prior_between_sd:.1%}, spread {case.spread:.0%}, drift {case.drift:.1%}/launch, "
              f"{case.config} tok/s {-case.drop:+.0%}, at most {case.max_rounds} launches per build: any regression "
              f"{r['fail_rate']:.3f}, {case.config} tok/s caught {r['tok_s_caught']:.3f}, launches per build and "
              f"configuration {r['launches_per_build']:.2f} ({args.runs} runs)", flush=True)
        if s is suite and case.spread == 0.01 and case.drop == 0.03 and case.drift == 0:
            if case.max_rounds == 4:
                power_3pct = r["tok_s_caught"]
            if needs is None and r["tok_s_caught"] >= 0.9:
                needs = case.max_rounds
    for launches in (1, 3):  # history gating of one cell beside it (cell_rates: K = 5, prior = the truth)
        rates = cell_rates(CellCase(truth=0.01, prior=0.01, launches=launches, drop=0.03), 4 * args.runs, args.seed)
        print(f"history, spread 1%, tok/s -3%, one cell, {launches} launch(es): fails {rates['fail_rate']:.3f} "
              f"({4 * args.runs} cells)", flush=True)
    print(f"power_ab_tok_s_3pct={power_3pct:.3f} ab_launches_per_build={needs if needs else '>6'}"
          f" (launches per build for -3 % at 0.9)", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
