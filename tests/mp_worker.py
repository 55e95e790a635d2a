"""One of several processes sharing a queue (run by test_multiprocess.py).

Usage: python mp_worker.py URL INDEX JOBS PROCESSES OUTDIR

Enqueues JOBS jobs tagged with INDEX while three consumers claim and ack jobs of
any process, until every process has produced and the queue is empty. Writes each
claim as "job_id payload" to OUTDIR/claims-INDEX.txt.
"""

from __future__ import annotations

import asyncio
import sys
from datetime import timedelta
from pathlib import Path

from jqueue import BrokerQueue, storage_from_url


async def run(url: str, index: int, jobs: int, processes: int, outdir: Path) -> None:
    claims: list[str] = []
    async with BrokerQueue(storage_from_url(url), stale_timeout=timedelta(hours=1)) as q:

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
    url, index, jobs, processes, outdir = sys.argv[1:6]
    asyncio.run(run(url, int(index), int(jobs), int(processes), Path(outdir)))
