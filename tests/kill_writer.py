"""Commits jobs to a file queue forever, printing each id once committed (run by test_processes.py).

Usage: python kill_writer.py PATH LAYOUT

On the log layout it checkpoints every 20 changes and compacts with a one-second retention,
so kills land in checkpoints and compactions too. Between those jobs it enqueues, claims and
acks scratch jobs, so that checkpoints drop rows and retire slabs.
"""

from __future__ import annotations

import asyncio
import sys
from datetime import timedelta

from jqueue import DirectQueue, LocalFileSystemStorage, LogSettings
from jqueue.core.commits import Layout


async def run(path: str, layout: Layout) -> None:
    settings = LogSettings(checkpoint_every=20, retention=timedelta(seconds=1))
    async with DirectQueue(LocalFileSystemStorage(path), layout=layout, log=settings) as q:
        while True:
            job = await q.enqueue("work", b"x" * 4096)
            print(job.id, flush=True)
            await q.enqueue("scratch", b"s")
            for scratch in await q.dequeue("scratch"):
                await q.ack(scratch)


if __name__ == "__main__":
    path, layout = sys.argv[1:3]
    asyncio.run(run(path, "log" if layout == "log" else "single"))
