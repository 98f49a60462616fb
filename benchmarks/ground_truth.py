"""What a perfect client would measure against the emulator: its own scheduler, in virtual time.

`simulate_closed_loop` (specguard.emulator.model) hands a finished request's successor to the
scheduler *before* the next step is planned. The real-time server cannot see it that early: it
plans the next step the moment the previous one ends, before any HTTP is written, so a successor
(sent after the client has read the last event) always arrives during that next step and is
admitted one step later. Real SGLang does the same. This driver reproduces exactly that (a
successor arrives just after the next step was planned, or at once if the server is idle), so
the only differences left between it and a measured run are what the client and the HTTP path
add. It records every step's end per request, for TTFT and per-token ITL.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from specguard.emulator.model import BatchScheduler, GenRequest, SchedulerConfig


@dataclass
class Truth:
    output_throughput: float  # tokens / (last finish - first arrival), tok/s
    ttft_ms: np.ndarray  # per request
    itl_ms: np.ndarray  # per token: each step's gap split over the tokens it gave


def closed_loop_truth(config: SchedulerConfig, concurrency: int, num_requests: int, input_len: int,
                      output_len: int, num_prompts: int) -> Truth:
    """Request i uses prompt i % num_prompts (its prefix-cache key), as the workload does."""
    sched = BatchScheduler(config)
    now = 0.0
    issued = 0
    marks: dict[int, list[tuple[float, int]]] = {}
    arrival: dict[int, float] = {}
    waiting_successors = 0

    def issue() -> None:
        nonlocal issued
        req = GenRequest(input_len, output_len, prompt_key=issued % num_prompts)
        req.tag = issued
        arrival[issued] = now
        marks[issued] = []
        sched.submit(req, now)
        issued += 1

    for _ in range(min(concurrency, num_requests)):
        issue()
    while sched.has_work() or waiting_successors:
        if not sched.has_work():  # idle: the successors start at once
            for _ in range(waiting_successors):
                issue()
            waiting_successors = 0
        step = sched.next_step(now)
        for _ in range(waiting_successors):  # arrived during this step: admitted after it
            issue()
        waiting_successors = 0
        now += step.duration_ms
        finished = sched.complete(step, now)
        for req in step.requests:
            marks[req.tag].append((now, req.completion_tokens))
        waiting_successors = min(len(finished), num_requests - issued)

    ttft, itl, tokens = [], [], 0
    for i, ms in marks.items():
        ttft.append(ms[0][0] - arrival[i])
        times = np.array([t for t, _ in ms])
        counts = np.diff([c for _, c in ms])
        itl.append(np.repeat(np.diff(times) / counts, counts))
        tokens += ms[-1][1]
    return Truth(output_throughput=tokens / (now / 1000.0), ttft_ms=np.array(ttft), itl_ms=np.concatenate(itl))
