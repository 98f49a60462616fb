"""The performance model: continuous batching with optional speculative decoding, as pure code.

``BatchScheduler`` holds waiting and running requests and, one step at a time, says what the
next step is (a prefill of newly admitted requests, or a decode step of every running request),
how long it takes in milliseconds, and how many tokens each request gets from it. It never
sleeps and never does I/O: the HTTP server drives it in real time on absolute deadlines, and
``simulate_closed_loop`` drives it in virtual time. Both drivers share this code, so the
simulator is the ground truth for what the server should measure.

Step cost (design.md):
    decode_ms  = forward_ms(B * D) + num_steps * draft_ms(B) + attention_ms_per_ktok * sum(ctx) / 1000
    prefill_ms = forward_ms(new requests) + prefill_ms_per_ktok * uncached prompt tokens / 1000
both times step_scale * drift (per launch) * jitter (per step) / speed_factor.
"""

from __future__ import annotations

import bisect
import math
from collections import OrderedDict, deque
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from specguard.emulator.profile import EmulatorProfile
from specguard.emulator.spec import ServingSettings, SpecRequest, resolve_settings


@dataclass
class SchedulerConfig:
    """Everything that fixes the modelled speed of one emulated server launch."""

    profile: EmulatorProfile
    settings: ServingSettings
    seed: int = 0
    step_scale: float = 1.0  # multiplies every step time (1.111 = about 10% slower)
    speed_factor: float = 1.0  # divides every step time (run the model faster than life)
    jitter_pct: float | None = None  # None = the profile's value
    drift_pct: float | None = None  # None = the profile's value
    decode_log_interval: int = 40  # decode steps between updates of the logged gauges


@dataclass(eq=False)  # identity semantics: two requests are never "equal"
class GenRequest:
    """One generation request as the scheduler sees it."""

    prompt_tokens: int
    max_new_tokens: int
    prompt_key: Hashable | None = None  # identical keys share the prefix cache
    counted: bool = True  # False for health checks: kept out of the metrics counters
    streaming: bool = True  # only labels the metrics counters
    arrival_ms: float = 0.0
    admit_ms: float | None = None
    first_token_ms: float | None = None
    finish_ms: float | None = None
    cached_tokens: int = 0
    completion_tokens: int = 0
    verify_ct: int = 0  # decode (verify) steps this request took part in
    accepted_drafts: int = 0
    aborted: bool = False
    tag: Any = None  # the driver's per-request data (the HTTP server keeps its stream here)

    @property
    def remaining(self) -> int:
        return self.max_new_tokens - self.completion_tokens

    @property
    def finished(self) -> bool:
        return self.finish_ms is not None


@dataclass
class Step:
    """One planned forward step: who is in it, what it costs and what each request gets."""

    kind: str  # "prefill" or "decode"
    requests: list[GenRequest]
    grants: list[int]  # new tokens per request, in the same order
    duration_ms: float


# SGLang's bucket bounds in seconds (see metrics.txt in the captures).
TTFT_BUCKETS_S = (0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 2.0, 4.0, 6.0, 8.0, 10.0, 20.0, 40.0, 60.0, 80.0, 100.0, 200.0, 400.0)
E2E_BUCKETS_S = TTFT_BUCKETS_S + (600.0, 1200.0, 1800.0, 2400.0)


@dataclass
class LatencyHistogram:
    """A Prometheus-style histogram: cumulative counts per upper bound, plus sum and count."""

    bounds_s: tuple[float, ...]
    cumulative: list[int] = field(default_factory=list)
    sum_s: float = 0.0
    count: int = 0

    def __post_init__(self) -> None:
        self.cumulative = [0] * len(self.bounds_s)

    def observe(self, value_s: float) -> None:
        self.sum_s += value_s
        self.count += 1
        for i in range(bisect.bisect_left(self.bounds_s, value_s), len(self.bounds_s)):
            self.cumulative[i] += 1


@dataclass
class TokenCounters:
    """Lifetime counters, as SGLang's Prometheus counters (counted when a request finishes)."""

    num_requests: int = 0
    prompt_tokens: int = 0
    cached_tokens: int = 0
    generation_tokens: int = 0
    verify_calls: int = 0
    ttft: LatencyHistogram = field(default_factory=lambda: LatencyHistogram(TTFT_BUCKETS_S))
    e2e: LatencyHistogram = field(default_factory=lambda: LatencyHistogram(E2E_BUCKETS_S))


@dataclass
class SchedulerStats:
    """Gauges SGLang updates every ``decode_log_interval`` decode steps, plus lifetime counters."""

    decode_steps: int = 0
    prefill_steps: int = 0
    gen_throughput: float = 0.0  # tok/s over the last log interval
    spec_accept_length: float = 0.0  # over the last log interval
    spec_accept_rate: float = 0.0  # over the last log interval
    avg_spec_accept_length: float = 0.0  # since the last reset (/flush_cache), as last logged
    counters: dict[bool, TokenCounters] = field(
        default_factory=lambda: {True: TokenCounters(), False: TokenCounters()}
    )  # keyed by "is streaming"
    _interval_start_ms: float | None = None
    _interval_tokens: int = 0
    _interval_verifies: int = 0
    _reset_tokens: int = 0
    _reset_verifies: int = 0


class PrefixCache:
    """A whole-prompt stand-in for SGLang's radix cache: a repeated prompt is cached but its last token.

    Enough to make the seed-A workload (every request the same ids) cheap to prefill, as it is on
    a real server, and to give ``/flush_cache`` something to flush.
    """

    def __init__(self, max_entries: int = 4096) -> None:
        self._keys: OrderedDict[Hashable, None] = OrderedDict()
        self._max_entries = max_entries

    def cached_tokens(self, key: Hashable | None, prompt_tokens: int) -> int:
        """Cached tokens for this prompt; remembers the prompt for next time."""
        if key is None:
            return 0
        if key in self._keys:
            self._keys.move_to_end(key)
            return max(prompt_tokens - 1, 0)
        self._keys[key] = None
        if len(self._keys) > self._max_entries:
            self._keys.popitem(last=False)
        return 0

    def clear(self) -> None:
        self._keys.clear()


class BatchScheduler:
    """FCFS continuous batching under a running-request cap, with a step cost and acceptance model."""

    def __init__(self, config: SchedulerConfig) -> None:
        self.config = config
        self.profile = config.profile
        self.spec = config.settings.spec
        self.max_running_requests = config.settings.max_running_requests
        self.waiting: deque[GenRequest] = deque()
        self.running: list[GenRequest] = []
        self.prefix_cache = PrefixCache()
        self.stats = SchedulerStats()
        # Separate streams, so that noise settings do not change the acceptance draws.
        self._accept_rng = np.random.default_rng([config.seed, 1])
        self._noise_rng = np.random.default_rng([config.seed, 2])
        drift_pct = self.profile.drift_pct if config.drift_pct is None else config.drift_pct
        jitter_pct = self.profile.jitter_pct if config.jitter_pct is None else config.jitter_pct
        self.drift = _mean_one_lognormal(self._noise_rng, drift_pct / 100.0)  # this launch's speed offset
        self._jitter_sd = jitter_pct / 100.0
        self._time_factor = config.step_scale * self.drift / config.speed_factor
        if self.spec is not None:
            # P(at least j drafts accepted), j = 1..num_steps: decreasing, one uniform draw per request.
            self._survival = np.cumprod(np.array(self.spec.accept_prob, dtype=float))

    # -- queue -------------------------------------------------------------------------------
    def submit(self, req: GenRequest, now_ms: float) -> None:
        req.arrival_ms = now_ms
        self.waiting.append(req)

    def abort(self, req: GenRequest) -> None:
        """Drop a request whose client went away (it stops costing anything from the next step)."""
        if req.finished or req.aborted:
            return
        req.aborted = True
        if req in self.waiting:
            self.waiting.remove(req)
        elif req in self.running:
            self.running.remove(req)

    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    # -- steps -------------------------------------------------------------------------------
    def next_step(self, now_ms: float) -> Step | None:
        """Plan the step starting at ``now_ms``: admit and prefill if possible, else decode."""
        if self.waiting and len(self.running) < self.max_running_requests:
            return self._prefill_step(now_ms)
        if self.running:
            return self._decode_step(now_ms)
        return None

    def _prefill_step(self, now_ms: float) -> Step:
        admitted = []
        while self.waiting and len(self.running) < self.max_running_requests:
            req = self.waiting.popleft()
            req.admit_ms = max(now_ms, req.arrival_ms)  # a catching-up driver may plan in the past
            req.cached_tokens = self.prefix_cache.cached_tokens(req.prompt_key, req.prompt_tokens)
            self.running.append(req)
            admitted.append(req)
        uncached = sum(r.prompt_tokens - r.cached_tokens for r in admitted)
        cost_ms = self.profile.forward_ms(len(admitted)) + self.profile.prefill_ms_per_ktok * uncached / 1000.0
        grants = [min(1, r.remaining) for r in admitted]
        return Step("prefill", admitted, grants, self._scaled(cost_ms))

    def _decode_step(self, now_ms: float) -> Step:
        batch = list(self.running)
        b = len(batch)
        context_tokens = sum(r.prompt_tokens + r.completion_tokens for r in batch)
        cost_ms = self.profile.attention_ms_per_ktok * context_tokens / 1000.0
        if self.spec is None:
            cost_ms += self.profile.forward_ms(b)
            grants = [1] * b
        else:
            spec = self.spec
            cost_ms += self.profile.forward_ms(b * spec.num_draft_tokens) + spec.num_steps * spec.draft_ms(b)
            accepted = (self._accept_rng.random(b)[:, None] < self._survival).sum(axis=1).tolist()
            grants = [min(1 + a, r.remaining) for a, r in zip(accepted, batch)]
        if self.stats._interval_start_ms is None:
            self.stats._interval_start_ms = now_ms
        return Step("decode", batch, grants, self._scaled(cost_ms))

    def _scaled(self, cost_ms: float) -> float:
        cost_ms *= self._time_factor
        if self._jitter_sd > 0:
            cost_ms *= _mean_one_lognormal(self._noise_rng, self._jitter_sd)
        return cost_ms

    def complete(self, step: Step, now_ms: float) -> list[GenRequest]:
        """Apply a step that ended at ``now_ms``; returns the requests it finished."""
        finished = []
        decode = step.kind == "decode"
        for req, grant in zip(step.requests, step.grants):
            if req.aborted:
                continue
            req.completion_tokens += grant
            if decode:
                req.verify_ct += 1
                req.accepted_drafts += grant - 1
            elif req.first_token_ms is None:
                req.first_token_ms = now_ms
            if req.remaining <= 0:
                req.finish_ms = now_ms
                finished.append(req)
                self._count_finished(req)
        if finished:
            self.running = [r for r in self.running if not r.finished]
        if decode:
            self._log_decode_step(step, now_ms)
        else:
            self.stats.prefill_steps += 1
        return finished

    # -- statistics --------------------------------------------------------------------------
    def _count_finished(self, req: GenRequest) -> None:
        if not req.counted:
            return
        c = self.stats.counters[req.streaming]
        c.num_requests += 1
        c.prompt_tokens += req.prompt_tokens
        c.cached_tokens += req.cached_tokens
        c.generation_tokens += req.completion_tokens
        c.verify_calls += req.verify_ct
        c.ttft.observe((req.first_token_ms - req.arrival_ms) / 1000.0)
        c.e2e.observe((req.finish_ms - req.arrival_ms) / 1000.0)

    def _log_decode_step(self, step: Step, now_ms: float) -> None:
        s = self.stats
        s.decode_steps += 1
        tokens = sum(step.grants)
        s._interval_tokens += tokens
        s._interval_verifies += len(step.grants)
        s._reset_tokens += tokens
        s._reset_verifies += len(step.grants)
        if s.decode_steps % self.config.decode_log_interval:
            return
        elapsed_ms = now_ms - (s._interval_start_ms if s._interval_start_ms is not None else now_ms)
        s.gen_throughput = s._interval_tokens / (elapsed_ms / 1000.0) if elapsed_ms > 0 else 0.0
        if self.spec is not None and s._interval_verifies:
            s.spec_accept_length = s._interval_tokens / s._interval_verifies
            s.spec_accept_rate = (s.spec_accept_length - 1.0) / self.spec.num_steps
            s.avg_spec_accept_length = s._reset_tokens / s._reset_verifies
        s._interval_start_ms = now_ms
        s._interval_tokens = s._interval_verifies = 0

    def decode_log_line(self) -> str:
        """The line SGLang logs every ``decode_log_interval`` decode steps."""
        s = self.stats
        line = f"Decode batch. #running-req: {len(self.running)}, "
        if self.spec is not None:
            line += f"accept len: {s.spec_accept_length:.2f}, accept rate: {s.spec_accept_rate:.2f}, "
        return line + f"gen throughput (token/s): {s.gen_throughput:.2f}, #queue-req: {len(self.waiting)}"

    def reset_accept_stats(self) -> None:
        """What /flush_cache does to the accept-length statistics (and the prefix cache)."""
        s = self.stats
        s._reset_tokens = s._reset_verifies = 0
        s.avg_spec_accept_length = 0.0
        self.prefix_cache.clear()


def _mean_one_lognormal(rng: np.random.Generator, sd: float) -> float:
    """A lognormal factor with mean 1 and log-sd ``sd`` (1.0 when sd is 0)."""
    if sd <= 0:
        return 1.0
    return math.exp(rng.normal(-sd * sd / 2.0, sd))


# -- virtual-time driver -------------------------------------------------------------------------
@dataclass
class SimulationResult:
    """A closed-loop run in virtual time, with the numbers a client would measure."""

    concurrency: int
    num_requests: int
    max_running_requests: int
    completion_tokens: int
    duration_s: float
    output_throughput: float  # completion tokens / duration, tok/s
    accept_length: float | None  # completion tokens / verify steps over the run; None without spec
    mean_ttft_ms: float
    mean_itl_ms: float  # per token: (e2e - ttft) / (tokens - 1), averaged over requests
    mean_e2e_ms: float
    decode_steps: int
    prefill_steps: int


def simulate_closed_loop(
    profile: EmulatorProfile,
    spec: SpecRequest | None,
    concurrency: int,
    num_requests: int,
    input_len: int,
    output_len: int,
    *,
    max_running_requests: int | None = None,
    accept_length: float | None = None,
    seed: int = 0,
    step_scale: float = 1.0,
    speed_factor: float = 1.0,
    jitter_pct: float | None = 0.0,
    drift_pct: float | None = 0.0,
    same_prompt: bool = True,
) -> SimulationResult:
    """Run ``num_requests`` requests through the scheduler with ``concurrency`` clients, in virtual time.

    Each client sends its next request the moment the previous one finishes. Settings are resolved
    exactly as the server resolves its flags (48-request cap under speculation, topk rewrite).
    ``same_prompt`` makes every prompt identical (prefix-cache hits, like the seed-A workload).
    Noise defaults to off here; pass None to use the profile's jitter and drift.
    """
    settings = resolve_settings(profile, spec, max_running_requests, accept_length)
    config = SchedulerConfig(profile, settings, seed, step_scale, speed_factor, jitter_pct, drift_pct)
    return run_closed_loop(BatchScheduler(config), concurrency, num_requests, input_len, output_len, same_prompt)


def run_closed_loop(
    scheduler: BatchScheduler,
    concurrency: int,
    num_requests: int,
    input_len: int,
    output_len: int,
    same_prompt: bool = True,
) -> SimulationResult:
    """Drive an existing scheduler through a closed-loop run in virtual time."""
    if concurrency < 1 or num_requests < 1:
        raise ValueError("concurrency and num_requests must be >= 1")
    now_ms = 0.0
    issued = 0
    done: list[GenRequest] = []

    def issue() -> None:
        nonlocal issued
        key = "prompt" if same_prompt else issued
        scheduler.submit(GenRequest(input_len, output_len, prompt_key=key), now_ms)
        issued += 1

    for _ in range(min(concurrency, num_requests)):
        issue()
    decode_steps = prefill_steps = 0
    while scheduler.has_work():
        step = scheduler.next_step(now_ms)
        assert step is not None
        now_ms += step.duration_ms
        if step.kind == "decode":
            decode_steps += 1
        else:
            prefill_steps += 1
        for req in scheduler.complete(step, now_ms):
            done.append(req)
            if issued < num_requests:
                issue()

    tokens = sum(r.completion_tokens for r in done)
    verifies = sum(r.verify_ct for r in done)
    ttft = [r.first_token_ms - r.arrival_ms for r in done]
    itl = [
        (r.finish_ms - r.first_token_ms) / (r.completion_tokens - 1) for r in done if r.completion_tokens > 1
    ]
    return SimulationResult(
        concurrency=concurrency,
        num_requests=num_requests,
        max_running_requests=scheduler.max_running_requests,
        completion_tokens=tokens,
        duration_s=now_ms / 1000.0,
        output_throughput=tokens / (now_ms / 1000.0) if now_ms > 0 else 0.0,
        accept_length=(tokens / verifies if verifies else None) if scheduler.spec is not None else None,
        mean_ttft_ms=float(np.mean(ttft)),
        mean_itl_ms=float(np.mean(itl)) if itl else 0.0,
        mean_e2e_ms=float(np.mean([r.finish_ms - r.arrival_ms for r in done])),
        decode_steps=decode_steps,
        prefill_steps=prefill_steps,
    )
