"""A worker process for the limit test (run by test_limits.py).

Usage: python limit_worker.py URL

Runs a ``Worker`` (concurrency 6, more than the limit of "work", so that one process alone
runs "other" jobs beside it) over a ``BrokerQueue`` at URL whose handler of entrypoint
"work" sleeps 30 ms, until the queue has nothing for it; prints "ready" once it is open.
"""

from __future__ import annotations

import asyncio
import sys

from jqueue import BrokerQueue, Job, Worker, storage_from_url


async def main(url: str) -> None:
    async def handle(job: Job) -> None:
        await asyncio.sleep(0.03)

    async with BrokerQueue(storage_from_url(url)) as queue:
        print("ready", flush=True)
        await Worker(queue, {"work": handle, "other": handle}, concurrency=6).burst()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
