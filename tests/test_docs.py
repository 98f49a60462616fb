"""Published figures equal the committed data they come from.

docs/research/gate-study.md and README.md's guarantee table quote docs/research/gate-study.json (the study run
behind them, both acceptance models); gate-study.md's "History" tables and one sentence of
docs/statistics.md quote the earlier studies, read from git at the commits gate-study.md's
headings name. Every figure of every checked table cell and sentence is parsed, in order, and
compared with the JSON value rounded to the figure's own decimals; a mismatch fails naming the
document, the place, and both figures. A figure added to a checked cell without a check fails too
(the counts must agree). When the study is re-run, regenerate the JSON and the documents together
(docs/research/evidence/README.md).
"""

from __future__ import annotations

import json
import math
import re
import shlex
import subprocess
from collections.abc import Iterator
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
STUDY_MD = ROOT / "docs" / "research" / "gate-study.md"
STUDY_JSON = ROOT / "docs" / "research" / "gate-study.json"
STATISTICS_MD = ROOT / "docs" / "statistics.md"
README = ROOT / "README.md"
GUARANTEES = ROOT / "docs" / "guarantees.md"  # the README links it

NUMBER = r"\d+(?:\.\d+)?"
ACCEPTANCE_MODELS = ("per-request", "per-run")
PRESETS = ("gpu-quiet", "gpu", "gpu-drift2")
ENGINE, ACCEPT_DROP = "engine slowdown 5%", "acceptance -8%"  # the study's one-half changes (simulate.py)

# A figure as the JSON gives it: (value, scale), scale 100 for a percentage.
Fig = tuple[float, float]


@pytest.fixture(scope="module")
def study() -> dict[str, Any]:
    return json.loads(STUDY_JSON.read_text(encoding="utf-8"))


def _study_at(heading: str, name: str) -> dict[str, Any]:
    """The gate-study.json committed at the commit a heading of gate-study.md names ("(commit abc1234)")."""
    m = re.search(heading + r".*?\(commit ([0-9a-f]{7,40})\)", STUDY_MD.read_text(encoding="utf-8"))
    assert m, f"docs/research/gate-study.md: the {name} heading no longer names its commit; update tests/test_docs.py"
    failure: Exception | None = None
    for path in ("docs/research/gate-study.json", "docs/gate-study.json"):  # the second: before the docs split
        try:
            out = subprocess.run(["git", "-C", str(ROOT), "show", f"{m.group(1)}:{path}"], capture_output=True,
                                 check=True, timeout=60)
            return json.loads(out.stdout)
        except (OSError, subprocess.CalledProcessError, subprocess.TimeoutExpired) as e:
            failure = e
    pytest.skip(f"the {name} study (git show {m.group(1)}:docs/research/gate-study.json) is not readable here: {failure}")


@pytest.fixture(scope="module")
def earlier_study() -> dict[str, Any]:
    """The study of the gates before issue 14 (one launch), which also ran both fail rules."""
    return _study_at(r"### Before issue 14: ", "'Before issue 14'")


@pytest.fixture(scope="module")
def issue14_study() -> dict[str, Any]:
    """The issue-14 study (relaunch on suspicion, at most 2 and 3 launches; the emulator before issue 23)."""
    return _study_at(r"### Issue 14: ", "'Issue 14'")


def by_acceptance(study: dict[str, Any], acceptance: str) -> dict[str, Any]:
    """The study's document for one acceptance model: the top level for the headline model, else
    other_acceptance[model] (with the headline noise and design, which only the top level names)."""
    if acceptance == study["acceptance"]:
        return study
    return {**study["other_acceptance"][acceptance], "headline_noise": study["headline_noise"],
            "headline_design": study["headline_design"]}


# ---------------------------------------------------------------- figures

def renders(text: str, value: float, scale: float = 1.0) -> bool:
    """Does the doc's figure `text` equal `value * scale` rounded to the figure's decimals?
    Both Python's float formatting and half-up decimal rounding count (they differ only on ties
    such as 0.465 -> 46 or 47 %)."""
    decimals = len(text.split(".")[1]) if "." in text else 0
    exact = Decimal(repr(value)) * Decimal(repr(scale))
    half_up = str(exact.quantize(Decimal(1).scaleb(-decimals), rounding=ROUND_HALF_UP))
    as_float = format(value, f".{decimals}%")[:-1] if scale == 100 else format(value * scale, f".{decimals}f")
    return Decimal(text) in (Decimal(half_up), Decimal(as_float))


def mismatches(where: str, text: str, want: list[Fig]) -> list[str]:
    """Every number of `text`, in order, against `want`; one message per difference."""
    got = re.findall(NUMBER, text)
    if len(got) != len(want):
        return [f"{where}: {text!r} has {len(got)} figures {got}, the test checks {len(want)} "
                f"({[v * s for v, s in want]}); a figure was added or removed: update tests/test_docs.py"]
    return [f"{where}: {text!r} quotes {g}, the JSON gives {v * s:g}"
            for g, (v, s) in zip(got, want) if not renders(g, v, s)]


def tables(text: str) -> Iterator[tuple[str, list[str], list[list[str]]]]:
    """Markdown tables, each with the heading it stands under (the last line starting with #)."""
    lines = text.splitlines()
    heading, i, fenced = "", 0, False
    while i < len(lines):
        fenced ^= lines[i].startswith("```")
        if lines[i].startswith("#") and not fenced:
            heading = lines[i]
        if lines[i].startswith("|") and i + 1 < len(lines) and re.match(r"^\|[\s:|-]+\|$", lines[i + 1]):
            head = [c.strip() for c in lines[i].strip("|").split("|")]
            rows = []
            j = i + 2
            while j < len(lines) and lines[j].startswith("|"):
                rows.append([c.strip() for c in lines[j].strip("|").split("|")])
                j += 1
            yield heading, head, rows
            i = j
        else:
            i += 1


def table_with(text: str, first_column: str, doc: str) -> tuple[list[str], list[list[str]]]:
    found = [(h, r) for _, h, r in tables(text) if h[0] == first_column]
    assert len(found) == 1, f"{doc}: {len(found)} tables whose first column is {first_column!r}; update tests/test_docs.py"
    return found[0]


def grid_entry(doc: dict[str, Any], noise: str, **want: Any) -> dict[str, Any]:
    """The one grid point of `noise` whose settings match `want`."""
    matches = [g for g in doc["studies"][noise]["grid"]
               if all(g["settings"].get(k) == pytest.approx(v) if isinstance(v, float) else g["settings"].get(k) == v
                      for k, v in want.items())]
    assert len(matches) == 1, f"gate-study.json, noise {noise}: {len(matches)} grid points match {want}"
    return matches[0]


def grid_point(doc: dict[str, Any], noise: str, **want: Any) -> dict[str, dict[str, Any]]:
    """The scenarios (by name) of the one grid point of `noise` whose settings match `want`."""
    return {s["scenario"]: s for s in grid_entry(doc, noise, **want)["scenarios"]}


def headline_entry(doc: dict[str, Any], prior: float | None = None, design: str | None = None) -> dict[str, Any]:
    """The headline grid point (defaults, headline design and noise), or the same at another prior/design."""
    return grid_entry(doc, doc["headline_noise"], design=design or doc["headline_design"],
                      prior_between_sd=prior if prior is not None else 0.01, repeats=3, fail_rule="significant",
                      history_sessions=5)


def headline(doc: dict[str, Any], prior: float | None = None, design: str | None = None) -> dict[str, dict[str, Any]]:
    return {s["scenario"]: s for s in headline_entry(doc, prior, design)["scenarios"]}


def gate_rate(scenario: dict[str, Any]) -> float:
    """The rate at which the gate the scenario isolates failed by itself."""
    return scenario[f"{scenario['isolates']}_fail_rate"]


def levels(scenario: dict[str, Any], gate: str = "either") -> dict[str, float]:
    """Level ("c1") -> the share of sessions whose changed cell there failed by `gate`."""
    rates = scenario["level_fail_rates"]
    return {level: rates[level][gate] for level in sorted(rates, key=lambda c: int(c[1:]))}


def level_figs(scenario: dict[str, Any], gate: str = "either", only: tuple[str, ...] | None = None) -> list[Fig]:
    """ "c1 0.96, c4 0.95, ...": each level's number, then its rate."""
    out: list[Fig] = []
    for level, rate in levels(scenario, gate).items():
        if only is None or level in only:
            out += [(int(level[1:]), 1), (rate, 1)]
    return out


def span(values: list[float]) -> list[Fig]:
    return [(min(values), 1), (max(values), 1)]


def check_sentences(doc_name: str, text: str, patterns: list[tuple[str, list[Fig]]]) -> list[str]:
    """Each pattern must match `text` (whitespace collapsed); its groups are the figures."""
    text = " ".join(text.split())
    wrong = []
    for pattern, want in patterns:
        m = re.search(pattern, text)
        if m is None:
            wrong.append(f"{doc_name}: no sentence matches {pattern!r} (reworded? update tests/test_docs.py)")
            continue
        wrong += mismatches(f"{doc_name} {m.group(0)!r}", " ".join(m.groups()), want)
    return wrong


# ---------------------------------------------------------------- docs/research/gate-study.md

@pytest.mark.parametrize("acceptance", ACCEPTANCE_MODELS)
def test_headline_keys_are_the_headline_grid_point(study, acceptance):
    """The top-level figures (what README and the summary lines quote) are the defaults' grid
    point of each acceptance model, and attach_* attach mode's, not another."""
    doc = by_acceptance(study, acceptance)
    s, half = headline(doc), headline(doc, prior=0.005)
    attach, attach_half = headline(doc, design="attach"), headline(doc, prior=0.005, design="attach")
    aa = s["A/A"]
    pairs = {
        "false_fail_rate": aa["fail_rate"], "false_fail_rate_half_prior": half["A/A"]["fail_rate"],
        "power_tok_s_5pct": gate_rate(s["tok/s -5%"]), "suite_power_tok_s_5pct": s["tok/s -5%"]["fail_rate"],
        "power_tok_s_10pct": gate_rate(s["tok/s -10%"]), "power_accept_10pct": gate_rate(s["accept -10%"]),
        "power_speculation_5pct": gate_rate(s["speculation 0.95x at c16"]),
        "suite_power_speculation_5pct": s["speculation 0.95x at c16"]["fail_rate"],
        "launches_per_config": aa["launches_per_config"],
        "launches_per_config_tok_s_5pct": s["tok/s -5%"]["launches_per_config"],
        "crossover_within_1_25x": aa["crossover_within_1_25x"],
        "power_step_5pct_by_level": levels(s[ENGINE]), "power_step_5pct_c1": levels(s[ENGINE])["c1"],
        "power_step_5pct_step_time_by_level": levels(s[ENGINE], "step_time"),
        "power_tok_s_5pct_by_level": levels(s["tok/s -5%"], "throughput"),
        "attribution_correct": headline_entry(doc)["attribution_correct"],
        "engine_slowdown_named_drafter": s[ENGINE]["wrong_half_rate"],
        "acceptance_drop_named_engine": s[ACCEPT_DROP]["wrong_half_rate"],
        "attach_false_fail_rate": attach["A/A"]["fail_rate"],
        "attach_false_fail_rate_half_prior": attach_half["A/A"]["fail_rate"],
        "attach_power_tok_s_5pct": gate_rate(attach["tok/s -5%"]),
        "attach_suite_power_tok_s_5pct": attach["tok/s -5%"]["fail_rate"],
        "attach_power_step_5pct_by_level": levels(attach[ENGINE]),
    }
    if doc is study:
        pairs["crossover_within_1_25x_seed_a"] = next(r["within_1_25x"] for r in study["crossover_study"]["rows"]
                                                      if r["design"] == study["headline_design"])
    assert doc["acceptance"] == acceptance
    wrong = [f"gate-study.json ({acceptance}) {k} = {doc[k]}, its headline grid point gives {v}"
             for k, v in pairs.items() if doc[k] != pytest.approx(v)]
    assert not wrong, "\n".join(wrong)


def test_gate_study_command_and_summary_lines_equal_the_json(study):
    """The command shown is the run's argv, and the summary lines are what it printed last."""
    from research.study.report import summary_line

    text = STUDY_MD.read_text(encoding="utf-8")
    m = re.search(r"```bash\n(python -m research.study .*?)\n```", text, flags=re.S)
    assert m, "docs/research/gate-study.md: no ```bash block with the `python -m research.study` command"
    assert shlex.split(m.group(1).replace("\\\n", " "))[3:] == study["argv"], \
        "docs/research/gate-study.md: the command differs from gate-study.json's argv"
    shown = [line for line in text.splitlines() if line.startswith("acceptance=")]
    printed = [summary_line(by_acceptance(study, a)) for a in study["other_acceptance"]] + [summary_line(study)]
    assert shown == printed, f"docs/research/gate-study.md summary lines {shown} != what the study prints {printed}"


DESIGN_SETTINGS = {"design": str, "rule": str, "repeats": int, "K": int}


def _design_table(doc: dict[str, Any], noise: str, head: list[str], rows: list[list[str]], where: str) -> tuple[list[str], int]:
    """The study's main table of one preset and acceptance model, row by row against the JSON."""
    wrong, checked = [], 0
    for row in rows:
        cell = dict(zip(head, row))
        prior = float(re.match(NUMBER, cell["prior tok (dof)"]).group(0))
        scen = grid_point(doc, noise, design=cell["design"], fail_rule=cell["rule"], repeats=int(cell["repeats"]),
                          history_sessions=int(cell["K"]), prior_between_sd=prior)
        aa = scen["A/A"]
        at = f"{where} row {cell['design']} prior {prior}"
        for col, text in cell.items():
            if col in DESIGN_SETTINGS or col.startswith("prior"):
                continue
            if col.startswith("false-fail"):
                want = [(aa["fail_rate"], 100), (aa["fail_ci95"][0], 100), (aa["fail_ci95"][1], 100)]
            elif col == "launches/config per change":  # under each change, in the order of the power columns
                want = [(scen[name]["launches_per_config"], 1) for name in scen if name != "A/A"]
            elif col.startswith("launches/config"):
                want = [(aa["launches_per_config"], 1)]
            elif col == "runs/session":
                want = [(aa["runs_per_session"], 1)]
            elif col == "xover ±1 level":
                want = [(aa["crossover_within_one_level"], 100)]
            elif col == "xover 1.25x":
                want = [(aa["crossover_within_1_25x"], 100)]
            elif col.startswith("P("):
                name = col[2:-1]
                assert name in scen, f"{at}: column {col!r} names no scenario of gate-study.json"
                want = [(scen[name]["fail_rate"], 1), (gate_rate(scen[name]), 1)]
            else:
                raise AssertionError(f"{at}: column {col!r} is new; teach tests/test_docs.py to check it")
            checked += len(want)
            wrong += mismatches(f"{at}, column {col!r}", text, want)
    return wrong, checked


def _levels_table(doc: dict[str, Any], noise: str, head: list[str], rows: list[list[str]], where: str) -> tuple[list[str], int]:
    """The study's per-level table (engine slowdown caught, attribution) of one preset and model."""
    wrong, checked = [], 0
    for row in rows:
        cell = dict(zip(head, row))
        entry = grid_entry(doc, noise, design=cell["design"], prior_between_sd=float(cell["prior"]))
        scen = {s["scenario"]: s for s in entry["scenarios"]}
        at = f"{where} row {cell['design']} prior {cell['prior']}"
        for col, text in cell.items():
            if col in ("design", "prior"):
                continue
            m = re.fullmatch(r"(c\d+) caught \(step_time\)", col)
            if m:
                rates = scen[ENGINE]["level_fail_rates"][m.group(1)]
                want = [(rates["either"], 1), (rates["step_time"], 1)]
            elif col == f"{ENGINE} read as drafter":
                want = [(scen[ENGINE]["wrong_half_rate"], 1)]
            elif col == f"{ACCEPT_DROP} read as engine":
                want = [(scen[ACCEPT_DROP]["wrong_half_rate"], 1)]
            elif col == "attribution right":
                want = [(entry["attribution_correct"], 1)]
            else:
                raise AssertionError(f"{at}: column {col!r} is new; teach tests/test_docs.py to check it")
            checked += len(want)
            wrong += mismatches(f"{at}, column {col!r}", text, want)
    return wrong, checked


def test_gate_study_tables_equal_the_json(study):
    """Both tables of every preset and acceptance model, as the study printed them, under a
    heading naming the preset (`gpu`) and the model; one row per grid point."""
    wrong, checked, seen = [], 0, set()
    for heading, head, rows in tables(STUDY_MD.read_text(encoding="utf-8")):
        if head[0] != "design":
            continue
        noise = re.search(r"`([\w-]+)`", heading)
        acceptance = re.search(r"\b(per-request|per-run)\b", heading)
        assert noise and acceptance, f"docs/research/gate-study.md: a study table under {heading!r} names no preset or model"
        doc, kind = by_acceptance(study, acceptance.group(1)), head[1]
        where = f"docs/research/gate-study.md {noise.group(1)} {acceptance.group(1)} ({kind} table)"
        check = {"rule": _design_table, "prior": _levels_table}.get(kind)
        assert check, f"{where}: a table of unknown kind"
        assert len(rows) == len(doc["studies"][noise.group(1)]["grid"]), f"{where}: not one row per grid point"
        w, c = check(doc, noise.group(1), head, rows, where)
        wrong, checked = wrong + w, checked + c
        seen.add((noise.group(1), acceptance.group(1), kind))
    missing = {(n, a, k) for n in PRESETS for a in ACCEPTANCE_MODELS for k in ("rule", "prior")} - seen
    assert not missing, f"docs/research/gate-study.md lost study tables: {sorted(missing)}"
    assert checked >= 1000 and not wrong, "\n".join(wrong) or f"only {checked} figures checked"


def test_gate_study_noise_headings_equal_the_json(study):
    """ "### 1 % (`gpu`: day 0.5 % + launch 0.87 %)": the spread and its parts, per preset."""
    text = STUDY_MD.read_text(encoding="utf-8")
    wrong, seen = [], set()
    for m in re.finditer(rf"^### ({NUMBER}) % \(`([\w-]+)`: day ({NUMBER}) % \+ launch ({NUMBER}) %\)", text, flags=re.M):
        noise = study["studies"][m.group(2)]["noise"]
        seen.add(m.group(2))
        wrong += mismatches(f"docs/research/gate-study.md heading {m.group(0)!r}", " ".join(m.group(1, 3, 4)),
                            [(math.hypot(noise["day_pct"], noise["drift_pct"]), 1), (noise["day_pct"], 1),
                             (noise["drift_pct"], 1)])
    assert seen == set(PRESETS), f"docs/research/gate-study.md: presets with a noise heading {seen}"
    assert not wrong, "\n".join(wrong)


# Issue 23's goals, in table order: (goal prefix, acceptance, the goal's figures, the goal as
# (">=" or "<=", value) or None where the goal is only to state the figures).
Goal = tuple[str, float] | None
GOALS: list[tuple[str, str, list[float], Goal]] = [
    ("engine slowdown 5 % caught >=", "per-request", [5, 0.95, 1], (">=", 0.95)),
    ("same, prior at half", "per-request", [], (">=", 0.95)),
    ("tok/s -5 % caught >=", "per-request", [5, 0.95], (">=", 0.95)),
    ("false fails <= 1 % per suite run, prior = true spread", "per-request", [1], ("<=", 0.01)),
    ("false fails <= 1 % per suite run, prior at half", "per-request", [1], ("<=", 0.01)),
    ("engine slowdown 5 % caught >= 0.9 at C = 1 and C = 4", "per-run", [5, 0.9, 1, 4], (">=", 0.9)),
    ("same, prior at half", "per-run", [], (">=", 0.9)),
    ("attribution right (", "per-run", [95], (">=", 0.95)),
    ("same, prior at half", "per-run", [], (">=", 0.95)),
    ("attribution right in", "per-request", [95], (">=", 0.95)),
    ("same, prior at half", "per-request", [], (">=", 0.95)),
    ("attach mode (one launch): tok/s -5 %", "per-request", [5], None),
    ("attach mode (one launch): tok/s -5 %", "per-run", [5], None),
    ("attach mode (one launch): false fails", "per-request", [1], ("<=", 0.01)),
    ("attach mode (one launch): false fails", "per-run", [1], ("<=", 0.01)),
]


def _goal_results(study: dict[str, Any], acceptance: str) -> list[tuple[list[Fig], float, list[Fig]]]:
    """Per goal row of this model, in GOALS order: (result figures, the measured value the goal
    thresholds, figures of the 'met' cell)."""
    doc = by_acceptance(study, acceptance)
    n = doc["sessions"]
    s, half = headline(doc), headline(doc, prior=0.005)
    attach, attach_half = headline(doc, design="attach"), headline(doc, prior=0.005, design="attach")
    right, right_half = headline_entry(doc)["attribution_correct"], headline_entry(doc, prior=0.005)["attribution_correct"]

    def ff(aa: dict[str, Any]) -> list[Fig]:  # "0.0 % (0/200; 95 % CI 0-1.9 %)"
        return [(aa["fail_rate"], 100), (aa["fail_rate"] * n, 1), (n, 1), (0.95, 100),
                (aa["fail_ci95"][0], 100), (aa["fail_ci95"][1], 100)]

    def halves(sc: dict[str, dict[str, Any]], correct: float) -> list[Fig]:  # "0.995 (0.000, 0.005)"
        return [(correct, 1), (sc[ENGINE]["wrong_half_rate"], 1), (sc[ACCEPT_DROP]["wrong_half_rate"], 1)]

    def attach_power(a: dict[str, dict[str, Any]]) -> list[Fig]:
        return [(gate_rate(a["tok/s -5%"]), 1), (a["tok/s -5%"]["fail_rate"], 1),
                (gate_rate(s["tok/s -5%"]), 1), (s["tok/s -5%"]["fail_rate"], 1),
                *span(list(levels(a[ENGINE]).values())), *span(list(levels(s[ENGINE]).values()))]

    def attach_ff() -> list[Fig]:
        aa = attach["A/A"]
        return [(aa["fail_rate"], 100), (aa["fail_rate"] * n, 1), (n, 1), (0.95, 100), (aa["fail_ci95"][0], 100),
                (aa["fail_ci95"][1], 100), (attach_half["A/A"]["fail_rate"], 100), (s["A/A"]["fail_rate"], 100),
                (half["A/A"]["fail_rate"], 100)]

    per_level = levels(s[ENGINE])
    weakest = min(per_level, key=per_level.__getitem__)  # "yes (c4 at 0.95 exactly: 190/200)"
    attach_worst = max(attach["A/A"]["fail_rate"], attach_half["A/A"]["fail_rate"])
    if acceptance == "per-request":
        return [
            (level_figs(s[ENGINE]) + [(r, 1) for r in levels(s[ENGINE], "step_time").values()], per_level[weakest],
             [(int(weakest[1:]), 1), (per_level[weakest], 1), (per_level[weakest] * n, 1), (n, 1)]),
            (level_figs(half[ENGINE]), min(levels(half[ENGINE]).values()), []),
            ([(gate_rate(s["tok/s -5%"]), 1), (s["tok/s -5%"]["fail_rate"], 1)], gate_rate(s["tok/s -5%"]), []),
            (ff(s["A/A"]), s["A/A"]["fail_rate"], []),
            (ff(half["A/A"]), half["A/A"]["fail_rate"], []),
            (halves(s, right), right, []),
            (halves(half, right_half), right_half, []),
            (attach_power(attach), math.nan, []),
            (attach_ff(), attach_worst, []),
        ]
    c14 = ("c1", "c4")
    return [
        (level_figs(s[ENGINE], "step_time", c14), min(levels(s[ENGINE], "step_time")[c] for c in c14), []),
        (level_figs(half[ENGINE], "step_time", c14), min(levels(half[ENGINE], "step_time")[c] for c in c14), []),
        (halves(s, right), right, []),
        (halves(half, right_half), right_half, []),
        (attach_power(attach), math.nan, []),
        (attach_ff(), attach_worst, []),
    ]


def test_gate_study_goals_table_equals_the_json(study):
    """Issue 23's goals: every figure against the JSON, and 'yes' exactly where the measured
    value reaches the goal ('**no**' where it does not)."""
    head, rows = table_with(STUDY_MD.read_text(encoding="utf-8"), "goal", "docs/research/gate-study.md")
    assert head == ["goal", "acceptance", "result", "met"], f"docs/research/gate-study.md goals table columns {head}"
    assert len(rows) == len(GOALS), f"docs/research/gate-study.md goals table: {len(rows)} rows, the test knows {len(GOALS)}"
    results = {a: iter(_goal_results(study, a)) for a in ACCEPTANCE_MODELS}
    wrong = []
    for row, (prefix, acceptance, goal_figs, goal) in zip(rows, GOALS):
        where = f"docs/research/gate-study.md goals row {row[0][:50]!r} ({row[1]})"
        assert row[0].startswith(prefix) and row[1] == acceptance, \
            f"{where}: expected {prefix!r} ({acceptance}); rows were added, removed or moved: update tests/test_docs.py"
        result, measured, met = next(results[acceptance])
        wrong += mismatches(f"{where}, goal", row[0], [(g, 1) for g in goal_figs])
        wrong += mismatches(f"{where}, result", row[2], result)
        wrong += mismatches(f"{where}, met", row[3], met)
        if goal is not None:
            op, bound = goal
            reached = measured >= bound - 1e-9 if op == ">=" else measured <= bound + 1e-9
            said = "yes" if row[3].startswith("yes") else "no" if "**no**" in row[3] else "?"
            if said != ("yes" if reached else "no"):
                wrong.append(f"{where}: says {row[3]!r}, but {measured:g} against the goal {op} {bound:g} "
                             f"is {'met' if reached else 'not met'}")
    assert not wrong, "\n".join(wrong)


def _sentences(study: dict[str, Any]) -> list[tuple[str, list[Fig]]]:
    """gate-study.md's figures outside the tables: (pattern whose groups are the figures, JSON)."""
    noise = study["studies"][study["headline_noise"]]["noise"]
    within = set(noise["within"].values())
    assert len(within) == 1, "the noise table quotes one run spread; the preset now has several"
    xo = study["studies"][study["headline_noise"]]["true_crossover_c"]
    cs = study["crossover_study"]
    new = next(r for r in cs["rows"] if r["design"] == study["headline_design"])
    old = next(r for r in cs["rows"] if r["design"] == "legacy")
    attach_x = next(r for r in cs["rows"] if r["design"] == "attach")
    run = by_acceptance(study, "per-run")
    grid = study["studies"][study["headline_noise"]]["grid"]
    s, legacy, half = headline(study), headline(study, design="legacy"), headline(study, prior=0.005)
    s_run, half_run = headline(run), headline(run, prior=0.005)
    attach, attach_half = headline(study, design="attach"), headline(study, prior=0.005, design="attach")
    assert attach_x["within_1_25x"] == new["within_1_25x"], "gate-study.md says attach mode's crossover score is the new design's"
    elapsed = [by_acceptance(study, a)["studies"][n]["elapsed_s"] for a in ACCEPTANCE_MODELS
               for n in ("gpu", "gpu-quiet", "gpu-drift2")]
    spec, spec_run = s["speculation 0.95x at c16"], s_run["speculation 0.95x at c16"]
    return [
        (r"(\d+) s deciding (\d+) trials at (\d+) grid points at 1 % \((\d+) s at 0.5 %, (\d+) s at 2 %\); per-run "
         r"acceptance (\d+) s, (\d+) s and (\d+) s; plus (\d+) s for the seed-A crossover study",
         [(elapsed[0], 1), (study["sessions"], 1), (len(grid), 1), *[(e, 1) for e in elapsed[1:]], (cs["elapsed_s"], 1)]),
        (r"all (\d+) trials it decided \((\d+) per acceptance model",
         [(study["sessions"] * len(ACCEPTANCE_MODELS), 1), (study["sessions"], 1)]),
        (r"3 runs per cell; (\d+) gate tests\)", [(study["gate_tests"], 1)]),
        (rf"\| day \(the machine's mood\) \| ({NUMBER}) % \|", [(noise["day_pct"], 1)]),
        (rf"\| launch \(drift\) \| ({NUMBER}) % \|", [(noise["drift_pct"], 1)]),
        (rf"\| run \| ({NUMBER}) % \+", [(within.pop(), 100)]),
        (rf"\| stall \| one run in (\d+) at ({NUMBER})x \|",
         [(1 / noise["stall_rate"], 1), (noise["stall_factors"][0], 1)] if len(noise["stall_factors"]) == 1 else []),
        (r"so two one-launch sessions differ by (\d+) %", [(math.hypot(noise["day_pct"], noise["drift_pct"]), 1)]),
        (r"(\d+) sessions per row, K = 5", [(study["sessions"], 1)]),
        (rf"true crossovers c({NUMBER}) and c({NUMBER})", [(xo["eagle3"], 1), (xo["mtp"], 1)]),
        (rf"true crossover c({NUMBER}), between 32 and 64\), (\d+) sessions: within a factor 1.25 of the truth "
         rf"in (\d+) % of sessions with the new design \(95 % CI ({NUMBER})-(\d+) %; median estimate c({NUMBER})\), "
         rf"(\d+) % with the earlier gates'",
         [(cs["true_crossover_c"], 1), (cs["sessions"], 1), (new["within_1_25x"], 100), (new["ci95"][0], 100),
          (new["ci95"][1], 100), (new["median_estimate"], 1), (old["within_1_25x"], 100)]),
        (r"within 1.25x of the truth in (\d+) % of sessions with per-request acceptance and (\d+) % with per-run",
         [(s["A/A"]["crossover_within_1_25x"], 100), (s_run["A/A"]["crossover_within_1_25x"], 100)]),
        (rf"the throughput cell alone catches the 5 % tok/s drop at c64 in ({NUMBER}) of sessions .*? the step-time "
         rf"gate catches it there in ({NUMBER})",
         [(levels(s["tok/s -5%"], "throughput")["c64"], 1), (levels(s["tok/s -5%"], "step_time")["c64"], 1)]),
        (rf"at 1 % it fails unchanged code in ({NUMBER})-({NUMBER}) % of sessions",
         [(attach["A/A"]["fail_rate"], 100), (attach_half["A/A"]["fail_rate"], 100)]),
        (rf"The engine slowdown is caught ({NUMBER})-({NUMBER}) per level with per-request acceptance and "
         rf"({NUMBER}) / ({NUMBER}) at c1 / c4 by step time with per-run acceptance \(goals ({NUMBER}) and ({NUMBER})\); "
         rf"the throughput gate alone catches the 5 % tok/s drop ({NUMBER}) \(per-request\)",
         [*span(list(levels(half[ENGINE]).values())), (levels(half_run[ENGINE], "step_time")["c1"], 1),
          (levels(half_run[ENGINE], "step_time")["c4"], 1), (0.95, 1), (0.9, 1), (gate_rate(half["tok/s -5%"]), 1)]),
        (rf"Its false fails stay at ({NUMBER}) %", [(half["A/A"]["fail_rate"], 100)]),
        (rf"right in ({NUMBER}) of sessions \(goal ({NUMBER})\): the acceptance drop read as the engine's in ({NUMBER})",
         [(headline_entry(study, prior=0.005)["attribution_correct"], 1), (0.95, 1),
          (half[ACCEPT_DROP]["wrong_half_rate"], 1)]),
        (rf"nothing relaunched, ({NUMBER}) % of unchanged sessions failed with the prior at the true spread \(95 % CI "
         rf"({NUMBER})-({NUMBER}) %: .*? and ({NUMBER}) % with it at half \(CI ({NUMBER})-({NUMBER}) %: above\)",
         [(attach["A/A"]["fail_rate"], 100), (attach["A/A"]["fail_ci95"][0], 100), (attach["A/A"]["fail_ci95"][1], 100),
          (attach_half["A/A"]["fail_rate"], 100), (attach_half["A/A"]["fail_ci95"][0], 100),
          (attach_half["A/A"]["fail_ci95"][1], 100)]),
        (rf"catches eagle3 at 0.95x its reference at c16 ({NUMBER}) / ({NUMBER}) \(goal 0.9: \*\*not met\*\* with per-run "
         rf"acceptance; the suite ({NUMBER}) / ({NUMBER})\), and unchanged code costs ({NUMBER}) / ({NUMBER}) launches per "
         rf"configuration \(goal 1.3: \*\*not met\*\* with per-run acceptance\), ({NUMBER}) / ({NUMBER}) with the prior",
         [(gate_rate(spec), 1), (gate_rate(spec_run), 1), (spec["fail_rate"], 1), (spec_run["fail_rate"], 1),
          (s["A/A"]["launches_per_config"], 1), (s_run["A/A"]["launches_per_config"], 1),
          (half["A/A"]["launches_per_config"], 1), (half_run["A/A"]["launches_per_config"], 1)]),
        (rf"the speculation gate fails ({NUMBER}) of those sessions \(the legacy gates ({NUMBER})\)",
         [(gate_rate(s["reference 7% faster"]), 1), (gate_rate(legacy["reference 7% faster"]), 1)]),
    ]


def test_gate_study_sentences_equal_the_json(study):
    wrong = check_sentences("docs/research/gate-study.md", STUDY_MD.read_text(encoding="utf-8"), _sentences(study))
    assert not wrong, "\n".join(wrong)


def test_gate_study_goal_verdicts_match_the_figures(study):
    """The 'not met' claims of the sentences above hold: the speculation gate below 0.9 and the
    launches above 1.3 with per-run acceptance, and not with per-request."""
    req, run = headline(study), headline(by_acceptance(study, "per-run"))
    assert gate_rate(req["speculation 0.95x at c16"]) >= 0.9 > gate_rate(run["speculation 0.95x at c16"])
    assert req["A/A"]["launches_per_config"] <= 1.3 < run["A/A"]["launches_per_config"]


ATTRIBUTION_ROWS = {"read as engine": (ACCEPT_DROP, "wrong_half_rate"), "read as drafter": (ENGINE, "wrong_half_rate"),
                    "attribution right": (None, "attribution_correct")}


ATTRIBUTION_095_JSON = ROOT / "docs" / "research" / "evidence" / "attribution" / "study-level-0.95.json"


def test_gate_study_attribution_table_equals_the_json(study):
    """The attribution table's columns at level 0.997 (the gates' level) against gate-study.json,
    at 0.95 against the run at that level (docs/research/evidence/attribution/)."""
    at_095 = json.loads(ATTRIBUTION_095_JSON.read_text(encoding="utf-8"))
    head, rows = table_with(STUDY_MD.read_text(encoding="utf-8"), "acceptance, what", "docs/research/gate-study.md")
    wrong, checked = [], 0
    for row in rows:
        acceptance = row[0].split(",")[0]
        what = next(k for k in ATTRIBUTION_ROWS if k in row[0])
        scenario, key = ATTRIBUTION_ROWS[what]
        for col, text in zip(head[1:], row[1:]):
            m = re.fullmatch(rf"prior ({NUMBER}), level ({NUMBER})", col)
            assert m, f"docs/research/gate-study.md attribution table: column {col!r} is new"
            source = {"0.997": study, "0.95": at_095}[m.group(2)]
            entry = headline_entry(by_acceptance(source, acceptance), prior=float(m.group(1)))
            value = entry[key] if scenario is None else next(s[key] for s in entry["scenarios"]
                                                            if s["scenario"] == scenario)
            wrong += mismatches(f"docs/research/gate-study.md attribution row {row[0]!r}, {col!r}", text, [(value, 1)])
            checked += 1
    assert checked == 24 and not wrong, "\n".join(wrong) or f"{checked} figures checked, 24 expected"


def test_gate_study_issue14_table_equals_its_json(issue14_study):
    head, rows = table_with(STUDY_MD.read_text(encoding="utf-8"), "issue-14 spread", "docs/research/gate-study.md")
    wrong, checked = [], 0
    for row in rows:
        cell = dict(zip(head, row))
        noise = next((v for k, v in BEFORE_PRESETS.items() if k in row[0]), None)
        assert noise, f"docs/research/gate-study.md issue-14 row {row[0]!r}: no preset named"

        def point(prior: float, noise: str = noise, design: str = cell["design"]) -> dict[str, dict[str, Any]]:
            return grid_point(issue14_study, noise, design=design, repeats=3, fail_rule="significant",
                              prior_between_sd=prior, history_sessions=5)

        s, half = point(0.01), point(0.005)
        spec = s["speculation 0.95x at c16"]
        expected = {
            "false fails, prior 0.01 / 0.005": [(s["A/A"]["fail_rate"], 100), (half["A/A"]["fail_rate"], 100)],
            "P(tok/s -5 %), gate": [(gate_rate(s["tok/s -5%"]), 1)],
            "P(speculation 0.95x at c16), gate (suite)": [(gate_rate(spec), 1), (spec["fail_rate"], 1)],
            "launches/config A/A, prior 0.01 / 0.005": [(s["A/A"]["launches_per_config"], 1),
                                                        (half["A/A"]["launches_per_config"], 1)],
            "launches/config under -5 %": [(s["tok/s -5%"]["launches_per_config"], 1)],
        }
        for col, text in cell.items():
            if col in ("issue-14 spread", "design"):
                continue
            assert col in expected, f"docs/research/gate-study.md issue-14 table: column {col!r} is new"
            checked += len(expected[col])
            wrong += mismatches(f"docs/research/gate-study.md issue-14 row {row[0]} {cell['design']}, {col!r}", text, expected[col])
    wrong += check_sentences("docs/research/gate-study.md", STUDY_MD.read_text(encoding="utf-8"),
                             [(r"no step-time gate: (\d+) gate tests\)", [(issue14_study["gate_tests"], 1)])])
    assert checked >= 60 and not wrong, "\n".join(wrong) or f"only {checked} figures checked"


BEFORE_PRESETS = {"(gpu-quiet)": "gpu-quiet", "(gpu)": "gpu", "(gpu-drift2)": "gpu-drift2"}


def test_gate_study_before_table_equals_the_earlier_json(earlier_study):
    head, rows = table_with(STUDY_MD.read_text(encoding="utf-8"), "launch spread", "docs/research/gate-study.md")
    wrong, checked = [], 0
    for row in rows:
        cell = dict(zip(head, row))
        noise = next((v for k, v in BEFORE_PRESETS.items() if k in row[0]), None)
        assert noise, f"docs/research/gate-study.md 'Before' row {row[0]!r}: no preset named"
        scen = grid_point(earlier_study, noise, repeats=3, fail_rule="significant", prior_between_sd=0.01,
                          history_sessions=int(cell["K"]))
        where = f"docs/research/gate-study.md 'Before' row {row[0]} K {cell['K']}"
        for col, text in cell.items():
            if col in ("launch spread", "K"):
                continue
            if col.startswith("false-fail"):
                want = [(scen["A/A"]["fail_rate"], 100)]
            elif col.startswith("P("):
                name = col[2:-1]
                assert name in scen, f"{where}: column {col!r} names no scenario of the earlier study"
                want = [(scen[name]["fail_rate"], 1)]
                if "(" in text:  # in brackets: the speculation gate's own rate
                    want.append((scen[name]["speculation_fail_rate"], 1))
            else:
                raise AssertionError(f"{where}: column {col!r} is new; teach tests/test_docs.py to check it")
            checked += len(want)
            wrong += mismatches(f"{where}, column {col!r}", text, want)
    assert checked >= 30 and not wrong, "\n".join(wrong) or f"only {checked} figures checked"


# ---------------------------------------------------------------- README.md

def _gate_counts(study: dict[str, Any]) -> list[int]:
    """Throughput, step-time, accept-length, must-win and report-only speculation tests of the suite."""
    from specguard.config import load_suite

    suite = load_suite(ROOT / study["suite"])
    spec = [s for s in suite.servers.values() if s.speculative]
    levels_ = suite.sweep.concurrency
    must_win = sum(1 for s in spec for c in levels_ if s.speculation_must_win_up_to is not None
                   and c <= s.speculation_must_win_up_to)
    n = len(suite.servers) * len(levels_)
    return [n, n, len(spec) * len(levels_), must_win, len(spec) * len(levels_) - must_win]


def test_guarantee_table_equals_the_json(study):
    text = GUARANTEES.read_text(encoding="utf-8")
    section = text[text.index("## Measured"):]
    _, head, rows = next(tables(section))
    run = by_acceptance(study, "per-run")
    s, half = headline(study), headline(study, prior=0.005)
    attach, attach_half = headline(study, design="attach"), headline(study, prior=0.005, design="attach")
    s_run = headline(run)
    noise = study["studies"][study["headline_noise"]]["noise"]
    spec = s["speculation 0.95x at c16"]
    seed_a = next(r for r in study["crossover_study"]["rows"] if r["design"] == study["headline_design"])
    expected: dict[str, list[Fig]] = {
        "false fails per whole-suite run": [(s["A/A"]["fail_rate"], 100), (half["A/A"]["fail_rate"], 100)],
        "tok/s -5 % / -10 %": [(s["tok/s -5%"]["fail_rate"], 1), (s["tok/s -10%"]["fail_rate"], 1),
                               (gate_rate(s["tok/s -5%"]), 1), (gate_rate(s["tok/s -10%"]), 1)],
        "engine slowdown 5 %": [*[(r, 1) for r in levels(s[ENGINE]).values()],
                                *[(int(c[1:]), 1) for c in levels(s[ENGINE])],
                                *[(r, 1) for r in levels(s_run[ENGINE], "step_time").values()]],
        "accept length -10 %": [(s["accept -10%"]["fail_rate"], 1)],
        "which half moved": [(headline_entry(study)["attribution_correct"], 1), (headline_entry(run)["attribution_correct"], 1),
                             (headline_entry(study, prior=0.005)["attribution_correct"], 1)],
        "speculation at 0.95x its reference": [(spec["fail_rate"], 1), (gate_rate(spec), 1)],
        "GPU cost": [(s["A/A"]["launches_per_config"], 1), (s["tok/s -5%"]["launches_per_config"], 1),
                     (0.05, 100)],
        "attach mode (one launch, no `restart_command`): false fails": [
            (attach["A/A"]["fail_rate"], 100), (attach_half["A/A"]["fail_rate"], 100),
            (s["A/A"]["fail_rate"], 100), (half["A/A"]["fail_rate"], 100)],
        "attach mode: tok/s -5 %": [(attach["tok/s -5%"]["fail_rate"], 1), (gate_rate(attach["tok/s -5%"]), 1),
                                    (s["tok/s -5%"]["fail_rate"], 1), (gate_rate(s["tok/s -5%"]), 1)],
        "crossover": [(1.25, 1), (seed_a["within_1_25x"], 100), (s["A/A"]["crossover_within_1_25x"], 100)],
    }
    wrong, seen = [], set()
    wrong += mismatches("guarantee table header", head[1],
                        [(study["sessions"], 1), (math.hypot(noise["day_pct"], noise["drift_pct"]), 1),
                         (noise["day_pct"], 1), (noise["drift_pct"], 1), (1, 1), (1 / noise["stall_rate"], 1)])
    for row in rows:
        key = next((k for k in expected if row[0].startswith(k)), None)
        assert key, f"guarantee table: row {row[0]!r} is new; teach tests/test_docs.py its figures"
        seen.add(key)
        wrong += mismatches(f"guarantee row {row[0]!r}", row[1], expected[key])
    assert seen == set(expected), f"guarantee table lost rows: {set(expected) - seen}"
    preamble = " ".join(section[:section.index("\n|")].split())
    m = re.search(r"(\d+) gate tests: (\d+) throughput, (\d+) step-time, (\d+) accept-length, (\d+) must-win and "
                  r"(\d+) report-only speculation; (\d+) runs per cell, K = (\d+) stored sessions", preamble)
    assert m, "docs/guarantees.md: the guarantee table's preamble (gate tests, runs, K) was reworded; update tests/test_docs.py"
    counts = _gate_counts(study)
    assert sum(counts) == study["gate_tests"], f"the suite's gate tests {counts} do not add up to the study's"
    wrong += mismatches("guarantee preamble", " ".join(m.groups()),
                        [(study["gate_tests"], 1), *[(c, 1) for c in counts], (3, 1), (5, 1)])
    assert not wrong, "\n".join(wrong)


# ---------------------------------------------------------------- docs/statistics.md

def test_statistics_md_power_sentence_equals_the_earlier_study(earlier_study):
    """The beyond-tolerance vs significant power sentence quotes the earlier study's grid (it ran
    both rules; the current one ran only the default), repeats 3, K = 3-5, 1 % spread."""
    text = " ".join(STATISTICS_MD.read_text(encoding="utf-8").split())
    m = re.search(r"measured power (\S+)-(\S+) for a 5 % drop with it, against (\S+)-(\S+) under \"significant\"", text)
    assert m, "docs/statistics.md: the power sentence was reworded; update tests/test_docs.py"

    def span(rule: str) -> list[Fig]:
        rates = [grid_point(earlier_study, "gpu", repeats=3, fail_rule=rule, prior_between_sd=0.01,
                            history_sessions=k)["tok/s -5%"]["fail_rate"] for k in (3, 5)]
        return [(min(rates), 1), (max(rates), 1)]

    wrong = mismatches("docs/statistics.md power sentence", " ".join(m.groups()),
                       span("beyond-tolerance") + span("significant"))
    assert not wrong, "\n".join(wrong)


def test_statistics_md_sentences_equal_the_json(study):
    """docs/statistics.md's figures of the current study: attribution at 0.997 (the 0.95 figures
    before them come from a separate run gate-study.json does not hold), the whole-suite false
    fails at half the prior, attach mode's power and the speculation gate's."""
    run = by_acceptance(study, "per-run")
    s, half, s_run = headline(study), headline(study, prior=0.005), headline(run)
    attach, attach_half = headline(study, design="attach"), headline(study, prior=0.005, design="attach")

    def named_engine(doc: dict[str, Any], prior: float) -> float:
        return headline(doc, prior=prior)[ACCEPT_DROP]["wrong_half_rate"]

    spec = s["speculation 0.95x at c16"]
    wrong = check_sentences("docs/statistics.md", STATISTICS_MD.read_text(encoding="utf-8"), [
        (rf"at 0.997: ({NUMBER}) %, ({NUMBER}) %, ({NUMBER})-({NUMBER}) %\)",
         [(named_engine(study, 0.01), 100), (named_engine(study, 0.005), 100),
          *[(v, 100) for v in sorted([named_engine(run, 0.01), named_engine(run, 0.005)])]]),
        (rf"stays inside it in launch mode \(the gate study: ({NUMBER}) % of whole-suite runs at half the prior, "
         rf"relaunches included\), not in attach mode, which cannot relaunch \(({NUMBER}) %",
         [(study["false_fail_rate_half_prior"], 100), (study["attach_false_fail_rate_half_prior"], 100)]),
        (rf"false fails in ({NUMBER}) % of whole-suite runs with the prior at the true spread and ({NUMBER}) % with it "
         rf"at half \(launch mode: ({NUMBER}) % and ({NUMBER}) %\), so the family bound does not hold there at half the "
         rf"prior; a 5 % tok/s drop caught by the throughput gate alone ({NUMBER}), by the suite ({NUMBER}) \(launch "
         rf"mode: ({NUMBER}) and ({NUMBER})\); the engine slowdown per level ({NUMBER})-({NUMBER}) \(launch mode "
         rf"({NUMBER})-({NUMBER})\)",
         [(attach["A/A"]["fail_rate"], 100), (attach_half["A/A"]["fail_rate"], 100), (s["A/A"]["fail_rate"], 100),
          (half["A/A"]["fail_rate"], 100), (gate_rate(attach["tok/s -5%"]), 1), (attach["tok/s -5%"]["fail_rate"], 1),
          (gate_rate(s["tok/s -5%"]), 1), (s["tok/s -5%"]["fail_rate"], 1), *span(list(levels(attach[ENGINE]).values())),
          *span(list(levels(s[ENGINE]).values()))]),
        (rf"at c16 only: ({NUMBER}) for this gate alone \(docs/research/gate-study.md; the suite as a whole ({NUMBER}), because "
         rf"the eagle3 c16 throughput cell drops too\), ({NUMBER}) with vLLM-like per-run acceptance",
         [(gate_rate(spec), 1), (spec["fail_rate"], 1), (gate_rate(s_run["speculation 0.95x at c16"]), 1)]),
    ])
    # the attach paragraph's "does not hold at half the prior": the whole 95 % interval above the family alpha
    assert attach_half["A/A"]["fail_ci95"][0] > 0.01, "docs/statistics.md: attach mode's false fails at half the prior"
    assert not wrong, "\n".join(wrong)


def test_suite_file_doc_names_every_key_in_its_table():
    """docs/suite-file.md documents every key a suite file can hold, in the table it is written in."""
    import dataclasses

    from specguard.config import ADVANCED_KEYS, ServerConfig, SoakConfig, SweepConfig, Tolerances
    from specguard.workload import WorkloadSpec
    text = (ROOT / "docs" / "suite-file.md").read_text()
    sections = dict(re.findall(r"^## `\[([a-z.A-Z]+)\]`\n(.*?)(?=^## |\Z)", text, flags=re.S | re.M))
    for table, cls in (("servers.NAME", ServerConfig), ("sweep", SweepConfig), ("workload", WorkloadSpec),
                       ("tolerances", Tolerances), ("soak", SoakConfig)):
        for f in dataclasses.fields(cls):
            if f.name == "name":
                continue
            where = "advanced" if ADVANCED_KEYS.get(f.name) == table.split(".")[0] else table
            assert f"`{f.name}`" in sections[where], (f.name, where)
    assert "`strict_server_args`" in sections["advanced"]


def test_design_md_places_every_top_level_module_the_layers_contract_lists():
    """docs/design.md's layer table and pyproject's exhaustive layers contract name the same modules,
    and each of them exists."""
    import tomllib
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    layers = next(c for c in contracts if c["type"] == "layers")
    assert layers["exhaustive"] is True and layers["containers"] == ["specguard"]
    in_contract = {name.strip() for layer in layers["layers"] for name in layer.split("|")}
    package = ROOT / "specguard"
    on_disk = {p.stem for p in package.iterdir()
               if (p.suffix == ".py" and p.stem != "__init__") or (p / "__init__.py").exists()}
    assert in_contract == on_disk
    table = (ROOT / "docs" / "design.md").read_text().split("| layer (top to bottom) |")[1].split("\n\n")[0]
    missing = sorted(m for m in on_disk if f"specguard/{m}.py" not in table and f"specguard/{m}/" not in table)
    assert not missing, f"docs/design.md's layer table does not place {missing}"


def test_readme_stays_a_first_page_and_every_relative_link_resolves():
    """The README is the two commands and first steps (<= 90 lines: the rest is in docs/); a link
    in it or in docs/ that names a file names one that exists."""
    assert len(README.read_text(encoding="utf-8").splitlines()) <= 90
    broken = []
    for page in [README, *sorted((ROOT / "docs").rglob("*.md"))]:
        for target in re.findall(r"\]\(([^)\s]+)\)", page.read_text(encoding="utf-8")):
            if target.startswith(("http://", "https://", "#", "mailto:")):
                continue
            path = (page.parent / target.split("#")[0]).resolve()
            if not path.exists():
                broken.append(f"{page.relative_to(ROOT)}: {target}")
    assert not broken, broken


def _flat(path: Path) -> str:
    """A document's text with its line breaks as spaces (a phrase may wrap)."""
    return " ".join(path.read_text().split())


def test_the_constants_the_docs_quote_are_the_codes():
    """docs/statistics.md, docs/ab.md and the default suite's comments quote the gate's levels,
    caps and limits; each phrase is built from the constant it quotes, so changing the code
    without the docs fails here."""
    from specguard.ab.decision import POOLED_SHARE
    from specguard.ab.plan import AB_GATE_WEIGHTS
    from specguard.config import SweepConfig, load_suite
    from specguard.decide.consistency import OUTLIER_SDS, RUN_OUTLIER
    from specguard.decide.gates import ATTRIBUTION_CONFIDENCE, MIN_HALF_EFFECT, MIN_HALF_SHARE, GateDesign
    from specguard.decide.prior import PRIOR_CHECK_P, SESSION_CHECK_P
    from specguard.labels import ACCEPT_LENGTH, SPECULATION, STEP_TIME, THROUGHPUT
    from specguard.session.options import RunOptions
    from specguard.session.plan import PlannedTest, Planner

    stats_md, ab_md, suite_toml = _flat(STATISTICS_MD), _flat(ROOT / "docs" / "ab.md"), _flat(ROOT / "perf_tests" / "suite.toml")
    design, sweep = GateDesign(), SweepConfig()
    assert (design.suspicion_p, design.max_launches) == (sweep.relaunch_p, sweep.max_launches)  # one default
    assert f"`relaunch_p = {design.suspicion_p:g}`, `max_launches = {design.max_launches}`" in stats_md
    check = f"chi-square at {PRIOR_CHECK_P:.0%}".replace("%", " %")
    assert check in ab_md and check in suite_toml
    session_check = f"`SESSION_CHECK_P = {SESSION_CHECK_P:g}`"
    assert session_check in stats_md and f"at {SESSION_CHECK_P:.0%}".replace("%", " %") in suite_toml
    assert f"Above the {1 - SESSION_CHECK_P:.0%} quantile of chi^2".replace("%", " %") in stats_md
    assert f"at {POOLED_SHARE:g} of the group's alpha (`POOLED_SHARE`)" in ab_md
    weight_column = {row.split("|")[1].strip().split(" (")[0]: float(row.split("|")[5])
                     for row in (ROOT / "docs" / "ab.md").read_text().splitlines()
                     if row.startswith("| ") and row.count("|") == 6 and row.split("|")[5].strip()[:1].isdigit()}
    assert weight_column == {"tok/s": AB_GATE_WEIGHTS[THROUGHPUT], "step time": AB_GATE_WEIGHTS[STEP_TIME],
                             "accept length": AB_GATE_WEIGHTS[ACCEPT_LENGTH],
                             "speculation ratio": AB_GATE_WEIGHTS[SPECULATION]}, weight_column
    suite = load_suite(ROOT / "perf_tests" / "suite.toml")
    plan = Planner(suite, RunOptions(), design).plan([PlannedTest(n, c, "throughput") for n in suite.servers
                                                      for c in suite.sweep.concurrency]
                                                     + [PlannedTest(n, c, g) for n in ("eagle3", "mtp")
                                                        for c in suite.sweep.concurrency
                                                        for g in ("step_time", "accept_length", "speculation")]
                                                     + [PlannedTest("baseline", c, "step_time")
                                                        for c in suite.sweep.concurrency])
    family = suite.tolerances.family_alpha
    shares = round(family / plan.alpha_for("throughput", "baseline", 1))
    assert f"{family:g}/{shares} per throughput test" in stats_md and f"throughput test is {family:g}/{shares}" in stats_md
    assert f"The level is {ATTRIBUTION_CONFIDENCE:g}, not 0.95" in stats_md
    assert f"is {MIN_HALF_EFFECT:.0%} or a third of the tok/s change".replace("%", " %") in stats_md
    assert MIN_HALF_SHARE == 1 / 3
    assert f"The limit is {RUN_OUTLIER:.0%}, or {OUTLIER_SDS:g} robust sds".replace("%", " %") in stats_md
