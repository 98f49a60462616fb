"""The report's figures, as PNG bytes, from a results document (matplotlib: the `plots` extra).

The level (client concurrency, or the request rate of an open-loop `[sweep] request_rate`
sweep, whose cells keep it in `concurrency`) is on a log2 axis with the measured levels as
ticks, labelled with what it is; colours follow the suite's configuration order in every
figure. Sized to stay readable when GitHub shrinks them in a PR.
"""

from __future__ import annotations

import io
from typing import TYPE_CHECKING

from specguard.labels import Level
from specguard.report.crossovers import CONCURRENCY, REQUEST_RATE, crossing, level_kind, level_label, ratio_curve
from specguard.report.results import cell_level, config_order, configs_by_name, sorted_cells, throughputs
from specguard.report.schema import LatencyKey, ResultsDoc
from specguard.report.summary import median

if TYPE_CHECKING:  # matplotlib is the optional `plots` extra: imported where a figure is drawn
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

FIG_SIZE = (7.2, 4.2)
DPI = 110
CONFIDENCE = 0.95
X_LABELS = {CONCURRENCY: "concurrency (clients)", REQUEST_RATE: "request rate (req/s, open loop)"}


def available() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def _figure(ncols: int = 1) -> tuple[Figure, list[Axes]]:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(FIG_SIZE[0] * (1.45 if ncols > 1 else 1), FIG_SIZE[1]), dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, ncols, squeeze=False)[0]
    return fig, list(axes)


def _png(fig: Figure) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()


def _colors(doc: ResultsDoc) -> dict[str, str]:
    palette = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf"]
    return {name: palette[i % len(palette)] for i, name in enumerate(config_order(doc))}


def x_label(doc: ResultsDoc) -> str:
    """The level axis' label: a rate sweep's levels are req/s, not clients."""
    return X_LABELS[level_kind(doc)]


def _concurrency_axis(ax: Axes, levels: list[int], label: str = X_LABELS[CONCURRENCY]) -> None:
    from matplotlib.ticker import NullLocator

    ax.set_xscale("log", base=2)
    ax.set_xticks(levels, [str(c) for c in levels])
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xlabel(label)
    ax.grid(True, which="major", alpha=0.3)
    if levels:
        ax.set_xlim(levels[0] / 1.3, levels[-1] * 1.3)


def _plain_log_y(ax: Axes, values: list[float | None]) -> None:
    """Log scale with plain numbers at 1-2-3-5 steps when the data span most of a decade or more."""
    from matplotlib.ticker import FuncFormatter, LogLocator

    positive = [v for v in values if v and v > 0]
    if not positive or max(positive) / min(positive) < 8:
        return
    ax.set_yscale("log")
    ax.yaxis.set_minor_locator(LogLocator(base=10, subs=(2, 3, 5)))
    fmt = FuncFormatter(lambda v, _: f"{v:g}")
    ax.yaxis.set_major_formatter(fmt)
    ax.yaxis.set_minor_formatter(fmt)
    ax.tick_params(axis="y", which="minor", labelsize=8)
    ax.grid(True, which="minor", axis="y", alpha=0.12)


def _series(doc: ResultsDoc, name: str, key: str) -> tuple[list[int], list[float], list[float], list[float]]:
    """Concurrency, median, min and max of a per-run metric for error-free cells; a level without a
    finite figure is left out."""
    cs: list[int] = []
    med: list[float] = []
    lo: list[float] = []
    hi: list[float] = []
    for cell in sorted_cells(doc):
        if cell["config"] != name or cell["error"] or not cell["runs"]:
            continue
        vals: list[float] = [r[key] for r in cell["runs"] if r.get(key) is not None]
        mid = median(vals)
        if mid is None:
            continue
        cs.append(cell_level(cell).value)
        med.append(mid)
        lo.append(min(vals))
        hi.append(max(vals))
    return cs, med, lo, hi


def _plot_runs(ax: Axes, doc: ResultsDoc, name: str, key: str, color: str) -> list[int]:
    """One configuration's per-run metric as median with min-max whiskers; the levels drawn
    (none: the configuration has no error-free cell with that metric)."""
    cs, med, lo, hi = _series(doc, name, key)
    if cs:
        ax.errorbar(cs, med, yerr=[[m - a for m, a in zip(med, lo)], [b - m for m, b in zip(med, hi)]], color=color,
                    marker="o", ms=5, lw=2, capsize=3, label=name)
    return cs


def _levels(doc: ResultsDoc) -> list[int]:
    return sorted({cell_level(c).value for c in doc["cells"]})


def throughput_png(doc: ResultsDoc) -> bytes | None:
    """tok/s per configuration (median, min-max whiskers) with the stored baseline's tolerance band."""
    colors, tol = _colors(doc), doc["tolerances"]["throughput"]
    fig, (ax,) = _figure()
    drawn = banded = False
    for name in config_order(doc):
        if not _plot_runs(ax, doc, name, "output_throughput", colors[name]):
            continue
        drawn = True
        base = sorted((Level.parse(d["level"]).value, d["reference"]) for d in doc["decisions"]
                      if d["config"] == name and d["gate"] == "throughput" and d.get("reference"))
        if base:
            banded = True
            bc, bv = zip(*base)
            ax.fill_between(bc, [v * (1 - tol) for v in bv], bv, color=colors[name], alpha=0.15, lw=0)
            ax.plot(bc, bv, color=colors[name], ls="--", lw=1)
    if not drawn:
        return None
    _concurrency_axis(ax, _levels(doc), x_label(doc))
    _plain_log_y(ax, [c["summary"]["output_throughput"] for c in doc["cells"]])
    ax.set_ylabel("output tok/s")
    band = f"dashed + shaded: stored baseline and its -{tol:.0%} tolerance" if banded else "no stored baseline to compare"
    ax.set_title(f"Output throughput ({band})", fontsize=10)
    ax.legend(loc="upper left", fontsize=9)
    return _png(fig)


def _interval_text(low: float | None, high: float | None, last_level: int) -> str:
    lo = f"{low:.0f}" if low is not None else "?"
    hi = f"{high:.0f}" if high is not None else f">{last_level}"
    return f"[{lo}, {hi}]"


def ratio_png(doc: ResultsDoc) -> bytes | None:
    """Speculative / reference tok/s per concurrency with its CI and 1.0; each crossover is a
    dotted line at its estimate and, along the bottom, a bar over its interval."""
    from matplotlib.transforms import blended_transform_factory

    colors, cfgs = _colors(doc), configs_by_name(doc)
    launch_sd = doc["tolerances"]["prior_between_sd"]
    levels, kind = _levels(doc), level_kind(doc)
    fig, (ax,) = _figure()
    rug = blended_transform_factory(ax.transData, ax.transAxes)
    drawn = 0
    for name in config_order(doc):
        ref = cfgs[name].get("reference")
        if not ref:
            continue
        curve = ratio_curve(throughputs(doc, name), throughputs(doc, ref), launch_sd=launch_sd, confidence=CONFIDENCE)
        if not curve:
            continue
        cs = [r.concurrency for r in curve]
        est = [r.estimate for r in curve]
        x = crossing(curve)
        label = f"{name} / {ref}"
        if x.estimate is not None and not x.below_range:
            label += f": crossover ~{x.estimate:.0f} {_interval_text(x.low, x.high, cs[-1])}"
            y = 0.04 + 0.05 * drawn
            ax.axvline(x.estimate, color=colors[name], ls=":", lw=1.5)
            ax.plot([x.low or x.estimate, x.high or levels[-1] * 1.3], [y, y], color=colors[name], lw=5, alpha=0.45,
                    solid_capstyle="butt", transform=rug)
            ax.plot([x.estimate], [y], marker="D", color=colors[name], ms=6, transform=rug)
        elif x.below_range:
            label += f": behind from {level_label(kind, cs[0])}"
        else:
            label += f": ahead up to {level_label(kind, cs[-1])}"
        ax.errorbar(cs, [e.ratio for e in est], yerr=[[e.ratio - e.low for e in est], [e.high - e.ratio for e in est]],
                    color=colors[name], marker="o", ms=5, lw=2, capsize=3, label=label)
        drawn += 1
    if not drawn:
        return None
    ax.axhline(1.0, color="black", lw=1)
    _concurrency_axis(ax, levels, x_label(doc))
    ax.set_ylabel("speculative / reference tok/s")
    ax.set_title(f"Speculation vs its reference ({CONFIDENCE:.0%} CI; bars at the bottom: crossover interval)",
                 fontsize=10)
    ax.legend(loc="upper right", fontsize=9)
    return _png(fig)


def accept_png(doc: ResultsDoc) -> bytes | None:
    """Accept length (tokens per verify step) per speculative configuration."""
    colors = _colors(doc)
    fig, (ax,) = _figure()
    drawn = False
    for name in config_order(doc):
        if _plot_runs(ax, doc, name, "accept_length", colors[name]):
            drawn = True
    if not drawn:
        return None
    _concurrency_axis(ax, _levels(doc), x_label(doc))
    ax.set_ylim(bottom=1.0)
    ax.set_ylabel("accept length (tokens / verify step)")
    ax.set_title("Accept length (median, min-max over runs)", fontsize=10)
    ax.legend(loc="best", fontsize=9)
    return _png(fig)


# The latency figure's panels: title, and the summary's p50 and p99 figures it draws
LATENCY_PANELS: tuple[tuple[str, LatencyKey, LatencyKey], ...] = (
    ("Time to first token", "median_ttft_ms", "p99_ttft_ms"), ("Inter-token latency", "median_itl_ms", "p99_itl_ms"))


def latency_png(doc: ResultsDoc) -> bytes | None:
    """TTFT and per-token ITL, p50 (solid) and p99 (dashed), per configuration."""
    from matplotlib.lines import Line2D

    colors = _colors(doc)
    fig, axes = _figure(ncols=2)
    drawn = [_latency_panel(ax, doc, colors, *panel) for ax, panel in zip(axes, LATENCY_PANELS)]
    if not any(drawn):
        return None
    handles = [Line2D([], [], color=colors[n], lw=2) for n in config_order(doc)]
    handles += [Line2D([], [], color="gray", ls="-"), Line2D([], [], color="gray", ls="--")]
    fig.legend(handles, [*config_order(doc), "p50", "p99"], loc="outside lower center", ncols=len(handles), fontsize=9)
    return _png(fig)


def _latency_panel(ax: Axes, doc: ResultsDoc, colors: dict[str, str], title: str, p50: LatencyKey, p99: LatencyKey) -> bool:
    """One latency panel: each configuration's p50 (solid) and p99 (dashed) by level; whether it
    drew any line."""
    drawn = False
    for name in config_order(doc):
        for key, ls in ((p50, "-"), (p99, "--")):
            points = latency_points(doc, name, key)
            if points:
                drawn = True
                ax.plot(*zip(*points), color=colors[name], ls=ls, marker="o", ms=4, lw=1.8)
    _concurrency_axis(ax, _levels(doc), x_label(doc))
    _plain_log_y(ax, [c["summary"][key] for c in doc["cells"] for key in (p50, p99)])
    ax.set_ylabel("ms")
    ax.set_title(f"{title} (solid p50, dashed p99)", fontsize=10)
    return drawn


def latency_points(doc: ResultsDoc, name: str, key: LatencyKey) -> list[tuple[int, float]]:
    """(level, latency) of a configuration's error-free cells with runs, in level order; a level
    whose figure is missing (or 0) is left out."""
    cells = [c for c in sorted_cells(doc) if c["config"] == name and not c["error"] and c["runs"]]
    return [(cell_level(c).value, v) for c in cells if (v := c["summary"][key])]


def acceptance_position_png(doc: ResultsDoc) -> bytes | None:
    """Share of verify steps that accepted at least k drafts, by draft position k, per speculative
    configuration and concurrency (runs' correct_drafts_histogram pooled per cell): the steps
    beyond which another drafted token rarely pays."""
    colors = _colors(doc)
    fig, (ax,) = _figure()
    drawn, positions = False, 1
    for cell in sorted_cells(doc):
        hist: list[int] = []
        for run in cell["runs"]:
            for k, n in enumerate(run.get("correct_drafts_histogram") or []):
                hist.extend([0] * (k + 1 - len(hist)))
                hist[k] += n
        steps = sum(hist)
        if cell["error"] or steps <= 0 or len(hist) < 2:
            continue
        at_least = [sum(hist[k:]) / steps for k in range(1, len(hist))]
        ax.plot(range(1, len(hist)), at_least, color=colors.get(cell["config"]), marker="o", ms=4, lw=1.5,
                alpha=0.8,
                label=f"{cell['config']} {cell['level']}")
        drawn, positions = True, max(positions, len(hist) - 1)
    if not drawn:
        return None
    ax.set_xticks(range(1, positions + 1))
    ax.set_ylim(0, 1)
    ax.set_xlabel("draft position k")
    ax.set_ylabel("verify steps accepting >= k drafts")
    ax.set_title("Acceptance by draft position", fontsize=10)
    ax.grid(True, alpha=0.3)
    ax.legend(loc="best", fontsize=8)
    return _png(fig)


SOAK_PANELS = (("accept_length", "accept length"), ("step_time_ms", "step time (ms)"), ("output_throughput", "tok/s"))


def soak_png(doc: ResultsDoc) -> bytes | None:
    """Each soaked configuration's windows in time order (accept length, step time, tok/s), the
    warm-up shaded and each worse change point marked where the slide began."""
    soaks = doc.get("soaks") or {}
    if not soaks:
        return None
    shifts: dict[tuple[str, str], int] = {}
    for d in doc["decisions"]:
        found = d.get("soak") if d["gate"] == "soak" else None
        for s in found["shifts"] if found else []:
            shifts[(d["config"], s["metric"])] = s["window"]
    colors = _colors(doc)
    fig, axes = _figure(ncols=len(SOAK_PANELS))
    for ax, (key, label) in zip(axes, SOAK_PANELS):
        for name, soak in soaks.items():
            values = [w.get(key) for w in soak["windows"]]
            ax.plot(range(len(values)), [v if v is not None else float("nan") for v in values], marker="o", ms=3, lw=1.2,
                    color=colors.get(name), label=name)
            if (name, key) in shifts:
                ax.axvline(shifts[(name, key)], color=colors.get(name), ls="--", lw=1)
            if soak["warmup_windows"]:
                ax.axvspan(-0.5, soak["warmup_windows"] - 0.5, color="0.9")
        ax.set_xlabel(f"window (~{next(iter(soaks.values()))['window_s']:g} s each)")
        ax.set_title(label, fontsize=10)
        ax.grid(True, alpha=0.3)
    axes[0].legend(loc="best", fontsize=8)
    return _png(fig)


FIGURES = {"throughput": throughput_png, "speculation_ratio": ratio_png, "accept_length": accept_png,
           "latency": latency_png, "acceptance_by_position": acceptance_position_png,
           "soak": soak_png}


def render_all(doc: ResultsDoc) -> dict[str, bytes]:
    """Every figure the document has data for, by name; empty without matplotlib."""
    if not available():
        return {}
    out = {}
    for name, make in FIGURES.items():
        png = make(doc)
        if png is not None:
            out[name] = png
    return out
