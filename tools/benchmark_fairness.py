"""The fair share's figures (issue 32, ADR 0021), on a local-file queue of the log layout.

- **A tenant's first job behind a flood.** Tenant ``flood`` enqueues ``--flood`` jobs, then
  tenant ``small`` enqueues one, while a worker claims ``--batch`` jobs at a time and acks
  them (an idle worker: it claims again at once). It counts the claims until the small job
  is claimed, and the time from its enqueue's return to that claim's return: with the jobs
  as records (``hot``) and in a checkpoint's slabs, opened afresh (``cold``). Goals: one
  claim round (the claim after the enqueue, with a batch of two or more), 50 ms.
- **Throughput with many tenants.** ``--jobs`` jobs spread over ``--tenants`` tenants, and
  the same jobs without a tenant, drained (claims of ``--batch`` and ``ack_many``) by one
  process; each setting ``--repeats`` times, in turn; the best run of each. Goal: with the
  tenants, within 10% of without.
- **Claims beside tenants at their limit.** ``--blocked`` tenants each hold the one job in
  progress that a limit of one per tenant lets them, and have another waiting; ``--jobs``
  jobs of tenants under the limit are drained as above. A claim must not pay for the blocked
  tenants again and again: the figure is its time against the time with none blocked.

Example::

    .venv/bin/python tools/benchmark_fairness.py --flood 100000 --jobs 20000 --tenants 1000
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

from jqueue import DirectQueue, JobSpec, LocalFileSystemStorage, LogSettings

ENTRYPOINT = "work"
NEVER = LogSettings(checkpoint_every=10**9)
"""Only the checkpoints the benchmark takes."""
ENQUEUE_BATCH = 10_000


async def enqueue(queue: DirectQueue, tenants: Sequence[str | None]) -> None:
    """Enqueue a job for each of ``tenants``, ``ENQUEUE_BATCH`` per commit."""
    for start in range(0, len(tenants), ENQUEUE_BATCH):
        part = tenants[start : start + ENQUEUE_BATCH]
        await queue.enqueue_many([JobSpec(ENTRYPOINT, b"%d" % n, tenant=t) for n, t in enumerate(part)])


async def first_start(root: Path, flood: int, batch: int, cold: bool) -> tuple[int, float]:
    """Return the claims until the small tenant's job is claimed, and the milliseconds from
    its enqueue to that claim."""
    storage = LocalFileSystemStorage(root / "queue.json")
    async with DirectQueue(storage, log=NEVER) as queue:
        await enqueue(queue, ["flood"] * flood)
        await queue.ack_many(await queue.dequeue(ENTRYPOINT, batch_size=batch))  # the worker is at work
        if cold:
            await queue.checkpoint()
    async with DirectQueue(LocalFileSystemStorage(root / "queue.json"), log=NEVER) as queue:
        await queue.count()  # opened before the clock starts
        small = await queue.enqueue(ENTRYPOINT, b"small", tenant="small")
        started, claims = time.perf_counter(), 0
        while True:
            claims += 1
            jobs = await queue.dequeue(ENTRYPOINT, batch_size=batch)
            if any(job.id == small.id for job in jobs):
                return claims, (time.perf_counter() - started) * 1000
            if not jobs:
                raise RuntimeError("the small tenant's job was never claimed")
            await queue.ack_many(jobs)


async def timed_drain(queue: DirectQueue, jobs: int, batch: int) -> float:
    """Return the jobs per second one process claims (``batch`` at a time) and acks until
    nothing is claimable, checking that they are ``jobs``."""
    started, done = time.perf_counter(), 0
    while claimed := await queue.dequeue(ENTRYPOINT, batch_size=batch):
        await queue.ack_many(claimed)
        done += len(claimed)
    elapsed = time.perf_counter() - started
    if done != jobs:
        raise RuntimeError(f"drained {done} jobs of {jobs}")
    return done / elapsed


async def drain(root: Path, jobs: int, tenants: int, batch: int) -> float:
    """Return the jobs per second of ``timed_drain`` over ``jobs`` spread over ``tenants``
    tenants (none when 0)."""
    names: list[str | None] = [None] * jobs if tenants == 0 else [f"t{n % tenants}" for n in range(jobs)]
    async with DirectQueue(LocalFileSystemStorage(root / "queue.json"), log=NEVER) as queue:
        await enqueue(queue, names)
        return await timed_drain(queue, jobs, batch)


async def beside_blocked(root: Path, jobs: int, blocked: int, batch: int) -> float:
    """Return the jobs per second of ``timed_drain`` over ``jobs`` each of its own tenant,
    under a limit of one job in progress per tenant that ``blocked`` other tenants have reached."""
    async with DirectQueue(LocalFileSystemStorage(root / "queue.json"), log=NEVER) as queue:
        await queue.limit(None, 1, per_tenant=True)
        await enqueue(queue, [f"blocked-{n}" for n in range(blocked)] * 2)
        held = 0
        while held < blocked:  # one job of each is claimed (and never acked): the rest wait
            held += len(await queue.dequeue(ENTRYPOINT, batch_size=ENQUEUE_BATCH))
        await enqueue(queue, [f"free-{n}" for n in range(jobs)])
        return await timed_drain(queue, jobs, batch)


async def main(arguments: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(prefix="jqueue-fairness-") as scratch:
        root = Path(scratch)
        print(f"a tenant's first job behind {arguments.flood:,} of another's, claims of {arguments.batch}:")
        for cold in (False, True):
            where = root / f"start-{cold}"
            where.mkdir()
            claims, millis = await first_start(where, arguments.flood, arguments.batch, cold)
            kind = "cold" if cold else "hot"
            print(f"  {kind}: claimed by claim {claims}, {millis:.1f} ms after its enqueue")
        jobs, batch, repeats = arguments.jobs, arguments.batch, arguments.repeats

        async def with_tenants(where: Path, tenants: int) -> float:
            return await drain(where, jobs, tenants, batch)

        async def with_blocked(where: Path, blocked: int) -> float:
            return await beside_blocked(where, jobs, blocked, batch)

        plain, shared = await best_of(with_tenants, root / "drain", arguments.tenants, repeats)
        print(f"throughput, {jobs:,} jobs, best of {repeats}:")
        print(f"  no tenant: {plain:,.0f} jobs/s")
        print(f"  {arguments.tenants:,} tenants: {shared:,.0f} jobs/s ({shared / plain:.2f} of no tenant)")
        free, slowed = await best_of(with_blocked, root / "blocked", arguments.blocked, repeats)
        print(f"a limit of 1 per tenant, {jobs:,} jobs of free tenants, best of {repeats}:")
        print(f"  none blocked: {free:,.0f} jobs/s")
        print(f"  {arguments.blocked:,} blocked: {slowed:,.0f} jobs/s ({slowed / free:.2f} of none blocked)")


async def best_of(
    run: Callable[[Path, int], Awaitable[float]], root: Path, setting: int, repeats: int
) -> tuple[float, float]:
    """Return the best rate of ``run`` with 0 and with ``setting``, ``repeats`` runs of each in
    turn, each in a directory of its own under ``root``."""
    best = {0: 0.0, setting: 0.0}
    for repeat in range(repeats):
        for value in best:
            where = root / f"{repeat}-{value}"
            where.mkdir(parents=True)
            best[value] = max(best[value], await run(where, value))
    return best[0], best[setting]


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--flood", type=int, default=100_000, help="the flooding tenant's jobs")
    parser.add_argument("--jobs", type=int, default=20_000, help="jobs drained per throughput run")
    parser.add_argument("--tenants", type=int, default=1_000, help="tenants of the throughput runs")
    parser.add_argument("--blocked", type=int, default=5_000, help="tenants at their limit")
    parser.add_argument("--batch", type=int, default=10, help="jobs per claim")
    parser.add_argument("--repeats", type=int, default=3, help="throughput runs per setting")
    arguments = parser.parse_args(argv)
    for name in ("flood", "jobs", "tenants", "blocked", "batch", "repeats"):
        if getattr(arguments, name) < 1:
            parser.error(f"--{name} must be at least 1")
    return arguments


if __name__ == "__main__":
    asyncio.run(main(parse()))
