"""Benchmark the cost of queue operations as the queue grows deep (the log-structured layout).

For each backend and depth, a child process fills a fresh queue with ``depth``
jobs (a ``BrokerQueue`` folding 1,000 concurrent enqueues per commit), opens it
again with a new ``DirectQueue`` and measures:

- ``enqueue``: sequential enqueues, latency per call;
- ``dequeue+ack``: sequential dequeue-then-ack pairs, latency per pair;
- ``broker c50``: a ``BrokerQueue`` with 50 callers, each looping dequeue, ack,
  enqueue (the depth stays put), in calls per second;
- the child's peak resident set size (it holds the whole queue's metadata; on the
  memory backend it also holds the stored objects themselves).

``--open-test`` then measures, on the file backend at the largest depth, how long a
fresh process takes to open the queue when 1,000 commits have landed since its
last checkpoint. ``--s3-latency`` measures a ``BrokerQueue`` with 1,000 concurrent
callers on S3 (moto's server in its own process) with 60 ms added to every read
and 100 ms to every write.

Examples
--------
The issue's figures (several minutes; about 3 GB of disk at 1M jobs)::

    .venv/bin/python tools/benchmark_depth.py --depths 1000,100000,1000000 --open-test --s3-latency

A quick look::

    .venv/bin/python tools/benchmark_depth.py --depths 1000,10000 --ops 200
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

from jqueue import (
    BrokerQueue,
    DirectQueue,
    InMemoryStorage,
    LocalFileSystemStorage,
    LogSettings,
    ObjectStoragePort,
)
from jqueue.domain.figures import percentiles
from jqueue.testing import free_port

ENTRYPOINT = "work"
FILL_BATCH = 1000
NO_CHECKPOINTS = LogSettings(checkpoint_every=10**12)


def _peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


async def _fill(storage: ObjectStoragePort, depth: int, payload: bytes) -> float:
    start = time.perf_counter()
    async with BrokerQueue(storage, max_payload_bytes=None) as broker:
        for first in range(0, depth, FILL_BATCH):
            count = min(FILL_BATCH, depth - first)
            await asyncio.gather(*(broker.enqueue(ENTRYPOINT, payload) for _ in range(count)))
    return time.perf_counter() - start


async def _latencies(calls: int, call: Callable[[], Awaitable[object]]) -> list[float]:
    latencies = []
    for _ in range(calls):
        start = time.perf_counter()
        await call()
        latencies.append((time.perf_counter() - start) * 1000)
    return latencies


def _summary(latencies: list[float]) -> dict[str, float]:
    p50, p99 = percentiles(latencies, (0.5, 0.99))
    return {
        "mean_ms": round(statistics.fmean(latencies), 3),
        "p50_ms": round(p50, 3),
        "p99_ms": round(p99, 3),
    }


async def _broker_cycles(broker: BrokerQueue, callers: int, total_calls: int) -> float:
    """Run ``callers`` loops of dequeue, ack, enqueue until ``total_calls``; return calls per second."""
    remaining = total_calls
    payload = b"y" * 1024

    def take() -> bool:
        nonlocal remaining
        remaining -= 1
        return remaining >= 0

    async def caller() -> None:
        while take():
            claimed = await broker.dequeue(ENTRYPOINT)
            for job in claimed:
                if take():
                    await broker.ack(job.id)
            if take():
                await broker.enqueue(ENTRYPOINT, payload)

    start = time.perf_counter()
    await asyncio.gather(*(caller() for _ in range(callers)))
    return total_calls / (time.perf_counter() - start)


async def run_case(backend: str, depth: int, ops: int, broker_calls: int, directory: Path) -> dict[str, Any]:
    """Fill a fresh queue to ``depth`` and measure it (runs in a child process)."""
    payload = b"x" * 1024
    key = f"depth-{depth}-{uuid.uuid4().hex[:8]}"
    storage: ObjectStoragePort = (
        InMemoryStorage(name=key)
        if backend == "memory"
        else LocalFileSystemStorage(directory / f"{key}.json")
    )
    fill_seconds = await _fill(storage, depth, payload)
    result: dict[str, Any] = {
        "backend": backend,
        "depth": depth,
        "fill_jobs_per_s": round(depth / fill_seconds),
    }
    async with DirectQueue(storage, max_payload_bytes=None) as direct:
        start = time.perf_counter()
        assert await direct.dequeue("nothing") == []
        result["reopen_s"] = round(time.perf_counter() - start, 3)
        result["enqueue"] = _summary(await _latencies(ops, lambda: direct.enqueue(ENTRYPOINT, payload)))

        async def dequeue_ack() -> None:
            [job] = await direct.dequeue(ENTRYPOINT)
            await direct.ack(job.id)

        result["dequeue_ack"] = _summary(await _latencies(ops, dequeue_ack))
    async with BrokerQueue(storage, max_payload_bytes=None) as broker:
        assert await broker.dequeue("nothing") == []  # opens the queue before the clock starts
        result["broker_c50_calls_per_s"] = round(await _broker_cycles(broker, 50, broker_calls))
    result["peak_rss_mib"] = round(_peak_rss_mib(), 1)
    return result


async def prepare_open_test(path: Path) -> None:
    """Checkpoint the queue at ``path`` now, then commit 1,000 single enqueues after it."""
    storage = LocalFileSystemStorage(path)
    async with DirectQueue(storage, log=LogSettings(checkpoint_every=1)) as q:
        await q.enqueue(ENTRYPOINT, b"checkpoint now")
    async with DirectQueue(storage, log=NO_CHECKPOINTS) as q:
        for _ in range(1000):
            await q.enqueue(ENTRYPOINT, b"after the checkpoint")


async def open_queue(path: Path) -> dict[str, Any]:
    """Open the queue at ``path`` in this fresh process and time it; then commit like a worker
    (1,000 enqueue, dequeue, ack rounds and a checkpoint) and report the peak memory."""
    start = time.perf_counter()
    async with DirectQueue(LocalFileSystemStorage(path), log=NO_CHECKPOINTS) as q:
        assert await q.dequeue("nothing") == []
        seconds = time.perf_counter() - start
        rss_open = _peak_rss_mib()
        for _ in range(1000):
            await q.enqueue(ENTRYPOINT, b"z" * 1024)
            [job] = await q.dequeue(ENTRYPOINT)
            await q.ack(job.id)
        assert await q.checkpoint()
    return {
        "open_s": round(seconds, 3),
        "peak_rss_mib_after_open": round(rss_open, 1),
        "peak_rss_mib_committing": round(_peak_rss_mib(), 1),
    }


def start_moto() -> tuple[subprocess.Popen[bytes], str]:
    """Start moto's S3 server in its own process with the benchmark bucket; returns it and its URL."""
    import boto3  # type: ignore[import-untyped, unused-ignore]

    from benchmark_storage import S3_BUCKET, S3_REGION

    port = free_port()
    os.environ.update({"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench"})
    server = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    endpoint = f"http://127.0.0.1:{port}"
    client = boto3.client("s3", endpoint_url=endpoint, region_name=S3_REGION)
    for _ in range(100):
        try:
            client.create_bucket(Bucket=S3_BUCKET)
            return server, endpoint
        except Exception:
            time.sleep(0.1)
    server.kill()
    raise RuntimeError("moto's server did not start")


async def run_s3_latency(endpoint: str, callers: int, calls: int, prefill: int) -> dict[str, Any]:
    """BrokerQueue throughput with ``callers`` callers on S3 at ``endpoint`` (60 ms per GET, 100 per PUT)."""
    from benchmark_storage import S3_BUCKET, S3_REGION
    from jqueue.adapters.storage.s3 import S3Storage
    from jqueue.testing import Faults, instrumented

    key = f"latency-{uuid.uuid4().hex[:8]}.json"
    inner = S3Storage(S3_BUCKET, key, endpoint_url=endpoint, region_name=S3_REGION)
    await _fill(inner, prefill, b"x" * 1024)
    latency = Faults(read_latency=timedelta(milliseconds=60), write_latency=timedelta(milliseconds=100))
    storage = instrumented(inner, latency)
    async with BrokerQueue(storage, max_payload_bytes=None, stale_timeout=timedelta(hours=1)) as broker:
        assert await broker.dequeue("nothing") == []
        rate = await _broker_cycles(broker, callers, calls)
    return {
        "callers": callers,
        "calls": calls,
        "calls_per_s": round(rate),
        "storage_reads": storage.reads,
        "storage_writes": storage.writes,
        "conflicts": storage.conflicts,
    }


def _child(arguments: Sequence[str]) -> dict[str, Any]:
    command = [sys.executable, __file__, *arguments]
    done = subprocess.run(command, check=True, capture_output=True, text=True)
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark; prints one JSON object per measurement and writes them all to ``--json``."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--backends", default="memory,file", help="comma-separated: memory, file")
    parser.add_argument("--depths", default="1000,100000", help="comma-separated queue depths")
    parser.add_argument("--ops", type=int, default=1000, help="sequential calls per measurement")
    parser.add_argument("--broker-calls", type=int, default=10000, help="calls in the broker c50 run")
    parser.add_argument("--dir", type=Path, default=None, help="where file queues go (default: a temp dir)")
    parser.add_argument("--open-test", action="store_true", help="time a fresh open at the largest depth")
    parser.add_argument("--s3-latency", action="store_true", help="run the 1,000-caller S3 latency case")
    parser.add_argument("--json", type=Path, default=Path("bench-results/depth.json"), help="results file")
    parser.add_argument("--case", nargs=2, metavar=("BACKEND", "DEPTH"), help=argparse.SUPPRESS)
    parser.add_argument("--prepare-open", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--open", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--s3-case", action="store_true", help=argparse.SUPPRESS)
    ns = parser.parse_args(argv)

    if ns.case:
        backend, depth = ns.case[0], int(ns.case[1])
        print(json.dumps(asyncio.run(run_case(backend, depth, ns.ops, ns.broker_calls, ns.dir))))
        return 0
    if ns.prepare_open:
        asyncio.run(prepare_open_test(ns.prepare_open))
        print(json.dumps({}))
        return 0
    if ns.open:
        print(json.dumps(asyncio.run(open_queue(ns.open))))
        return 0
    if ns.s3_case:
        server, endpoint = start_moto()
        try:
            print(json.dumps(asyncio.run(run_s3_latency(endpoint, 1000, 30000, 10000))))
        finally:
            server.terminate()
            server.wait(timeout=30)
        return 0

    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(dir=ns.dir) as scratch:
        directory = Path(scratch)
        depths = [int(d) for d in ns.depths.split(",")]
        for backend in ns.backends.split(","):
            for depth in depths:
                common = [
                    "--ops",
                    str(ns.ops),
                    "--broker-calls",
                    str(ns.broker_calls),
                    "--dir",
                    str(directory),
                ]
                row = _child(["--case", backend, str(depth), *common])
                print(json.dumps(row), flush=True)
                results.append(row)
        if ns.open_test:
            deepest = max(depths)
            if not list(directory.glob(f"depth-{deepest}-*.json")):
                _child(
                    [
                        "--case",
                        "file",
                        str(deepest),
                        "--ops",
                        "1",
                        "--broker-calls",
                        "1",
                        "--dir",
                        str(directory),
                    ]
                )
            [path] = directory.glob(f"depth-{deepest}-*.json")
            _child(["--prepare-open", str(path)])
            row = {"open_test": _child(["--open", str(path)]), "depth": deepest}
            print(json.dumps(row), flush=True)
            results.append(row)
    if ns.s3_latency:
        row = {"s3_latency": _child(["--s3-case"])}
        print(json.dumps(row), flush=True)
        results.append(row)
    ns.json.parent.mkdir(parents=True, exist_ok=True)
    ns.json.write_text(json.dumps({"command": sys.argv, "results": results}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
