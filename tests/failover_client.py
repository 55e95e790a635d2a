"""A producer or worker process for the failover test under load (test_failover_load.py).

Usage:
    python failover_client.py produce ROOT OUTFILE FIRST COUNT
    python failover_client.py work ROOT OUTFILE STOPFILE

Both reach queue "q" through ``connect(ROOT, "q")``: the broker the root's record names,
followed through failovers. ``produce`` enqueues payloads ``p-FIRST`` .. in batches of 5,
one every ``PACE`` s, and writes ``ID PAYLOAD`` for each job the calls returned. ``work``
claims batches (5 s leases), writes ``ID PAYLOAD ATTEMPTS`` for each job before acking it,
and notes an ack whose answer says the lease is gone (``lost ID``); it stops once STOPFILE
exists and a claim finds nothing.
"""

from __future__ import annotations

import asyncio
import sys
from datetime import timedelta
from pathlib import Path

from jqueue import JobNotFoundError, LeaseLostError, connect

PACE = 0.1
"""Seconds between a producer's batches, so that it runs through every kill of the test."""
LEASE = timedelta(seconds=5)
"""Short, so that a claim whose answer a killed broker never sent runs out soon."""


async def produce(root: str, out: Path, first: int, count: int) -> None:
    async with connect(root, "q") as queue:
        with out.open("a", buffering=1) as lines:
            for start in range(first, first + count, 5):
                payloads = [f"p-{n}".encode() for n in range(start, min(start + 5, first + count))]
                for job in await queue.enqueue_many("work", payloads):
                    lines.write(f"{job.id} {job.payload.decode()}\n")
                await asyncio.sleep(PACE)


async def work(root: str, out: Path, stop: Path) -> None:
    async with connect(root, "q") as queue:
        with out.open("a", buffering=1) as lines:
            while True:
                jobs = await queue.dequeue(batch_size=5, visibility_timeout=LEASE)
                if not jobs:
                    if stop.exists():
                        return
                    await asyncio.sleep(0.05)
                    continue
                for job in jobs:
                    lines.write(f"{job.id} {job.payload.decode()} {job.attempts}\n")
                    try:
                        await queue.ack(job)
                    except (LeaseLostError, JobNotFoundError):
                        lines.write(f"lost {job.id}\n")


if __name__ == "__main__":
    mode, root, outfile = sys.argv[1:4]
    if mode == "produce":
        asyncio.run(produce(root, Path(outfile), int(sys.argv[4]), int(sys.argv[5])))
    else:
        asyncio.run(work(root, Path(outfile), Path(sys.argv[4])))
