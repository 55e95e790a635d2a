"""``QueueInsight``: what the dashboard and the metrics read of a queue, as ``queue.insight``."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import TYPE_CHECKING, TypeVar

from jqueue.core.loop.store import CommitStats
from jqueue.domain.figures import Throughput, Timings
from jqueue.domain.insight import DeadGroup, dead_groups, throughput, timings
from jqueue.domain.spec import POSITIVE_SPAN
from jqueue.domain.times import span_micros, to_micros, utc_now

if TYPE_CHECKING:
    from jqueue.core.commits import StoreOpener
    from jqueue.domain.index import QueueIndex

T = TypeVar("T")


class QueueInsight:
    """Figures of a queue for people: throughput, timings, dead letters grouped by their error,
    and this process's commit counts."""

    def __init__(self, opener: StoreOpener) -> None:
        self._opener = opener

    async def _view(self, look: Callable[[QueueIndex], T]) -> T:
        return await (await self._opener.store()).view(look)

    async def commit_stats(self) -> CommitStats:
        """Return the counts of this process's commits to the queue (for metrics)."""
        return (await self._opener.store()).stats

    async def throughput(
        self, window: timedelta = timedelta(hours=1), bucket: timedelta = timedelta(minutes=1)
    ) -> Throughput:
        """Return how many jobs were acked and how many died in each ``bucket`` of the last
        ``window``, from the history (at a cost bounded by ``HISTORY_BUDGET`` records)."""
        POSITIVE_SPAN.check("window", window)
        POSITIVE_SPAN.check("bucket", bucket)
        now = to_micros(utc_now())
        return await self._view(
            lambda index: throughput(index, now, span_micros(window), span_micros(bucket))
        )

    async def timings(self, sample: int = 1_000) -> dict[str, Timings]:
        """Return, per entrypoint, the outcomes and the wait and run time percentiles of its
        newest ``sample`` finished jobs, from the history."""
        return await self._view(lambda index: timings(index, sample))

    async def dead_groups(self, entrypoint: str | None = None) -> list[DeadGroup]:
        """Return the dead jobs (of ``entrypoint`` if given) grouped by the first line of their
        error, largest group first (at most ``GROUP_BUDGET`` dead jobs are looked at)."""
        return await self._view(lambda index: dead_groups(index, entrypoint))
