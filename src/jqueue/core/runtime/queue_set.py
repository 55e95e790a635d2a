"""``QueueSet``: claim from several queues at once, merged in priority and enqueue order."""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Collection, Sequence
from datetime import timedelta

from jqueue.domain.models import Job
from jqueue.domain.values import Bounds
from jqueue.ports.queue import Queue

logger = logging.getLogger("jqueue")

SET_BATCH_SIZE = Bounds(ge=1)
"""The bounds of ``QueueSet.dequeue``'s ``batch_size`` (a queue's own ``dequeue`` takes 0 too)."""


class QueueSet:
    """Several queues (on any storages) claimed from as one.

    ``dequeue`` looks at what each queue would hand out, picks the best
    ``batch_size`` jobs across them by (priority, enqueue time), and claims that
    many from each queue. Each job comes back with the queue it belongs to: ack,
    nack and heartbeat it there.

    Parameters
    ----------
    queues : sequence of queues
        ``DirectQueue`` or ``BrokerQueue`` instances, opened by the caller.
    """

    def __init__(self, queues: Sequence[Queue]) -> None:
        if not queues:
            raise ValueError("a queue set needs at least one queue")
        self.queues = list(queues)

    async def dequeue(
        self,
        entrypoint: str | Collection[str] | None = None,
        *,
        batch_size: int = 1,
        visibility_timeout: timedelta | None = None,
    ) -> list[tuple[Queue, Job]]:
        """Claim up to ``batch_size`` jobs across the queues, best (priority, created_at) first.

        Returns ``(queue, job)`` pairs in that order. Other processes may claim
        between the look and the claim; each queue then hands out its next best. A queue
        that fails is skipped (and logged), so jobs claimed from the others are never
        lost; only when every queue fails is its error raised.
        """
        SET_BATCH_SIZE.check("batch_size", batch_size)
        looks = await asyncio.gather(
            *(q.peek(entrypoint, batch_size) for q in self.queues), return_exceptions=True
        )
        _raise_if_all_failed(looks)
        candidates = sorted(
            (job.priority, job.created_at, position)
            for position, jobs in enumerate(looks)
            if not isinstance(jobs, BaseException)
            for job in jobs
        )[:batch_size]
        wanted = Counter(position for _, _, position in candidates)
        positions = sorted(wanted)
        claims = await asyncio.gather(
            *(
                self.queues[p].dequeue(
                    entrypoint, batch_size=wanted[p], visibility_timeout=visibility_timeout
                )
                for p in positions
            ),
            return_exceptions=True,
        )
        pairs = [
            (self.queues[p], job)
            for p, jobs in zip(positions, claims, strict=True)
            if not isinstance(jobs, BaseException)
            for job in jobs
        ]
        if not pairs:
            _raise_if_all_failed(claims)
        for failed in [exc for exc in [*looks, *claims] if isinstance(exc, BaseException)]:
            logger.warning("a queue of the set failed; the others' jobs are returned: %r", failed)
        return sorted(pairs, key=lambda pair: (pair[1].priority, pair[1].created_at))


def _raise_if_all_failed(results: Sequence[object]) -> None:
    """Raise the first failure if every queue failed (a cancellation at once)."""
    failures = [r for r in results if isinstance(r, BaseException)]
    for failure in failures:
        if not isinstance(failure, Exception):
            raise failure
    if failures and len(failures) == len(results):
        raise failures[0]
