"""The CPU of a sequential durable enqueue on a local file root, and where it goes.

``.venv/bin/python tools/enqueue_cpu.py [--queue direct|broker] [--jobs N] [--layers]`` enqueues
N jobs one at a time (each ``await queue.enqueue`` returns once its commit is synced), after
a warm-up, and prints the process's CPU per job, user and system apart. With ``--layers`` it
runs again under ``cProfile`` and adds up the time of each function by where it lives (the
domain, the engine, the adapters, asyncio, built-ins, the system calls that reach the disk),
with the calls per job: the profiler slows every call, so compare shares and call counts,
not the profiled microseconds with the unprofiled ones. Compare two versions in one sitting,
interleaved (``PYTHONPATH=CHECKOUT/src``), since a shared machine is noisy.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import cProfile
import os
import pstats
import tempfile
from pathlib import Path

from jqueue import BrokerQueue, DirectQueue, LocalFileSystemStorage

WARM_UP = 300
PAYLOAD = b"p" * 100
SYSCALLS = ("fdatasync", "pwrite", "pread", "flock", "posix.stat")


async def enqueue_sequentially(kind: str, jobs: int, profile: cProfile.Profile | None) -> os.times_result:
    """Enqueue ``jobs`` jobs one at a time on a fresh file root; return the CPU times they took."""
    storage = LocalFileSystemStorage(Path(tempfile.mkdtemp()) / "queue.json")
    queue = DirectQueue(storage) if kind == "direct" else BrokerQueue(storage)
    async with queue:
        for _ in range(WARM_UP):
            await queue.enqueue("warm-up", PAYLOAD)
        before = os.times()
        if profile is not None:
            profile.enable()
        for _ in range(jobs):
            await queue.enqueue("job", PAYLOAD)
        if profile is not None:
            profile.disable()
        after = os.times()
    return os.times_result(tuple(b - a for a, b in zip(before, after, strict=True)))


def layer_of(file: str, function: str) -> str:
    """Where a profiled function lives, as ``--layers`` adds them up."""
    if any(call in function for call in SYSCALLS):
        return "system calls (disk)"
    if "/jqueue/" in file:
        return "jqueue." + file.split("/jqueue/")[1].split("/")[0].removesuffix(".py")
    if "asyncio" in file:
        return "asyncio"
    return "built-ins" if file == "~" else "standard library"


def print_layers(profile: cProfile.Profile, jobs: int) -> None:
    """Print the profiled time and the calls per job of each layer."""
    seconds: collections.Counter[str] = collections.Counter()
    calls: collections.Counter[str] = collections.Counter()
    stats = pstats.Stats(profile).stats  # type: ignore[attr-defined]
    for (file, _, function), (_, count, own, _, _) in stats.items():
        layer = layer_of(file, function)
        seconds[layer] += own
        calls[layer] += count
    total = sum(seconds.values())
    for layer, own in seconds.most_common():
        share = 100 * own / total
        print(f"  {layer:22s} {share:5.1f}% of the profiled time  {calls[layer] / jobs:6.1f} calls/job")
    print(f"  {'all':22s} {sum(calls.values()) / jobs:6.1f} calls/job")


def main() -> None:
    """Measure, and with ``--layers`` profile, one run."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--queue", choices=("direct", "broker"), default="direct")
    parser.add_argument("--jobs", type=int, default=5_000)
    parser.add_argument("--layers", action="store_true", help="profile a second run, by layer")
    args = parser.parse_args()
    spent = asyncio.run(enqueue_sequentially(args.queue, args.jobs, None))
    per_job = 1000 / args.jobs
    cpu, user, system = (spent.user + spent.system) * per_job, spent.user * per_job, spent.system * per_job
    split = f"user {user:.3f}, system {system:.3f}"
    print(f"{args.queue}, {args.jobs} sequential enqueues: CPU {cpu:.3f} ms/job ({split})")
    if args.layers:
        profile = cProfile.Profile()
        asyncio.run(enqueue_sequentially(args.queue, args.jobs, profile))
        print_layers(profile, args.jobs)


if __name__ == "__main__":
    main()
