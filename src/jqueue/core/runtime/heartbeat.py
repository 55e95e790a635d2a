"""``HeartbeatManager``: keeps a claimed job alive while its work runs."""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from datetime import timedelta
from types import TracebackType
from typing import cast

from jqueue.core.runtime.context import JobContext
from jqueue.domain.errors import JobCancelledError, JobNotFoundError, JQueueError, LeaseLostError
from jqueue.domain.models import Job
from jqueue.domain.spec import POSITIVE_SPAN
from jqueue.ports.queue import SupportsCancelCheck, SupportsHeartbeat, SupportsProgress

logger = logging.getLogger("jqueue")

PROMPT_EVERY = timedelta(seconds=2)
"""How often a worker's job, between heartbeats, stores its new progress (one heartbeat, only
if its handler reported some) or asks whether its cancel was asked for (a read, no commit)."""


_cancel_checks: dict[type, bool] = {}


def _checks_cancel(queue: SupportsHeartbeat) -> bool:
    """Whether ``queue`` can say that a job's cancel was asked for (``SupportsCancelCheck``;
    a protocol's ``isinstance`` is slow, so the answer is kept per type)."""
    kind = type(queue)
    checks = _cancel_checks.get(kind)
    if checks is None:
        checks = _cancel_checks[kind] = isinstance(queue, SupportsCancelCheck)
    return checks


def _takes_progress(queue: SupportsHeartbeat) -> bool:
    """Whether ``queue.heartbeat`` takes ``progress`` (a queue of another library may not)."""
    try:
        return "progress" in inspect.signature(queue.heartbeat).parameters
    except (TypeError, ValueError):
        return False


class HeartbeatManager:
    """Send heartbeats for one job in the background while the ``async with`` block runs.

    A job that is gone (acked or removed elsewhere) or, for a claimed ``Job``, whose
    lease was lost stops the beats quietly; a transient failure (a storage error, a
    lost race) skips one beat and the next one is tried on time. The task is cancelled
    when the block exits.

    Parameters
    ----------
    queue : SupportsHeartbeat
        The queue the job was claimed from (anything with ``async heartbeat(job_id)``).
    job_id : Job or str
        The claimed job (its lease fences every beat), or its id (unfenced), as in
        ``HeartbeatManager(q, job.id)``.
    interval : timedelta
        Time between beats.
    context : JobContext or None
        The running job's context (a ``Worker`` gives one): each beat stores the progress its
        handler reported since the last one, and a beat that finds the job's cancel asked for
        (``JobCancelledError``) stops the beats and cancels the context's handler.
    """

    def __init__(
        self,
        queue: SupportsHeartbeat,
        job_id: Job | str,
        interval: timedelta = timedelta(seconds=60),
        *,
        context: JobContext | None = None,
    ) -> None:
        POSITIVE_SPAN.check("interval", interval)
        self.queue = queue
        self.job = job_id
        self.job_id = job_id if isinstance(job_id, str) else job_id.id
        self.interval = interval
        self.context = context
        self._task: asyncio.Task[None] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._entered = 0.0

    async def __aenter__(self) -> HeartbeatManager:
        self._entered = time.monotonic()
        self._timer = asyncio.get_running_loop().call_later(self._tick(), self._start)
        return self

    def _tick(self) -> float:
        """Seconds between two looks: the interval, or ``PROMPT_EVERY`` when there is a handler's
        progress to store and a cancel to look for."""
        interval = self.interval.total_seconds()
        prompt = self.context is not None and _checks_cancel(self.queue)
        return min(interval, PROMPT_EVERY.total_seconds()) if prompt else interval

    def _start(self) -> None:
        """The first look is due: from now on a task looks (a job done sooner costs no task)."""
        self._timer = None
        self._task = asyncio.create_task(self._beat(), name=f"jqueue-heartbeat-{self.job_id}")

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        timer, self._timer = self._timer, None
        if timer is not None:
            timer.cancel()
        task, self._task = self._task, None
        if task is None:
            return
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if current is not None and current.cancelling():
                raise

    async def _beat(self) -> None:
        interval, tick = self.interval.total_seconds(), self._tick()
        last_beat = self._entered
        while True:
            report = None if self.context is None else self.context.take_report()
            due = time.monotonic() - last_beat >= interval - tick / 2
            try:
                if report is not None and _takes_progress(self.queue):
                    await cast(SupportsProgress, self.queue).heartbeat(
                        self.job, progress=report[0], note=report[1]
                    )
                    last_beat = time.monotonic()
                elif due:
                    await self.queue.heartbeat(self.job)
                    last_beat = time.monotonic()
                elif await cast(SupportsCancelCheck, self.queue).cancel_requested(self.job):
                    raise JobCancelledError(self.job_id)
            except JobCancelledError:
                logger.info("job %s was cancelled; heartbeats stop and its handler is stopped", self.job_id)
                if self.context is not None:
                    self.context.cancel()
                return
            except (JobNotFoundError, LeaseLostError):
                logger.info("job %s is gone or its lease was lost; heartbeats stop", self.job_id)
                return
            except JQueueError as exc:
                if report is not None and self.context is not None:
                    self.context.put_back(report)
                logger.warning("heartbeat for job %s failed, trying again next beat: %r", self.job_id, exc)
            await asyncio.sleep(tick)
