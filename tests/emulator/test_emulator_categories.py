"""The emulator's acceptance per prompt category: profiles, the --emulator-category-accept flag,
and the category read from the prompt text alone (no extra request field)."""

from __future__ import annotations

import pytest

from specguard import datasets
from specguard.emulator.categories import category_of_messages, category_of_text, parse_category_factors
from specguard.emulator.model import BatchScheduler, GenRequest, SchedulerConfig
from specguard.emulator.profile import load_profile
from specguard.emulator.spec import SpecRequest, expected_accept_length, resolve_settings


def test_prompt_text_alone_gives_the_category():
    code = datasets.category_prompts("code")[3]
    assert category_of_text(code) == "code" and category_of_text("something else") == ""
    assert category_of_messages([{"role": "system", "content": "be brief"}, {"role": "user", "content": code}]) == "code"
    assert category_of_messages([{"role": "user", "content": [{"type": "text", "text": code}]}]) == ""


def test_category_factor_flag_parses_and_refuses_bad_values():
    assert parse_category_factors(["code=0.85", "math=1.1,chat=0.9"]) == {"code": 0.85, "math": 1.1, "chat": 0.9}
    for bad in ("code", "code=", "code=-1", "=0.8", "code=x"):
        with pytest.raises(ValueError, match="--emulator-category-accept .*CATEGORY=FACTOR"):
            parse_category_factors([bad])


def test_profile_per_category_acceptance_is_validated(tmp_path):
    spec = resolve_settings(load_profile("fast"), SpecRequest("EAGLE3", 3, 1, 4)).spec
    table = dict(spec.accept_prob_by_category)
    assert set(table) == set(datasets.SHIPPED_CATEGORIES)
    assert expected_accept_length(table["code"], 3) > spec.expected_accept_length > expected_accept_length(table["chat"], 3)
    bad = tmp_path / "bad.toml"
    bad.write_text('model_path = "/m"\nforward_ms = [[1, 1.0]]\n[draft.EAGLE3]\ndraft_ms = [[1, 0.1]]\n'
                   'accept_prob = [0.8]\n[draft.EAGLE3.accept_prob_by_category]\ncode = [1.5]\n')
    with pytest.raises(ValueError, match="accept_prob_by_category.code"):
        load_profile(bad)
    # a forced mean accept length replaces the whole acceptance model, categories included
    forced = resolve_settings(load_profile("fast"), SpecRequest("EAGLE3", 3, 1, 4), accept_length=2.0).spec
    assert forced.accept_prob_by_category == ()


def _accept_length_by_category(factors: dict[str, float], n: int = 400) -> dict[str, float]:
    """Decode n requests per category through the scheduler, in virtual time (no HTTP)."""
    profile = load_profile("fast")
    settings = resolve_settings(profile, SpecRequest("EAGLE3", 3, 1, 4), 512)
    sched = BatchScheduler(SchedulerConfig(profile, settings, seed=4, jitter_pct=0, drift_pct=0,
                                           category_accept_factor=factors))
    reqs = [GenRequest(8, 64, category=c) for _ in range(n) for c in (*datasets.SHIPPED_CATEGORIES, "")]
    now = 0.0
    for r in reqs:
        sched.submit(r, now)
    for _ in range(100_000):  # bounded
        step = sched.next_step(now)
        if step is None:
            break
        now += step.duration_ms
        sched.complete(step, now)
    assert all(r.finished for r in reqs)
    out = {}
    for c in (*datasets.SHIPPED_CATEGORIES, ""):
        rs = [r for r in reqs if r.category == c]
        out[c] = sum(r.completion_tokens for r in rs) / sum(r.verify_ct for r in rs)
    return out


def test_category_factor_moves_only_that_category():
    base = _accept_length_by_category({})
    low = _accept_length_by_category({"code": 0.85})
    table = dict(resolve_settings(load_profile("fast"), SpecRequest("EAGLE3", 3, 1, 4)).spec.accept_prob_by_category)
    assert base["code"] == pytest.approx(expected_accept_length(table["code"], 3), rel=0.03)
    assert base[""] == pytest.approx(3.03, rel=0.03)  # an unknown prompt: the profile's default acceptance
    want = expected_accept_length(tuple(p * 0.85 for p in table["code"]), 3)
    assert low["code"] == pytest.approx(want, rel=0.03) and low["code"] / base["code"] < 0.88
    for c in ("math", "chat", "summarisation", ""):
        assert low[c] == pytest.approx(base[c], rel=0.03), c


# -- over HTTP ------------------------------------------------------------------------------------
from specguard.config import ServerConfig  # noqa: E402
from specguard.engines import get_engine  # noqa: E402
from specguard.measure.generator import run_once  # noqa: E402
from specguard.measure.load import LoadSettings  # noqa: E402
from specguard.measure.metrics import summarize_run, workload_categories  # noqa: E402
from specguard.server import launch, stop  # noqa: E402
from specguard.workload import WorkloadSpec, build_workload  # noqa: E402


def _measure(tmp_path, extra: list[str]) -> tuple[dict[str, float], float]:
    """Per-category and overall accept length of one C=16 run of 512 category prompts (~2700 verify
    steps per category: the per-category ratio's sampling sd is ~1%)."""
    cfg = ServerConfig(name="cat", engine="emulator", model_path="/models/specguard-fast", speculative_algorithm="EAGLE3",
                       draft_model_path="/models/draft", startup_timeout_s=30,
                       args=["--emulator-profile", "fast", "--random-seed", "7", "--emulator-jitter-pct", "0",
                             "--emulator-drift-pct", "0", "--speculative-num-steps", "3", "--speculative-eagle-topk", "1",
                             "--speculative-num-draft-tokens", "4", *extra])
    handle = launch(cfg, get_engine("emulator"), log_dir=tmp_path)
    try:
        workload = build_workload(WorkloadSpec(kind="categories", output_len=64))
        settings = LoadSettings(concurrency=16, num_requests=512, run_timeout_s=120)
        run = run_once(handle.base_url, workload, settings)
    finally:
        stop(handle)
    m = summarize_run(run, categories=workload_categories(workload, 512))
    assert m.failed == 0, m.errors
    return {c: s.accept_length for c, s in m.categories.items()}, m.accept_length


@pytest.mark.e2e
def test_a_code_only_acceptance_drop_shows_in_the_code_category_and_is_diluted_overall(tmp_path):
    base, base_all = _measure(tmp_path / "a", [])
    low, low_all = _measure(tmp_path / "b", ["--emulator-category-accept", "code=0.85"])
    ratios = {c: low[c] / base[c] for c in base}
    print("accept length per category (base -> code=0.85): "
          + ", ".join(f"{c} {base[c]:.3f} -> {low[c]:.3f} ({ratios[c]:.3f})" for c in sorted(base))
          + f"; overall {base_all:.3f} -> {low_all:.3f} ({low_all / base_all:.3f})")
    assert set(base) == set(datasets.SHIPPED_CATEGORIES)
    assert ratios["code"] < 0.87  # expected (0.85 on every position's acceptance): 2.70 / 3.28 = 0.82
    for c in ("math", "chat", "summarisation"):
        assert abs(ratios[c] - 1) < 0.04, (c, ratios[c])
    # the same drop averaged over the run is under a third of the code category's: a per-run gate
    # sees ~-5%, the code category ~-18%
    assert 1 - low_all / base_all < (1 - ratios["code"]) / 3 + 0.01
    assert low_all / base_all < 0.99


# -- research.calibrate: per-category acceptance from a sweep's results ----------------------------
def test_calibrate_fits_per_category_acceptance(tmp_path):
    from dataclasses import replace

    from research import calibrate

    cells = [{"config": "mtp", "runs": [
        {"categories": {"code": {"accept_length": 1.9, "total_verify_ct": 100},
                        "chat": {"accept_length": 1.5, "total_verify_ct": 300}}},
        {"categories": {"code": {"accept_length": 1.7, "total_verify_ct": 100},
                        "chat": {"accept_length": None, "total_verify_ct": 0}}},
    ]}]
    assert calibrate.category_accept_lengths(cells) == {"chat": pytest.approx(1.5), "code": pytest.approx(1.8)}

    csv = tmp_path / "a.csv"
    csv.write_text("concurrency,baseline_tok_s,spec_tok_s,accept_length,input_len,output_len,cap,algorithm,num_steps,topk,"
                   "num_draft_tokens\n1,108,121.5,1.7,100,100,48,NEXTN,1,1,2\n16,873,1209,1.7\n")
    sweep = calibrate.read_measurements(csv)
    sweep = replace(sweep, specs=[replace(sweep.specs[0], accept_length_by_category={"code": 1.8, "chat": 1.5})])
    profile = calibrate.fit_profile(sweep, "fitted")
    path = tmp_path / "fitted.toml"
    path.write_text(calibrate.profile_toml(profile, "test"))
    draft = load_profile(path).drafts["NEXTN"]  # the file as written, read back
    assert expected_accept_length(draft.accept_prob_by_category["code"], 1) == pytest.approx(1.8, abs=1e-4)
    assert expected_accept_length(draft.accept_prob_by_category["chat"], 1) == pytest.approx(1.5, abs=1e-4)
    assert expected_accept_length(draft.accept_prob, 1) == pytest.approx(1.7, abs=1e-4)
