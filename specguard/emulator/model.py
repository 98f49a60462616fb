"""The performance model: continuous batching with optional speculative decoding, as pure code.

``BatchScheduler`` holds waiting and running requests and, one step at a time, says what the
next step is (a prefill of newly admitted requests, or a decode step of every running request),
how long it takes in milliseconds, and how many tokens each request gets from it. It never
sleeps and never does I/O: the HTTP server drives it in real time on absolute deadlines, and
``simulate_closed_loop`` drives it in virtual time. Both drivers share this code, so the
simulator is the ground truth for what the server should measure.

Step cost (design.md):
    decode_ms  = forward_ms(B * D) + passes * draft_ms(B) + attention_ms_per_ktok * sum(ctx) / 1000
    (D draft tokens, passes = num_steps for the EAGLE chain, 1 for NGRAM/DFLASH; under adaptive
    speculation D = steps + 1 of the batch's slot, and steps 0 is a plain decode: D = 1, no draft)
    prefill_ms = forward_ms(new requests) + prefill_ms_per_ktok * uncached prompt tokens / 1000
both times step_scale * drift (per launch) * jitter (per step) / speed_factor.
"""

from __future__ import annotations

import bisect
import hashlib
import math
from collections import OrderedDict, deque
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

from specguard.emulator.adaptive import AdaptivePolicy
from specguard.emulator.decay import DecaySettings, ServingAge
from specguard.emulator.profile import EmulatorProfile
from specguard.emulator.simulated_acceptance import SimulatedAcceptance
from specguard.emulator.spec import ServingSettings, SpecConfig, SpecRequest, resolve_settings

# How acceptance varies between identical runs (--emulator-acceptance):
# - "per-request" (SGLang at temperature 0): a greedy request's acceptance is a function of its
#   content and its position in the output, so identical runs accept identically, but for a small
#   term that grows with the batch (batch-dependent numerics pick another argmax near ties);
# - "per-run" (vLLM, whose per-run acceptance varies, vllm#53436): every verify step draws afresh,
#   and each run's acceptance moves as a whole, most at small batches.
# Requests with temperature > 0 draw afresh in either mode.
PER_REQUEST, PER_RUN = "per-request", "per-run"
ACCEPTANCE_MODES = (PER_REQUEST, PER_RUN)


def run_acceptance_sd(mode: str, batch: int) -> float:
    """The log-scale spread of a run's acceptance as a whole at this batch size. Set so the
    emulator's run-to-run CV of tok/s follows vllm#53436's measurements within a factor of 2:
    SGLang 0.28 %, 0.26 %, 0.26 %, 0.11 %, 0.15 %, 2.54 % at C = 1, 2, 4, 8, 16, 32 (timing noise
    below 32, this term from 32 up); vLLM 9.85 %, 19.65 %, 7.50 % at C = 1, 2, 4, fading at 8+."""
    if mode == PER_RUN:
        return 0.12 * min(1.0, 4.0 / batch) ** 3
    return 0.012 * min(1.0, max(0.0, (batch - 16) / 16))


def acceptance_key(*parts: object) -> int:
    """A stable 64-bit key of a request's content (the same across processes and launches,
    unlike Python's hash of a str)."""
    digest = hashlib.blake2b(repr(parts).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little")


_MASK64 = np.uint64(0xFFFFFFFFFFFFFFFF)


def keyed_uniforms(keys: np.ndarray, positions: np.ndarray) -> np.ndarray:
    """One uniform in [0, 1) per (key, position): splitmix64 of the pair, so a request's draw at
    an output position is the same on every run."""
    with np.errstate(over="ignore"):
        z = keys.astype(np.uint64) ^ (positions.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15))
        z = (z + np.uint64(0x9E3779B97F4A7C15)) & _MASK64
        z = ((z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)) & _MASK64
        z = ((z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)) & _MASK64
        z = z ^ (z >> np.uint64(31))
    uniforms: np.ndarray = (z >> np.uint64(11)).astype(np.float64) / float(1 << 53)
    return uniforms


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
    cuda_graph_bs: list[int] | None = None  # decode CUDA-graph batch sizes (adaptive routing pads to them)
    # --emulator-category-accept: category -> factor on its conditional acceptance per position
    category_accept_factor: dict[str, float] = field(default_factory=dict)
    acceptance: str = PER_REQUEST  # ACCEPTANCE_MODES
    decay: DecaySettings | None = None  # --emulator-fault-accept-decay / -step-slowdown (decay.py)
    simulated: SimulatedAcceptance | None = None  # SGLANG_SIMULATE_ACC_LEN (simulated_acceptance.py)


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
    # correct_hist[k] = verify steps that accepted exactly k drafts (spec_correct_drafts_histogram)
    correct_hist: list[int] = field(default_factory=list)
    rank: int = 0  # DP rank the request was dispatched to (round robin)
    aborted: bool = False
    tag: Any = None  # the driver's per-request data (the HTTP server keeps its stream here)
    category: str = ""  # prompt category (emulator/categories.py): picks its acceptance, if the profile has one
    # acceptance_key() of a greedy request's content (its draws repeat run after run); None: a fresh
    # draw each step (temperature > 0)
    accept_key: int | None = None

    @property
    def remaining(self) -> int:
        return self.max_new_tokens - self.completion_tokens

    @property
    def finished(self) -> bool:
        return self.finish_ms is not None


def known_ms(ms: float | None, what: str) -> float:
    """A request's time stamp (``admit_ms``, ``first_token_ms``, ``finish_ms``) where the scheduler
    has set it already: the first token's after its prefill, the finish after its last step."""
    if ms is None:
        raise RuntimeError(f"request has no {what} time yet")
    return ms


@dataclass
class Step:
    """One planned forward step: who is in it, what it costs and what each request gets."""

    kind: str  # "prefill" or "decode"
    requests: list[GenRequest]
    grants: list[int]  # new tokens per request, in the same order
    duration_ms: float
    steps: int = 0  # speculative steps this decode ran with
    draft_tokens: int = 1  # tokens per request in its verify


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
    spec_requests: int = 0  # finished requests with verify steps (spec_verify_calls_total is inc()ed by them)
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
    spec_num_steps: int = 0  # sglang:spec_num_steps, sampled at the fold (0 before the first)
    spec_num_draft_tokens: int = 0
    avg_spec_accept_length: float | None = None  # since start or /flush_cache; None before the first fold
    counters: dict[bool, TokenCounters] = field(
        default_factory=lambda: {True: TokenCounters(), False: TokenCounters()}
    )  # keyed by "is streaming"
    _interval_start_ms: float | None = None
    _interval_tokens: int = 0
    _interval_verifies: int = 0
    _interval_correct: int = 0
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
    """FCFS continuous batching under a running-request cap, with a step cost and acceptance model.

    With several DP ranks (replicas or attention DP) requests are dispatched round robin, as
    SGLang's default ``load_balance_method`` does, and each rank admits up to its own cap. The
    ranks step together: attention-DP ranks cost as one batch of all their requests; replicas
    run in parallel, so a step costs what the largest replica batch costs.
    """

    def __init__(self, config: SchedulerConfig) -> None:
        self.config = config
        self.profile = config.profile
        settings = config.settings
        self.settings = settings
        self.spec = settings.spec
        self.max_running_requests = settings.max_running_requests
        self.rank_cap = settings.rank_cap
        self.num_ranks = settings.ranks
        self.replicas = settings.dp_size
        self.running_per_rank = [0] * self.num_ranks
        self._next_rank = 0
        self.waiting: deque[GenRequest] = deque()
        self.running: list[GenRequest] = []
        self.prefix_cache = PrefixCache()
        self.stats = SchedulerStats()
        # Separate streams, so that noise settings do not change the acceptance draws.
        self._accept_rng = np.random.default_rng([config.seed, 1])
        self._noise_rng = np.random.default_rng([config.seed, 2])
        self._run_rng = np.random.default_rng([config.seed, 3])
        self._sim_rng = np.random.default_rng([config.seed, 4])  # forced acceptance's per-batch lengths
        self.age = ServingAge(config.decay) if config.decay is not None and config.decay.active else None
        if config.acceptance not in ACCEPTANCE_MODES:
            raise ValueError(f"acceptance {config.acceptance!r}; use one of {', '.join(ACCEPTANCE_MODES)}")
        self._run_z = 0.0  # this run's acceptance offset, in units of run_acceptance_sd (start_run)
        drift_pct = self.profile.drift_pct if config.drift_pct is None else config.drift_pct
        jitter_pct = self.profile.jitter_pct if config.jitter_pct is None else config.jitter_pct
        self.drift = _mean_one_lognormal(self._noise_rng, drift_pct / 100.0)  # this launch's speed offset
        self._jitter_sd = jitter_pct / 100.0
        self._time_factor = config.step_scale * self.drift / config.speed_factor
        self.adaptive: AdaptivePolicy | None = None
        if self.spec is not None:
            # P(at least j drafts accepted), j = 1..positions: decreasing, one uniform draw per request.
            self._survival = np.cumprod(np.array(self.spec.accept_prob, dtype=float))
            self._survival_by_category = category_survival(self.spec, config.category_accept_factor)
            # the drafter's part of a greedy request's draws: same drafter, same acceptance
            self._drafter_key = acceptance_key(self.profile.name, self.spec.algorithm, self.spec.num_steps,
                                               self.spec.topk, self.spec.num_draft_tokens)
            if settings.adaptive is not None:
                self.adaptive = AdaptivePolicy(settings.adaptive, config.cuda_graph_bs)

    @property
    def current_steps(self) -> int | None:
        """Steps the drafter runs now (adaptive: the last activated slot's); None without speculation."""
        if self.spec is None:
            return None
        return self._live_shape(self.spec)[0]

    @property
    def current_draft_tokens(self) -> int | None:
        if self.spec is None:
            return None
        return self._live_shape(self.spec)[1]

    def _live_shape(self, spec: SpecConfig) -> tuple[int, int]:
        """(steps, draft tokens) the drafter runs now: the last activated adaptive slot's, else the static ones."""
        if self.adaptive is not None:
            return self.adaptive.active_steps, self.adaptive.active_steps + 1
        return spec.num_steps, spec.num_draft_tokens

    # -- queue -------------------------------------------------------------------------------
    def submit(self, req: GenRequest, now_ms: float) -> None:
        req.arrival_ms = now_ms
        if self.age is not None:
            self.age.on_submit(req.counted, now_ms)
        if self.num_ranks > 1:
            req.rank = self._next_rank
            self._next_rank = (self._next_rank + 1) % self.num_ranks
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
            self.running_per_rank[req.rank] -= 1

    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    def _can_admit(self) -> bool:
        if not self.waiting:
            return False
        if self.num_ranks == 1:
            return len(self.running) < self.rank_cap
        per_rank, cap = self.running_per_rank, self.rank_cap
        return any(per_rank[r.rank] < cap for r in self.waiting)

    # -- steps -------------------------------------------------------------------------------
    def next_step(self, now_ms: float) -> Step | None:
        """Plan the step starting at ``now_ms``: admit and prefill if possible, else decode."""
        if self.age is not None:
            self.age.advance(now_ms)
        if self._can_admit():
            return self._prefill_step(now_ms)
        if self.running:
            return self._decode_step(now_ms)
        return None

    def _prefill_step(self, now_ms: float) -> Step:
        admitted = []
        kept: deque[GenRequest] = deque()
        per_rank, cap = self.running_per_rank, self.rank_cap
        while self.waiting:
            req = self.waiting.popleft()
            if per_rank[req.rank] >= cap:
                kept.append(req)  # its rank is full; another rank may still admit
                if self.num_ranks == 1:
                    break
                continue
            req.admit_ms = max(now_ms, req.arrival_ms)  # a catching-up driver may plan in the past
            req.cached_tokens = self.prefix_cache.cached_tokens(req.prompt_key, req.prompt_tokens)
            self.running.append(req)
            per_rank[req.rank] += 1
            admitted.append(req)
        kept.extend(self.waiting)
        self.waiting = kept
        uncached = sum(r.prompt_tokens - r.cached_tokens for r in admitted)
        cost_ms = self.profile.forward_ms(len(admitted)) + self.profile.prefill_ms_per_ktok * uncached / 1000.0
        grants = [min(1, r.remaining) for r in admitted]
        return Step("prefill", admitted, grants, self._scaled(cost_ms))

    def _decode_step(self, now_ms: float) -> Step:
        batch = list(self.running)
        b = len(batch)
        context_tokens = sum(r.prompt_tokens + r.completion_tokens for r in batch)
        # Replicas step in parallel: the largest replica batch sets the pace.
        cost_b = max(self.running_per_rank) if self.replicas > 1 else b
        cost_ms = self.profile.attention_ms_per_ktok * context_tokens / 1000.0 / self.replicas
        steps, draft_tokens = 0, 1
        if self.spec is None:
            cost_ms += self.profile.forward_ms(cost_b)
            grants = [1] * b
        else:
            spec = self.spec
            if self.adaptive is not None:
                steps = self.adaptive.activate(cost_b)
                draft_tokens = steps + 1
            else:
                steps, draft_tokens = spec.num_steps, spec.num_draft_tokens
            passes = spec.draft_passes(steps)
            cost_ms += self.profile.forward_ms(cost_b * draft_tokens)
            if passes:
                cost_ms += passes * spec.draft_ms(cost_b)
            positions = spec.positions(steps)
            if positions > 0 and self.config.simulated is not None:
                grants = self._simulated_grants(batch, positions + 1)
            elif positions > 0:
                grants = self._verify_grants(batch, positions, cost_b)
            else:
                grants = [1] * b
        if self.stats._interval_start_ms is None:
            self.stats._interval_start_ms = now_ms
        return Step("decode", batch, grants, self._scaled(cost_ms), steps, draft_tokens)

    def _verify_grants(self, batch: list[GenRequest], positions: int, cost_b: int) -> list[int]:
        """Each request's accepted drafts plus the bonus: its draw against P(at least j accepted)
        (its category's, this run's offset, the decay's factor), never beyond what it still needs."""
        survival = self._survival[:positions]
        if self._survival_by_category:  # one row per request: its category's acceptance
            by_cat, default = self._survival_by_category, self._survival
            survival = np.stack([by_cat.get(r.category, default)[:positions] for r in batch])
        thresholds = self._run_scaled(survival, cost_b)
        powers = self.age.survival_powers(self._survival[:positions]) if self.age is not None else None
        if powers is not None:
            thresholds = thresholds * powers
        accepted = (self._draws(batch)[:, None] < thresholds).sum(axis=1).tolist()
        return [min(1 + a, r.remaining) for a, r in zip(accepted, batch)]

    def _simulated_grants(self, batch: list[GenRequest], max_len: int) -> list[int]:
        """SGLang's forced acceptance: one length per verify call (a DP rank's batch), the same for
        every request in it (simulated_acceptance.py), never beyond what a request still needs."""
        sim = self.config.simulated
        assert sim is not None
        length = sim.length * self.age.length_factor if self.age is not None else None
        per_rank: dict[int, int] = {}
        grants = []
        for req in batch:
            n = per_rank.get(req.rank)
            if n is None:
                n = per_rank[req.rank] = sim.draw(self._sim_rng, max_len, length)
            grants.append(min(n, req.remaining))
        return grants

    def start_run(self) -> None:
        """A new run begins (/flush_cache): its acceptance offset is drawn afresh."""
        self._run_z = float(self._run_rng.standard_normal())

    def _run_scaled(self, survival: np.ndarray, batch: int) -> np.ndarray:
        """The survival curve with this run's acceptance offset at this batch size: every
        position's conditional acceptance times exp(z x sd), capped at 1."""
        sd = run_acceptance_sd(self.config.acceptance, batch)
        if sd == 0.0 or self._run_z == 0.0:
            return survival
        factor = math.exp(self._run_z * sd)
        ratios = survival / np.concatenate([np.ones_like(survival[..., :1]), survival[..., :-1]], axis=-1)
        return np.cumprod(np.minimum(ratios * factor, 1.0), axis=-1)

    def _draws(self, batch: list[GenRequest]) -> np.ndarray:
        """One uniform per request: keyed by its content and output position where it is greedy
        and acceptance is per request, else fresh."""
        fresh = self._accept_rng.random(len(batch))
        if self.config.acceptance != PER_REQUEST:
            return fresh
        keyed = [(i, r.accept_key) for i, r in enumerate(batch) if r.accept_key is not None]
        if keyed:
            keys = np.array([k ^ self._drafter_key for _, k in keyed], dtype=np.uint64)
            positions = np.array([batch[i].completion_tokens for i, _ in keyed], dtype=np.uint64)
            fresh[[i for i, _ in keyed]] = keyed_uniforms(keys, positions)
        return fresh

    def _scaled(self, cost_ms: float) -> float:
        cost_ms *= self._time_factor
        if self.age is not None:
            cost_ms *= self.age.time_factor
        if self._jitter_sd > 0:
            cost_ms *= _mean_one_lognormal(self._noise_rng, self._jitter_sd)
        return cost_ms

    def complete(self, step: Step, now_ms: float) -> list[GenRequest]:
        """Apply a step that ended at ``now_ms``; returns the requests it finished."""
        decode = step.kind == "decode"
        correct_all: list[int] = []  # accepted drafts of each request a verify step served
        if self.age is not None:
            self.age.tokens += sum(g for r, g in zip(step.requests, step.grants) if r.counted and not r.aborted)
        if not decode:
            finished = self._grant_prefill(step, now_ms)
        elif self.spec is None:
            finished = self._grant_decode(step, now_ms)
        else:
            finished = self._grant_verify(step, now_ms, correct_all)
        if finished:
            self.running = [r for r in self.running if not r.finished]
            for req in finished:
                if not req.aborted:
                    self.running_per_rank[req.rank] -= 1
        if decode:
            if self.adaptive is not None:
                cost_b = max(self.running_per_rank) if self.replicas > 1 else len(step.requests)
                self.adaptive.on_verify(correct_all, cost_b)
            self._log_decode_step(step, now_ms, sum(correct_all))
        else:
            self.stats.prefill_steps += 1
        return finished

    # The three loops below are the per-step hot path: each request's tokens, then, where it has all
    # it asked for, its finish (counted in request order, as the histograms' sums depend on it).
    def _grant_prefill(self, step: Step, now_ms: float) -> list[GenRequest]:
        """A prefill gives each admitted request its first token."""
        finished = []
        for req, grant in zip(step.requests, step.grants):
            if req.aborted:
                continue
            req.completion_tokens += grant
            if req.first_token_ms is None:
                req.first_token_ms = now_ms
            if req.remaining <= 0:
                req.finish_ms = now_ms
                finished.append(req)
                self._count_finished(req)
        return finished

    def _grant_decode(self, step: Step, now_ms: float) -> list[GenRequest]:
        """A decode step without speculation: one token per request."""
        finished = []
        for req, grant in zip(step.requests, step.grants):
            if req.aborted:
                continue
            req.completion_tokens += grant
            req.verify_ct += 1
            if req.remaining <= 0:
                req.finish_ms = now_ms
                finished.append(req)
                self._count_finished(req)
        return finished

    def _grant_verify(self, step: Step, now_ms: float, correct_all: list[int]) -> list[GenRequest]:
        """A verify step: each request's accepted drafts plus the bonus token; its accepted-draft
        count goes to its histogram and to ``correct_all`` (in request order)."""
        finished = []
        for req, grant in zip(step.requests, step.grants):
            if req.aborted:
                continue
            req.completion_tokens += grant
            req.verify_ct += 1
            correct = grant - 1
            req.accepted_drafts += correct
            hist = req.correct_hist
            while len(hist) <= correct:
                hist.append(0)
            hist[correct] += 1
            correct_all.append(correct)
            if req.remaining <= 0:
                req.finish_ms = now_ms
                finished.append(req)
                self._count_finished(req)
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
        if self.spec is not None and req.verify_ct > 0:
            c.verify_calls += req.verify_ct
            c.spec_requests += 1
        c.ttft.observe((known_ms(req.first_token_ms, "first token") - req.arrival_ms) / 1000.0)
        c.e2e.observe((known_ms(req.finish_ms, "finish") - req.arrival_ms) / 1000.0)

    def _log_decode_step(self, step: Step, now_ms: float, correct: int) -> None:
        """MetricsReporter.log_decode_stats: window counters, folded every decode_log_interval steps."""
        s = self.stats
        s.decode_steps += 1
        tokens = sum(step.grants)
        s._interval_tokens += tokens
        s._interval_verifies += len(step.grants)
        s._interval_correct += correct
        if s.decode_steps % self.config.decode_log_interval:
            return
        elapsed_ms = now_ms - (s._interval_start_ms if s._interval_start_ms is not None else now_ms)
        s.gen_throughput = s._interval_tokens / (elapsed_ms / 1000.0) if elapsed_ms > 0 else 0.0
        if self.spec is not None and s._interval_verifies:
            steps, draft_tokens = self._live_shape(self.spec)
            s.spec_accept_length = s._interval_tokens / s._interval_verifies
            # correct drafts / (verify steps x (current num_draft_tokens - 1))
            proposed = s._interval_verifies * (draft_tokens - 1)
            s.spec_accept_rate = s._interval_correct / proposed if proposed > 0 else 0.0
            s._reset_tokens += s._interval_tokens
            s._reset_verifies += s._interval_verifies
            s.avg_spec_accept_length = s._reset_tokens / s._reset_verifies
            s.spec_num_steps = steps
            s.spec_num_draft_tokens = draft_tokens
        s._interval_start_ms = now_ms
        s._interval_tokens = s._interval_verifies = s._interval_correct = 0

    def decode_log_line(self) -> str:
        """The line SGLang logs every ``decode_log_interval`` decode steps."""
        s = self.stats
        line = f"Decode batch, #running-req: {len(self.running)}, "
        if self.spec is not None:
            line += f"accept len: {s.spec_accept_length:.2f}, accept rate: {s.spec_accept_rate:.2f}, "
        return line + f"gen throughput (token/s): {s.gen_throughput:.2f}, #queue-req: {len(self.waiting)}"

    def reset_accept_stats(self) -> None:
        """What a successful /flush_cache does (``MetricsReporter.reset_metrics`` and the radix cache)."""
        s = self.stats
        s._reset_tokens = s._reset_verifies = 0
        s._interval_tokens = s._interval_verifies = s._interval_correct = 0
        s.avg_spec_accept_length = None
        s.decode_steps = 0
        self.prefix_cache.clear()


def category_survival(spec: SpecConfig, factors: dict[str, float]) -> dict[str, np.ndarray]:
    """Category -> P(at least j drafts accepted), j = 1..positions: the profile's per-category
    acceptance (else its default), each position's conditional probability times the category's
    factor (capped at 1). {} when neither the profile nor the flags name a category (the common
    case keeps the one-row fast path)."""
    own = dict(spec.accept_prob_by_category)
    out = {}
    for category in sorted(set(own) | set(factors)):
        probs = np.array(own.get(category, spec.accept_prob), dtype=float) * factors.get(category, 1.0)
        out[category] = np.cumprod(np.minimum(probs, 1.0))
    return out


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


@dataclass(frozen=True)
class ClosedLoop:
    """A closed-loop run: ``concurrency`` clients, each sending its next request the moment the
    previous one finishes, ``num_requests`` in all of ``input_len`` prompt and ``output_len``
    output tokens. ``same_prompt`` makes every prompt identical (prefix-cache hits, like the
    seed-A workload)."""

    concurrency: int
    num_requests: int
    input_len: int
    output_len: int
    same_prompt: bool = True


@dataclass(frozen=True)
class SimLaunch:
    """The simulated server's launch beside its profile and speculation: its flags (the running
    requests cap, DP, CUDA-graph sizes), a forced mean accept length, and its speed and noise
    (``SchedulerConfig``'s fields; noise off by default, None: the profile's jitter and drift)."""

    max_running_requests: int | None = None
    accept_length: float | None = None
    seed: int = 0
    step_scale: float = 1.0
    speed_factor: float = 1.0
    jitter_pct: float | None = 0.0
    drift_pct: float | None = 0.0
    dp_size: int = 1
    attn_dp_size: int = 1
    cuda_graph_bs: list[int] | None = None


def simulate_closed_loop(profile: EmulatorProfile, spec: SpecRequest | None, loop: ClosedLoop,
                         launch: SimLaunch = SimLaunch()) -> SimulationResult:
    """Run ``loop`` through the scheduler in virtual time. Settings are resolved exactly as the
    server resolves its flags (48-request cap under speculation, topk rewrite, defaults by
    architecture, adaptive steps)."""
    settings = resolve_settings(profile, spec, launch.max_running_requests, launch.accept_length,
                                dp_size=launch.dp_size, attn_dp_size=launch.attn_dp_size)
    config = SchedulerConfig(profile, settings, launch.seed, launch.step_scale, launch.speed_factor, launch.jitter_pct,
                             launch.drift_pct, cuda_graph_bs=launch.cuda_graph_bs)
    return run_closed_loop(BatchScheduler(config), loop.concurrency, loop.num_requests, loop.input_len,
                           loop.output_len, loop.same_prompt)


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
    run = _drive_closed_loop(scheduler, concurrency, num_requests, input_len, output_len, same_prompt)
    return _closed_loop_result(scheduler, concurrency, num_requests, run)


class _ClosedLoopRun(NamedTuple):
    done: list[GenRequest]  # in the order they finished
    end_ms: float  # virtual time when the last one finished
    decode_steps: int
    prefill_steps: int


def _drive_closed_loop(
    scheduler: BatchScheduler, concurrency: int, num_requests: int, input_len: int, output_len: int,
    same_prompt: bool,
) -> _ClosedLoopRun:
    """Step the scheduler until ``num_requests`` requests have finished; each client sends its next
    request the moment its previous one finishes."""
    now_ms = 0.0
    issued = 0
    done: list[GenRequest] = []

    def issue() -> None:
        nonlocal issued
        key = "prompt" if same_prompt else issued
        # the run's i-th request is the same greedy request every run (acceptance repeats)
        scheduler.submit(GenRequest(input_len, output_len, prompt_key=key, accept_key=acceptance_key("request", issued)),
                         now_ms)
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
    return _ClosedLoopRun(done, now_ms, decode_steps, prefill_steps)


def _closed_loop_result(
    scheduler: BatchScheduler, concurrency: int, num_requests: int, run: _ClosedLoopRun,
) -> SimulationResult:
    """What a client measures over a closed-loop run."""
    done, now_ms = run.done, run.end_ms
    tokens = sum(r.completion_tokens for r in done)
    verifies = sum(r.verify_ct for r in done)
    first_ms = [known_ms(r.first_token_ms, "first token") for r in done]
    finish_ms = [known_ms(r.finish_ms, "finish") for r in done]
    ttft = [first - r.arrival_ms for first, r in zip(first_ms, done)]
    itl = [
        (finish - first) / (r.completion_tokens - 1)
        for first, finish, r in zip(first_ms, finish_ms, done)
        if r.completion_tokens > 1
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
        mean_e2e_ms=float(np.mean([finish - r.arrival_ms for finish, r in zip(finish_ms, done)])),
        decode_steps=run.decode_steps,
        prefill_steps=run.prefill_steps,
    )
