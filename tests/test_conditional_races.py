"""The storage servers the contention tests rely on decide races with exactly one winner.

moto's conditional PUT was seen to let two writers win (1 race in 200), so the multi-process
tests run on SeaweedFS too; these tests check that SeaweedFS's conditional writes hold, and
moto's once ``moto_server`` serializes its PUTs.
"""

from __future__ import annotations

import asyncio
import sys
import uuid

from conftest import BUCKET, s3_session
from jqueue import CASConflictError, S3Storage
from servers import S3Endpoint

RACERS = 4
TRIALS = 15


async def test_seaweedfs_lets_one_racer_win_each_conditional_write(seaweedfs: S3Endpoint) -> None:
    key = f"race-{uuid.uuid4().hex}.json"
    where = {"endpoint_url": seaweedfs.url, "region_name": seaweedfs.region}
    racers = [S3Storage(BUCKET, key, **where, session=s3_session(seaweedfs)) for _ in range(RACERS)]
    for storage in racers:
        await storage.__aenter__()
    try:
        for trial in range(TRIALS):
            name = f"log/{trial:020d}"
            created = await asyncio.gather(
                *(s.create(name, b"%d" % n) for n, s in enumerate(racers)), return_exceptions=True
            )
            won = [n for n, outcome in enumerate(created) if outcome is None]
            assert len(won) == 1, created
            assert all(isinstance(o, CASConflictError) for o in created if o is not None), created
            assert await racers[0].get(name) == b"%d" % won[0]

            _, etag = await racers[0].read()
            written = await asyncio.gather(
                *(s.write(b"%d-%d" % (trial, n), if_match=etag) for n, s in enumerate(racers)),
                return_exceptions=True,
            )
            winners = [n for n, outcome in enumerate(written) if isinstance(outcome, str)]
            assert len(winners) == 1, written
            assert (await racers[0].read())[0] == b"%d-%d" % (trial, winners[0])
    finally:
        for storage in racers:
            await storage.__aexit__(None, None, None)


async def test_moto_lets_one_racer_win_each_create(moto: S3Endpoint) -> None:
    """moto checks If-None-Match and then stores, nothing held between: under thread switches
    two racing creates both won (the multi-process log tests then saw a process whose own entry
    was overwritten fail to replay the next one). ``moto_server`` serializes its PUTs."""
    key = f"race-{uuid.uuid4().hex}.json"
    where = {"endpoint_url": moto.url, "region_name": moto.region}
    racers = [S3Storage(BUCKET, key, **where, session=s3_session(moto)) for _ in range(RACERS)]
    for storage in racers:
        await storage.__aenter__()
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # moto serves from threads of this process: switch them often
    try:
        for trial in range(100):
            name = f"log/{trial:020d}"
            created = await asyncio.gather(
                *(s.create(name, b"%d" % n) for n, s in enumerate(racers)), return_exceptions=True
            )
            won = [n for n, outcome in enumerate(created) if outcome is None]
            assert len(won) == 1, created
            assert await racers[0].get(name) == b"%d" % won[0]
    finally:
        sys.setswitchinterval(interval)
        for storage in racers:
            await storage.__aexit__(None, None, None)
