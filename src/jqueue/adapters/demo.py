"""A runnable end-to-end demonstration: producers and workers sharing one queue.

``python -m jqueue`` enqueues jobs and drains them with several workers, each job
under a heartbeat, on a local file queue (``.jqueue/demo.json``) unless ``--url``
names another storage.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from datetime import timedelta
from pathlib import Path

from jqueue.adapters.storage.url import storage_from_url
from jqueue.core.broker import BrokerQueue
from jqueue.core.heartbeat import HeartbeatManager

DEFAULT_PATH = Path(".jqueue") / "demo.json"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Read the demo's options."""
    parser = argparse.ArgumentParser(prog="python -m jqueue", description=__doc__)
    parser.add_argument("--url", help=f"storage URL (default: file URL of ./{DEFAULT_PATH})")
    parser.add_argument("--jobs", type=int, default=200, help="jobs to enqueue (default: 200)")
    parser.add_argument("--workers", type=int, default=8, help="concurrent workers (default: 8)")
    return parser.parse_args(argv)


async def run_demo(url: str, jobs: int, workers: int) -> dict[str, object]:
    """Enqueue ``jobs`` jobs, drain them with ``workers`` workers and return a summary."""
    processed: list[int] = []
    started = time.perf_counter()
    async with BrokerQueue(storage_from_url(url)) as queue:
        enqueued = await asyncio.gather(
            *(queue.enqueue("square", json.dumps({"n": n}).encode(), priority=n % 3) for n in range(jobs))
        )

        async def worker() -> None:
            while claimed := await queue.dequeue("square", batch_size=4):
                for job in claimed:
                    async with HeartbeatManager(queue, job, interval=timedelta(seconds=5)):
                        processed.append(json.loads(job.payload)["n"] ** 2)
                    await queue.ack(job)

        await asyncio.gather(*(worker() for _ in range(workers)))
        state = await queue.read_state()
    return {
        "url": url,
        "enqueued": len(enqueued),
        "processed": len(processed),
        "sum_of_squares": sum(processed),
        "left_in_queue": len(state.jobs),
        "state_version": state.version,
        "seconds": round(time.perf_counter() - started, 3),
    }


def main(argv: list[str] | None = None) -> None:
    """Run the demo and print its summary as JSON."""
    args = parse_args(argv)
    url = args.url or DEFAULT_PATH.absolute().as_uri()
    print(json.dumps(asyncio.run(run_demo(url, args.jobs, args.workers)), indent=2))
