"""Prompt categories: the shipped sets, ShareGPT-format files, JSONL categories, and the
workload kinds built from them."""

from __future__ import annotations

import json
import subprocess
import sys
from importlib import resources
from pathlib import Path

import pytest

from specguard import datasets
from specguard.workload import WorkloadError, WorkloadSpec, build_workload

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.e2e
def test_shipped_sets_are_distinct_small_and_regenerate_identically():
    total = 0
    for c in datasets.SHIPPED_CATEGORIES:
        prompts = datasets.category_prompts(c)
        assert len(set(prompts)) == len(prompts) >= 512  # C=256 runs of 2 x C requests never repeat one
        total += len(resources.files("specguard").joinpath(f"data/prompts/{c}.jsonl").read_bytes())
    assert total < 500_000
    done = subprocess.run([sys.executable, str(ROOT / "tools" / "make_prompt_sets.py"), "--check"],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_categories_workload_interleaves_every_category_without_repeats():
    w = build_workload(WorkloadSpec(kind="categories"))
    window = [w.prompt(i) for i in range(512)]  # a C=256 run of 2 x C requests
    assert len({p.text for p in window}) == 512
    assert [p.category for p in window[:4]] == list(datasets.SHIPPED_CATEGORIES)
    assert {c: sum(p.category == c for p in window) for c in datasets.SHIPPED_CATEGORIES} == dict.fromkeys(
        datasets.SHIPPED_CATEGORIES, 128)


def _sharegpt(path: Path, n: int = 6) -> Path:
    rows = [{"id": f"x{i}", "conversations": [{"from": "human", "value": f"question {i}?"},
                                              {"from": "gpt", "value": f"answer {i}"}]} for i in range(n)]
    rows.append({"id": "short", "conversations": [{"from": "human", "value": "one turn only"}]})  # skipped
    rows.append({"id": "tagged", "category": "code", "conversation": [{"from": "human", "value": "def f(): pass"},
                                                                      {"from": "gpt", "value": "ok"}]})
    path.write_text(json.dumps(rows))
    return path


def test_sharegpt_file_reads_first_turns_with_a_seeded_order(tmp_path):
    path = _sharegpt(tmp_path / "sg.json")
    w = build_workload(WorkloadSpec(kind="sharegpt", path=str(path), seed=1))
    texts = sorted(p.text for p in w.prompts)
    assert texts == sorted([f"question {i}?" for i in range(6)] + ["def f(): pass"])  # 1-turn entry skipped
    assert {p.category for p in w.prompts} == {"sharegpt", "code"}
    again = build_workload(WorkloadSpec(kind="sharegpt", path=str(path), seed=1))
    assert again.prompts == w.prompts and again.digest() == w.digest()
    assert build_workload(WorkloadSpec(kind="sharegpt", path=str(path), seed=2)).prompts != w.prompts


@pytest.mark.parametrize("content, says", [
    ("not json", "not valid JSON"),
    ('{"conversations": []}', "JSON list"),
    ('[{"turns": []}]', 'entry 0 has no "conversations"'),
    ('[{"conversations": [{"from": "human"}, {"from": "gpt", "value": "x"}]}]', 'conversations[0] needs a string "value"'),
    ('[{"conversations": [{"from": "human", "value": "x"}]}]', "no conversation with at least two turns"),
])
def test_bad_sharegpt_files_get_one_line_naming_the_file(tmp_path, content, says):
    path = tmp_path / "bad.json"
    path.write_text(content)
    with pytest.raises(WorkloadError) as exc:
        build_workload(WorkloadSpec(kind="sharegpt", path=str(path)))
    assert says in str(exc.value) and str(path) in str(exc.value) and "\n" not in str(exc.value)
    with pytest.raises(WorkloadError, match="needs a path"):
        WorkloadSpec(kind="sharegpt")


def test_jsonl_category_field_is_kept(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_text('{"text": "a", "category": "code"}\n{"input_ids": [5, 6], "category": "math"}\n{"text": "b"}\n')
    w = build_workload(WorkloadSpec(kind="jsonl", path=str(path)))
    assert [p.category for p in w.prompts] == ["code", "math", ""]


def test_suite_file_accepts_a_sharegpt_workload(tmp_path):
    from specguard.config import load_suite

    sg = _sharegpt(tmp_path / "sg.json")
    suite = tmp_path / "suite.toml"
    suite.write_text(f'[servers.a]\nengine = "emulator"\nmodel_path = "/m"\n\n[workload]\nkind = "sharegpt"\npath = "{sg}"\n')
    assert load_suite(suite).workload.kind == "sharegpt"


# -- specguard bench, end to end -------------------------------------------------------------------
def _bench(tmp_path, *args: str) -> tuple[int, dict]:
    from specguard.cli import main

    out = tmp_path / "bench.json"
    code = main(["bench", "--emulator", "fast", "--speculative-algorithm", "EAGLE3", "--input-len", "16",
                 "--output-len", "16", "--warmup", "0", "--emulator-arg=--emulator-jitter-pct=0",
                 "--emulator-arg=--emulator-drift-pct=0", "--json", str(out), *args])
    if out.exists():
        from specguard.report.bench_doc import BENCH

        BENCH.load(out)  # what bench wrote is the document its model says
    return code, json.loads(out.read_text()) if out.exists() else {}


@pytest.mark.e2e
def test_bench_on_a_sharegpt_file_made_here(tmp_path, capsys):
    sg = _sharegpt(tmp_path / "sg.json", n=12)
    code, doc = _bench(tmp_path, "--workload", "sharegpt", "--workload-file", str(sg), "--concurrency", "4",
                       "--slo", "ttft_ms=5000,tpot_ms=1000")
    assert code == 0, capsys.readouterr().err
    (level,) = doc["levels"]
    (run,) = level["runs"]
    assert level["load_model"] == "closed-loop c=4" and run["load_model"] == "closed-loop c=4"
    assert run["completed"] == run["num_requests"] == 16 and run["failed"] == 0
    assert set(run["categories"]) == {"sharegpt", "code"}  # the tagged entry keeps its category
    assert sum(c["requests"] for c in run["categories"].values()) == 16
    # every request meets so loose an SLO: goodput is the request rate
    assert run["request_goodput"] == pytest.approx(run["request_throughput"], rel=1e-6) and run["slo_attainment"] == 1.0
    assert "goodput" in capsys.readouterr().out


@pytest.mark.e2e
def test_bench_request_rate_levels_with_goodput(tmp_path, capsys):
    code, doc = _bench(tmp_path, "--workload", "categories", "--request-rate", "2,8,32", "--requests", "16",
                       "--max-concurrency", "64", "--slo", "ttft_ms=200,tpot_ms=20")
    out = capsys.readouterr()
    print(out.out)
    assert code == 0, out.err
    assert [lv["request_rate"] for lv in doc["levels"]] == [2, 8, 32]
    assert [lv["load_model"] for lv in doc["levels"]] == [f"poisson {r} req/s, cap 64" for r in (2, 8, 32)]
    for lv in doc["levels"]:
        (run,) = lv["runs"]
        assert run["failed"] == 0 and run["num_requests"] == 16
        assert run["goodput_slos_ms"] == {"ttft_ms": 200.0, "tpot_ms": 20.0}
        assert 0 <= run["request_goodput"] <= run["request_throughput"] + 1e-9
        assert run["request_goodput"] == pytest.approx(run["slo_attainment"] * 16 / run["duration_s"])
        assert set(run["categories"]) == set(datasets.SHIPPED_CATEGORIES)
    # open loop: the run lasts as long as its arrivals (16 at 2 req/s: ~8 s; at 32 req/s: ~0.5 s)
    d2, d32 = doc["levels"][0]["runs"][0]["duration_s"], doc["levels"][2]["runs"][0]["duration_s"]
    assert d2 > 3 and d32 < 2.5 and d2 > 3 * d32


def test_bench_refuses_bad_slo_and_rate_in_one_line(capsys):
    from specguard.cli import main

    with pytest.raises(SystemExit) as exc:
        main(["bench", "--url", "http://127.0.0.1:9", "--slo", "ttft=5"])
    assert exc.value.code == 4 and "ttft_ms=500,tpot_ms=50" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        main(["bench", "--url", "http://127.0.0.1:9", "--request-rate", "0"])
    assert exc.value.code == 4 and "--request-rate" in capsys.readouterr().err
