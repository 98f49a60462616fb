"""The vLLM CPU suite as a user runs it: real engine, real speculative decoding, real verdicts.

`pytest perf_tests --suite perf_tests/suites/vllm-cpu.toml` runs in a subprocess against a temp
baseline directory, launching vLLM servers on 127.0.0.1 with the tiny models whose acceptance is
known by construction (tools/build_tiny_models.py). Nothing is mocked.

Skipped unless SPECGUARD_VLLM_PYTHON names the vLLM venv's python (.ci/setup_vllm.sh makes it);
once it is set, a missing interpreter or model is a failure, never a skip. .ci/run_real_engine.sh
sets it and also fails on a skip.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
import real_suite_runs
from real_suite_runs import engine_python, tiny_models

from specguard.report.results import decision_text

pytestmark = pytest.mark.real_engine
REPO = Path(__file__).resolve().parents[2]
SUITE = REPO / "perf_tests" / "suites" / "vllm-cpu.toml"
MODELS = ("target", "draft-70", "draft-20")
RUN_TIMEOUT_S = 1500  # one suite session: the update run took 507-564 s on a busy 2-core machine, and passed
# 900 s (interrupted) on 3 Dec while the shared machine ran 1.7x slower (baseline c1 157 tok/s, 268 the run before)

# Accept length = 1 + accepted / drafts from vLLM's counters, so only steps that drafted count.
# ngram: the first ~11 tokens of each request are generated without drafts (no earlier occurrence
#   of the last 2 tokens until the period-10 output has repeated once); they do not enter the
#   ratio. Every later proposal continues the period, so each drafting step accepts all 4: 5.0.
#   (Counted over all steps, SGLang-style, 64 tokens in 1 + 11 + ~10.4 steps would be ~2.9.)
# draft70 (AAADAADAAD): 10/3 = 3.333 in steady state; a 64-token request is ~19 steps, and its
#   first step starts anywhere in the pattern and the last is cut by max_tokens, which moves the
#   run's ratio by at most a few hundredths per request (3.25-3.28 measured).
# weakdraft (draft-20, ADDDDADDDD): 10/8 = 1.25 in steady state, same edge effects (1.246 measured).
EXPECTED_ACCEPT = {"ngram": (4.95, 5.0001), "draft70": (3.15, 3.40), "weakdraft": (1.20, 1.30)}


def vllm_env() -> dict[str, str]:
    """The environment the suite needs; a set-but-broken one fails (only an unset one skips)."""
    python = engine_python("SPECGUARD_VLLM_PYTHON", ".ci/setup_vllm.sh", ".ci/run_real_engine.sh")
    models = tiny_models("SPECGUARD_TINY_MODELS", "~/.cache/specguard/tiny-models", MODELS, python)
    return {**os.environ, "SPECGUARD_VLLM_PYTHON": python, "SPECGUARD_TINY_MODELS": str(models)}


def run_suite(work: Path, baselines: Path, tag: str, env: dict[str, str], *args: str) -> tuple[int, str, dict[str, str], dict]:
    return real_suite_runs.run_suite(SUITE, work, baselines, tag, env, *args, timeout_s=RUN_TIMEOUT_S)


def verdicts(doc: dict, gate: str) -> dict[tuple[str, int], str]:
    return {(d["config"], int(d["level"][1:])): d["verdict"] for d in doc.get("decisions", []) if d["gate"] == gate}


def speculation_ratios(doc: dict) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    for d in doc.get("decisions", []):
        if d["gate"] == "speculation" and d.get("estimate"):
            out.setdefault(d["config"], []).append(d["estimate"]["ratio"])
    return out


def accept_lengths(doc: dict) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    for cell in doc.get("cells", []):
        out.setdefault(cell["config"], []).extend(r["accept_length"] for r in cell["runs"])
    return out


@pytest.fixture
def work_dir(tmp_path: Path) -> Path:
    """Where the runs leave summaries, results and server logs: SPECGUARD_REAL_ENGINE_ARTIFACTS
    (CI prints and keeps them) or the test's temp dir. Baselines always start empty in tmp_path."""
    where = os.environ.get("SPECGUARD_REAL_ENGINE_ARTIFACTS")
    path = Path(where) if where else tmp_path
    path.mkdir(parents=True, exist_ok=True)
    return path


def test_vllm_suite_catches_slow_speculation_and_gates_on_its_own_baselines(work_dir: Path, tmp_path: Path):
    env = vllm_env()
    baselines = tmp_path / "baselines"

    # 1. First baselines. The speculation gate is enforced even while updating: ngram must win;
    # the weak draft must lose, confidently (FAIL, with its measured ratio in the message) at one
    # concurrency at least -- on a busy 2-core machine the other may only be inconclusive.
    code, out, res, doc = run_suite(work_dir, baselines, "update", env, "--update-baselines")
    assert res, out[-4000:]
    # The catch may come from a cell's own test, or from the session-level Holm test when the
    # drop is significant across the session though not at a cell's level (it must name weakdraft).
    failed = {t: m for t, m in res.items() if m != "passed"}
    cell_fails = {t: m for t, m in failed.items() if t.startswith("test_speculation_beats_reference[weakdraft-")}
    holm_fail = failed.get("family_holm")
    assert failed and set(failed) <= set(cell_fails) | {"family_holm"}, failed
    for message in cell_fails.values():
        ratio = re.search(r"speculation weakdraft c\d+: .* ratio (\d\.\d+) \[(\d\.\d+), (\d\.\d+)\]", message)
        assert message.startswith("failure") and ratio and float(ratio.group(3)) < 1.0 and "-> FAIL" in message, message
    if holm_fail is not None:
        caught = re.findall(r"speculation (\w+) c\d+ ratio (\d\.\d+)", holm_fail)
        assert caught and all(name == "weakdraft" and float(r) < 1.0 for name, r in caught), holm_fail
    assert code == 1, out[-4000:]
    # ngram's tests passed (above); its win must also be confident somewhere, and the gate may call
    # it behind nowhere. "Ahead at every level" is not asked of the point estimates: on a busy
    # machine (a clean-clone CI beside other jobs) ngram c4 measured 0.80x with its runs spread
    # 1002-3177 tok/s and the baseline's 525-1819, and the gate rightly said inconclusive there.
    spec, ratios = verdicts(doc, "speculation"), speculation_ratios(doc)
    ngram = {spec[("ngram", 1)], spec[("ngram", 4)]}
    assert "pass" in ngram and "fail" not in ngram and max(ratios["ngram"]) > 1, (spec, ratios)
    assert "pass" not in {spec[("weakdraft", 1)], spec[("weakdraft", 4)]} and max(ratios["weakdraft"]) < 1, (spec, ratios)
    for name, (low, high) in EXPECTED_ACCEPT.items():
        values = accept_lengths(doc)[name]
        assert values and all(low <= v <= high for v in values), (name, values)
    assert all(r["accept_length"] is None for c in doc["cells"] if c["config"] == "baseline" for r in c["runs"])
    assert (baselines / "weakdraft.json").is_file()  # a gate failure is not a sweep error
    # The engine's step time is recorded for every run (vLLM: from its draft counters), and the weak
    # draft's speculation lines name the drafter's factor beside the engine's (issue 23).
    # A run whose counters did not publish in time, or whose tokens all came in one read, is
    # unmeasured and says so (never 0: seen on a baseline c1 run of 3 requests, step time 0.0).
    assert all((r["step_time_ms"] or 0) > 0 or any(n["kind"] in ("counters_idle", "step_time_unmeasured")
                                                   for n in r["notes"])
               for c in doc["cells"] for r in c["runs"]), doc["cells"]
    assert sum(1 for c in doc["cells"] for r in c["runs"] if r["step_time_ms"]) >= len(doc["cells"]), doc["cells"]
    weak = [decision_text(d) for d in doc["decisions"] if d["gate"] == "speculation" and d["config"] == "weakdraft"]
    assert weak and all("the drafter's accept length 1." in m and "the engine's step time ratio" in m for m in weak), weak

    # 2. Gate mode against those baselines: a new launch of ngram must match its fingerprint and
    # pass throughput, accept length (exactly 5.0 again) and speculation vs the stored reference.
    code, out, res, doc = run_suite(work_dir, baselines, "gate", env, "--require-baselines", "-k", "ngram")
    cells = {t: m for t, m in res.items() if t != "family_holm"}  # the session-level Holm test
    assert code == 0 and len(cells) == 8 and set(res.values()) == {"passed"}, out[-4000:]
    for gate in ("throughput", "step_time", "accept_length", "speculation"):
        assert set(verdicts(doc, gate).values()) <= {"pass", "inconclusive"}, (gate, verdicts(doc, gate))
    assert verdicts(doc, "accept_length") == {("ngram", 1): "pass", ("ngram", 4): "pass"}
