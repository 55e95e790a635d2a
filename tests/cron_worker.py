"""A worker process for the cron test (run by test_cron.py).

Usage: python cron_worker.py URL SECONDS

Runs a ``Worker`` over a ``BrokerQueue`` at URL with a periodic job of entrypoint "tick"
every 0.5 s, acking each, for SECONDS; prints "ready" once the queue is open.
"""

from __future__ import annotations

import asyncio
import sys
from datetime import timedelta

from jqueue import BrokerQueue, Job, Worker, storage_from_url


async def main(url: str, seconds: float) -> None:
    async def handle(job: Job) -> None:
        return None

    async with BrokerQueue(storage_from_url(url)) as queue:
        worker = Worker(queue, {"tick": handle})
        worker.cron(None, "tick", b"", every=timedelta(seconds=0.5))
        print("ready", flush=True)
        asyncio.get_running_loop().call_later(seconds, worker.stop)
        await worker.run(install_signals=False)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], float(sys.argv[2])))
