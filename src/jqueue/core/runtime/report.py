"""What a ``Worker`` says of itself to the queues that pass it on (``SupportsWorkerReport``):
its handlers, concurrency, running jobs and periodic jobs, for the dashboard."""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from jqueue.domain.errors import JQueueError
from jqueue.domain.times import utc_now
from jqueue.ports.queue import PeriodicReport, SupportsWorkerReport, WorkerReport

if TYPE_CHECKING:
    from jqueue.core.runtime.worker import Worker

logger = logging.getLogger("jqueue.worker")


def worker_report(worker: Worker) -> WorkerReport:
    """Return what ``worker`` is and does now."""
    now = utc_now()
    periodic = []
    for _, schedule in worker.schedules:
        tick = schedule.latest(now)
        last_job = str(schedule.job(tick).id)  # a periodic job always has its tick's id
        following = schedule.following(tick)
        periodic.append(PeriodicReport(schedule.entrypoint, schedule.name, tick, following, last_job))
    return WorkerReport(list(worker.handlers), worker.concurrency, worker.stats.running, periodic)


def announce(worker: Worker) -> None:
    """Have each queue of ``worker`` that passes reports on say what the worker is."""
    for queue in worker.queues:
        if isinstance(queue, SupportsWorkerReport):
            queue.report_worker(lambda: worker_report(worker))


FAREWELL_SECONDS = 2.0
"""How long a stopping worker tries to say so: a broker away for longer (one being replaced)
learns it from the worker's silence instead, and the stop is not held up."""


async def farewell(worker: Worker) -> None:
    """Have each queue of ``worker`` that passes reports on say that the worker stopped (once,
    within ``FAREWELL_SECONDS``; a queue that cannot is left to let the worker's silence say it)."""
    for queue in worker.queues:
        if isinstance(queue, SupportsWorkerReport):
            try:
                await asyncio.wait_for(queue.say_stopped(), FAREWELL_SECONDS)
            except (JQueueError, TimeoutError) as exc:
                logger.debug("could not say that the worker stopped: %r", exc)
