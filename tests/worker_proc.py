"""A worker process for the signal and crash tests (run by test_worker_processes.py).

Usage: python worker_proc.py URL OUTFILE SLEEP_MS CONCURRENCY GRACE_S VISIBILITY_S

Runs a ``Worker`` over a ``BrokerQueue`` at URL until a signal stops it. The handler
of entrypoint "work" appends the job id to OUTFILE.started, sleeps SLEEP_MS, appends it to
OUTFILE (each flushed), and returns. Prints "ready" once the queue is open.
"""

from __future__ import annotations

import asyncio
import sys
from datetime import timedelta
from pathlib import Path

from jqueue import BrokerQueue, Job, QueuePolicy, Worker, storage_from_url


async def main(
    url: str, outfile: Path, sleep_ms: int, concurrency: int, grace: float, visibility: float
) -> None:
    lease = timedelta(seconds=visibility)
    policy = QueuePolicy(history_limit=0)
    started = outfile.with_name(outfile.name + ".started")
    with outfile.open("a", buffering=1) as out, started.open("a", buffering=1) as begun:

        async def handle(job: Job) -> None:
            begun.write(f"{job.id}\n")
            await asyncio.sleep(sleep_ms / 1000)
            out.write(f"{job.id}\n")

        async with BrokerQueue(storage_from_url(url), stale_timeout=lease, policy=policy) as queue:
            worker = Worker(
                queue, {"work": handle}, concurrency=concurrency, grace_period=timedelta(seconds=grace)
            )
            print("ready", flush=True)
            await worker.run()


if __name__ == "__main__":
    url, outfile, sleep_ms, concurrency, grace, visibility = sys.argv[1:7]
    asyncio.run(main(url, Path(outfile), int(sleep_ms), int(concurrency), float(grace), float(visibility)))
