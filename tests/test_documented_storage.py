"""Code from the original jqueue documentation, run as written (only storage locations changed):
the storage adapters, the state format and custom adapters.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import pathlib
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest

from documented import Storage, opened
from jqueue import (
    BrokerQueue,
    CASConflictError,
    DirectQueue,
    InMemoryStorage,
    JQueueError,
    LocalFileSystemStorage,
    ObjectStoragePort,
    StorageError,
)


async def test_switch_backend_blocks(tmp_path: Path, gcs_emulator: None) -> None:
    # Local file (single machine)
    from jqueue import LocalFileSystemStorage

    storage: object = LocalFileSystemStorage(tmp_path / "var/lib/myapp/queue.json")
    assert isinstance(storage, ObjectStoragePort)
    # AWS S3
    from jqueue.adapters.storage.s3 import S3Storage

    storage = S3Storage(bucket="my-bucket", key="queues/jobs.json")
    assert isinstance(storage, ObjectStoragePort)
    # Google Cloud Storage
    from jqueue.adapters.storage.gcs import GCSStorage

    storage = GCSStorage(bucket_name="my-bucket", blob_name="queues/jobs.json")
    assert isinstance(storage, ObjectStoragePort)
    # Partitioning: one file per workload (the queues are constructed, not entered)
    email_queue = BrokerQueue(S3Storage(bucket="b", key="queues/email.json"))
    sms_queue = BrokerQueue(S3Storage(bucket="b", key="queues/sms.json"))
    assert email_queue is not sms_queue


async def test_s3_adapter_blocks() -> None:
    import aioboto3

    from jqueue.adapters.storage.s3 import S3Storage

    made = [
        S3Storage(
            bucket="my-bucket",
            key="queue.json",
            endpoint_url="http://minio.internal:9000",
            region_name="us-east-1",
        ),
        # Standard AWS, credentials from environment / IAM role
        S3Storage(bucket="my-bucket", key="queues/jobs.json"),
        # Explicit region
        S3Storage(bucket="my-bucket", key="jobs.json", region_name="eu-central-1"),
        # S3-compatible (MinIO, Cloudflare R2, Tigris, ...)
        S3Storage(bucket="my-bucket", key="jobs.json", endpoint_url="http://minio.internal:9000"),
        # Bring your own session
        S3Storage(
            bucket="my-bucket",
            key="jobs.json",
            session=aioboto3.Session(aws_access_key_id="...", aws_secret_access_key="..."),
        ),
    ]
    assert all(isinstance(storage, ObjectStoragePort) for storage in made)


async def test_gcs_adapter_block(gcs_emulator: None) -> None:
    from jqueue.adapters.storage.gcs import GCSStorage

    # Application Default Credentials
    storage = GCSStorage(bucket_name="my-bucket", blob_name="queues/jobs.json")
    # Explicit client
    from google.cloud import storage as gcs

    explicit = GCSStorage(
        bucket_name="my-bucket",
        blob_name="jobs.json",
        client=gcs.Client(project="my-project"),
    )
    assert isinstance(storage, ObjectStoragePort)
    assert isinstance(explicit, ObjectStoragePort)


async def test_in_memory_storage_block() -> None:
    storage = InMemoryStorage()
    assert await storage.read() == (b"", None)
    # or with pre-populated state:
    storage = InMemoryStorage(initial_content=b'{"version":0,"jobs":[]}')
    content, etag = await storage.read()
    assert content == b'{"version":0,"jobs":[]}'
    assert isinstance(etag, str)
    newer = await storage.write(b'{"version":1,"jobs":[]}', if_match=etag)
    assert int(newer) > int(etag)  # "Monotonic integer counter"
    assert await storage.read() == (b'{"version":1,"jobs":[]}', newer)
    with pytest.raises(CASConflictError):
        await storage.write(b"stale", if_match=etag)
    async with BrokerQueue(storage) as q:
        assert (await q.read_state()).version == 1
        await q.enqueue("task", b"x")
    assert int((await storage.read())[1] or "-1") > int(newer)


@pytest.mark.parametrize("as_type", [str, pathlib.Path])
async def test_filesystem_storage_block(tmp_path: Path, as_type: Callable[[Path], str | Path]) -> None:
    where = tmp_path / "var/lib/myapp/queue.json"
    storage = LocalFileSystemStorage(as_type(where))
    # accepts str or pathlib.Path; parent directories are created automatically
    await DirectQueue(storage).enqueue("task", b"x")
    assert where.is_file()
    content, etag = await storage.read()
    assert content == where.read_bytes()
    assert content != b""
    assert etag == hashlib.sha256(content).hexdigest()
    with pytest.raises(CASConflictError):
        await storage.write(b"{}", if_match=hashlib.sha256(b"other").hexdigest())


EXAMPLE_STATE = {
    "version": 3,
    "jobs": [
        {
            "id": "550e8400-e29b-41d4-a716-446655440000",
            "entrypoint": "send_email",
            "payload": "eyJ0byI6ICJ1c2VyQGV4YW1wbGUuY29tIn0=",
            "status": "queued",
            "priority": 0,
            "created_at": "2024-01-01T12:00:00+00:00",
            "heartbeat_at": None,
        },
        {
            "id": "6ba7b810-9dad-11d1-80b4-00c04fd430c8",
            "entrypoint": "resize_image",
            "payload": base64.b64encode(b"...").decode(),
            "status": "in_progress",
            "priority": 5,
            "created_at": "2024-01-01T11:59:00+00:00",
            "heartbeat_at": "2024-01-01T12:00:45+00:00",
        },
    ],
}
JOB_FIELDS = {"id", "entrypoint", "payload", "status", "priority", "created_at", "heartbeat_at"}


async def test_documented_state_format(new_storage: Callable[[], Storage], kind: str) -> None:
    # New queues default to the log layout (docs/storage.md, "Layouts"); the documented single JSON
    # document is what layout="single" writes: the documented fields, plus ours.
    fresh = new_storage()
    async with opened(kind, fresh, layout="single") as q:
        job = await q.enqueue("send_email", b"hello")
    document = json.loads((await fresh.read())[0] or b"null")
    assert isinstance(document, dict)
    assert {"version", "jobs"} <= set(document)
    assert [(j["id"], base64.b64decode(j["payload"])) for j in document["jobs"]] == [(job.id, b"hello")]
    assert set(document["jobs"][0]) >= JOB_FIELDS


async def test_prepopulated_documented_state(new_storage: Callable[[], Storage], kind: str) -> None:
    storage = new_storage()  # the document's complete example, written before any queue runs
    await storage.write(json.dumps(EXAMPLE_STATE, indent=2).encode())
    async with opened(kind, storage) as q:
        state = await q.read_state()
        assert state.version == 3
        first = state.find("550e8400-e29b-41d4-a716-446655440000")
        assert first is not None
        assert first.payload == b'{"to": "user@example.com"}'
        assert first.created_at == datetime(2024, 1, 1, 12, tzinfo=UTC)
        assert [j.id for j in state.in_progress_jobs()] == ["6ba7b810-9dad-11d1-80b4-00c04fd430c8"]
        await q.enqueue("send_email", b"more")
    document = json.loads((await storage.read())[0] or b"null")
    assert document["version"] > 3
    assert len(document["jobs"]) == 3


class MyStorage:
    """The documented custom adapter: only ``read`` and ``write``."""

    def __init__(self) -> None:
        self.content: bytes | None = None
        self.counter = 0

    async def read(self) -> tuple[bytes, str | None]:
        if self.content is None:
            return b"", None
        return self.content, str(self.counter)

    async def write(self, content: bytes, if_match: str | None = None) -> str:
        if if_match is not None and (self.content is None or if_match != str(self.counter)):
            raise CASConflictError("etag mismatch")
        self.content, self.counter = content, self.counter + 1
        return str(self.counter)


async def test_custom_adapter_block(kind: str) -> None:
    storage = MyStorage()
    assert isinstance(storage, ObjectStoragePort)
    async with opened(kind, storage) as q:
        job = await q.enqueue("task", b"custom")
        [claimed] = await q.dequeue("task")
        assert claimed.id == job.id
        await q.ack(claimed.id)
        assert (await q.read_state()).jobs == ()
        writes = storage.counter
        await asyncio.gather(q.enqueue("task", b"1"), q.enqueue("task", b"2"), q.enqueue("task", b"3"))
        # BrokerQueue: "These three enqueues are batched into a single storage write"
        assert storage.counter - writes == (1 if kind == "broker" else 3)


async def test_storage_error_has_cause(tmp_path: Path) -> None:
    (tmp_path / "blocker").write_text("a file where a directory should be")
    q = DirectQueue(LocalFileSystemStorage(tmp_path / "blocker" / "queue.json"))
    with pytest.raises(StorageError) as raised:
        await q.enqueue("task", b"x")
    assert isinstance(raised.value, JQueueError)
    assert isinstance(raised.value.cause, OSError)  # "has .cause attribute"


class AlwaysConflicting(MyStorage):
    async def write(self, content: bytes, if_match: str | None = None) -> str:
        self.counter += 1
        raise CASConflictError("etag mismatch")


async def test_direct_queue_retries_ten_times() -> None:
    storage = AlwaysConflicting()
    with pytest.raises(CASConflictError):  # "only bubbles up ... if all retries are exhausted"
        await DirectQueue(storage).enqueue("task", b"x")
    assert storage.counter == 11  # the first attempt and "up to 10 retries"
