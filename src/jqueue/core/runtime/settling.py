"""How a worker settles a job it ran: ``Settling._settle`` acks, nacks or releases it, riding
out a storage (or broker) outage within ``max_outage``."""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta

from jqueue.core.runtime.outage import Outage
from jqueue.core.runtime.outcomes import Outcome
from jqueue.core.runtime.setup import WorkerSetup
from jqueue.core.runtime.slots import CarriedAcks
from jqueue.domain.errors import JQueueError
from jqueue.domain.models import Job
from jqueue.ports.queue import Queue


class Settling(WorkerSetup):
    """The settling of a ``Worker``'s jobs."""

    poll_interval: timedelta
    max_poll_interval: timedelta
    _acks: CarriedAcks
    _outages: Outage
    _retry_due: float

    def stop(self, *, immediate: bool = False) -> None:
        raise NotImplementedError

    def _outage(self, exc: JQueueError, doing: str) -> bool:
        """Note a failure while ``doing`` (see ``Outage.failed``); stop the worker once the outage
        lasted longer than ``max_outage``."""
        if self._outages.failed(exc, doing):
            return True
        self.stop()
        return False

    async def _settle(
        self,
        queue: Queue,
        job: Job,
        outcome: Outcome,
        error: str | None,
        delay: timedelta | None,
        give_up: bool,
        result: bytes | None = None,
    ) -> None:
        """Ack, nack (after ``delay``, else the back-off; with ``give_up`` to the dead letters at
        once) or release the job, retrying transient storage failures within ``max_outage``."""
        pause = self.poll_interval.total_seconds()
        while True:
            try:
                if outcome is Outcome.ACKED:
                    if not await self._acks.carry(job, result):
                        await queue.ack(job, **({} if result is None else {"result": result}))  # an old Queue
                elif outcome in (Outcome.RELEASED, Outcome.CANCELLED):
                    await queue.release(job)  # a job whose cancel was asked for ends cancelled
                else:
                    if delay is None:
                        delay = self._retry_delay(
                            queue, job.attempts
                        )  # chosen here, so until_empty knows when
                    limit = self._attempts_limit(queue, job)
                    dead: dict[str, bool] = (
                        {"dead": True} if give_up else {}
                    )  # a Queue of old may not take it
                    await queue.nack(job, delay=delay, error=error, max_attempts=limit, **dead)
                    if outcome is Outcome.RETRIED and delay:
                        self._retry_due = max(self._retry_due, time.monotonic() + delay.total_seconds())
            except JQueueError as exc:
                if not self._outage(exc, f"settling job {job.id}"):
                    raise
                await asyncio.sleep(pause)
                pause = min(self.max_poll_interval.total_seconds(), pause * 2)
                continue
            self._outages.ended()
            return
