"""``Worker``: claims jobs, runs their handlers under heartbeats, and acks, retries or buries them."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping, Sequence
from datetime import timedelta

from jqueue.core import telemetry
from jqueue.core.runtime import measures
from jqueue.core.runtime.context import JobContext
from jqueue.core.runtime.cron import Schedule, run_schedule
from jqueue.core.runtime.handlers import Handler, HandlerPools, HandlerSpec, HandlerTimeoutError
from jqueue.core.runtime.heartbeat import HeartbeatManager
from jqueue.core.runtime.hooks import Hook, call_hooks
from jqueue.core.runtime.outage import Outage
from jqueue.core.runtime.outcomes import (
    JobResult,
    Outcome,
    WorkerStats,
    error_message,
    result_bytes,
    traceback_text,
)
from jqueue.core.runtime.queue_set import QueueSet
from jqueue.core.runtime.report import announce, farewell
from jqueue.core.runtime.settling import Settling
from jqueue.core.runtime.setup import handled_signals
from jqueue.core.runtime.slots import CarriedAcks, Slots
from jqueue.core.runtime.steering import Fail, HandlerFailure, ResultError, Retry
from jqueue.core.runtime.waiting import first_of, unless_stopped
from jqueue.domain.errors import (
    JobNotFoundError,
    JQueueError,
    LeaseLostError,
    PayloadTooLargeError,
    is_transient,
)
from jqueue.domain.models import Job
from jqueue.domain.policy import Backoff
from jqueue.domain.spec import ATTEMPTS
from jqueue.domain.times import utc_now
from jqueue.domain.values import Bounds
from jqueue.ports.queue import ChangeSource, Queue, SupportsAckAndDequeue

logger = logging.getLogger("jqueue.worker")

DEFAULT_MAX_ATTEMPTS = 5
DEFAULT_BACKOFF = Backoff()
CONCURRENCY = Bounds(ge=1)
"""The bounds of a worker's ``concurrency``."""
CLAIM_GRACE = timedelta(seconds=5)
"""How long a claim under way when the worker is told to stop may still take to answer (at most
the grace period): what it claimed is then released at once."""


class Worker(Settling):
    """Runs handlers for the jobs of one queue or several.

    For each claimed job, heartbeats run while its handler does; success acks the job
    (fenced by its lease); an exception or the time limit nacks it with the queue's
    back-off, recording the error (past its last attempt it is dead). Claims come in
    batches up to the free concurrency; an idle worker polls with a growing interval
    (an empty poll writes nothing). Pauses and throttles apply as to any claim.

    Parameters
    ----------
    queues : queue or sequence of queues
        Opened ``DirectQueue`` / ``BrokerQueue`` instances; several are claimed from as a
        ``QueueSet``.
    handlers : mapping of str to handler, optional
        Handlers by entrypoint (``handler`` and ``register`` add more).
    concurrency : int
        Jobs run at once.
    timeout : timedelta or None
        Default time limit per job.
    visibility_timeout : timedelta or None
        Lease length per claim (the queue's by default); heartbeats go every third of it.
    poll_interval, max_poll_interval : timedelta
        The first and the longest wait between empty polls.
    grace_period : timedelta
        How long a stopping worker lets running jobs finish before it returns them to
        the queue.
    max_attempts : int or None
        Attempts a job gets when neither the job nor the queue's policy sets a limit;
        then it is dead. None: no limit (a job that always fails is retried forever).
    backoff : Backoff or None
        The wait before a retry when the queue's policy has no back-off; None: none.
    max_outage : timedelta
        How long the storage, or the broker of a queue through ``jqueue serve``, may keep
        failing (claims, acks) before the worker stops with the last error; shorter outages
        (``is_transient``) are retried with back-off.
    """

    def __init__(
        self,
        queues: Queue | Sequence[Queue],
        handlers: Mapping[str, Handler] | None = None,
        *,
        concurrency: int = 10,
        timeout: timedelta | None = None,
        visibility_timeout: timedelta | None = None,
        poll_interval: timedelta = timedelta(milliseconds=50),
        max_poll_interval: timedelta = timedelta(seconds=2),
        grace_period: timedelta = timedelta(seconds=30),
        max_attempts: int | None = DEFAULT_MAX_ATTEMPTS,
        backoff: Backoff | None = DEFAULT_BACKOFF,
        max_outage: timedelta = timedelta(minutes=5),
    ) -> None:
        CONCURRENCY.check("concurrency", concurrency)
        if not timedelta(0) < poll_interval <= max_poll_interval:
            raise ValueError("poll intervals need 0 < poll_interval <= max_poll_interval")
        if max_attempts is not None:
            ATTEMPTS.check("max_attempts", max_attempts)
        self.queues = [queues] if isinstance(queues, Queue) else list(queues)
        if not self.queues:
            raise ValueError("a worker needs a queue")
        self.concurrency = concurrency
        self.timeout = timeout
        self.visibility_timeout = visibility_timeout
        self.poll_interval = poll_interval
        self.max_poll_interval = max_poll_interval
        self.grace_period = grace_period
        self.max_attempts = max_attempts
        self.backoff = backoff
        self.max_outage = max_outage
        self._outages = Outage(max_outage)
        self.handlers: dict[str, HandlerSpec] = {}
        self.hooks: dict[str, list[Hook]] = {"start": [], "stop": [], "before_job": [], "after_job": []}
        self.stats = WorkerStats()
        self._stopping = asyncio.Event()
        self._abort = asyncio.Event()
        self._retry_due = 0.0
        self._slots = Slots()
        self._acks = CarriedAcks(self._slots.wake)
        self.schedules: list[tuple[Queue, Schedule]] = []
        for entrypoint, function in (handlers or {}).items():
            self.register(entrypoint, function)

    # --- running ----------------------------------------------------------------------

    def stop(self, *, immediate: bool = False) -> None:
        """Stop claiming; running jobs get the grace period, or none if ``immediate``."""
        self._stopping.set()
        if immediate:
            self._abort.set()

    def _on_signal(self) -> None:
        if self._stopping.is_set():
            logger.warning("second signal: stopping now")
            self.stop(immediate=True)
        else:
            logger.info("signal: finishing running jobs, then stopping")
            self.stop()

    async def burst(self) -> WorkerStats:
        """Run until nothing is left to claim (``run(until_empty=True)``)."""
        return await self.run(until_empty=True)

    async def run(self, *, until_empty: bool = False, install_signals: bool = True) -> WorkerStats:
        """Claim and run jobs until stopped (``stop()``, SIGTERM or SIGINT), or with
        ``until_empty`` until nothing is claimable, nothing runs and no retry of this worker
        is pending.

        On the first signal the worker stops claiming and gives running jobs the grace
        period; then, or on a second signal at once, it returns the rest to the queue
        (``release``), so they are claimed again without counting as failures.
        """
        if not self.handlers:
            raise ValueError("register a handler first")
        self.stats, self._outages = WorkerStats(), Outage(self.max_outage)
        self._stopping, self._abort = asyncio.Event(), asyncio.Event()
        pools = HandlerPools(self.concurrency)
        self._slots = Slots()
        self._acks = CarriedAcks(self._slots.wake)
        started = time.monotonic()
        logger.info("worker started: %s", self.description())
        announce(self)
        with handled_signals(self._on_signal, install_signals):
            await call_hooks(self.hooks["start"], self)
            ticking = [] if until_empty else [
                asyncio.create_task(run_schedule(queue, schedule, self._stopping), name="jqueue-cron")
                for queue, schedule in self.schedules
            ]  # fmt: skip
            try:
                await pools.start(self.handlers.values())
                await self._claim_loop(pools, until_empty)
            finally:
                for task in ticking:
                    task.cancel()
                await asyncio.gather(*ticking, return_exceptions=True)
                finished = await self._slots.drain(self.grace_period, self._abort)
                pools.close(wait=finished and not self._abort.is_set())
                self.stats.seconds = time.monotonic() - started
                await call_hooks(self.hooks["stop"], self, self.stats)
                await farewell(self)
        if self._outages.fatal is not None:
            raise self._outages.fatal
        return self.stats

    async def _claim_loop(self, pools: HandlerPools, until_empty: bool) -> None:
        idle = self.poll_interval.total_seconds()
        feeds = [
            feed for queue in self.queues if isinstance(feed := getattr(queue, "changes", None), ChangeSource)
        ]
        slots, acks = self._slots, self._acks
        acks.open = len(self.queues) == 1 and isinstance(self.queues[0], SupportsAckAndDequeue)
        try:
            while not self._stopping.is_set():
                slots.wake.clear()
                # a carried ack's job gives its place to a job of the claim that carries it
                free = self.concurrency - len(slots.running) + len(acks)
                seen = [feed.generation for feed in feeds]
                if free <= 0 and not acks:
                    await first_of([self._stopping, slots.wake], None, [])
                    continue
                looked = time.monotonic()
                try:
                    claimed = await self._claim(max(free, 0))
                except JQueueError as exc:
                    if not self._outage(exc, "claiming"):
                        return
                    claimed = []
                if claimed:
                    idle = self.poll_interval.total_seconds()
                    for queue, job in claimed:
                        slots.hold(
                            asyncio.create_task(self._process(queue, job, pools), name=f"jqueue-job-{job.id}")
                        )
                    continue
                # a retry that fell due after the claim looked is claimable now: look again
                retry_pending = self._retry_due > looked
                if until_empty and not slots.running and not retry_pending and self._outages.since is None:
                    return
                wait = max(0.0, min(idle, self._retry_due - time.monotonic())) if retry_pending else idle
                idle = min(self.max_poll_interval.total_seconds(), idle * 2)
                if await first_of([self._stopping, slots.wake], wait, list(zip(feeds, seen, strict=True))):
                    idle = self.poll_interval.total_seconds()
        finally:
            acks.close()

    async def _claim(self, count: int) -> list[tuple[Queue, Job]]:
        """Claim up to ``count`` jobs, carrying the acks that wait (``CarriedAcks``)."""
        entrypoints = list(self.handlers)
        visibility = self.visibility_timeout
        carried = self._acks.take()

        async def claim() -> list[tuple[Queue, Job]]:
            if carried:
                [queue] = self.queues
                assert isinstance(queue, SupportsAckAndDequeue)
                try:
                    outcomes, jobs = await queue.ack_and_dequeue(
                        [(job, result) for job, result, _ in carried],
                        entrypoints,
                        batch_size=count,
                        visibility_timeout=visibility,
                    )
                except BaseException as exc:
                    CarriedAcks.answer(carried, exc)
                    raise
                CarriedAcks.answer(carried, outcomes)
                return [(queue, job) for job in jobs]
            if len(self.queues) > 1:
                return await QueueSet(self.queues).dequeue(
                    entrypoints, batch_size=count, visibility_timeout=visibility
                )
            [queue] = self.queues
            jobs = await queue.dequeue(entrypoints, batch_size=count, visibility_timeout=visibility)
            return [(queue, job) for job in jobs]

        # a stop does not cut short a claim that carries acks (only an abort does), and gives
        # another a moment to answer, so that what it claimed is released, not left leased
        started = time.time_ns()
        if carried:
            claimed = await unless_stopped(claim(), self._abort) or []
        else:
            grace = min(self.grace_period, CLAIM_GRACE).total_seconds()
            claimed = await unless_stopped(claim(), self._stopping, grace, self._abort) or []
        telemetry.claimed([job.traceparent for _, job in claimed], started)
        if claimed and self._stopping.is_set():  # claimed while stopping: returned, not started
            await asyncio.gather(*(queue.release(job) for queue, job in claimed), return_exceptions=True)
            return []
        self.stats.claimed += len(claimed)
        self._outages.ended()
        return claimed

    # --- one job ----------------------------------------------------------------------

    async def _process(self, queue: Queue, job: Job, pools: HandlerPools) -> None:
        with telemetry.running(job.id, job.entrypoint, job.attempts, job.traceparent):
            measures.started(job)
            try:
                await self._run(queue, job, pools)
            finally:  # whatever became of it: settled, cut short by a stop, or failed
                measures.stopped(job)

    async def _run(self, queue: Queue, job: Job, pools: HandlerPools) -> None:
        spec = self.handlers[job.entrypoint]
        claimed_at = job.claimed_at[-1] if job.claimed_at else utc_now()
        due = max(job.not_before or job.created_at, job.released_at or job.created_at)
        waited = (claimed_at - due).total_seconds()
        visibility = (
            job.lease_expires_at - job.heartbeat_at if job.lease_expires_at and job.heartbeat_at else None
        )
        interval = (visibility or queue.visibility_timeout) / 3
        await call_hooks(self.hooks["before_job"], job)
        started = time.monotonic()
        error: str | None = None
        delay: timedelta | None = None  # a Retry's own delay; None: the usual back-off
        give_up = False  # a Fail: dead at once
        result: bytes | None = None
        task = asyncio.current_task()
        context = JobContext(job, task)
        beats = HeartbeatManager(queue, job, interval=interval, context=context)
        async with beats:  # the lease holds until settled
            try:
                with context.current():
                    try:
                        returned = await pools.call(spec, job)
                    finally:
                        context.handler_done()
                result = result_bytes(returned)
            except asyncio.CancelledError:
                if context.interrupted and task is not None:
                    stopping = task.uncancel() > 0  # the worker stops too
                    await self._finish(queue, job, Outcome.CANCELLED, "cancelled", waited, started)
                    if stopping:
                        raise
                    return
                await self._finish(queue, job, Outcome.RELEASED, "worker stopped", waited, started)
                raise
            except HandlerTimeoutError as exc:
                self.stats.timed_out += 1
                error = str(exc)
            except Retry as exc:
                error, delay = f"Retry: {error_message(exc)}", exc.delay
            except Fail as exc:
                error, give_up = f"Fail: {error_message(exc)}", True
            except ResultError as exc:
                error, give_up = error_message(exc), True
            except HandlerFailure as exc:
                error = f"{type(exc).__name__}: {error_message(exc)}"
            except Exception as exc:
                error = f"{type(exc).__name__}: {error_message(exc)}\n{traceback_text(exc)}"
                telemetry.raised(exc)
            if error is None:
                await self._finish(queue, job, Outcome.ACKED, None, waited, started, returned=result)
            else:
                limit = self._attempts_limit(queue, job)
                dies = give_up or (limit is not None and job.attempts >= limit)
                outcome = Outcome.DEAD if dies else Outcome.RETRIED
                await self._finish(queue, job, outcome, error, waited, started, delay, give_up)

    async def _finish(
        self,
        queue: Queue,
        job: Job,
        outcome: Outcome,
        error: str | None,
        waited: float,
        started: float,
        delay: timedelta | None = None,
        give_up: bool = False,
        returned: bytes | None = None,
    ) -> None:
        try:
            try:
                with telemetry.settling(outcome):
                    await asyncio.shield(self._settle(queue, job, outcome, error, delay, give_up, returned))
            except PayloadTooLargeError as exc:  # the result can never be kept: no retry would help
                outcome, error = Outcome.DEAD, str(ResultError(str(exc)))
                await asyncio.shield(self._settle(queue, job, outcome, error, None, True))
        except (LeaseLostError, JobNotFoundError):
            if outcome is not Outcome.CANCELLED:  # else it ended cancelled already
                outcome = Outcome.LOST
        except JQueueError as exc:
            if not is_transient(exc):
                raise
            outcome = Outcome.LOST  # the storage is gone for good: the lease runs out and the job returns
        result = JobResult(job, outcome, error, waited, time.monotonic() - started)
        measures.finished(result)
        self.stats.outcomes[outcome] += 1
        if logger.isEnabledFor(level := result.level()):
            logger.log(level, "job %s", result.summary(), extra=result.log_fields())
        await call_hooks(self.hooks["after_job"], result)
