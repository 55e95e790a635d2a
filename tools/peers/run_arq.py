"""arq on Redis (the append-only file synced on every write), for ``benchmark_peers.py``:
``run_arq.py SCENARIO WORKDIR ...`` with the server in ``REDIS_URL``. arq has no batch enqueue:
``batch`` enqueues one by one."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from contextlib import suppress
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from arq import Worker, create_pool, func
from arq.connections import RedisSettings
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


def settings() -> RedisSettings:
    """The connection settings of the benchmark's server."""
    return RedisSettings.from_dsn(os.environ["REDIS_URL"])


async def produce(args: argparse.Namespace) -> dict[str, Any]:
    """The producer scenarios."""
    pool = await create_pool(settings())
    result: dict[str, Any] = {}
    try:
        if args.scenario in ("sequential", "batch"):
            with measured(result, args.jobs):
                for _ in range(args.jobs):
                    await pool.enqueue_job(ENTRYPOINT, payload())
            if args.scenario == "batch":
                result["note"] = "no batch API: one enqueue per job"
        elif args.scenario == "fill":
            for _ in range(args.jobs // BATCH * BATCH):
                await pool.enqueue_job(ENTRYPOINT, payload())
        elif args.scenario == "paced":
            for pause in paced(args.jobs, args.rate):
                await asyncio.sleep(pause)
                await pool.enqueue_job(ENTRYPOINT, payload())
    finally:
        await pool.aclose()
    return result


async def work(args: argparse.Namespace) -> None:
    """A worker process: a ``Worker`` with its defaults (it polls the queue every 0.5 s, starting up to
    ``max_jobs`` jobs at a time), until SIGTERM."""
    done = Done(args.workdir)
    record = record_latency(args.workdir) if args.scenario == "latency-worker" else None

    async def handle(ctx: dict[str, Any], data: bytes) -> None:
        if record is not None:
            record(data)
        done.one()

    pool = await create_pool(settings())  # reaches the server before the worker says it is ready
    worker = Worker([func(handle, name=ENTRYPOINT)], redis_pool=pool, max_jobs=args.concurrency)
    await ready_then_go(args)
    with suppress(asyncio.CancelledError):  # its SIGTERM handler cancels its main task
        await worker.async_run()
    with suppress(asyncio.CancelledError):
        await worker.close()


if __name__ == "__main__":
    run_asyncio_runner(produce, work)
