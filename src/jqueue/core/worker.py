"""``Worker``: claims jobs, runs their handlers under heartbeats, and acks, retries or buries them."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import signal
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from enum import StrEnum
from typing import Any

from jqueue.core.handlers import Handler, HandlerPools, HandlerSpec, HandlerTimeoutError
from jqueue.core.heartbeat import HeartbeatManager
from jqueue.core.management import ManagementOperations
from jqueue.core.queue_set import QueueSet
from jqueue.domain.errors import JobNotFoundError, LeaseLostError
from jqueue.domain.models import Job, utc_now

logger = logging.getLogger("jqueue.worker")

Queue = ManagementOperations


class Outcome(StrEnum):
    """What became of a job a worker ran."""

    ACKED = "acked"
    RETRIED = "retried"
    DEAD = "dead"
    LOST = "lost"
    RELEASED = "released"


@dataclass(frozen=True)
class JobResult:
    """One job's run: its outcome, error and timings (seconds)."""

    job: Job
    outcome: Outcome
    error: str | None
    waited: float
    ran: float


@dataclass
class WorkerStats:
    """What a worker run did.

    Attributes
    ----------
    claimed : int
        Jobs claimed.
    outcomes : dict of Outcome to int
        Jobs per outcome: acked, retried (failed, back in the queue), dead (failed
        their last attempt), lost (their lease was lost before the ack), released
        (returned at shutdown).
    timed_out : int
        Failures that were time limits.
    seconds : float
        Duration of the run.
    """

    claimed: int = 0
    outcomes: dict[Outcome, int] = field(default_factory=lambda: dict.fromkeys(Outcome, 0))
    timed_out: int = 0
    seconds: float = 0.0

    @property
    def acked(self) -> int:
        """Jobs that succeeded."""
        return self.outcomes[Outcome.ACKED]

    @property
    def failed(self) -> int:
        """Jobs whose handler failed (retried or dead)."""
        return self.outcomes[Outcome.RETRIED] + self.outcomes[Outcome.DEAD]


Hook = Callable[..., Awaitable[object] | object]


async def _call_hooks(hooks: list[Hook], *args: Any) -> None:
    for hook in hooks:
        result = hook(*args)
        if inspect.isawaitable(result):
            await result


class Worker:
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
    ) -> None:
        if concurrency < 1:
            raise ValueError(f"concurrency must be at least 1, got {concurrency}")
        if not timedelta(0) < poll_interval <= max_poll_interval:
            raise ValueError("poll intervals need 0 < poll_interval <= max_poll_interval")
        self.queues = [queues] if isinstance(queues, ManagementOperations) else list(queues)
        if not self.queues:
            raise ValueError("a worker needs a queue")
        self.concurrency = concurrency
        self.timeout = timeout
        self.visibility_timeout = visibility_timeout
        self.poll_interval = poll_interval
        self.max_poll_interval = max_poll_interval
        self.grace_period = grace_period
        self.handlers: dict[str, HandlerSpec] = {}
        self.hooks: dict[str, list[Hook]] = {"start": [], "stop": [], "before_job": [], "after_job": []}
        self.stats = WorkerStats()
        self._stopping = asyncio.Event()
        self._abort = asyncio.Event()
        self._retry_due = 0.0
        for entrypoint, function in (handlers or {}).items():
            self.register(entrypoint, function)

    # --- configuration ----------------------------------------------------------------

    def register(
        self,
        entrypoint: str,
        function: Handler,
        *,
        timeout: timedelta | None = None,
        in_process: bool = False,
    ) -> None:
        """Run ``function`` for jobs of ``entrypoint``, with its own time limit if given; a sync
        function runs in a thread, or in a process with ``in_process``."""
        self.handlers[entrypoint] = HandlerSpec.of(function, timeout or self.timeout, in_process)

    def handler(
        self, entrypoint: str, *, timeout: timedelta | None = None, in_process: bool = False
    ) -> Callable[[Handler], Handler]:
        """Decorator form of ``register``."""

        def decorate(function: Handler) -> Handler:
            self.register(entrypoint, function, timeout=timeout, in_process=in_process)
            return function

        return decorate

    def on(self, event: str) -> Callable[[Hook], Hook]:
        """Decorator adding a hook: ``start(worker)``, ``stop(worker, stats)``,
        ``before_job(job)`` or ``after_job(result)``; sync or async."""
        if event not in self.hooks:
            raise ValueError(f"unknown hook {event!r}; one of {sorted(self.hooks)}")

        def decorate(hook: Hook) -> Hook:
            self.hooks[event].append(hook)
            return hook

        return decorate

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

    @contextlib.contextmanager
    def _signals(self, install: bool) -> Iterator[None]:
        loop = asyncio.get_running_loop()
        installed: list[signal.Signals] = []
        if install:
            for sig in (signal.SIGTERM, signal.SIGINT):
                with contextlib.suppress(ValueError, RuntimeError, NotImplementedError):
                    loop.add_signal_handler(sig, self._on_signal)
                    installed.append(sig)
        try:
            yield
        finally:
            for sig in installed:
                loop.remove_signal_handler(sig)

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
        self.stats = WorkerStats()
        self._stopping, self._abort = asyncio.Event(), asyncio.Event()
        pools = HandlerPools(self.concurrency)
        running: set[asyncio.Task[None]] = set()
        started = time.monotonic()
        with self._signals(install_signals):
            await _call_hooks(self.hooks["start"], self)
            try:
                await self._claim_loop(running, pools, until_empty)
            finally:
                await self._drain(running)
                pools.close(wait=not self._abort.is_set())
                self.stats.seconds = time.monotonic() - started
                await _call_hooks(self.hooks["stop"], self, self.stats)
        return self.stats

    async def _claim_loop(
        self, running: set[asyncio.Task[None]], pools: HandlerPools, until_empty: bool
    ) -> None:
        idle = self.poll_interval.total_seconds()
        while not self._stopping.is_set():
            free = self.concurrency - len(running)
            if free > 0:
                claimed = await self._claim(free)
                if claimed:
                    idle = self.poll_interval.total_seconds()
                    for queue, job in claimed:
                        task = asyncio.create_task(
                            self._process(queue, job, pools), name=f"jqueue-job-{job.id}"
                        )
                        running.add(task)
                        task.add_done_callback(running.discard)
                    continue
                retry_in = self._retry_due - time.monotonic()
                if until_empty and not running and retry_in <= 0:
                    return
                wait = min(idle, retry_in) if retry_in > 0 else idle
                idle = min(self.max_poll_interval.total_seconds(), idle * 2)
            else:
                wait = None
            await self._wait_any(running, wait)

    async def _wait_any(self, running: set[asyncio.Task[None]], seconds: float | None) -> None:
        stopping = asyncio.create_task(self._stopping.wait())
        try:
            await asyncio.wait({stopping, *running}, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopping.cancel()

    async def _claim(self, count: int) -> list[tuple[Queue, Job]]:
        entrypoints = list(self.handlers)
        visibility = self.visibility_timeout
        if len(self.queues) == 1:
            [queue] = self.queues
            jobs = await queue.dequeue(entrypoints, batch_size=count, visibility_timeout=visibility)
            claimed = [(queue, job) for job in jobs]
        else:
            claimed = await QueueSet(self.queues).dequeue(
                entrypoints, batch_size=count, visibility_timeout=visibility
            )
        self.stats.claimed += len(claimed)
        return claimed

    async def _drain(self, running: set[asyncio.Task[None]]) -> None:
        """Let running jobs finish within the grace period (unless aborted), then release the rest."""
        if not running:
            return
        if not self._abort.is_set():
            abort = asyncio.create_task(self._abort.wait())
            grace = self.grace_period.total_seconds()
            deadline = time.monotonic() + grace
            while running and not self._abort.is_set() and time.monotonic() < deadline:
                await asyncio.wait(
                    {abort, *running}, timeout=deadline - time.monotonic(), return_when="FIRST_COMPLETED"
                )
            abort.cancel()
        pending = list(running)
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)

    # --- one job ----------------------------------------------------------------------

    async def _process(self, queue: Queue, job: Job, pools: HandlerPools) -> None:
        spec = self.handlers[job.entrypoint]
        waited = (utc_now() - (job.not_before or job.created_at)).total_seconds()
        visibility = (
            job.lease_expires_at - job.heartbeat_at if job.lease_expires_at and job.heartbeat_at else None
        )
        interval = (visibility or queue.visibility_timeout) / 3
        await _call_hooks(self.hooks["before_job"], job)
        started = time.monotonic()
        error: str | None = None
        try:
            async with HeartbeatManager(queue, job, interval=interval):
                await pools.call(spec, job)
        except asyncio.CancelledError:
            await self._finish(queue, job, Outcome.RELEASED, "worker stopped", waited, started)
            raise
        except HandlerTimeoutError as exc:
            self.stats.timed_out += 1
            error = str(exc)
        except Exception as exc:
            error = f"{type(exc).__name__}: {exc}"
        if error is None:
            await self._finish(queue, job, Outcome.ACKED, None, waited, started)
        else:
            limit = job.max_attempts or queue.policy.max_attempts
            outcome = Outcome.DEAD if limit is not None and job.attempts >= limit else Outcome.RETRIED
            await self._finish(queue, job, outcome, error, waited, started)

    async def _finish(
        self, queue: Queue, job: Job, outcome: Outcome, error: str | None, waited: float, started: float
    ) -> None:
        try:
            if outcome is Outcome.ACKED:
                await queue.ack(job)
            elif outcome is Outcome.RELEASED:
                await queue.release(job)
            else:
                delay = queue.policy.retry_delay(job.attempts)  # chosen here, so until_empty knows when
                await queue.nack(job, delay=delay, error=error)
                if outcome is Outcome.RETRIED and delay:
                    self._retry_due = max(self._retry_due, time.monotonic() + delay.total_seconds())
        except (LeaseLostError, JobNotFoundError):
            outcome = Outcome.LOST
        result = JobResult(job, outcome, error, waited, time.monotonic() - started)
        self.stats.outcomes[outcome] += 1
        logger.info(
            "job %s %s: %s",
            job.id,
            job.entrypoint,
            outcome,
            extra={
                "job_id": job.id,
                "entrypoint": job.entrypoint,
                "outcome": str(outcome),
                "attempts": job.attempts,
                "error": error,
                "wait_s": round(result.waited, 6),
                "run_s": round(result.ran, 6),
            },
        )
        await _call_hooks(self.hooks["after_job"], result)
