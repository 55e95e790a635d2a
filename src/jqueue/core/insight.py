"""``QueueInsight``: what the dashboard and the metrics read of a queue, as ``queue.insight``."""

from __future__ import annotations

import asyncio
import heapq
from collections.abc import Callable, Iterable
from datetime import timedelta
from itertools import islice
from typing import TYPE_CHECKING, TypeVar

from jqueue.core.loop.store import CommitStats
from jqueue.domain.figures import Throughput, Timings, timings_of
from jqueue.domain.insight import HISTORY_BUDGET, DeadGroup, dead_groups, joined_groups, throughput
from jqueue.domain.spec import POSITIVE_SPAN
from jqueue.domain.times import span_micros, to_micros, utc_now

if TYPE_CHECKING:
    from jqueue.core.commits import StoreOpener
    from jqueue.domain.index import QueueIndex
    from jqueue.domain.records import HistoryRecord

T = TypeVar("T")


class QueueInsight:
    """Figures of a queue for people: throughput, timings, dead letters grouped by their error,
    and this process's commit counts; of a sharded queue, its shards' added up.

    Parameters
    ----------
    *openers : StoreOpener
        The stores of the queue's logs (one per shard).
    """

    def __init__(self, *openers: StoreOpener) -> None:
        self.openers = openers

    @classmethod
    def joined(cls, insights: Iterable[QueueInsight]) -> QueueInsight:
        """The figures of the shards that ``insights`` read, added up."""
        return cls(*(opener for insight in insights for opener in insight.openers))

    async def _views(self, look: Callable[[QueueIndex], T]) -> list[T]:
        async def view(opener: StoreOpener) -> T:
            return await (await opener.store()).view(look)

        return list(await asyncio.gather(*(view(opener) for opener in self.openers)))

    async def commit_stats(self) -> CommitStats:
        """Return the counts of this process's commits to the queue (for metrics)."""
        total = CommitStats()
        for opener in self.openers:
            total.add((await opener.store()).stats)
        return total

    async def throughput(
        self, window: timedelta = timedelta(hours=1), bucket: timedelta = timedelta(minutes=1)
    ) -> Throughput:
        """Return how many jobs were acked and how many died in each ``bucket`` of the last
        ``window``, from the history (at a cost bounded by ``HISTORY_BUDGET`` records a shard)."""
        POSITIVE_SPAN.check("window", window)
        POSITIVE_SPAN.check("bucket", bucket)
        now = to_micros(utc_now())
        each = await self._views(
            lambda index: throughput(index, now, span_micros(window), span_micros(bucket))
        )
        for other in each[1:]:
            each[0].add(other)
        return each[0]

    async def timings(self, sample: int = 1_000) -> dict[str, Timings]:
        """Return, per entrypoint, the outcomes and the wait and run time percentiles of its
        newest ``sample`` finished jobs, from the history."""

        def newest(index: QueueIndex) -> list[HistoryRecord]:
            return list(islice(index.history.newest_first(), HISTORY_BUDGET))

        each = await self._views(newest)
        merged = heapq.merge(*each, key=lambda record: -record.finished)
        return timings_of(islice(merged, HISTORY_BUDGET), sample)

    async def dead_groups(self, entrypoint: str | None = None) -> list[DeadGroup]:
        """Return the dead jobs (of ``entrypoint`` if given) grouped by the first line of their
        error, largest group first (at most ``GROUP_BUDGET`` dead jobs a shard are looked at)."""
        return joined_groups(await self._views(lambda index: dead_groups(index, entrypoint)))
