"""jqueue on a local file root, for ``benchmark_peers.py``:
``run_jqueue.py direct|broker|serve SCENARIO WORKDIR ...``; ``serve`` calls the ``jqueue serve``
at ``$JQUEUE_URL`` (``jqueue.connect``), which the benchmark starts on ``WORKDIR/root``."""

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

from jqueue import BrokerQueue, DirectQueue, Job, LocalFileSystemStorage, RemoteQueue, Worker
from jqueue.adapters.event_loop import run_event_loop


def open_queue(kind: str, workdir: Path) -> DirectQueue | BrokerQueue | RemoteQueue:
    """The queue of a run, at ``WORKDIR/queue.json`` (served: ``WORKDIR/root/queue.json``)."""
    if kind == "serve":
        return RemoteQueue(os.environ["JQUEUE_URL"], "queue")
    storage = LocalFileSystemStorage(workdir / "queue.json")
    return BrokerQueue(storage) if kind == "broker" else DirectQueue(storage)


async def produce(args: argparse.Namespace) -> dict[str, Any]:
    """The timed producer scenarios, and the untimed fill of the others."""
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
            for _ in range(args.jobs // BATCH):
                await queue.enqueue_many(ENTRYPOINT, [payload() for _ in range(BATCH)])
        elif args.scenario == "paced":
            for pause in paced(args.jobs, args.rate):
                await asyncio.sleep(pause)
                await queue.enqueue(ENTRYPOINT, payload())
    return result


async def work(args: argparse.Namespace) -> None:
    """A worker process: wait for ``WORKDIR/go``, then run until stopped (SIGTERM)."""
    done = Done(args.workdir)
    record = record_latency(args.workdir) if args.scenario == "latency-worker" else None
    async with open_queue(args.kind, args.workdir) as queue:
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
    args = runner_arguments(["direct", "broker", "serve"])
    started = time.time()
    if args.scenario.endswith("worker"):
        run_event_loop(work(args))  # as ``jqueue worker`` runs its handlers
    else:
        emit({**asyncio.run(produce(args)), "wall_s": round(time.time() - started, 3)})


if __name__ == "__main__":
    main()
