"""The shards of the queue a Spark read or write names (``jqueue.sharded``, ADR 0022)."""

from __future__ import annotations

import asyncio

from jqueue.adapters.service.wire.root import shard_location
from jqueue.adapters.storage.url import storage_from_url
from jqueue.core.direct import DirectQueue


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


def unsharded(url: str) -> None:
    """Refuse a write to the queue at ``url`` if it has several shards: a write's jobs would
    all go to one log, past the shard their tenant or dedup key gives them.

    Raises
    ------
    ValueError
        If the queue has more than one shard.
    """
    count = len(shard_urls(url))
    if count > 1:
        raise ValueError(
            f"{url} is a queue of {count} shards: a Spark write goes to a queue of one; enqueue"
            " to a sharded queue through jqueue.sharded(...).enqueue_many"
        )
