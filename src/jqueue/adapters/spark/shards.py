"""The shards of the queue a Spark read or write names (``jqueue.sharded``, ADR 0022), and the
shard of each row a write adds (``RowRouter``)."""

from __future__ import annotations

import asyncio
import random

from jqueue.adapters.service.wire.root import shard_location
from jqueue.adapters.storage.url import storage_from_url
from jqueue.core.direct import DirectQueue
from jqueue.core.log.parts import PartRow
from jqueue.domain.sharding import routing_key, shard_of


def shard_urls(url: str) -> list[str]:
    """Return the storage URL of each shard of the queue at ``url``, shard 0 (``url``) first:
    one for a queue never sharded."""

    async def count() -> int:
        async with DirectQueue(storage_from_url(url)) as queue:
            return await queue.shards()

    return [shard_location(url, k) for k in range(asyncio.run(count()))]


def one_log(url: str, what: str, shard: str | None) -> str:
    """Return the URL of the log that ``what`` reads: shard ``shard`` of the queue at ``url``
    (the ``shard`` option) if given, else the queue's own if it has one shard.

    Raises
    ------
    ValueError
        If the queue has several shards and none is chosen (``what`` would miss the others'
        jobs), or the chosen one is not one of them.
    """
    urls = shard_urls(url)
    if shard is not None:
        if not shard.isdigit() or int(shard) >= len(urls):
            raise ValueError(
                f"shard must be one of 0 to {len(urls) - 1} (the shards of {url}), not {shard!r}"
            )
        return urls[int(shard)]
    if len(urls) > 1:
        raise ValueError(
            f"{url} is a queue of {len(urls)} shards, and {what} reads one log: choose a shard"
            f" with .option('shard', K), K from 0 to {len(urls) - 1}, one stream each"
        )
    return url


class RowRouter:
    """The shard of each row one task writes to a queue of ``len(urls)`` shards, as
    ``ShardedQueue`` places a job: its first parent's (a row this task placed, or a job in the
    queue), else its tenant's, else its dedup key's, else its id's, else the next shard in turn.

    Parameters
    ----------
    urls : list of str
        The storage URL of each shard, shard 0 first.
    """

    def __init__(self, urls: list[str]) -> None:
        self.urls = urls
        self.placed: dict[str, int] = {}
        """The shard of each row with an id this task placed, and of each parent found."""
        self._turn = random.randrange(len(urls))

    def route(self, row: PartRow) -> int | None:
        """Return the row's shard; None for a row whose first parent is not placed yet (it
        may come later in the task: ``settle`` places it then)."""
        count = len(self.urls)
        if row.after:
            shard = self.placed.get(row.after[0])
            if shard is None:
                return None
        elif row.tenant is not None or row.dedup_key is not None or row.id is not None:
            shard = shard_of(routing_key(row.tenant, row.dedup_key, row.id or ""), count)
        else:  # its id comes from its part's seed: spread, and found by a lookup when settled
            shard, self._turn = self._turn, (self._turn + 1) % count
        if row.id is not None:
            self.placed[row.id] = shard
        return shard

    async def settle(self, waiting: list[PartRow]) -> list[int]:
        """Return the shard of each row ``route`` left waiting, once every row is routed: its
        first parent's, placed by now or found in the queue.

        Raises
        ------
        ValueError
            If a row's first parent is neither a row of this task nor a job of the queue (a row
            of another task cannot be known here: its shard may be any).
        """
        coming = {row.id for row in waiting}
        parents = dict.fromkeys(row.after[0] for row in waiting)
        await self._find([parent for parent in parents if parent not in self.placed and parent not in coming])
        left = list(range(len(waiting)))
        while left:
            ready = {n for n in left if waiting[n].after[0] in self.placed}
            if not ready:
                row = waiting[left[0]]
                raise ValueError(
                    f"job {row.id or '(no id)'} waits for {row.after[0]}, which is neither in its"
                    " partition nor in the queue: on a queue of several shards a job goes to its"
                    " first parent's shard, so write a job in the same partition as its first parent"
                    " (or once the parent is in the queue)"
                )
            for n in sorted(ready):
                self.route(waiting[n])
            left = [n for n in left if n not in ready]
        return [self.placed[row.after[0]] for row in waiting]

    async def _find(self, job_ids: list[str]) -> None:
        """Place each of ``job_ids`` that a shard holds, live or finished."""
        for shard, url in enumerate(self.urls):
            if not job_ids:
                return
            async with DirectQueue(storage_from_url(url)) as queue:
                for job_id in job_ids:
                    if await queue.find(job_id) is not None or await queue.finished(job_id) is not None:
                        self.placed[job_id] = shard
            job_ids = [job_id for job_id in job_ids if job_id not in self.placed]
