"""Staged parts of a bulk write: immutable objects beside the queue, one per task attempt.

A part is compact JSON, ``{"entrypoint": "...", "jobs": [[payload, priority, dedup_key,
delay_seconds], ...]}`` with base64 payloads, named ``stage/<write id>/<partition>-<attempt>-<random>``.
"""

from __future__ import annotations

from datetime import timedelta

import msgspec

from jqueue.adapters.storage.url import storage_from_url
from jqueue.domain.spec import JobSpec
from jqueue.ports.storage import KeyedStoragePort

STAGE_PREFIX = "stage/"
StagedJob = tuple[bytes, int, str | None, float | None]


class _Part(msgspec.Struct):
    entrypoint: str
    jobs: list[StagedJob]


def keyed_storage(url: str) -> KeyedStoragePort:
    """Return the storage at ``url``, which must hold named objects beside the queue."""
    storage = storage_from_url(url)
    if not isinstance(storage, KeyedStoragePort):
        raise TypeError(f"{url}: a bulk write needs a storage with named objects")
    return storage


def encode_part(entrypoint: str, jobs: list[StagedJob]) -> bytes:
    """Return a staged part's content."""
    return msgspec.json.encode(_Part(entrypoint, jobs))


def decode_part(data: bytes) -> list[JobSpec]:
    """Return the jobs of a staged part."""
    part = msgspec.json.decode(data, type=_Part)
    return [
        JobSpec(
            part.entrypoint, payload, priority, None if delay is None else timedelta(seconds=delay), None, key
        )
        for payload, priority, key, delay in part.jobs
    ]


def part_prefix(write_id: str) -> str:
    """Return the name prefix of a bulk write's staged parts."""
    return f"{STAGE_PREFIX}{write_id}/"
