"""A program written as the documentation shows ends with a clean stderr: no connection is left
open by a queue used without ``async with``."""

from __future__ import annotations

import subprocess
import sys

from conftest import BUCKET, s3_env
from servers import S3Endpoint

PROGRAM = """
import asyncio, sys
from jqueue import DirectQueue
from jqueue.adapters.storage.s3 import S3Storage

async def main(bucket: str, endpoint: str) -> None:
    for _ in range(10):
        for name in ("email", "sms"):
            q = DirectQueue(S3Storage(bucket=bucket, key=f"clean-exit/{name}.json", endpoint_url=endpoint))
            await q.enqueue(name, b"payload")
            [claimed] = await q.dequeue(name)
            await q.ack(claimed.id)
            assert (await q.read_state()).jobs == ()

asyncio.run(main(sys.argv[1], sys.argv[2]))
print("done")
"""


def test_direct_queues_used_without_async_with_leave_nothing_open(moto: S3Endpoint) -> None:
    finished = subprocess.run(
        [sys.executable, "-W", "default", "-c", PROGRAM, BUCKET, moto.url],
        env=s3_env(moto),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert (finished.returncode, finished.stdout, finished.stderr) == (0, "done\n", "")
