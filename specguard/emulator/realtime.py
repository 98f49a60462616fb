"""The real-time driver: runs the pure ``BatchScheduler`` against the wall clock inside asyncio.

Steps are scheduled on absolute deadlines (next end = previous end + step duration), so time
spent serving HTTP between steps does not slow the modelled server down as long as the CPU
keeps up; if it falls behind, the next steps run back to back until it has caught up. Each step
end appends one progress mark per request and wakes that request's HTTP handler.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time

from specguard.emulator.model import BatchScheduler, GenRequest, Step

# Falling further behind real time than this means the machine cannot keep up; stop catching up.
MAX_LAG_MS = 1000.0

log = logging.getLogger("specguard.emulator")


class RequestProgress:
    """What a request's handler has not sent yet: one mark per step, and a wake-up event."""

    __slots__ = ("req", "marks", "event")

    def __init__(self, req: GenRequest) -> None:
        self.req = req
        # (completion_tokens, spec_verify_ct, accepted_drafts) after each step the request took part in
        self.marks: list[tuple[int, int, int]] = []
        self.event = asyncio.Event()

    def take(self) -> list[tuple[int, int, int]]:
        marks, self.marks = self.marks, []
        self.event.clear()
        return marks


class PreciseTimer:
    """Wakes the event loop at a deadline to within ~0.1 ms.

    asyncio's epoll selector rounds every timeout up to a whole millisecond, so a step that starts
    p ms after the previous wake-up lasts p + n ms: a 3.0 ms step came out as 3.3 ms or 2.3 ms,
    and the ITL median read +10 %. A helper thread sleeps with nanosleep and wakes the loop with
    call_soon_threadsafe instead (when the loop is idle in epoll, it holds no GIL to wait for).
    """

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._cond = threading.Condition()
        self._pending: tuple[float, asyncio.Future[None]] | None = None
        self._closed = False
        self._thread = threading.Thread(target=self._serve, name="emulator-timer", daemon=True)
        self._thread.start()

    def sleep_until(self, deadline_s: float) -> asyncio.Future[None]:
        """A future that completes at ``deadline_s`` on the loop's clock (time.monotonic)."""
        fut: asyncio.Future[None] = self._loop.create_future()
        with self._cond:
            self._pending = (deadline_s, fut)
            self._cond.notify()
        return fut

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify()
        self._thread.join(timeout=1.0)

    def _serve(self) -> None:
        while True:
            with self._cond:
                while self._pending is None and not self._closed:
                    self._cond.wait()
                pending = self._pending
                if self._closed or pending is None:  # the wait leaves a deadline unless closed
                    return
                deadline_s, fut = pending
                self._pending = None
            remaining_s = deadline_s - time.monotonic()
            if remaining_s > 0:
                time.sleep(remaining_s)
            try:
                self._loop.call_soon_threadsafe(_resolve, fut)
            except RuntimeError:  # the loop closed while we slept
                return


def _resolve(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


class RealtimeEngine:
    """Owns the scheduler and the asyncio task that steps it in real time."""

    def __init__(self, scheduler: BatchScheduler) -> None:
        self.scheduler = scheduler
        self._loop = asyncio.get_running_loop()
        self._wake = asyncio.Event()
        self._idle = asyncio.Event()  # set whenever the scheduler has no running or waiting request
        self._idle.set()
        self.last_output_ms = float("-inf")  # loop time of the last step's outputs (/health checks it)
        self._task: asyncio.Task[None] | None = None
        self._timer: PreciseTimer | None = None
        # Converts loop-clock milliseconds to wall-clock seconds for SGLang's *_ts fields.
        self._wall_offset_s = time.time() - self._loop.time()

    def now_ms(self) -> float:
        return self._loop.time() * 1000.0

    def wall_s(self, loop_ms: float) -> float:
        return loop_ms / 1000.0 + self._wall_offset_s

    def start(self) -> None:
        self._timer = PreciseTimer(self._loop)
        self._task = asyncio.create_task(self._run(), name="emulator-scheduler")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
        if self._timer is not None:
            self._timer.close()

    def submit(self, req: GenRequest) -> RequestProgress:
        progress = RequestProgress(req)
        req.tag = progress
        self.scheduler.submit(req, self.now_ms())
        self._idle.clear()
        self._wake.set()
        return progress

    async def wait_idle(self, timeout_s: float) -> None:
        """Return when the scheduler is idle or after ``timeout_s``, whichever comes first."""
        try:
            await asyncio.wait_for(self._idle.wait(), timeout_s)
        except asyncio.TimeoutError:
            pass

    def abort(self, req: GenRequest) -> None:
        self.scheduler.abort(req)

    async def wait_finished(self, progress: RequestProgress) -> None:
        while not progress.req.finished:
            await progress.event.wait()
            progress.take()

    async def _run(self) -> None:
        scheduler = self.scheduler
        end_ms: float | None = None  # absolute end of the previous step; None after idling
        while True:
            if not scheduler.has_work():
                await self._wait_for_work()
                end_ms = None
            end_ms = self._step_start_ms(end_ms)
            adaptive = scheduler.adaptive
            before = adaptive.active_steps if adaptive is not None else None
            step = scheduler.next_step(end_ms)
            assert step is not None  # there is work, so there is a prefill or a decode to run
            end_ms += step.duration_ms
            await self._sleep_until(end_ms)
            scheduler.complete(step, end_ms)
            self.last_output_ms = self.now_ms()
            if adaptive is not None and before is not None and adaptive.active_steps != before:
                # EAGLEWorkerV2.apply_runtime_state logs this on every switch
                log.info("Switch adaptive runtime state: steps %d -> %d, draft_tokens %d -> %d",
                         before, adaptive.active_steps, before + 1, adaptive.active_steps + 1)
            _deliver(step)
            if step.kind == "decode" and scheduler.stats.decode_steps % scheduler.config.decode_log_interval == 0:
                log.info(scheduler.decode_log_line())

    async def _wait_for_work(self) -> None:
        """Idle until a request is submitted."""
        self._idle.set()
        self._wake.clear()
        await self._wake.wait()

    def _step_start_ms(self, end_ms: float | None) -> float:
        """When the next step starts: where the previous one ended, or now after idling or when more
        than ``MAX_LAG_MS`` behind (the machine cannot keep up; it resynchronises with a warning)."""
        now = self.now_ms()
        if end_ms is None:
            return now
        if now - end_ms > MAX_LAG_MS:
            log.warning("emulator is %.0f ms behind real time (CPU overloaded); resynchronising", now - end_ms)
            return now
        return end_ms

    async def _sleep_until(self, end_ms: float) -> None:
        """Wait for a step's end on the precise timer; a late step still yields once."""
        if end_ms > self.now_ms():
            assert self._timer is not None
            await self._timer.sleep_until(end_ms / 1000.0)
        else:
            # Late: still yield, or two steps' tokens would go out in one write and the
            # client would see a 0 ms and a two-step gap instead of two step-long gaps.
            await asyncio.sleep(0)


def _deliver(step: Step) -> None:
    """One progress mark per live request of the step, and a wake-up for its handler."""
    for req in step.requests:
        progress = req.tag
        if progress is not None and not req.aborted:
            progress.marks.append((req.completion_tokens, req.verify_ct, req.accepted_drafts))
            progress.event.set()
