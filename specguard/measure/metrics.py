"""Per-run metrics, with SGLang bench_serving's key names where they overlap.

Token counts come from the server. ITL is per token: an event that carries k tokens after a gap
g contributes k gaps of g/k, so speculation's multi-token events are not counted as one slow
token. Accept length is a ratio of sums over the run's own requests.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from specguard.measure.accept_sources import REQUESTS, AcceptCheck, check_accept_sources, disagreement_note, stream_count
from specguard.measure.client import RequestRecord
from specguard.measure.load import WORKERS_ENV, RunResult
from specguard.notes import Note, NoteKind
from specguard.workload import Workload

LATENCY_STATS = ("mean", "median", "p90", "p99")
MAX_ERRORS_KEPT = 5
CLIENT_BUSY_FRACTION = 0.7  # of a core per client process, over a run: beyond it the client may lag


@dataclass
class RunMetrics:
    """One run's summary; `latency_ms` holds e.g. `median_ttft_ms`, `p99_itl_ms`."""

    concurrency: int
    num_requests: int
    completed: int
    failed: int
    duration_s: float
    total_input_tokens: int
    total_output_tokens: int
    output_throughput: float  # completion tokens per second of wall time
    request_throughput: float
    latency_ms: dict[str, float] = field(default_factory=dict)
    accept_length: float | None = None  # sum completion tokens / sum spec_verify_ct, else the engine's source
    total_verify_ct: int = 0
    # Acceptance by draft position, from the requests' spec_correct_drafts_histogram (SGLang's final
    # event or sglext chunk): correct_drafts_histogram[k] = verify steps that accepted exactly k
    # drafts, summed over the run; acceptance_by_position[k-1] = share of verify steps that
    # accepted at least k drafts (P(draft k accepted)), the input for choosing --speculative-num-steps.
    correct_drafts_histogram: list[int] = field(default_factory=list)
    acceptance_by_position: list[float] = field(default_factory=list)
    spec_accept_rate: float | None = None  # sum correct drafts / sum proposed drafts over the run's requests
    spec_num_steps: float | None = None  # adaptive speculation: sglang:spec_num_steps after the run (steps in use)
    # The engine's time per decode step of one request (a verify step with speculation): the run's
    # decode time over its decode steps, step_time_ms(); tok/s per request ~ accept length / this.
    step_time_ms: float | None = None
    server_accept_length: dict[str, float] = field(default_factory=dict)  # by source name
    accept_check: AcceptCheck | None = None  # every source's accept length against the run's (accept_sources.py)
    tokens_estimated: bool = False
    client_cpu_fraction: float = 0.0  # client CPU seconds / (duration x client processes)
    errors: list[str] = field(default_factory=list)  # the first few, verbatim
    notes: list[Note] = field(default_factory=list)  # what the run says beside its figures (notes.NoteKind)
    load_model: str = ""  # "closed-loop c=16" or "poisson 8 req/s, cap 64" (measure/load.py load_model)
    # Goodput under SLOs (bench_serving's keys, sglang/benchmark/goodput.py GoodputMetrics): requests
    # that succeeded and met every SLO, per second of the run; None when no SLO was given.
    goodput_slos_ms: dict[str, float] = field(default_factory=dict)
    request_goodput: float | None = None
    slo_attainment: float | None = None  # good requests / requests sent
    # Per prompt category (when the workload's prompts carry one): see category_summaries().
    categories: dict[str, CategorySummary] = field(default_factory=dict)


@dataclass
class CategorySummary:
    """One prompt category's share of a run: its requests, tokens, share of the run's tok/s and
    its own accept length (ratio of sums over its requests, as the run's)."""

    requests: int
    completed: int
    output_tokens: int
    output_throughput: float  # this category's completion tokens / the run's duration
    throughput_share: float  # of the run's completion tokens
    accept_length: float | None = None
    total_verify_ct: int = 0
    median_ttft_ms: float = math.nan
    median_tpot_ms: float = math.nan


def request_meets_slo(r: RequestRecord, slo_ms: dict[str, float]) -> bool:
    """Succeeded and within every SLO. As bench_serving's calculate_goodput: TPOT is (e2e - TTFT) /
    (output tokens - 1), 0 for a single-token response; e2e counts from the send."""
    if not r.ok or r.first_token_s is None:
        return False
    ttft_ms = (r.first_token_s - r.send_s) * 1e3
    e2e_ms = (r.end_s - r.send_s) * 1e3
    n = r.completion_tokens or 0
    tpot_ms = (e2e_ms - ttft_ms) / (n - 1) if n > 1 else 0.0
    observed = {"ttft_ms": ttft_ms, "tpot_ms": tpot_ms, "e2e_ms": e2e_ms}
    return all(observed[k] <= v for k, v in slo_ms.items())


def goodput(run: RunResult, slo_ms: dict[str, float], duration_s: float) -> tuple[float, float]:
    """(request_goodput in good requests/s, slo_attainment = good / sent)."""
    good = sum(1 for r in run.requests if request_meets_slo(r, slo_ms))
    return good / duration_s, good / max(len(run.requests), 1)


def workload_categories(workload: Workload, num_requests: int) -> list[str]:
    """Request index -> its prompt's category for a run of `num_requests` (all "" when none)."""
    return [workload.prompt(i).category for i in range(num_requests)]


def category_summaries(run: RunResult, categories: Sequence[str], duration_s: float) -> dict[str, CategorySummary]:
    """Split a run's requests by category (`categories[k]` is request k's, k = record.index) and
    summarise each; {} when no request has a category."""
    groups = _requests_by_category(run.requests, categories)
    run_output_tokens = completed_output_tokens(run.requests) or 1  # a run without tokens: every share is 0
    return {c: _category_summary(groups[c], run_output_tokens, duration_s) for c in sorted(groups)}


def _requests_by_category(records: Iterable[RequestRecord], categories: Sequence[str]) -> dict[str, list[RequestRecord]]:
    """Records grouped by their index's category; an index outside `categories` or an empty
    category leaves the record out."""
    groups: dict[str, list[RequestRecord]] = {}
    for r in records:
        c = categories[r.index] if 0 <= r.index < len(categories) else ""
        if c:
            groups.setdefault(c, []).append(r)
    return groups


def _category_summary(records: list[RequestRecord], run_output_tokens: int, duration_s: float) -> CategorySummary:
    ok = [r for r in records if r.ok]
    tokens = completed_output_tokens(ok)
    accept_length, verify_ct = requests_accept_length(ok)
    return CategorySummary(
        requests=len(records), completed=len(ok), output_tokens=tokens, output_throughput=tokens / duration_s,
        throughput_share=tokens / run_output_tokens, accept_length=accept_length, total_verify_ct=verify_ct,
        median_ttft_ms=_median_or_nan(ttft_ms(ok)), median_tpot_ms=_median_or_nan(tpot_ms(ok)))


def completed_output_tokens(records: Iterable[RequestRecord]) -> int:
    """The server's completion tokens summed over the records that succeeded."""
    return sum(r.completion_tokens or 0 for r in records if r.ok)


def requests_accept_length(records: Iterable[RequestRecord]) -> tuple[float | None, int]:
    """(accept length, verify steps) over the requests that report verify steps: a ratio of sums,
    completion tokens / spec_verify_ct; (None, 0) when none does."""
    with_verify = [r for r in records if r.spec_verify_ct]
    verify_ct = sum(r.spec_verify_ct or 0 for r in with_verify)
    if not verify_ct:
        return None, verify_ct
    return sum(r.completion_tokens or 0 for r in with_verify) / verify_ct, verify_ct


def ttft_ms(records: Iterable[RequestRecord]) -> list[float]:
    """Send -> first token-bearing event, of each request that had one."""
    out: list[float] = []
    for r in records:
        first_s = r.first_token_s
        if first_s is not None:
            out.append((first_s - r.send_s) * 1e3)
    return out


def tpot_ms(records: Iterable[RequestRecord]) -> list[float]:
    """(end - first token) / (completion tokens - 1), of each request with a first token and at
    least two tokens (a single-token response has no time per output token)."""
    out: list[float] = []
    for r in records:
        first_s, tokens = r.first_token_s, r.completion_tokens or 0
        if first_s is not None and tokens > 1:
            out.append((r.end_s - first_s) * 1e3 / (tokens - 1))
    return out


def _median_or_nan(values: list[float]) -> float:
    return float(np.median(values)) if values else math.nan


def _percentiles(values: np.ndarray, name: str, out: dict[str, float]) -> None:
    if values.size == 0:
        for stat in LATENCY_STATS:
            out[f"{stat}_{name}"] = math.nan
        return
    p50, p90, p99 = np.percentile(values, [50, 90, 99])
    out[f"mean_{name}"] = float(values.mean())
    out[f"median_{name}"] = float(p50)
    out[f"p90_{name}"] = float(p90)
    out[f"p99_{name}"] = float(p99)


def per_token_itl_s(record: RequestRecord) -> np.ndarray:
    """Gaps between token-bearing events after the first, split evenly over each event's tokens.

    When the stream did not say how many tokens each event carried (`tokens_estimated`), the
    server's total is spread evenly over the events.
    """
    times = np.asarray(record.event_s, dtype=np.float64)
    if times.size < 2:
        return np.empty(0)
    if record.tokens_estimated and record.completion_tokens:
        tokens = np.full(times.size - 1, record.completion_tokens / times.size)
    else:
        tokens = np.asarray(record.event_tokens, dtype=np.float64)[1:]
    gaps = np.diff(times)
    counts = np.maximum(np.rint(tokens).astype(np.int64), 1)
    # an event that says it carries no token (never sent by SGLang) counts as one: no infinite gap
    return np.repeat(gaps / np.where(tokens > 0, tokens, 1.0), counts)


def summarize_run(run: RunResult, server_accept_length: dict[str, float] | None = None,
                  accept_length_source: str | None = None, *, slo_ms: dict[str, float] | None = None,
                  categories: Sequence[str] | None = None, server_accepted_drafts: float | None = None) -> RunMetrics:
    """Reduce one run's request records to its metrics; failures are counted, never dropped.
    With `slo_ms` the run's goodput is computed; with `categories` (request index -> category,
    e.g. workload_categories()) the per-category summaries.

    The accept length comes from the requests' own verify counts; only when they carry none does
    the engine's run-level `accept_length_source` (a key of `server_accept_length`) stand in.
    `server_accepted_drafts`: the drafts the server accepted over the run by its own counters
    (vLLM), for the step time of requests that report no verify counts.
    """
    ok = [r for r in run.requests if r.ok]
    bad = [r for r in run.requests if not r.ok]
    duration_s = run_duration_s(run)
    out_tokens = completed_output_tokens(ok)
    accept_length, verify_ct = run_accept_length(ok, server_accept_length, accept_length_source)
    histogram = drafts_histogram(ok)
    metrics = RunMetrics(
        concurrency=run.concurrency,
        num_requests=len(run.requests),
        completed=len(ok),
        failed=len(bad),
        duration_s=duration_s,
        total_input_tokens=sum(r.prompt_tokens or 0 for r in ok),
        total_output_tokens=out_tokens,
        output_throughput=out_tokens / duration_s,
        request_throughput=len(ok) / duration_s,
        latency_ms=latency_percentiles_ms(ok),
        accept_length=accept_length,
        total_verify_ct=verify_ct,
        correct_drafts_histogram=histogram,
        acceptance_by_position=acceptance_by_position(histogram),
        spec_accept_rate=spec_accept_rate(ok),
        step_time_ms=step_time_ms(ok, server_accepted_drafts),
        server_accept_length=dict(server_accept_length or {}),
        tokens_estimated=any(r.tokens_estimated for r in ok),
        client_cpu_fraction=run.client_cpu_s / (duration_s * run.processes),
        errors=[f"request {r.index}: {r.error}" for r in bad[:MAX_ERRORS_KEPT]],
        load_model=run.load_model or f"closed-loop c={run.concurrency}",
    )
    if slo_ms:
        metrics.goodput_slos_ms = dict(slo_ms)
        metrics.request_goodput, metrics.slo_attainment = goodput(run, slo_ms, duration_s)
    if categories:
        metrics.categories = category_summaries(run, categories, duration_s)
    _note_unmeasured_step_time(metrics, ok)
    _check_accept_sources(metrics, ok, accept_length_source)
    metrics.notes.extend(client_busy_notes(metrics.client_cpu_fraction))
    return metrics


def _note_unmeasured_step_time(metrics: RunMetrics, ok: list[RequestRecord]) -> None:
    """Requests decoded but no decode time was seen (step_time_ms): said, so a missing step time is never silent."""
    if metrics.step_time_ms is None and any((r.completion_tokens or 0) >= 2 for r in ok):
        metrics.notes.append(Note.of(NoteKind.STEP_TIME_UNMEASURED))


def _check_accept_sources(metrics: RunMetrics, ok: list[RequestRecord], accept_length_source: str | None) -> None:
    """The run's accept length against its other sources (accept_sources.py), and a warning when one disagrees."""
    verify_ct = metrics.total_verify_ct
    metrics.accept_check = check_accept_sources(metrics.accept_length, verify_ct,
                                                sum(1 for r in ok if r.spec_verify_ct), metrics.server_accept_length,
                                                stream_count(ok), own=REQUESTS if verify_ct else str(accept_length_source))
    note = disagreement_note(metrics.accept_check) if metrics.accept_check else None
    if note:
        metrics.notes.append(note)


def run_accept_length(records: Iterable[RequestRecord], server_accept_length: dict[str, float] | None,
                      accept_length_source: str | None) -> tuple[float | None, int]:
    """(accept length, verify steps): the requests' own (requests_accept_length); the engine's
    `accept_length_source` from `server_accept_length` only when no request reports verify steps."""
    accept_length, verify_ct = requests_accept_length(records)
    if accept_length is None and accept_length_source:
        accept_length = (server_accept_length or {}).get(accept_length_source)
    return accept_length, verify_ct


def step_time_ms(records: Iterable[RequestRecord], server_accepted_drafts: float | None = None) -> float | None:
    """The engine's time per decode step of one request, in ms: the summed decode time (first
    token to last byte) over the summed decode steps of the requests with two or more tokens.
    A request's decode steps are its spec_verify_ct (SGLang, speculative), else one per token after
    the first (completion_tokens - 1), less `server_accepted_drafts` over those requests (vLLM's
    counters: a speculative step yields its accepted drafts besides its own token). A ratio of
    sums, like accept length; None when no request decoded, or when every request's tokens came in
    one read (no decode time was seen: dividing 0 s would record a step time of 0)."""
    decode_s = 0.0
    verify_steps = token_steps = 0
    for r in records:
        first_s, tokens = r.first_token_s, r.completion_tokens or 0
        if first_s is None or tokens < 2 or r.end_s <= first_s:
            continue
        decode_s += r.end_s - first_s
        if r.spec_verify_ct:
            verify_steps += r.spec_verify_ct
        else:
            token_steps += tokens - 1
    if token_steps and server_accepted_drafts:
        token_steps = max(1, round(token_steps - server_accepted_drafts))
    steps = verify_steps + token_steps
    return decode_s * 1e3 / steps if steps else None


def run_duration_s(run: RunResult) -> float:
    """First send to last byte over the run's requests (the run's own window when it has none),
    never 0 (every rate divides by it)."""
    start_s = min((r.send_s for r in run.requests), default=run.start_s)
    end_s = max((r.end_s for r in run.requests), default=run.end_s)
    return max(end_s - start_s, 1e-9)


def latency_percentiles_ms(records: Sequence[RequestRecord]) -> dict[str, float]:
    """mean, median, p90 and p99 (LATENCY_STATS) of TTFT, TPOT, per-token ITL and e2e latency
    over `records` (the completed requests), keyed e.g. `p99_itl_ms`; NaN where there is no value."""
    itl = np.concatenate([per_token_itl_s(r) for r in records]) if records else np.empty(0)
    itl *= 1e3  # in place: at 2M tokens a run's ITL array is 16 MB
    e2e = [(r.end_s - r.send_s) * 1e3 for r in records]
    latency: dict[str, float] = {}
    for name, values in (("ttft_ms", np.array(ttft_ms(records))), ("tpot_ms", np.array(tpot_ms(records))),
                         ("itl_ms", itl), ("e2e_latency_ms", np.array(e2e))):
        _percentiles(values, name, latency)
    return latency


def spec_accept_rate(records: Sequence[RequestRecord]) -> float | None:
    """Accepted drafts / proposed drafts summed over the requests (a request's proposed count only
    where it reports its correct count, and vice versa); None when none was proposed."""
    proposed = sum(r.spec_num_proposed_drafts or 0 for r in records if r.spec_num_correct_drafts is not None)
    correct = sum(r.spec_num_correct_drafts or 0 for r in records if r.spec_num_proposed_drafts)
    return correct / proposed if proposed else None


def client_busy_notes(client_cpu_fraction: float) -> list[Note]:
    """One note when the client processes were busier than CLIENT_BUSY_FRACTION of a core each."""
    if client_cpu_fraction > CLIENT_BUSY_FRACTION:
        return [Note.of(NoteKind.CLIENT_BUSY, fraction=client_cpu_fraction, workers_env=WORKERS_ENV)]
    return []


def drafts_histogram(records: Iterable[RequestRecord]) -> list[int]:
    """The requests' spec_correct_drafts_histogram added up position by position (each request's
    list is as long as the most drafts it had accepted in one step, plus one)."""
    total: list[int] = []
    for r in records:
        hist = r.spec_correct_drafts_histogram
        if not hist:
            continue
        if len(hist) > len(total):
            total.extend([0] * (len(hist) - len(total)))
        for k, n in enumerate(hist):
            total[k] += n
    return total


def acceptance_by_position(histogram: Sequence[int]) -> list[float]:
    """P(at least k drafts accepted in a verify step) for k = 1 .. len - 1; the expected accept
    length with s steps (topk 1) is 1 + the sum of the first s entries."""
    steps = sum(histogram)
    if steps <= 0:
        return []
    out, at_least = [], steps
    for k in range(1, len(histogram)):
        at_least -= histogram[k - 1]
        out.append(at_least / steps)
    return out


def outliers(values: Sequence[float], k_mad: float = 5.0) -> list[int]:
    """Indices of runs more than k MADs from the median: reported, never dropped."""
    arr = np.asarray(values, dtype=float)
    if arr.size < 5:  # the MAD of fewer runs is too unstable to call anything an outlier
        return []
    med = float(np.median(arr))
    mad = float(np.median(np.abs(arr - med))) * 1.4826
    if mad == 0:
        return []
    return [i for i, v in enumerate(arr) if abs(v - med) > k_mad * mad]


class RunFigures(Protocol):
    """What the gates read of one run (a measured RunMetrics, a stored RunSample)."""

    @property
    def output_throughput(self) -> float: ...

    @property
    def accept_length(self) -> float | None: ...

    @property
    def step_time_ms(self) -> float | None: ...

    @property
    def correct_drafts_histogram(self) -> list[int]: ...


class RunSeries:
    """The per-run figures the gates compare, for anything holding ``runs`` with
    ``output_throughput`` and ``accept_length`` (a measured cell, a stored baseline session)."""

    runs: Sequence[RunFigures]

    @property
    def throughputs(self) -> list[float]:
        return [r.output_throughput for r in self.runs]

    @property
    def accept_lengths(self) -> list[float]:
        return [r.accept_length for r in self.runs if r.accept_length is not None]

    @property
    def steps_per_s(self) -> list[float]:
        """Per run, the server's decode steps per second: tok/s ÷ accept length (a verify step
        makes accept-length tokens), tok/s for a run without one (a plain decode step makes one).
        A stall slows it as it slows tok/s; a run's acceptance does not move it
        (decide/consistency.py judges a speculative cell's stalls on it)."""
        return [r.output_throughput / r.accept_length if r.accept_length else r.output_throughput for r in self.runs]

    def position_shares(self, k: int) -> list[float]:
        """Per run, the share of its verify steps that accepted at least k drafts (acceptance at
        draft position k, from the correct-drafts histogram); runs without the histogram, or whose
        steps never reached position k, are left out (a share of 0 has no log)."""
        out = []
        for r in self.runs:
            hist = r.correct_drafts_histogram
            steps = sum(hist)
            reached = sum(hist[k:]) if k < len(hist) else 0
            if steps > 0 and reached > 0:
                out.append(reached / steps)
        return out

    @property
    def step_rates(self) -> list[float]:
        """Decode steps per second of one request (1000 / step_time_ms): the step-time gate's
        series, oriented like tok/s (lower is worse)."""
        return [1e3 / r.step_time_ms for r in self.runs if r.step_time_ms]

