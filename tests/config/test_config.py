"""Suite file loading: every mistake named with file, key and fix, before any server starts."""

import re
from pathlib import Path

import pytest

from specguard.config import ConfigError, load_suite

GOOD = """
[sweep]
concurrency = [1, 4]
repeats = 3

[workload]
kind = "random-ids"
input_len = 64
output_len = 32

[servers.baseline]
engine = "emulator"
model_path = "/models/t"

[servers.eagle3]
engine = "emulator"
model_path = "/models/t"
speculative_algorithm = "EAGLE3"
draft_model_path = "/models/d"
num_steps = 3
eagle_topk = 1
num_draft_tokens = 4
reference = "baseline"
speculation_must_win_up_to = 4
"""


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "suite.toml"
    p.write_text(text)
    return p


def test_good_suite_loads(tmp_path):
    suite = load_suite(write(tmp_path, GOOD))
    assert list(suite.servers) == ["baseline", "eagle3"]
    assert suite.servers["eagle3"].speculative and not suite.servers["baseline"].speculative
    assert suite.sweep.num_requests(4) == 16 and suite.workload.output_len == 32


def test_a_request_floor_lifts_only_the_levels_below_it(tmp_path):
    # a run is max(C, requests_per_worker x C, min_requests_per_run) requests
    suite = load_suite(write(tmp_path, GOOD + "\n[advanced]\nmin_requests_per_run = 32\n"))
    assert [suite.sweep.num_requests(c) for c in (1, 4, 8, 16)] == [32, 32, 32, 64]


@pytest.mark.parametrize("change,expected", [
    (("repeats = 3", "repeats = 3\nrepeat = 2"), "unknown key sweep.repeat"),
    (("repeats = 3", "repeats = 1"), "repeats >= 2"),
    (("concurrency = [1, 4]", "concurrency = [0, 4]"), "positive"),
    (("concurrency = [1, 4]", "concurrency = \"1,4\""), "sweep.concurrency"),
    (("num_draft_tokens = 4", "num_draft_tokens = 16"), "set num_draft_tokens = 4"),
    (('reference = "baseline"', ""), "has no reference"),
    (('reference = "baseline"', 'reference = "nope"'), "not a configuration"),
    (('engine = "emulator"\nmodel_path = "/models/t"\n\n[servers.eagle3]',
      'engine = "tgi"\nmodel_path = "/models/t"\n\n[servers.eagle3]'), "engine"),
    (("input_len = 64", "input_len = -1"), "[workload]"),
    (("[sweep]", "[sweeps]"), "unknown top-level key"),
    (("[sweep]", "[advanced]\nfail_rule = \"maybe\"\n\n[sweep]"), "advanced.fail_rule = 'maybe'"),
    (("[sweep]", "[advanced]\npass_confidence = 0.3\n\n[sweep]"), "advanced.pass_confidence = 0.3"),
    (("[sweep]", "[advanced]\nrelaunch_p = 0.001\n\n[sweep]"), "advanced.relaunch_p = 0.001"),
    (("[sweep]", "[advanced]\nmin_requests_per_run = -1\n\n[sweep]"), "advanced.min_requests_per_run = -1"),
    (("[sweep]", "[advanced]\nmax_launches = 0\n\n[sweep]"), "advanced.max_launches = 0"),
    (("[sweep]", "[advanced]\nlaunch = 2\n\n[sweep]"), "unknown key advanced.launch"),
    (("[sweep]", "[advanced]\nhistory_sessions = \"5\"\n\n[sweep]"), "advanced.history_sessions = '5' has the wrong type"),
])
def test_mistakes_name_file_key_and_fix(tmp_path, change, expected):
    path = write(tmp_path, GOOD.replace(*change, 1))
    with pytest.raises(ConfigError) as err:
        load_suite(path)
    assert expected in str(err.value) and str(path) in str(err.value)


def test_missing_and_invalid_files(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_suite(tmp_path / "none.toml")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_suite(write(tmp_path, "[servers\n"))


def test_default_suite_file_is_valid():
    suite = load_suite(Path(__file__).parents[2] / "perf_tests" / "suite.toml")
    assert {"baseline", "eagle3", "mtp"} <= set(suite.servers)


RATE = GOOD.replace("concurrency = [1, 4]", 'request_rate = [2, 8, 32]\nslo = "ttft_ms=200,tpot_ms=20"') + \
    "\n[advanced]\nmax_concurrency = 16\nburstiness = 0.5\n"


def test_request_rate_levels_cap_burstiness_and_slo_load(tmp_path):
    sweep = load_suite(write(tmp_path, RATE)).sweep
    assert (sweep.request_rate, sweep.rate_cap, sweep.burstiness, sweep.slo) == ([2, 8, 32], 16, 0.5, "ttft_ms=200,tpot_ms=20")
    assert sweep.num_requests(8) == 32  # requests_per_worker (4) seconds of arrivals at 8 req/s
    default = load_suite(write(tmp_path, GOOD)).sweep
    assert default.request_rate == [] and default.slo is None and default.rate_cap == 64


@pytest.mark.parametrize("change,expected", [
    (("request_rate = [2, 8, 32]", "request_rate = [2, 8, 32]\nconcurrency = [4]"), "either concurrency or request_rate"),
    (("request_rate = [2, 8, 32]", "request_rate = [0, 8]"), "sweep.request_rate = [0, 8]"),
    (("request_rate = [2, 8, 32]", "request_rate = [2.5]"), "sweep.request_rate = [2.5] has the wrong type"),
    (("max_concurrency = 16", "max_concurrency = 0"), "advanced.max_concurrency = 0"),
    (("burstiness = 0.5", "burstiness = 0"), "advanced.burstiness = 0.0"),
    (('slo = "ttft_ms=200,tpot_ms=20"', 'slo = "ttft=200"'), "sweep.slo = 'ttft=200'"),
    (("request_rate = [2, 8, 32]", "concurrency = [1, 4]"), "advanced.max_concurrency = 16: only used with request_rate"),
])
def test_request_rate_mistakes_name_the_key(tmp_path, change, expected):
    path = write(tmp_path, RATE.replace(*change, 1))
    with pytest.raises(ConfigError) as err:
        load_suite(path)
    assert expected in str(err.value) and str(path) in str(err.value), str(err.value)


@pytest.mark.parametrize("table,key,value", [("sweep", "launches", "2"), ("sweep", "read_timeout_s", "30"),
                                             ("tolerances", "fail_rule", '"significant"'),
                                             ("tolerances", "history_sessions", "5"), ("workload", "repeated_id", "7")])
def test_a_key_moved_to_advanced_is_one_line_naming_its_new_place(tmp_path, table, key, value):
    text = GOOD + f"\n[{table}]\n{key} = {value}\n" if table == "tolerances" \
        else GOOD.replace(f"[{table}]", f"[{table}]\n{key} = {value}")
    with pytest.raises(ConfigError) as err:
        load_suite(write(tmp_path, text))
    message = str(err.value)
    assert "\n" not in message and f"{table}.{key} moved to the [advanced] table" in message
    assert f"advanced.{key} = " in message and str(tmp_path / "suite.toml") in message
    fixed = GOOD + f"\n[advanced]\n{key} = {value}\n"  # where it says: the suite loads
    load_suite(write(tmp_path, fixed))


def test_removed_and_moved_tables_name_what_to_do(tmp_path):
    with pytest.raises(ConfigError, match=r"tolerances.spread_rule was removed: .* delete the key"):
        load_suite(write(tmp_path, GOOD + '\n[tolerances]\nspread_rule = "pooled-t"\n'))
    with pytest.raises(ConfigError, match=r"\[attach\] moved: write strict_server_args under \[advanced\]"):
        load_suite(write(tmp_path, GOOD + "\n[attach]\nstrict_server_args = true\n"))
    suite = load_suite(write(tmp_path, GOOD + "\n[advanced]\nstrict_server_args = true\n"))
    assert suite.attach.strict_server_args


def test_a_user_meets_at_most_36_keys_outside_advanced():
    # 35 until servers.NAME.simulate_accept_length (the engine measured alone, issue 30); the
    # [soak] table is opt-in (no soak test until soak.duration_s is set) and not counted here
    import dataclasses

    from specguard.config import ADVANCED_KEYS, ServerConfig, SweepConfig, Tolerances
    from specguard.workload import WorkloadSpec
    user = [f"{t}.{f.name}" for t, cls in (("servers", ServerConfig), ("sweep", SweepConfig),
                                             ("workload", WorkloadSpec), ("tolerances", Tolerances))
            for f in dataclasses.fields(cls) if f.name != "name" and ADVANCED_KEYS.get(f.name) != t]
    assert len(user) <= 36, user


def test_a_value_is_blamed_on_the_flag_that_set_it_else_on_its_key_as_the_file_spells_it():
    from specguard.config import Origin
    at = Origin(Path("s.toml"), {"sweep.concurrency": "--concurrency"})
    assert at("sweep.concurrency", [1, 4]) == "--concurrency 1,4 (command line)"  # as typed
    assert at("sweep.launches", 0) == "s.toml: advanced.launches = 0"
    assert at("sweep.repeats", 1) == "s.toml: sweep.repeats = 1"


def test_a_bad_value_from_the_command_line_names_the_flag_not_the_file(tmp_path):
    import dataclasses

    from specguard.config import validate_suite
    suite = load_suite(write(tmp_path, GOOD))
    bad = dataclasses.replace(suite, sweep=dataclasses.replace(suite.sweep, repeats=1))
    with pytest.raises(ConfigError) as err:
        validate_suite(bad, {"sweep.repeats": "--repeats"})
    assert str(err.value) == ("--repeats 1 (command line): the gates need at least 2 runs per cell to estimate noise; "
                              "set repeats >= 2")


@pytest.mark.parametrize("change,message", [
    (("num_steps = 3\n", ""), "servers.eagle3: SGLang refuses eagle_topk/num_draft_tokens without num_steps; set num_steps too"),
    (("num_draft_tokens = 4", "num_draft_tokens = 6"),
     "servers.eagle3: eagle_topk = 1 with num_steps = 3 and num_draft_tokens = 6: SGLang silently runs num_steps + 1 = 4 "
     "draft tokens with topk 1; set num_draft_tokens = 4, or num_steps = 5 to draft 6 tokens"),
    (('reference = "baseline"', 'reference = "eagle3"'),
     "servers.eagle3.reference = 'eagle3' is itself speculative; name a non-speculative configuration"),
    (('[servers.eagle3]', 'speculation_must_win_up_to = 4\n\n[servers.eagle3]'),
     "servers.baseline.speculation_must_win_up_to only makes sense on a speculative configuration"),
    (('[servers.eagle3]', 'startup_timeout_s = 0\n\n[servers.eagle3]'), "servers.baseline.startup_timeout_s must be positive"),
    (('model_path = "/models/t"\nspeculative', 'model_path = ""\nspeculative'), "servers.eagle3.model_path is required"),
    (('speculative_algorithm = "EAGLE3"', 'speculative_algorithm = "MEDUSA"'),
     "servers.eagle3.speculative_algorithm = 'MEDUSA'; use one of EAGLE, EAGLE3, NEXTN, STANDALONE, NGRAM"),
    (('[servers.eagle3]', 'speculative_config = { method = "ngram" }\n\n[servers.eagle3]'),
     "servers.baseline.speculative_config is vLLM's; for emulator use speculative_algorithm and "
     "num_steps/eagle_topk/num_draft_tokens"),
    (('engine = "emulator"\nmodel_path = "/models/t"\nspeculative', 'engine = "vllm"\nmodel_path = "/models/t"\nspeculative'),
     "servers.eagle3: vLLM takes speculative_config (a table), not speculative_algorithm"),
    (("num_steps = 3", "num_steps = 0"), "servers.eagle3.num_steps = 0 must be positive"),
])
def test_a_server_mistake_is_one_line_naming_the_key_and_the_fix(tmp_path, change, message):
    path = write(tmp_path, GOOD.replace(*change, 1))
    with pytest.raises(ConfigError) as err:
        load_suite(path)
    assert str(err.value) == f"{path}: {message}"


@pytest.mark.parametrize("advanced,message", [
    ("launches = 0", "advanced.launches = 0: must be >= 1 (server launches per configuration)"),
    ('relaunch = "always"', "advanced.relaunch = 'always': use \"off\" or \"on-suspicion\" (docs/statistics.md)"),
    ("relaunch_p = 1.0", "advanced.relaunch_p = 1.0: must be in (0, 1), e.g. 0.05"),
    ("prior_between_dof = 0", "advanced.prior_day_sd = 0.005 / prior_between_dof = 0.0: prior_day_sd must be >= 0 and "
                              "prior_between_dof > 0 (inf: the prior as known)"),
    ("history_sessions = 0", "advanced.history_sessions = 0: must be >= 1"),
    ("read_timeout_s = 0", "advanced.read_timeout_s = 0.0: must be positive"),
    ('speculation_metric = "goodput"', "advanced.speculation_metric = 'goodput': goodput needs SLOs; set "
                                       "[sweep] slo = \"ttft_ms=...,tpot_ms=...\""),
])
def test_a_design_or_statistics_mistake_names_its_advanced_key(tmp_path, advanced, message):
    path = write(tmp_path, GOOD + f"\n[advanced]\n{advanced}\n")
    with pytest.raises(ConfigError) as err:
        load_suite(path)
    assert str(err.value) == f"{path}: {message}"


def test_forced_acceptance_is_one_key_that_sets_sglangs_variable_and_is_checked(tmp_path):
    from specguard.config import parse_suite

    def suite(**eagle3):
        raw = {"servers": {"baseline": {"engine": "emulator", "model_path": "/m"},
                           "eagle3": {"engine": "emulator", "model_path": "/m", "speculative_algorithm": "EAGLE3",
                                      "num_steps": 3, "eagle_topk": 1, "num_draft_tokens": 4, "reference": "baseline",
                                      **eagle3}}}
        return parse_suite(raw, tmp_path / "s.toml")

    forced = suite(simulate_accept_length=3, env={"SGLANG_SIMULATE_ACC_METHOD": "multinomial"}).servers["eagle3"]
    assert forced.forced_acceptance and forced.launch_env == {"SGLANG_SIMULATE_ACC_METHOD": "multinomial",
                                                              "SGLANG_SIMULATE_ACC_LEN": "3"}
    assert suite().servers["eagle3"].launch_env == {} and not suite().servers["eagle3"].forced_acceptance
    for bad, says in [({"simulate_accept_length": 5}, "simulate_accept_length = 5 > num_steps + 1 = 4"),
                      ({"simulate_accept_length": 0}, "a whole number of tokens per verify step, >= 1"),
                      ({"simulate_accept_length": 2.5}, "simulate_accept_length = 2.5 has the wrong type"),
                      ({"env": {"SGLANG_SIMULATE_ACC_LEN": "3"}}, "write simulate_accept_length = N instead"),
                      ({"simulate_accept_length": 3, "env": {"SGLANG_SIMULATE_ACC_TOKEN_MODE": "zeros"}},
                       "env.SGLANG_SIMULATE_ACC_TOKEN_MODE = 'zeros': with simulate_accept_length, one of fixed, "
                       "real-draft-token")]:
        with pytest.raises(ConfigError, match=re.escape(says)):
            suite(**bad)
    with pytest.raises(ConfigError, match="servers.baseline.simulate_accept_length forces SGLang's speculative acceptance"):
        parse_suite({"servers": {"baseline": {"engine": "emulator", "model_path": "/m", "simulate_accept_length": 2}}},
                    tmp_path / "s.toml")


def test_a_soak_is_off_until_it_has_a_duration_and_its_mistakes_name_the_key(tmp_path):
    assert load_suite(write(tmp_path, GOOD)).soaked == []
    suite = load_suite(write(tmp_path, GOOD + "\n[soak]\nduration_s = 600\nwindow_s = 30\n"))
    assert suite.soaked == ["eagle3"] and suite.soak.concurrency == 16  # every speculative configuration
    chosen = load_suite(write(tmp_path, GOOD + '\n[soak]\nduration_s = 600\nconfigs = ["baseline"]\n'))
    assert chosen.soaked == ["baseline"]
    passive = load_suite(write(tmp_path, GOOD + '\n[soak]\nduration_s = 600\nmode = "passive"\n'))
    assert passive.soak.mode == "passive" and suite.soak.mode == "load"
    for body, message in (("duration_s = 60\nwindow_s = 30", r"soak.duration_s = 60.0: a soak needs the warm-up windows "
                                                           r"and at least 3 more of 30 s: at least 120 s"),
                          ('duration_s = 600\nconfigs = ["nope"]', r"soak.configs = \['nope'\]: 'nope' is not a "
                                                                   r"configuration"),
                          ("duration_s = 600\nwindow = 30", r"unknown key soak.window; known keys: duration_s, window_s"),
                          ("duration_s = 600\nconcurrency = 0", r"soak.concurrency = 0: must be positive"),
                          ('duration_s = 600\nmode = "quiet"', r"soak.mode = 'quiet': use one of load, passive")):
        with pytest.raises(ConfigError, match=message):
            load_suite(write(tmp_path, GOOD + f"\n[soak]\n{body}\n"))
