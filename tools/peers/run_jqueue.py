"""jqueue on a local file root, for ``benchmark_peers.py``:
``run_jqueue.py direct|broker|serve|shards|queues SCENARIO WORKDIR ...``; ``serve`` calls the
``jqueue serve`` at ``$JQUEUE_URL``, which the benchmark starts on ``WORKDIR/root``. With several
members of one root (``$JQUEUE_URL`` lists them, comma-separated), ``shards`` is one queue of two
shards (``jqueue.sharded``) and ``queues`` two queues, half the jobs each: worker ``n`` calls
member ``n`` in turn (and, for ``queues``, the queue ``n % 2``)."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from common import (
    BATCH,
    ENTRYPOINT,
    Done,
    emit,
    measured,
    paced,
    payload,
    ready_then_go,
    record_latency,
    runner_arguments,
)

import jqueue
from jqueue import BrokerQueue, DirectQueue, Job, LocalFileSystemStorage, RemoteQueue, ShardedQueue, Worker
from jqueue.adapters.event_loop import run_event_loop

SHARDS = 2
"""The shards of ``shards``'s queue, and the queues of ``queues``."""

AnyQueue = DirectQueue | BrokerQueue | RemoteQueue | ShardedQueue


def open_queue(kind: str, workdir: Path, index: int = 0) -> AnyQueue:
    """The queue of a run, at ``WORKDIR/queue.json`` (served: ``WORKDIR/root/queue.json``), as
    worker ``index`` calls it."""
    if kind in ("serve", "shards", "queues"):
        urls = os.environ["JQUEUE_URL"].split(",")
        url = urls[index % len(urls)]
        if kind == "shards":
            return jqueue.sharded(url, "queue", SHARDS, broker="require")
        return RemoteQueue(url, "queue" if kind == "serve" else f"queue{index % SHARDS}")
    storage = LocalFileSystemStorage(workdir / "queue.json")
    return BrokerQueue(storage) if kind == "broker" else DirectQueue(storage)


async def produce(args: argparse.Namespace) -> dict[str, Any]:
    """The timed producer scenarios, and the untimed fill of the others."""
    if args.kind == "queues":  # half the jobs in each queue
        for index in range(SHARDS):
            async with open_queue(args.kind, args.workdir, index) as queue:
                await fill(queue, args.jobs // SHARDS)
        return {}
    result: dict[str, Any] = {}
    async with open_queue(args.kind, args.workdir) as queue:
        await queue.enqueue("warm-up", b"creates the queue")
        if args.scenario == "sequential":
            with measured(result, args.jobs):
                for _ in range(args.jobs):
                    await queue.enqueue(ENTRYPOINT, payload())
        elif args.scenario == "batch":
            with measured(result, args.jobs):
                for _ in range(args.jobs // BATCH):
                    await queue.enqueue_many(ENTRYPOINT, [payload() for _ in range(BATCH)])
        elif args.scenario == "fill":
            await fill(queue, args.jobs)
        elif args.scenario == "paced":
            for pause in paced(args.jobs, args.rate):
                await asyncio.sleep(pause)
                await queue.enqueue(ENTRYPOINT, payload())
    return result


async def fill(queue: AnyQueue, jobs: int) -> None:
    """Enqueue ``jobs`` jobs in batches, untimed."""
    for _ in range(jobs // BATCH):
        await queue.enqueue_many(ENTRYPOINT, [payload() for _ in range(BATCH)])


async def work(args: argparse.Namespace) -> None:
    """A worker process: wait for ``WORKDIR/go``, then run until stopped (SIGTERM)."""
    done = Done(args.workdir)
    record = record_latency(args.workdir) if args.scenario == "latency-worker" else None
    async with open_queue(args.kind, args.workdir, args.index) as queue:
        worker = Worker(queue, concurrency=args.concurrency)

        @worker.handler(ENTRYPOINT)
        async def handle(job: Job) -> None:
            if record is not None:
                record(job.payload)
            done.one()

        await ready_then_go(args)
        await worker.run()


def main() -> None:
    """Run one scenario and print its result."""
    args = runner_arguments(["direct", "broker", "serve", "shards", "queues"])
    started = time.time()
    if args.scenario.endswith("worker"):
        run_event_loop(work(args))  # as ``jqueue worker`` runs its handlers
    else:
        emit({**asyncio.run(produce(args)), "wall_s": round(time.time() - started, 3)})


if __name__ == "__main__":
    main()
