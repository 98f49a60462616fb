"""Published figures equal the committed data they come from.

docs/gate-study.md and README.md's guarantee table quote docs/gate-study.json (the study run
behind them); gate-study.md's "Before" table and one sentence of docs/statistics.md quote the
earlier study, read from git at the commit gate-study.md names. Every figure of every checked
table cell and sentence is parsed, in order, and compared with the JSON value rounded to the
figure's own decimals; a mismatch fails naming the document, the place, and both figures. A
figure added to a checked cell without a check fails too (the counts must agree). When the study
is re-run, regenerate the JSON and the documents together (docs/evidence/README.md).
"""

from __future__ import annotations

import json
import math
import re
import subprocess
from collections.abc import Iterator
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
STUDY_MD = ROOT / "docs" / "gate-study.md"
STUDY_JSON = ROOT / "docs" / "gate-study.json"
STATISTICS_MD = ROOT / "docs" / "statistics.md"
README = ROOT / "README.md"

NUMBER = r"\d+(?:\.\d+)?"

# A figure as the JSON gives it: (value, scale), scale 100 for a percentage.
Fig = tuple[float, float]


@pytest.fixture(scope="module")
def study() -> dict[str, Any]:
    return json.loads(STUDY_JSON.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def earlier_study() -> dict[str, Any]:
    """The committed study that gate-study.md's "Before" section names ("(commit abc1234)")."""
    m = re.search(r"## Before: .*?\(commit ([0-9a-f]{7,40})\)", STUDY_MD.read_text(encoding="utf-8"))
    assert m, "docs/gate-study.md: the 'Before' heading no longer names its commit; update tests/test_docs.py"
    try:
        out = subprocess.run(["git", "-C", str(ROOT), "show", f"{m.group(1)}:docs/gate-study.json"],
                             capture_output=True, check=True, timeout=60)
    except (OSError, subprocess.CalledProcessError, subprocess.TimeoutExpired) as e:
        pytest.skip(f"the earlier study (git show {m.group(1)}:docs/gate-study.json) is not readable here: {e}")
    return json.loads(out.stdout)


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
    """Markdown tables with the text just before each (its heading and paragraph)."""
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        if lines[i].startswith("|") and i + 1 < len(lines) and re.match(r"^\|[\s:|-]+\|$", lines[i + 1]):
            context = "\n".join(lines[max(0, i - 8):i])
            head = [c.strip() for c in lines[i].strip("|").split("|")]
            rows = []
            j = i + 2
            while j < len(lines) and lines[j].startswith("|"):
                rows.append([c.strip() for c in lines[j].strip("|").split("|")])
                j += 1
            yield context, head, rows
            i = j
        else:
            i += 1


def table_with(text: str, first_column: str, doc: str) -> tuple[list[str], list[list[str]]]:
    found = [(h, r) for _, h, r in tables(text) if h[0] == first_column]
    assert len(found) == 1, f"{doc}: {len(found)} tables whose first column is {first_column!r}; update tests/test_docs.py"
    return found[0]


def grid_point(doc: dict[str, Any], noise: str, **want: Any) -> dict[str, dict[str, Any]]:
    """The scenarios (by name) of the one grid point of `noise` whose settings match `want`."""
    matches = [g for g in doc["studies"][noise]["grid"]
               if all(g["settings"].get(k) == pytest.approx(v) if isinstance(v, float) else g["settings"].get(k) == v
                      for k, v in want.items())]
    assert len(matches) == 1, f"gate-study.json, noise {noise}: {len(matches)} grid points match {want}"
    return {s["scenario"]: s for s in matches[0]["scenarios"]}


def headline(doc: dict[str, Any], prior: float | None = None, design: str | None = None) -> dict[str, dict[str, Any]]:
    """The headline grid point (defaults, headline design and noise), or the same at another prior/design."""
    return grid_point(doc, doc["headline_noise"], design=design or doc["headline_design"],
                      prior_between_sd=prior if prior is not None else 0.01, repeats=3, fail_rule="significant",
                      history_sessions=5)


def gate_rate(scenario: dict[str, Any]) -> float:
    """The rate at which the gate the scenario isolates failed by itself."""
    return scenario[f"{scenario['isolates']}_fail_rate"]


# ---------------------------------------------------------------- docs/gate-study.md

def test_headline_keys_are_the_headline_grid_point(study):
    """The top-level figures (what README quotes) are the defaults' grid point, not another."""
    s = headline(study)
    aa = s["A/A"]
    pairs = {
        "false_fail_rate": aa["fail_rate"],
        "false_fail_rate_half_prior": headline(study, prior=0.005)["A/A"]["fail_rate"],
        "power_tok_s_5pct": gate_rate(s["tok/s -5%"]), "suite_power_tok_s_5pct": s["tok/s -5%"]["fail_rate"],
        "power_tok_s_10pct": gate_rate(s["tok/s -10%"]), "power_accept_10pct": gate_rate(s["accept -10%"]),
        "power_speculation_5pct": gate_rate(s["speculation 0.95x at c16"]),
        "suite_power_speculation_5pct": s["speculation 0.95x at c16"]["fail_rate"],
        "launches_per_config": aa["launches_per_config"],
        "launches_per_config_tok_s_5pct": s["tok/s -5%"]["launches_per_config"],
        "crossover_within_1_25x": aa["crossover_within_1_25x"],
        "crossover_within_1_25x_seed_a": next(r["within_1_25x"] for r in study["crossover_study"]["rows"]
                                              if r["design"] == study["headline_design"]),
    }
    wrong = [f"gate-study.json {k} = {study[k]}, its headline grid point gives {v}"
             for k, v in pairs.items() if study[k] != pytest.approx(v)]
    assert not wrong, "\n".join(wrong)


AFTER_SETTINGS = {"design": str, "rule": str, "repeats": int, "K": int}


def test_gate_study_after_table_equals_the_json(study):
    head, rows = table_with(STUDY_MD.read_text(encoding="utf-8"), "design", "docs/gate-study.md")
    wrong, checked = [], 0
    for row in rows:
        cell = dict(zip(head, row))
        prior = float(re.match(NUMBER, cell["prior tok (dof)"]).group(0))
        scen = grid_point(study, study["headline_noise"], design=cell["design"], fail_rule=cell["rule"],
                          repeats=int(cell["repeats"]), history_sessions=int(cell["K"]), prior_between_sd=prior)
        aa = scen["A/A"]
        where = f"docs/gate-study.md 'After' row {cell['design']} prior {prior}"
        for col, text in cell.items():
            if col in AFTER_SETTINGS or col.startswith("prior"):
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
                assert name in scen, f"{where}: column {col!r} names no scenario of gate-study.json"
                want = [(scen[name]["fail_rate"], 1), (gate_rate(scen[name]), 1)]
            else:
                raise AssertionError(f"{where}: column {col!r} is new; teach tests/test_docs.py to check it")
            checked += len(want)
            wrong += mismatches(f"{where}, column {col!r}", text, want)
    assert len(rows) == len(study["studies"][study["headline_noise"]]["grid"]), \
        "docs/gate-study.md 'After' table: not one row per grid point of the study"
    assert checked >= 60 and not wrong, "\n".join(wrong) or f"only {checked} figures checked"


def test_gate_study_goals_table_equals_the_json(study):
    head, rows = table_with(STUDY_MD.read_text(encoding="utf-8"), "goal", "docs/gate-study.md")
    s, half, legacy = headline(study), headline(study, prior=0.005), headline(study, design="legacy")
    n = study["sessions"]
    seed_a = next(r for r in study["crossover_study"]["rows"] if r["design"] == study["headline_design"])

    def ff(aa: dict[str, Any], ci_label: list[Fig]) -> list[Fig]:  # "1.0 % (2/200; 95 % CI 0.3-3.6 %)"
        return [(aa["fail_rate"], 100), (aa["fail_rate"] * n, 1), (n, 1), *ci_label,
                (aa["fail_ci95"][0], 100), (aa["fail_ci95"][1], 100)]

    spec = s["speculation 0.95x at c16"]
    expected: dict[str, tuple[list[Fig], list[Fig]]] = {  # goal prefix: (result figures, 'met' figures)
        "false-fail rate": (ff(s["A/A"], [(0.95, 100)]), []),
        "same, prior at half": (ff(half["A/A"], []), []),
        "power, tok/s -5": ([(gate_rate(s["tok/s -5%"]), 1), (s["tok/s -5%"]["fail_rate"], 1)],
                            [(0.9, 1), (gate_rate(legacy["tok/s -5%"]), 1)]),
        "power, tok/s -10": ([(gate_rate(s["tok/s -10%"]), 1)], []),
        "power, accept length -10": ([(gate_rate(s["accept -10%"]), 1)], []),
        "power, speculation at 0.95x": ([(gate_rate(spec), 1), (spec["fail_rate"], 1), (16, 1)],  # "the c16 ... cell"
                                        [(gate_rate(legacy["speculation 0.95x at c16"]), 1)]),
        "launches per configuration": ([(s["A/A"]["launches_per_config"], 1), (s["A/A"]["sessions_relaunching"], 100),
                                        (s["tok/s -5%"]["launches_per_config"], 1), (0.05, 100)], []),
        "crossover within 1.25x": ([(seed_a["within_1_25x"], 100)], []),
        "default suite under 3 minutes": ([], []),
    }
    wrong, seen = [], set()
    for row in rows:
        key = next((k for k in expected if row[0].startswith(k)), None)
        assert key, f"docs/gate-study.md goals table: row {row[0]!r} is new; teach tests/test_docs.py its figures"
        seen.add(key)
        result, met = expected[key]
        wrong += mismatches(f"docs/gate-study.md goals row {row[0]!r}, result", row[1], result)
        wrong += mismatches(f"docs/gate-study.md goals row {row[0]!r}, met", row[2], met)
    assert seen == set(expected), f"docs/gate-study.md goals table lost rows: {set(expected) - seen}"
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
    grid = study["studies"][study["headline_noise"]]["grid"]
    s, legacy = headline(study), headline(study, design="legacy")
    return [
        (r"\((\d+) s deciding (\d+) trials at (\d+) grid points",
         [(study["studies"][study["headline_noise"]]["elapsed_s"], 1), (study["sessions"], 1), (len(grid), 1)]),
        (r"plus (\d+) s for the seed-A crossover study", [(cs["elapsed_s"], 1)]),
        (rf"\| day \(the machine's mood\) \| ({NUMBER}) % \|", [(noise["day_pct"], 1)]),
        (rf"\| launch \(drift\) \| ({NUMBER}) % \|", [(noise["drift_pct"], 1)]),
        (rf"\| run \| ({NUMBER}) % \+", [(within.pop(), 100)]),
        (rf"\| stall \| one run in (\d+) at ({NUMBER})x \|",
         [(1 / noise["stall_rate"], 1), (noise["stall_factors"][0], 1)] if len(noise["stall_factors"]) == 1 else []),
        (r"so two one-launch sessions differ by (\d+) %", [(math.hypot(noise["day_pct"], noise["drift_pct"]), 1)]),
        (rf"(\d+) sessions per row, preset `{study['headline_noise']}`", [(study["sessions"], 1)]),
        (rf"true crossovers c({NUMBER}) and c({NUMBER})", [(xo["eagle3"], 1), (xo["mtp"], 1)]),
        (rf"true crossover c({NUMBER}), between 32 and 64\), (\d+) sessions: within a factor 1.25 of the truth "
         rf"in (\d+) % of sessions with the new design \(95 % CI ({NUMBER})-(\d+) %; median estimate c({NUMBER})\), "
         rf"(\d+) % with the earlier gates'",
         [(cs["true_crossover_c"], 1), (cs["sessions"], 1), (new["within_1_25x"], 100), (new["ci95"][0], 100),
          (new["ci95"][1], 100), (new["median_estimate"], 1), (old["within_1_25x"], 100)]),
        (r"the t quantile at alpha 0.01 / (\d+) / 2", [(study["gate_tests"], 1)]),
        (r"at alpha 0.01 / (\d+)\. The suite as a whole catches the 0.95x case (\d+) % of the time",
         [(2 * study["gate_tests"], 1), (s["speculation 0.95x at c16"]["fail_rate"], 100)]),
        (rf"the speculation gate fails ({NUMBER}) of those sessions \(earlier ({NUMBER})\)",
         [(gate_rate(s["reference 7% faster"]), 1), (gate_rate(legacy["reference 7% faster"]), 1)]),
    ]


def test_gate_study_sentences_equal_the_json(study):
    text = " ".join(STUDY_MD.read_text(encoding="utf-8").split())
    wrong = []
    for pattern, want in _sentences(study):
        m = re.search(pattern, text)
        if m is None:
            wrong.append(f"docs/gate-study.md: no sentence matches {pattern!r} (reworded? update tests/test_docs.py)")
            continue
        wrong += mismatches(f"docs/gate-study.md {m.group(0)!r}", " ".join(m.groups()), want)
    assert not wrong, "\n".join(wrong)


BEFORE_PRESETS = {"(gpu-quiet)": "gpu-quiet", "(gpu)": "gpu", "(gpu-drift2)": "gpu-drift2"}


def test_gate_study_before_table_equals_the_earlier_json(earlier_study):
    head, rows = table_with(STUDY_MD.read_text(encoding="utf-8"), "launch spread", "docs/gate-study.md")
    wrong, checked = [], 0
    for row in rows:
        cell = dict(zip(head, row))
        noise = next((v for k, v in BEFORE_PRESETS.items() if k in row[0]), None)
        assert noise, f"docs/gate-study.md 'Before' row {row[0]!r}: no preset named"
        scen = grid_point(earlier_study, noise, repeats=3, fail_rule="significant", prior_between_sd=0.01,
                          history_sessions=int(cell["K"]))
        where = f"docs/gate-study.md 'Before' row {row[0]} K {cell['K']}"
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

def test_readme_guarantee_table_equals_the_json(study):
    text = README.read_text(encoding="utf-8")
    section = text[text.index("### What the gate guarantees"):]
    section = section[:section.index("\n## ")]
    context, head, rows = next(tables(section))
    s, half = headline(study), headline(study, prior=0.005)
    noise = study["studies"][study["headline_noise"]]["noise"]
    spec = s["speculation 0.95x at c16"]
    seed_a = next(r for r in study["crossover_study"]["rows"] if r["design"] == study["headline_design"])
    expected: dict[str, list[Fig]] = {
        "false fails per whole-suite run": [(s["A/A"]["fail_rate"], 100), (half["A/A"]["fail_rate"], 100)],
        "tok/s -5 % / -10 %": [(s["tok/s -5%"]["fail_rate"], 1), (s["tok/s -10%"]["fail_rate"], 1),
                               (gate_rate(s["tok/s -5%"]), 1), (gate_rate(s["tok/s -10%"]), 1)],
        "accept length -10 %": [(s["accept -10%"]["fail_rate"], 1)],
        "speculation at 0.95x its reference": [(spec["fail_rate"], 1), (gate_rate(spec), 1)],
        "GPU cost": [(s["A/A"]["launches_per_config"], 1), (s["tok/s -5%"]["launches_per_config"], 1),
                     (0.05, 100)],
        "crossover": [(1.25, 1), (seed_a["within_1_25x"], 100), (s["A/A"]["crossover_within_1_25x"], 100)],
    }
    wrong, seen = [], set()
    wrong += mismatches("README guarantee table header", head[1],
                        [(study["sessions"], 1), (math.hypot(noise["day_pct"], noise["drift_pct"]), 1),
                         (noise["day_pct"], 1), (noise["drift_pct"], 1), (1, 1), (1 / noise["stall_rate"], 1)])
    for row in rows:
        key = next((k for k in expected if row[0].startswith(k)), None)
        assert key, f"README guarantee table: row {row[0]!r} is new; teach tests/test_docs.py its figures"
        seen.add(key)
        wrong += mismatches(f"README guarantee row {row[0]!r}", row[1], expected[key])
    assert seen == set(expected), f"README guarantee table lost rows: {set(expected) - seen}"
    preamble = " ".join(context.split())
    m = re.search(r"(\d+) gate tests; (\d+) runs per cell, K = (\d+) stored sessions", preamble)
    assert m, "README: the guarantee table's preamble (gate tests, runs, K) was reworded; update tests/test_docs.py"
    wrong += mismatches("README guarantee preamble", " ".join(m.groups()),
                        [(study["gate_tests"], 1), (3, 1), (5, 1)])
    study_text = STUDY_MD.read_text(encoding="utf-8")
    goals = " ".join(study_text[study_text.index("In one paragraph:"):].split())
    m = re.search(rf"false fails are ({NUMBER}) % \(goal (\d+) %\).*?caught ({NUMBER})-({NUMBER}) of the time "
                  rf"\(goal ({NUMBER})\).*?at one level ({NUMBER}) of the time \(goal ({NUMBER}); the suite catches it "
                  rf"({NUMBER}) of the time", goals)
    assert m, "docs/gate-study.md: the 'not met' paragraph was reworded; update tests/test_docs.py"
    wrong += mismatches("docs/gate-study.md 'not met' paragraph", " ".join(m.groups()),
                        [(half["A/A"]["fail_rate"], 100), (1, 1), (gate_rate(s["tok/s -5%"]), 1),
                         (s["tok/s -5%"]["fail_rate"], 1), (0.9, 1), (gate_rate(spec), 1), (0.9, 1),
                         (spec["fail_rate"], 1)])
    assert not wrong, "\n".join(wrong)


# ---------------------------------------------------------------- docs/statistics.md

def test_statistics_md_half_width():
    """The interval half-width docs/statistics.md quotes, computed with the gate's own function
    (1 % prior, 3 runs of within-run sd 0-1 %, K = 3-5, alpha 0.01 / 28 one-sided)."""
    import numpy as np

    from specguard.decide.gates import gate_confidence
    from specguard.research.study.legacy import compare_to_history

    text = " ".join(STATISTICS_MD.read_text(encoding="utf-8").split())
    m = re.search(r"interval's half-width \((\S+)-(\S+) % with a 1 % between-launch spread at alpha 0.01/28\)", text)
    assert m, "docs/statistics.md: the half-width sentence was reworded; update tests/test_docs.py"
    widths = []
    for within in (0.0, 0.005, 0.01):
        runs = list(np.exp(np.array([-1.0, 0.0, 1.0]) * within))
        for k in (3, 5):
            e = compare_to_history(runs, [runs] * k, threshold=0.97, prior_between_sd=0.01,
                                   confidence=gate_confidence(0.01 / 28))
            widths.append(math.log(e.high / e.ratio) * 100)
    lo, hi = map(float, m.groups())
    assert lo <= min(widths) and max(widths) <= hi, f"half-widths {min(widths):.2f}-{max(widths):.2f} %, doc says {lo}-{hi} %"


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


def test_suite_file_doc_names_every_key_in_its_table():
    """docs/suite-file.md documents every key a suite file can hold, in the table it is written in."""
    import dataclasses

    from specguard.config import ADVANCED_KEYS, ServerConfig, SweepConfig, Tolerances
    from specguard.workload import WorkloadSpec
    text = (ROOT / "docs" / "suite-file.md").read_text()
    sections = dict(re.findall(r"^## `\[([a-z.A-Z]+)\]`\n(.*?)(?=^## |\Z)", text, flags=re.S | re.M))
    for table, cls in (("servers.NAME", ServerConfig), ("sweep", SweepConfig), ("workload", WorkloadSpec),
                       ("tolerances", Tolerances)):
        for f in dataclasses.fields(cls):
            if f.name == "name":
                continue
            where = "advanced" if ADVANCED_KEYS.get(f.name) == table.split(".")[0] else table
            assert f"`{f.name}`" in sections[where], (f.name, where)
    assert "`strict_server_args`" in sections["advanced"]
