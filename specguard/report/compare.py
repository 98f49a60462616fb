"""Two results files, cell by cell: B over A with the gates' statistics and a verdict.

A is the "before" (e.g. the accepted commit), B the "after". Both are separate server launches,
so each ratio is `stats.compare_sessions` (Welch plus the declared launch-to-launch spread on
each side), at the gates' per-cell confidence (family alpha split over the compared cells), and
the verdict is the gates' three outcomes against B's tolerances.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from specguard.decide.gates import gate_confidence
from specguard.decide.stats import RatioEstimate, compare_sessions
from specguard.labels import Level, Verdict
from specguard.report.results import ResultsError, cell_level, config_order, effective, sorted_cells
from specguard.report.schema import ResultsDoc
from specguard.report.terminal import fmt, level_column

COMPARABLE_WORKLOAD = ("kind", "input_len", "output_len", "seed", "repeated_id", "vocab_size", "path")
COMPARABLE_SWEEP = ("api", "requests_per_worker")
METRICS = {"throughput": ("output_throughput", "throughput", "prior_between_sd"),
           "accept_length": ("accept_length", "accept_length", "prior_between_sd_accept")}


@dataclass(frozen=True)
class CellComparison:
    config: str
    level: Level
    metric: str  # "throughput" or "accept_length"
    a: float
    b: float
    estimate: RatioEstimate
    verdict: Verdict  # pass / fail / inconclusive (against 1 - tolerance)


@dataclass
class Comparison:
    cells: list[CellComparison]
    notes: list[str]

    @property
    def regressed(self) -> bool:
        return any(c.verdict == Verdict.FAIL for c in self.cells)


def _check_comparable(a: ResultsDoc, b: ResultsDoc) -> None:
    diffs = [f"workload.{k}: {a['workload'].get(k)!r} vs {b['workload'].get(k)!r}"
             for k in COMPARABLE_WORKLOAD if a["workload"].get(k) != b["workload"].get(k)]
    diffs += [f"sweep.{k}: {a['sweep'].get(k)!r} vs {b['sweep'].get(k)!r}"
              for k in COMPARABLE_SWEEP if a["sweep"].get(k) != b["sweep"].get(k)]
    if diffs:
        raise ResultsError("the two results measured different work, so their tok/s are not comparable: "
                           + "; ".join(diffs))


def _samples(doc: ResultsDoc, key: str) -> dict[tuple[str, Level], list[float]]:
    out = {}
    for cell in sorted_cells(doc):
        vals = [r[key] for r in cell["runs"] if r.get(key) is not None and r[key] > 0]
        if not cell["error"] and len(vals) >= 2:
            out[(cell["config"], cell_level(cell))] = vals
    return out


SERVER_KEYS = ("engine_version", "model_path", "speculative_algorithm", "num_steps", "eagle_topk",
               "num_draft_tokens", "max_running_requests", "tp_size")


def _server_differences(a: ResultsDoc, b: ResultsDoc, names: set[str]) -> list[str]:
    """Every effective argument that differs between the two servers of a configuration: the
    core ones first, then the resolved arguments that change performance (attention backend,
    KV cache dtype, attention DP, CUDA-graph sizes, adaptive speculation, ...) by name."""
    notes = []
    for name in sorted(names):
        eff_a, eff_b = _effective_args(a, name), _effective_args(b, name)
        extra = sorted((set(eff_a) | set(eff_b)) - set(SERVER_KEYS))
        for key in (*SERVER_KEYS, *extra):
            va = effective(a, name, key) if key in SERVER_KEYS else eff_a.get(key)
            vb = effective(b, name, key) if key in SERVER_KEYS else eff_b.get(key)
            if va != vb:
                notes.append(f"{name}: {key} {va!r} -> {vb!r}")
    return notes


def _effective_args(doc: ResultsDoc, name: str) -> dict[str, Any]:
    """What a configuration's server reported running ({} when it never came up or is not in `doc`)."""
    server = doc["servers"].get(name)
    return (server.get("effective_args") if server else None) or {}


def compare(a: ResultsDoc, b: ResultsDoc) -> Comparison:
    """Every cell measured error-free in both documents; ResultsError when nothing is comparable."""
    _check_comparable(a, b)
    tol = b["tolerances"]
    pairs = _pairs(a, b)
    confidence = gate_confidence(tol["family_alpha"] / len(pairs))
    out = []
    for metric, (config, c), xa, xb in pairs:
        _, tol_key, sd_key = METRICS[metric]
        est = compare_sessions(xb, xa, threshold=1 - tol[tol_key], launch_sd=tol[sd_key], confidence=confidence,
                               rule=tol.get("fail_rule", "beyond-tolerance"))
        out.append(CellComparison(config, c, metric, sum(xa) / len(xa), sum(xb) / len(xb), est, est.outcome()))
    notes = _unpaired_notes(a, b, out) + _server_differences(a, b, {x.config for x in out})
    notes.append(f"per-cell confidence {confidence:.4f} (family alpha {tol['family_alpha']} over {len(out)} "
                 f"comparisons); tolerances from B: throughput {tol['throughput']:.0%}, accept length {tol['accept_length']:.0%}")
    return Comparison(out, notes)


Pair = tuple[str, tuple[str, Level], list[float], list[float]]  # metric, (config, level), A's runs, B's runs


def _pairs(a: ResultsDoc, b: ResultsDoc) -> list[Pair]:
    """Each metric of each cell with enough runs in both documents, in B's suite order (throughput
    first); ResultsError when there is none."""
    pairs: list[Pair] = []
    for metric, (key, _, _) in METRICS.items():
        sa, sb = _samples(a, key), _samples(b, key)
        pairs += [(metric, cell, sa[cell], sb[cell]) for cell in sb if cell in sa]
    if not pairs:
        cells_a = sorted({(c["config"], cell_level(c)) for c in a["cells"]})
        cells_b = sorted({(c["config"], cell_level(c)) for c in b["cells"]})
        raise ResultsError(f"no cell was measured (error-free, >= 2 runs) in both files: A has {_names(cells_a)}, "
                           f"B has {_names(cells_b)}")
    order = {name: i for i, name in enumerate(config_order(b))}
    pairs.sort(key=lambda p: (order.get(p[1][0], len(order)), p[1][1], p[0] != "throughput"))
    return pairs


def _unpaired_notes(a: ResultsDoc, b: ResultsDoc, compared: list[CellComparison]) -> list[str]:
    """The cells of either document that were not compared (missing, failed or too few runs in the other)."""
    done = {(x.config, x.level) for x in compared}
    only_a = {(c["config"], cell_level(c)) for c in a["cells"]} - done
    only_b = {(c["config"], cell_level(c)) for c in b["cells"]} - done
    notes = []
    if only_a:
        notes.append(f"not compared (missing or failed in B): {_names(sorted(only_a))}")
    if only_b:
        notes.append(f"not compared (missing or failed in A): {_names(sorted(only_b))}")
    return notes


def _names(cells: list[tuple[str, Level]]) -> str:
    return ", ".join(f"{n}-{level}" for n, level in cells) or "none"


def render_text(cmp: Comparison, a_label: str, b_label: str) -> str:
    head = f"{'config':<12} {'C':>4} {'metric':<13} {'A':>9} {'B':>9} {'B/A [CI]':>26}  verdict"
    lines = [f"A = {a_label}", f"B = {b_label}", head, "-" * len(head)]
    for x in cmp.cells:
        e = x.estimate
        spec = ".1f" if x.metric == "throughput" else ".3f"
        ci = f"{e.ratio:.3f} [{e.low:.3f}, {e.high:.3f}]"
        verdict = x.verdict.upper() if x.verdict == Verdict.FAIL else x.verdict
        if x.verdict != Verdict.FAIL and e.low > 1:
            verdict += " (faster)" if x.metric == "throughput" else " (higher)"
        lines.append(f"{x.config:<12} {level_column(x.level):>4} {x.metric:<13} {fmt(x.a, spec):>9} {fmt(x.b, spec):>9} "
                     f"{ci:>26}  {verdict}")
    lines += [f"note: {n}" for n in cmp.notes]
    failed = sum(1 for x in cmp.cells if x.verdict == Verdict.FAIL)
    lines.append(f"compare: {failed} of {len(cmp.cells)} cell comparisons regressed" if failed
                 else f"compare: no regression in {len(cmp.cells)} cell comparisons")
    return "\n".join(lines)
