"""Commits jobs to a file queue forever, printing each id once committed (run by test_crash.py).

Usage: python kill_writer.py PATH
"""

from __future__ import annotations

import asyncio
import sys

from jqueue import DirectQueue, LocalFileSystemStorage


async def run(path: str) -> None:
    async with DirectQueue(LocalFileSystemStorage(path)) as q:
        while True:
            job = await q.enqueue("work", b"x" * 4096)
            print(job.id, flush=True)


if __name__ == "__main__":
    asyncio.run(run(sys.argv[1]))
