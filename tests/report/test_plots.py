"""The report's figures label their level axis with what the levels are (no servers)."""

from __future__ import annotations

import pytest
from synthetic_results import MTP, as_rate_sweep, make_doc, seed_a_doc

from specguard.report import plots

pytest.importorskip("matplotlib")

LEVEL_FIGURES = ("throughput", "speculation_ratio", "accept_length", "latency")


@pytest.fixture
def figures(monkeypatch):
    """Each figure function returns its matplotlib Figure instead of PNG bytes."""
    monkeypatch.setattr(plots, "_png", lambda fig: fig)

    def build(doc):
        return {name: make(doc) for name, make in plots.FIGURES.items()}

    return build


def rate_doc(doc: dict) -> dict:
    """A concurrency document relabelled as an open-loop sweep (levels rN)."""
    return as_rate_sweep(doc)


def with_histograms(doc: dict) -> dict:
    for cell in doc["cells"]:
        if cell["config"] == "mtp":
            for run in cell["runs"]:
                run["correct_drafts_histogram"] = [5, 3, 2]
    return doc


def test_concurrency_sweep_axes_say_clients(figures):
    figs = figures(seed_a_doc())
    for name in LEVEL_FIGURES:
        assert {ax.get_xlabel() for ax in figs[name].axes} == {"concurrency (clients)"}, name
    assert plots.x_label(seed_a_doc()) == "concurrency (clients)"


def test_rate_sweep_axes_say_request_rate(figures):
    figs = figures(rate_doc(seed_a_doc()))
    for name in LEVEL_FIGURES:
        assert {ax.get_xlabel() for ax in figs[name].axes} == {"request rate (req/s, open loop)"}, name
        ticks = [t.get_text() for t in figs[name].axes[0].get_xticklabels()]
        assert ticks == ["1", "4", "16", "32", "64", "128"], name  # the measured rates are the ticks


def _legend(fig) -> list[str]:
    return [t.get_text() for t in fig.axes[0].get_legend().get_texts()]


def test_rate_sweep_legends_name_rate_levels(figures):
    ahead = {"baseline": {2: 100, 8: 300}, "mtp": {2: 150, 8: 400}}
    assert _legend(figures(make_doc(ahead, {"mtp": dict(MTP)}))["speculation_ratio"]) == ["mtp / baseline: ahead up to c8"]
    assert _legend(figures(rate_doc(make_doc(ahead, {"mtp": dict(MTP)})))["speculation_ratio"]) == \
        ["mtp / baseline: ahead up to r8"]
    behind = rate_doc(make_doc({"baseline": {4: 100, 16: 300}, "mtp": {4: 60, 16: 200}}, {"mtp": dict(MTP)}))
    assert _legend(figures(behind)["speculation_ratio"]) == ["mtp / baseline: behind from r4"]
    by_position = figures(rate_doc(with_histograms(make_doc(ahead, {"mtp": dict(MTP)}))))["acceptance_by_position"]
    assert _legend(by_position) == ["mtp r2", "mtp r8"]
    assert _legend(figures(with_histograms(make_doc(ahead, {"mtp": dict(MTP)})))["acceptance_by_position"]) == \
        ["mtp c2", "mtp c8"]


def test_level_axis_defaults_to_clients_for_other_callers():
    # tune/output.py draws its own figure through _concurrency_axis(ax, levels)
    fig, (ax,) = plots._figure()
    plots._concurrency_axis(ax, [1, 4, 16])
    assert ax.get_xlabel() == "concurrency (clients)"


def test_the_soak_figure_draws_each_metric_over_the_windows_and_marks_the_slide(figures):
    doc = seed_a_doc()
    assert figures(doc)["soak"] is None  # no soak: no figure
    windows = [{"accept_length": 3.0 if i < 6 else 2.7, "step_time_ms": 5.0, "output_throughput": 600.0}
               for i in range(12)]
    doc["soaks"] = {"mtp": {"concurrency": 16, "window_s": 30.0, "warmup_windows": 1, "windows": windows}}
    doc["decisions"].append({"gate": "soak", "config": "mtp", "level": "c16", "verdict": "fail", "soak": {
        "windows": 11, "warmup": 1, "half": "drafter", "stalled": [],
        "shifts": [{"metric": "accept_length", "window": 6, "before": 3.0, "after": 2.7, "low": 0.89, "high": 0.91,
                    "p_value": 1e-9}]}})
    fig = figures(doc)["soak"]
    accept, step, tok = fig.axes[:3]
    assert [ax.get_title() for ax in (accept, step, tok)] == ["accept length", "step time (ms)", "tok/s"]
    assert list(accept.lines[0].get_ydata()) == [w["accept_length"] for w in windows]
    assert [line.get_xdata()[0] for line in accept.lines[1:]] == [6]  # the slide's first window, marked
    assert len(step.lines) == 1 and accept.get_xlabel() == "window (~30 s each)"
