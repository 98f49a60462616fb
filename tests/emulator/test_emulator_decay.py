"""The ageing server (emulator/decay.py): acceptance that decays and steps that slow down along a
ramp over serving time or tokens served, checked on the scheduler's own clock (virtual time)."""

from __future__ import annotations

import numpy as np
import pytest

from specguard.emulator import launch_server
from specguard.emulator.decay import DecayClock, DecaySettings, ServingAge, position_factor
from specguard.emulator.faults import decay_settings_from_args
from specguard.emulator.model import BatchScheduler, GenRequest, SchedulerConfig, Step
from specguard.emulator.profile import load_profile
from specguard.emulator.simulated_acceptance import SimulatedAcceptance
from specguard.emulator.spec import SpecRequest, expected_accept_length, resolve_settings

EAGLE3 = SpecRequest("EAGLE3", 3, 1, 4)
NEVER = 1e12  # a ramp start no test reaches


def scheduler(decay: DecaySettings | None, spec: SpecRequest | None = EAGLE3, seed: int = 3,
              jitter: float = 0.0, simulated: SimulatedAcceptance | None = None) -> BatchScheduler:
    profile = load_profile("fast")
    settings = resolve_settings(profile, spec, 64)
    return BatchScheduler(SchedulerConfig(profile, settings, seed, jitter_pct=jitter, drift_pct=0.0, decay=decay,
                                          simulated=simulated))


def drive(sched: BatchScheduler, requests: int, until_ms: float, first_at_ms: float = 0.0) -> list[tuple[float, Step]]:
    """Submit long requests at ``first_at_ms`` and step the scheduler in virtual time until
    ``until_ms``: (start time, step) of every step."""
    now = first_at_ms
    for i in range(requests):
        sched.submit(GenRequest(16, 10**7, prompt_key=i), now)
    steps = []
    while now < until_ms:
        step = sched.next_step(now)
        assert step is not None
        steps.append((now, step))
        now += step.duration_ms
        sched.complete(step, now)
    return steps


def windowed_grants(steps: list[tuple[float, Step]], window_ms: float) -> dict[int, np.ndarray]:
    """Tokens of every verify of the decode steps that start in each window."""
    out: dict[int, list[int]] = {}
    for start, step in steps:
        if step.kind == "decode":
            out.setdefault(int(start // window_ms), []).extend(step.grants)
    return {w: np.array(g, dtype=float) for w, g in out.items()}


# -- the ramp and the factor ------------------------------------------------------------------------
def test_the_ramp_is_zero_then_linear_then_held():
    d = DecaySettings(accept_decay=0.1, start=200.0, over=400.0)
    assert [d.ramp(t) for t in (0.0, 199.9, 200.0, 300.0, 500.0, 600.0, 6000.0)] == pytest.approx(
        [0.0, 0.0, 0.0, 0.25, 0.75, 1.0, 1.0])
    step = DecaySettings(step_slowdown=0.05, start=10.0, over=0.0)
    assert (step.ramp(9.99), step.ramp(10.0), step.ramp(1e6)) == (0.0, 1.0, 1.0)
    assert not DecaySettings().active and DecaySettings(step_slowdown=0.01).active


@pytest.mark.parametrize("kwargs, flag", [
    ({"accept_decay": 1.0}, "--emulator-fault-accept-decay must be in [0, 1), got 1.0"),
    ({"accept_decay": -0.1}, "--emulator-fault-accept-decay must be in [0, 1)"),
    ({"step_slowdown": -1.0}, "--emulator-fault-step-slowdown must be > -1"),
    ({"accept_decay": 0.1, "start": -1.0}, "--emulator-fault-decay-start-s must be >= 0"),
    ({"accept_decay": 0.1, "over": -1.0, "clock": DecayClock.TOKENS}, "--emulator-fault-decay-over-tokens must be >= 0"),
])
def test_bad_settings_name_the_flag(kwargs, flag):
    with pytest.raises(ValueError) as err:
        DecaySettings(**kwargs)
    assert flag in str(err.value)


@pytest.mark.parametrize("probs", [(0.88, 0.78, 0.68), (0.5,), (0.95, 0.9, 0.9, 0.85, 0.8), (1.0, 1.0, 1.0)])
@pytest.mark.parametrize("fraction", [0.0, 0.05, 0.1, 0.3])
def test_the_position_factor_gives_exactly_the_decayed_length(probs, fraction):
    survival = np.cumprod(np.array(probs))
    undecayed = expected_accept_length(probs, len(probs))
    k = position_factor(survival, (1 - fraction) * undecayed)
    assert 0.0 < k <= 1.0
    assert 1 + float(np.sum(survival * k ** np.arange(1, len(probs) + 1))) == pytest.approx(
        (1 - fraction) * undecayed, rel=1e-12)


def test_the_position_factor_clamps_unreachable_lengths():
    survival = np.cumprod(np.array([0.1, 0.1]))  # 1.11 undecayed
    assert position_factor(survival, 0.9) == 0.0  # below one token per verify: nothing accepted
    assert position_factor(survival, 1.5) == 1.0  # above the undecayed length: unchanged


def test_serving_age_factors_follow_the_ramp():
    age = ServingAge(DecaySettings(accept_decay=0.2, step_slowdown=0.5, start=1.0, over=2.0))
    survival = np.cumprod(np.array([0.9, 0.8, 0.7]))
    age.advance(5000.0)  # no generation request yet: the clock has not started
    assert age.ramp == 0.0 and age.time_factor == 1.0 and age.survival_powers(survival) is None
    age.on_submit(counted=False, now_ms=100.0)  # a health probe does not start it
    age.on_submit(counted=True, now_ms=1000.0)
    age.on_submit(counted=True, now_ms=9000.0)  # only the first request does
    age.advance(3000.0)  # 2 s in: half-way up the ramp
    assert age.ramp == 0.5 and age.time_factor == 1.25 and age.length_factor == pytest.approx(0.9)
    powers = age.survival_powers(survival)
    assert powers is not None
    assert 1 + float(np.sum(survival * powers)) == pytest.approx(0.9 * (1 + float(np.sum(survival))), rel=1e-12)


# -- the scheduler on its virtual clock -------------------------------------------------------------
def test_accept_length_falls_linearly_by_the_fraction_then_holds():
    """--emulator-fault-accept-decay 0.10 --emulator-fault-decay-start-s 2 --emulator-fault-decay-over-s 4,
    64 running requests, 1 s windows: 3.03 until 2 s, down the line to 2.73 at 6 s, then held."""
    decay = DecaySettings(accept_decay=0.10, start=2.0, over=4.0)
    sched = scheduler(decay)
    undecayed = sched.spec.expected_accept_length
    windows = windowed_grants(drive(sched, 64, 10_000.0), 1000.0)
    assert len(windows) == 10
    for w, grants in windows.items():
        # the window's mean ramp (linear inside a window, so its middle's value)
        expected = undecayed * (1 - 0.10 * (decay.ramp(w) + decay.ramp(w + 1)) / 2)
        se = grants.std() / np.sqrt(len(grants))  # ~1500 verifies a window: ~0.8 %
        assert abs(grants.mean() - expected) < 4 * se, (w, grants.mean(), expected, se)
    before = np.concatenate([windows[w] for w in (0, 1)]).mean()
    after = np.concatenate([windows[w] for w in (6, 7, 8, 9)]).mean()
    assert after / before == pytest.approx(0.90, abs=0.015)
    assert sched.age is not None and sched.age.ramp == 1.0


def test_forced_acceptance_decays_exactly():
    """Under SGLANG_SIMULATE_ACC_LEN the forced length is what decays: 4 -> 3 with a 25 % decay,
    every verify exactly 4 before the ramp and exactly 3 after it."""
    decay = DecaySettings(accept_decay=0.25, start=1.0, over=1.0)
    sched = scheduler(decay, simulated=SimulatedAcceptance(4.0))
    for start, step in drive(sched, 8, 3000.0):
        if step.kind != "decode":
            continue
        ramp = decay.ramp(start / 1000.0)
        assert len(set(step.grants)) == 1  # one length per batch
        if ramp == 0.0:
            assert step.grants[0] == 4
        elif ramp == 1.0:
            assert step.grants[0] == 3
        else:
            assert step.grants[0] in (3, 4)


def test_steps_slow_down_by_the_ramp_exactly():
    """Same seed, same noise: every step of the slowed scheduler lasts (1 + F ramp) times its twin's."""
    decay = DecaySettings(step_slowdown=0.05, start=1.0, over=2.0)
    slowed, plain = scheduler(decay, jitter=1.0), scheduler(None, jitter=1.0)
    slowed_steps = drive(slowed, 16, 4500.0)
    plain_steps = drive(plain, 16, 4500.0)
    ratios = []
    for (start, a), (_, b) in zip(slowed_steps, plain_steps):
        assert a.kind == b.kind and a.grants == b.grants  # acceptance does not depend on time
        assert a.duration_ms / b.duration_ms == pytest.approx(1 + 0.05 * decay.ramp(start / 1000.0), rel=1e-12)
        ratios.append(a.duration_ms / b.duration_ms)
    assert ratios[0] == 1.0 and ratios[-1] == pytest.approx(1.05) and slowed_steps[0][1].kind == "prefill"


def test_the_clock_starts_at_the_first_generation_request_not_at_launch():
    """A health probe at launch, the first generation request 50 s later, the step change 10 s
    after that request: steps run at twice their twin's time from 60 s on, not from 10 s."""
    decay = DecaySettings(step_slowdown=1.0, start=10.0, over=0.0)
    runs = []
    for sched in (scheduler(decay), scheduler(None)):
        sched.submit(GenRequest(1, 1, counted=False), 0.0)
        sched.complete(sched.next_step(0.0), 5.0)
        runs.append(drive(sched, 4, 62_000.0, first_at_ms=50_000.0))
    slowed, plain = runs
    assert scheduler(decay).age is not None
    for (start, a), (_, b) in zip(slowed, plain):
        assert a.duration_ms / b.duration_ms == (2.0 if start >= 60_000.0 else 1.0)
    assert slowed[-1][0] >= 60_000.0


def test_the_token_clock_counts_generated_tokens():
    decay = DecaySettings(accept_decay=0.2, start=2000.0, over=4000.0, clock=DecayClock.TOKENS)
    sched = scheduler(decay, simulated=SimulatedAcceptance(4.0))  # 4 tokens per verify, falling to 3.2
    for i in range(8):
        sched.submit(GenRequest(16, 10**7, prompt_key=i), 0.0)
    now, served, held = 0.0, 0, []
    while now < 4000.0:
        step = sched.next_step(now)
        assert step is not None and sched.age is not None
        assert sched.age.ramp == decay.ramp(float(served))  # read before the step's own tokens
        if served >= 6000:
            held += step.grants
        served += sum(step.grants)
        now += step.duration_ms
        sched.complete(step, now)
        assert sched.age.tokens == served
    assert len(held) > 1000 and set(held) == {3, 4}  # 3.2: the floor or the ceiling, per batch
    assert np.mean(held) == pytest.approx(3.2, abs=0.1)


def test_a_decay_that_has_not_started_changes_nothing():
    """Bit for bit: grants and step times equal a scheduler without the fault until the ramp starts."""
    decayed = scheduler(DecaySettings(accept_decay=0.5, step_slowdown=0.5, start=NEVER), jitter=1.0)
    plain = scheduler(None, jitter=1.0)
    assert plain.age is None and scheduler(DecaySettings()).age is None  # all-zero: no fault at all
    a, b = drive(decayed, 32, 3000.0), drive(plain, 32, 3000.0)
    assert [(t, s.kind, s.grants, s.duration_ms) for t, s in a] == [(t, s.kind, s.grants, s.duration_ms) for t, s in b]


# -- the flags ---------------------------------------------------------------------------------------
def parse(argv: list[str]):
    return launch_server.build_arg_parser().parse_args(argv)


def test_flags_give_the_ramp_in_seconds_or_in_tokens():
    assert decay_settings_from_args(parse([])) is None
    seconds = decay_settings_from_args(parse(["--emulator-fault-accept-decay", "0.1", "--emulator-fault-decay-start-s",
                                              "200", "--emulator-fault-decay-over-s", "400"]))
    assert seconds == DecaySettings(0.1, 0.0, 200.0, 400.0, DecayClock.SECONDS)
    tokens = decay_settings_from_args(parse(["--emulator-fault-step-slowdown", "0.05",
                                             "--emulator-fault-decay-start-tokens", "1e5"]))
    assert tokens == DecaySettings(0.0, 0.05, 1e5, 0.0, DecayClock.TOKENS)


@pytest.mark.parametrize("argv, message", [
    (["--emulator-fault-accept-decay", "0.1", "--emulator-fault-decay-start-s", "1", "--emulator-fault-decay-over-tokens",
      "5"], "exclude each other"),
    (["--emulator-fault-decay-start-s", "100"], "need --emulator-fault-accept-decay or --emulator-fault-step-slowdown"),
    (["--emulator-fault-step-slowdown", "-1"], "--emulator-fault-step-slowdown must be > -1"),
])
def test_bad_flag_combinations_are_one_line_errors(argv, message):
    with pytest.raises(ValueError, match=message):
        decay_settings_from_args(parse(argv))


def test_accept_decay_needs_speculation_and_is_reported(monkeypatch):
    monkeypatch.delenv(launch_server.ACCEPT_LENGTH_ENV, raising=False)
    argv = ["--emulator-fault-accept-decay", "0.1"]
    with pytest.raises(ValueError, match="--emulator-fault-accept-decay decays acceptance: it needs --speculative-algorithm"):
        launch_server.build_settings(parse(argv), argv)
    slow = ["--emulator-fault-step-slowdown", "0.05"]  # an engine without speculation can still slow down
    assert launch_server.build_settings(parse(slow), slow).scheduler_config.decay == DecaySettings(step_slowdown=0.05)
    argv += ["--speculative-algorithm", "EAGLE3", "--speculative-num-steps", "3", "--speculative-eagle-topk", "1",
             "--emulator-fault-decay-start-s", "200", "--emulator-fault-decay-over-s", "400"]
    settings = launch_server.build_settings(parse(argv), argv)
    assert settings.emulator_info["decay"] == {"accept_decay": 0.1, "step_slowdown": 0.0, "start": 200.0,
                                               "over": 400.0, "clock": "s"}
    plain = ["--speculative-algorithm", "EAGLE3"]
    assert "decay" not in launch_server.build_settings(parse(plain), plain).emulator_info


def test_help_lists_the_decay_flags(capsys):
    with pytest.raises(SystemExit):
        parse(["--help"])
    text = capsys.readouterr().out
    for flag in ("--emulator-fault-accept-decay", "--emulator-fault-step-slowdown", "--emulator-fault-decay-start-s",
                 "--emulator-fault-decay-over-s", "--emulator-fault-decay-start-tokens",
                 "--emulator-fault-decay-over-tokens"):
        assert flag in text
