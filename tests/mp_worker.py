"""One of several processes sharing a queue (run by test_processes.py).

Usage: python mp_worker.py URL INDEX JOBS PROCESSES OUTDIR LAYOUT

Enqueues JOBS jobs tagged with INDEX while three consumers claim and ack jobs of
any process, until every process has produced and the queue is empty. Writes each
claim as "job_id payload" to OUTDIR/claims-INDEX.txt. On the log layout every
process checkpoints every 50 changes and compacts with a two-second retention, so
checkpoints and compaction race the other processes' commits (the retention must
outlast any pause between a writer's look at the log and its commit: two seconds
leaves room for a loaded two-core machine).
"""

from __future__ import annotations

import asyncio
import sys
from datetime import timedelta
from pathlib import Path

from jqueue import BrokerQueue, LogSettings, storage_from_url
from jqueue.core.commits import Layout

STRESS = LogSettings(checkpoint_every=50, retention=timedelta(seconds=2))
PATIENCE = 100
"""Conflicting commits retried (the default is 20): four processes rewriting one object in a
tight loop, on a machine that other tests load, can lose 20 races in a row; what this test
checks is that sharing never claims a job twice, not how long the losers wait."""


async def run(url: str, index: int, jobs: int, processes: int, outdir: Path, layout: Layout) -> None:
    claims: list[str] = []
    storage = storage_from_url(url)
    async with BrokerQueue(
        storage, stale_timeout=timedelta(hours=1), max_retries=PATIENCE, layout=layout, log=STRESS
    ) as q:

        async def produce() -> None:
            for start in range(0, jobs, 25):
                await asyncio.gather(
                    *(q.enqueue("work", f"{index}:{n}".encode()) for n in range(start, min(start + 25, jobs)))
                )
            (outdir / f"produced-{index}").touch()

        async def everything_done() -> bool:
            if len(list(outdir.glob("produced-*"))) < processes:
                return False
            return not (await q.read_state()).jobs

        async def consume() -> None:
            while True:
                claimed = await q.dequeue("work", batch_size=10)
                if not claimed:
                    if await everything_done():
                        return
                    await asyncio.sleep(0.02)
                    continue
                claims.extend(f"{job.id} {job.payload.decode()}" for job in claimed)
                await asyncio.gather(*(q.ack(job.id) for job in claimed))

        await asyncio.gather(produce(), consume(), consume(), consume())
    (outdir / f"claims-{index}.txt").write_text("".join(line + "\n" for line in claims))


if __name__ == "__main__":
    url, index, jobs, processes, outdir, layout = sys.argv[1:7]
    asyncio.run(
        run(url, int(index), int(jobs), int(processes), Path(outdir), "log" if layout == "log" else "single")
    )
