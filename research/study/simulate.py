"""Simulated server launches: the emulator's scheduler in virtual time, with noise and injected changes.

A whole real-time session of the default suite takes ~90 s, so hundreds of them are out of
reach. The study instead drives the emulator's scheduler in virtual time (``run_closed_loop``:
the scheduler code the real-time server runs, per-step jitter, per-launch drift, a new seed per
launch) and adds the extra noise the real-time client was measured to add (``client_noise``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from research.study.noise import Noise, rescalable
from specguard.config import ServerConfig, Suite
from specguard.emulator.model import PER_REQUEST, BatchScheduler, GenRequest, SchedulerConfig, Step, run_closed_loop
from specguard.emulator.profile import EmulatorProfile, load_profile
from specguard.emulator.spec import SpecRequest, resolve_settings

# (tok/s per run, accept length per run (empty without speculation), step rate per run: 1000 / the
# engine's step time in ms, as RunSeries.step_rates gives the step_time gate)
Runs = tuple[list[float], list[float], list[float]]
Launch = dict[int, Runs]  # concurrency -> runs of one server launch


# The two halves of a speculative configuration's speed, each moved alone (``scenarios``): the
# engine's step time (step_scale 1.053: every step 5.3 % longer, step rate -5 %) and the drafter's
# acceptance (accept length x 0.92); the study scores which half each tok/s verdict names.
ENGINE_SLOWDOWN, ACCEPTANCE_DROP = "engine slowdown 5%", "acceptance -8%"


@dataclass(frozen=True)
class Change:
    """An injected regression: applied to one configuration's current launch only."""

    name: str
    config: str = ""
    step_scale: float = 1.0  # every step takes this much longer (tok/s / step_scale)
    accept_factor: float = 1.0  # accept length times this
    level_factor: float = 1.0  # tok/s times this at ``levels`` only
    levels: tuple[int, ...] = ()
    gate: str = ""  # the gate this scenario isolates ("" = the suite as a whole)

    @property
    def is_null(self) -> bool:
        return self.step_scale == 1.0 and self.accept_factor == 1.0 and self.level_factor == 1.0


def profile_of(cfg: ServerConfig) -> EmulatorProfile:
    """The emulator profile a configuration launches with (``--emulator-profile``, default fast)."""
    args = cfg.args
    for i, a in enumerate(args):
        if a == "--emulator-profile" and i + 1 < len(args):
            return load_profile(args[i + 1])
        if a.startswith("--emulator-profile="):
            return load_profile(a.split("=", 1)[1])
    return load_profile("fast")


def spec_request(cfg: ServerConfig) -> SpecRequest | None:
    if not cfg.speculative_algorithm:
        return None
    return SpecRequest(cfg.speculative_algorithm, cfg.num_steps, cfg.eagle_topk, cfg.num_draft_tokens)


def reference_of(cfg: ServerConfig) -> str:
    """A speculative configuration's reference (the suite file requires one)."""
    if cfg.reference is None:
        raise ValueError(f"speculative configuration {cfg.name!r} has no reference")
    return cfg.reference


class _StepTimingScheduler(BatchScheduler):
    """The emulator's scheduler, keeping the requests each run finishes: the step time the client
    measures (measure/metrics.py ``step_time_ms``) needs their first-token and finish times and
    verify steps, which ``SimulationResult`` does not carry."""

    def __init__(self, config: SchedulerConfig) -> None:
        super().__init__(config)
        self.finished: list[GenRequest] = []

    def complete(self, step: Step, now_ms: float) -> list[GenRequest]:
        done = super().complete(step, now_ms)
        self.finished.extend(done)
        return done

    def take_step_time_ms(self) -> float | None:
        """The run's step time (summed decode time over summed decode steps of the requests with
        two or more tokens, as ``step_time_ms`` computes it from the client's records), and a
        fresh list for the next run."""
        decode_ms = 0.0
        steps = 0
        for r in self.finished:
            if r.completion_tokens < 2 or r.first_token_ms is None or r.finish_ms is None:
                continue
            decode_ms += r.finish_ms - r.first_token_ms
            steps += r.verify_ct  # a decode step per verify (speculative) or per token after the first
        self.finished = []
        return decode_ms / steps if steps else None


def _scheduler(cfg: ServerConfig, seed: int, noise: Noise | None, change: Change | None,
               acceptance: str = PER_REQUEST) -> _StepTimingScheduler:
    profile = profile_of(cfg)
    spec = spec_request(cfg)
    accept = None
    if change is not None and change.accept_factor != 1.0 and spec is not None:
        natural = resolve_settings(profile, spec, cfg.max_running_requests).spec
        if natural is None:
            raise ValueError(f"{cfg.name}: the emulator resolves no speculation for {spec}")
        accept = natural.expected_accept_length * change.accept_factor
    settings = resolve_settings(profile, spec, cfg.max_running_requests, accept)
    return _StepTimingScheduler(SchedulerConfig(
        profile, settings, seed=seed, step_scale=change.step_scale if change else 1.0,
        jitter_pct=0.0 if noise is None else noise.jitter_pct, drift_pct=0.0 if noise is None else noise.drift_pct,
        acceptance=acceptance))


def simulate_launch(suite: Suite, name: str, seed: int, repeats: int, noise: Noise | None,
                    change: Change | None = None, day_offset: float = 0.0, acceptance: str = PER_REQUEST) -> Launch:
    """One server launch measured at every concurrency, runs in sequence as ``measure_cell`` does.

    Each run starts as the server's does after /flush_cache: the prefix cache cleared and
    ``start_run()`` (a run's own acceptance offset where ``acceptance`` has one). Warmup runs are
    not simulated: in virtual time they start from the same flushed scheduler as every measured
    run, so they change nothing but the draws. ``noise=None`` gives the noise-free truth (no run
    offset: the model's expected acceptance). The time factors (day, launch, run, stall, a
    level's slowdown) divide the step time as they divide tok/s: they are the clock's.
    """
    cfg = suite.servers[name]
    sched = _scheduler(cfg, seed, noise, change, acceptance)
    rng = np.random.default_rng([seed, 7])
    same_prompt = suite.workload.kind == "repeated-id"
    out: Launch = {}
    for c in suite.sweep.concurrency:
        offset = rng.normal(0.0, noise.between.get(c, 0.0)) if noise else 0.0
        tok, acc, rate = [], [], []
        for _ in range(repeats):
            sched.prefix_cache.clear()
            if noise is not None:
                sched.start_run()
            r = run_closed_loop(sched, c, suite.sweep.num_requests(c), suite.workload.input_len,
                                suite.workload.output_len, same_prompt)
            step_ms = sched.take_step_time_ms()
            factor = math.exp(day_offset)
            if change is not None and c in change.levels:
                factor *= change.level_factor
            if noise:
                factor *= noise.bias.get(f"{name} c{c}", 1.0) * math.exp(offset + rng.normal(0.0, noise.within.get(c, 0.0)))
                if noise.stall_factors and rng.random() < noise.stall_rate:
                    factor *= float(rng.choice(noise.stall_factors))
            tok.append(r.output_throughput * factor)
            if r.accept_length is not None:
                acc.append(r.accept_length)
            if step_ms is not None:
                rate.append(1e3 / step_ms * factor)
        out[c] = (tok, acc, rate)
    return out


def seed_of(*parts: int) -> int:
    """One launch's seed from the trial's coordinates (base seed, index, role, ...)."""
    return int(np.random.SeedSequence(list(parts)).generate_state(1)[0])


@dataclass
class Trial:
    """The launches behind one simulated session: K stored sessions, the unchanged current
    session, and the changed configuration's launch for every injected change."""

    history: list[dict[str, Launch]]
    current: dict[str, Launch]
    changed: dict[str, Launch]  # change name -> launch of change.config
    # further launches of this session (relaunches, or launches = L): [launch 2, launch 3, ...]
    more: dict[str, list[Launch]] = field(default_factory=dict)
    changed_more: dict[str, list[Launch]] = field(default_factory=dict)


def _day_offsets(noise: Noise | None, base_seed: int, index: int, k: int) -> np.ndarray:
    """The day offsets of a trial: [this session, stored session 1, ..., stored session k]."""
    day_sd = noise.day_pct / 100 if noise else 0.0
    return np.random.default_rng([base_seed, index, 11]).normal(0.0, day_sd, k + 1) if day_sd > 0 else np.zeros(k + 1)


def simulate_trial(suite: Suite, index: int, base_seed: int, max_history: int, repeats: int, noise: Noise,
                   changes: Sequence[Change], max_launches: int = 1, acceptance: str = PER_REQUEST) -> Trial:
    """K stored sessions (one launch per configuration each, a day offset per session) and the
    current session: ``max_launches`` launches per configuration sharing the session's day. A
    changed configuration's launches reuse the unchanged ones' seeds (common random numbers).
    ``acceptance``: the emulator's acceptance model (``SchedulerConfig.acceptance``)."""
    names = list(suite.servers)
    days = _day_offsets(noise, base_seed, index, max_history)
    hist = [{n: simulate_launch(suite, n, seed_of(base_seed, index, 1, k, j), repeats, noise, day_offset=float(days[k + 1]),
                                acceptance=acceptance)
             for j, n in enumerate(names)} for k in range(max_history)]

    def launches(n: str, j: int, ch: Change | None) -> list[Launch]:
        return [simulate_launch(suite, n, seed_of(base_seed, index, 2, k, j), repeats, noise, ch, float(days[0]),
                                acceptance)
                for k in range(max_launches)]

    cur = {n: launches(n, j, None) for j, n in enumerate(names)}
    changed = {ch.name: launches(ch.config, names.index(ch.config), ch) for ch in changes if not ch.is_null}
    return Trial(hist, {n: ls[0] for n, ls in cur.items()}, {k: ls[0] for k, ls in changed.items()},
                 {n: ls[1:] for n, ls in cur.items()}, {k: ls[1:] for k, ls in changed.items()})


def extend_trial(suite: Suite, trial: Trial, index: int, base_seed: int, noise: Noise, changes: Sequence[Change],
                 max_launches: int, acceptance: str = PER_REQUEST) -> Trial:
    """``trial`` with launches added up to ``max_launches`` per configuration, exactly as
    ``simulate_trial(..., max_launches)`` would have simulated them: the same seeds per launch
    index, the session's day offset, each changed configuration's launch with its change. Lets a
    cache of 2-launch trials serve a 3-launch design without simulating the rest again."""
    names = list(suite.servers)
    have = 1 + min(len(ls) for ls in trial.more.values()) if trial.more else 1
    if have >= max_launches:
        return trial
    days = _day_offsets(noise, base_seed, index, len(trial.history))
    first = next(iter(trial.current.values()))
    repeats = len(next(iter(first.values()))[0])
    by_name = {ch.name: ch for ch in changes}

    def add(n: str, ch: Change | None, got: list[Launch]) -> list[Launch]:
        j = names.index(n)
        return [*got[: have - 1], *(simulate_launch(suite, n, seed_of(base_seed, index, 2, k, j), repeats, noise, ch,
                                                    float(days[0]), acceptance) for k in range(have, max_launches))]

    more = {n: add(n, None, trial.more.get(n, [])) for n in trial.current}
    changed_more = {c: add(by_name[c].config, by_name[c], trial.changed_more.get(c, [])) for c in trial.changed}
    return Trial(trial.history, trial.current, trial.changed, more, changed_more)


def rescale_trial(suite: Suite, trial: Trial, index: int, base_seed: int, frm: Noise, to: Noise,
                  changes: Sequence[Change]) -> Trial:
    """``trial`` (simulated under ``frm``) as ``simulate_trial`` would have simulated it under ``to``.

    Exact, not an approximation: a launch's drift is the first draw of its scheduler's noise
    stream (``BatchScheduler``: exp(N(-d^2/2, d)), d = drift_pct / 100), every step's cost is
    multiplied by it and the closed loop in virtual time has no other clock, so tok/s scales by
    drift_frm / drift_to, and so does the step rate; the day offsets are day_pct / 100 times one
    stream of standard normals. Accept lengths do not depend on either. The tests check it against direct simulation. This
    is what lets the study measure 0.5 %, 1 % and 2 % launch spread on one simulation."""
    if not rescalable(frm, to):
        raise ValueError("rescale_trial: the noises differ in more than drift and day")
    changed_cfg = {ch.name: ch.config for ch in changes}
    missing = [ch for ch in trial.changed if ch not in changed_cfg]
    if missing:
        raise ValueError(f"rescale_trial: no change named {', '.join(missing)} among the scenarios")
    names = list(suite.servers)
    k = len(trial.history)
    zd = (np.random.default_rng([base_seed, index, 11]).standard_normal(k + 1) if frm.day_pct > 0
          else np.zeros(k + 1))
    scaled = _launch_rescaler(frm, to)

    def cur(n: str, k: int, launch: Launch) -> Launch:
        return scaled(launch, seed_of(base_seed, index, 2, k, names.index(n)), float(zd[0]))

    hist = [{n: scaled(h[n], seed_of(base_seed, index, 1, i, j), float(zd[i + 1])) for j, n in enumerate(names)}
            for i, h in enumerate(trial.history)]
    return Trial(hist, {n: cur(n, 0, launch) for n, launch in trial.current.items()},
                 {ch: cur(changed_cfg[ch], 0, launch) for ch, launch in trial.changed.items()},
                 {n: [cur(n, i + 1, launch) for i, launch in enumerate(ls)] for n, ls in trial.more.items()},
                 {ch: [cur(changed_cfg[ch], i + 1, launch) for i, launch in enumerate(ls)]
                  for ch, ls in trial.changed_more.items()})


def _launch_rescaler(frm: Noise, to: Noise) -> Callable[[Launch, int, float], Launch]:
    """launch, its seed, its day's standard normal -> the launch under ``to`` (``rescale_trial``)."""
    if frm.drift_pct is None or to.drift_pct is None:
        raise ValueError("rescale_trial: both noises need a per-launch drift")
    da, db = frm.drift_pct / 100, to.drift_pct / 100

    def scaled(launch: Launch, seed: int, day_z: float) -> Launch:
        z = float(np.random.default_rng([seed, 2]).standard_normal())
        f = math.exp((-da * da / 2 + da * z) - (-db * db / 2 + db * z) + (to.day_pct - frm.day_pct) / 100 * day_z)
        return {c: ([t * f for t in tok], list(acc), [r * f for r in rate]) for c, (tok, acc, rate) in launch.items()}

    return scaled


def scenarios(suite: Suite, config: str, noise: Noise | None = None) -> list[Change]:
    """A/A, then injected changes, each isolating one gate where it can.

    tok/s -5 % / -10 % (every step of ``config`` longer: the throughput gate), accept length -10 %
    (the accept-length gate; tok/s drops with it), ENGINE_SLOWDOWN (every step 5.3 % longer: the
    step_time gate at every level, and a tok/s verdict that must name the engine) and
    ACCEPTANCE_DROP (accept length -8 %, steps unchanged: a tok/s verdict that must not name the
    engine), "speculation 0.95x at cN": ``config`` slowed at
    its highest must-win level N only, to 0.95x its reference there (the speculation gate; the
    throughput gate sees that cell drop too), and "reference 7% faster": the reference sped up,
    the speculative configurations unchanged (the speculation gate, where the true gain is < 7 %;
    no throughput gate can fail on a faster reference).
    """
    cfg = suite.servers[config]
    out = [Change("A/A")]
    out += [Change(f"tok/s -{p}%", config, step_scale=1 / (1 - p / 100), gate="throughput") for p in (5, 10)]
    out += [Change("accept -10%", config, accept_factor=0.9, gate="accept_length")]
    out += [Change(ENGINE_SLOWDOWN, config, step_scale=1.053, gate="step_time"),
            Change(ACCEPTANCE_DROP, config, accept_factor=0.92, gate="accept_length")]
    must_win = [c for c in suite.sweep.concurrency
                if cfg.speculation_must_win_up_to is not None and c <= cfg.speculation_must_win_up_to]
    if must_win and cfg.reference:
        c = must_win[-1]
        bias = noise.bias if noise else {}
        spec = simulate_launch(suite, config, 0, 1, None)[c][0][0] * bias.get(f"{config} c{c}", 1.0)
        ref = simulate_launch(suite, cfg.reference, 0, 1, None)[c][0][0] * bias.get(f"{cfg.reference} c{c}", 1.0)
        out.append(Change(f"speculation 0.95x at c{c}", config, level_factor=0.95 * ref / spec, levels=(c,),
                          gate="speculation"))
        out.append(Change("reference 7% faster", cfg.reference, step_scale=1 / 1.07, gate="speculation"))
    return out
