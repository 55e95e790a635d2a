"""Which shard of a sharded queue a job lives in (ADR 0022).

A job's shard follows from what it carries, so that any process finds it again from the job
alone: a hash of its tenant, else of its dedup key, else of its id. A job with parents goes to
its first parent's shard instead (the caller resolves that parent), so that a workflow stays
inside one log's commit.
"""

from __future__ import annotations

import hashlib

from jqueue.domain.values import Bounds

SHARDS = Bounds(ge=1, le=1024)
"""The bounds of a queue's number of shards."""


def routing_key(tenant: str | None, dedup_key: str | None, job_id: str) -> str:
    """The value a job's shard is a hash of: its tenant, else its dedup key, else its id."""
    if tenant is not None:
        return f"t:{tenant}"
    if dedup_key is not None:
        return f"d:{dedup_key}"
    return f"i:{job_id}"


def shard_of(key: str, shards: int) -> int:
    """The shard (0 to ``shards - 1``) of routing key ``key``."""
    digest = hashlib.blake2b(key.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") % shards
