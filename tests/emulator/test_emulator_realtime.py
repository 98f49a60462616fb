"""The real-time driver: steps on the wall clock, one step's tokens per handler wake-up."""

from __future__ import annotations

import asyncio

from specguard.emulator.model import BatchScheduler, GenRequest, SchedulerConfig
from specguard.emulator.profile import load_profile
from specguard.emulator.realtime import RealtimeEngine
from specguard.emulator.spec import resolve_settings


def test_late_steps_still_reach_the_handler_one_at_a_time():
    """A server that is behind runs steps back to back, but must yield between them: otherwise two
    steps' tokens go out in one write and the client measures a 0 ms and a double gap."""
    profile = load_profile("fast")
    # Every step lasts 1 ns, so every deadline has passed by the time it is checked.
    sched = BatchScheduler(SchedulerConfig(profile, resolve_settings(profile, None, 8), 0, step_scale=1e-6,
                                           jitter_pct=0.0, drift_pct=0.0))

    async def main() -> list[int]:
        engine = RealtimeEngine(sched)
        engine.start()
        progress = engine.submit(GenRequest(prompt_tokens=16, max_new_tokens=20))
        batches: list[int] = []

        async def consume() -> None:
            while not progress.req.finished:
                await progress.event.wait()  # as the HTTP handlers wait (no task in between)
                batches.append(len(progress.take()))

        try:
            await asyncio.wait_for(consume(), timeout=5)
        finally:
            await engine.stop()
        return batches

    batches = asyncio.run(main())
    assert sum(batches) == 20  # prefill (first token) + 19 decode steps
    assert max(batches) == 1, f"marks per wake-up: {batches}"


def test_step_start_follows_the_previous_end_unless_idle_or_far_behind(caplog):
    from specguard.emulator.realtime import MAX_LAG_MS

    profile = load_profile("fast")
    sched = BatchScheduler(SchedulerConfig(profile, resolve_settings(profile, None, 8), 0))

    async def main() -> tuple[float, float, float, float]:
        engine = RealtimeEngine(sched)
        now = engine.now_ms()
        return (engine._step_start_ms(None), engine._step_start_ms(now - 5.0),
                engine._step_start_ms(now - MAX_LAG_MS - 50.0), now)

    with caplog.at_level("WARNING", logger="specguard.emulator"):
        idle, behind, lost, now = asyncio.run(main())
    assert idle >= now and behind == now - 5.0  # a little behind: catch up back to back
    assert lost >= now and "ms behind real time (CPU overloaded); resynchronising" in caplog.text


def test_deliver_marks_live_requests_and_wakes_their_handlers():
    from specguard.emulator.model import Step
    from specguard.emulator.realtime import RequestProgress, _deliver

    async def main() -> None:
        live, gone, untracked = GenRequest(10, 5), GenRequest(10, 5), GenRequest(10, 5)
        live.tag, gone.tag = RequestProgress(live), RequestProgress(gone)
        live.completion_tokens, live.verify_ct, live.accepted_drafts = 4, 2, 1
        gone.aborted = True
        _deliver(Step("decode", [live, gone, untracked], [2, 2, 2], 1.0))
        assert live.tag.marks == [(4, 2, 1)] and live.tag.event.is_set()
        assert gone.tag.marks == [] and not gone.tag.event.is_set()

    asyncio.run(main())
