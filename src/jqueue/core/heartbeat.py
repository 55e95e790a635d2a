"""``HeartbeatManager``: keeps a claimed job alive while its work runs."""

from __future__ import annotations

import asyncio
import inspect
import logging
from datetime import timedelta
from types import TracebackType
from typing import cast

from jqueue.core.context import JobContext
from jqueue.domain.errors import JobCancelledError, JobNotFoundError, JQueueError, LeaseLostError
from jqueue.domain.models import Job
from jqueue.ports.queue import SupportsHeartbeat, SupportsProgress

logger = logging.getLogger("jqueue")


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
        if interval <= timedelta(0):
            raise ValueError(f"interval must be positive, got {interval}")
        self.queue = queue
        self.job = job_id
        self.job_id = job_id if isinstance(job_id, str) else job_id.id
        self.interval = interval
        self.context = context
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> HeartbeatManager:
        self._task = asyncio.create_task(self._beat(), name=f"jqueue-heartbeat-{self.job_id}")
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
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
        seconds = self.interval.total_seconds()
        while True:
            await asyncio.sleep(seconds)
            report = None if self.context is None else self.context.take_report()
            try:
                if report is not None and _takes_progress(self.queue):
                    await cast(SupportsProgress, self.queue).heartbeat(
                        self.job, progress=report[0], note=report[1]
                    )
                else:
                    await self.queue.heartbeat(self.job)
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
