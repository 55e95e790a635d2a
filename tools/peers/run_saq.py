"""SAQ on Redis (the append-only file synced on every write), for ``benchmark_peers.py``:
``run_saq.py SCENARIO WORKDIR ...`` with the server in ``REDIS_URL``. SAQ has no batch enqueue:
``batch`` enqueues one by one. Its jobs are JSON, so the payload travels as text (the same 1 KB)."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from common import (
    BATCH,
    ENTRYPOINT,
    Done,
    measured,
    paced,
    payload,
    ready_then_go,
    record_latency,
    run_asyncio_runner,
)
from saq import Queue, Worker


def text() -> str:
    """The benchmark's payload as the text SAQ's JSON can carry."""
    return payload().decode()


async def produce(args: argparse.Namespace) -> dict[str, Any]:
    """The producer scenarios."""
    queue = Queue.from_url(os.environ["REDIS_URL"])
    result: dict[str, Any] = {}
    try:
        await queue.connect()
        if args.scenario in ("sequential", "batch"):
            with measured(result, args.jobs):
                for _ in range(args.jobs):
                    await queue.enqueue(ENTRYPOINT, data=text())
            if args.scenario == "batch":
                result["note"] = "no batch API: one enqueue per job"
        elif args.scenario == "fill":
            for _ in range(args.jobs // BATCH * BATCH):
                await queue.enqueue(ENTRYPOINT, data=text())
        elif args.scenario == "paced":
            for pause in paced(args.jobs, args.rate):
                await asyncio.sleep(pause)
                await queue.enqueue(ENTRYPOINT, data=text())
    finally:
        await queue.disconnect()
    return result


async def work(args: argparse.Namespace) -> None:
    """A worker process: a ``Worker`` with its defaults (each of its tasks blocks on Redis for the next
    job, ``BLMOVE``, rather than polling), until SIGTERM."""
    done = Done(args.workdir)
    record = record_latency(args.workdir) if args.scenario == "latency-worker" else None

    async def handle(ctx: dict[str, Any], *, data: str) -> None:
        if record is not None:
            record(data.encode())
        done.one()

    queue = Queue.from_url(os.environ["REDIS_URL"])
    await queue.connect()
    await queue.version()  # reaches the server before the worker says it is ready
    worker = Worker(queue, functions=[(ENTRYPOINT, handle)], concurrency=args.concurrency)
    await ready_then_go(args)
    try:
        await worker.start()  # returns on SIGTERM (its own handler)
    finally:
        await queue.disconnect()


if __name__ == "__main__":
    run_asyncio_runner(produce, work)
