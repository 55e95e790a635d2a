"""Queues written by older versions open and migrate (ADR 0015): a checkpoint of the first
layout (``jqueue-log/1``, every job inline) with entries after it, on a file root and on S3;
checkpoints naming slabs of the first layout (``jqueue-slab/1``, rows sorted by id), likewise;
slabs of this layout whose headers do not give their blocks' insertion numbers, likewise; and
a queue in the single-object layout. The fixtures were written by the jqueue of each time
(``fixtures/make_old_queues.py``)."""

from __future__ import annotations

import base64
import json
import shutil
import tarfile
from pathlib import Path
from typing import Any

import pytest

from conftest import Backend
from jqueue import DirectQueue, JobStatus, KeyedStoragePort, LocalFileSystemStorage
from jqueue.core.formats.checkpoint import MANIFEST_LAYOUT
from jqueue.core.formats.entry import CHECKPOINT_PREFIX
from jqueue.core.formats.slab import MAGIC

FIXTURES = Path(__file__).parent / "fixtures"


async def everything(queue: DirectQueue) -> dict[str, Any]:
    """What a queue holds, as its API shows it."""
    jobs = sorted((job.model_dump() for job in await queue.jobs(limit=None)), key=lambda job: job["id"])
    history = [(h.job_id, h.outcome, h.result) for h in await queue.history()]
    return {"jobs": jobs, "history": history}


def check_the_old_jobs(held: dict[str, Any]) -> None:
    by_payload = {job["payload"]: job for job in held["jobs"]}
    assert (
        len(held["jobs"]) == 13
    )  # 14 enqueued, one acked; one more enqueued and one acked after the checkpoint
    assert by_payload[b"deduplicated"]["dedup_key"] == "key-1"
    assert by_payload[b"after the checkpoint"]["status"] is JobStatus.QUEUED
    assert [job["status"] for job in held["jobs"]].count(JobStatus.DEAD) == 1
    assert [job["status"] for job in held["jobs"]].count(JobStatus.IN_PROGRESS) == 2
    assert (JobStatus.ACKED, b"done") in [(outcome, result) for _, outcome, result in held["history"]]


async def migrates(storage: KeyedStoragePort, reopen: Any, rewritten: str) -> None:
    """Open the old queue (of fixtures ``rewritten``), checkpoint it, and open it again from the
    new checkpoint alone; slabs of an older layout are rewritten into one of this layout."""
    async with DirectQueue(storage) as queue:
        before = await everything(queue)
        check_the_old_jobs(before)
        await queue.checkpoint()
    [*_, newest] = sorted(await storage.list_names(CHECKPOINT_PREFIX))
    manifest = json.loads(await storage.get(newest) or b"{}")
    assert manifest["layout"] == MANIFEST_LAYOUT
    names = [name for name, *_ in manifest["slabs"]]
    assert all([(await storage.get(name) or b"").startswith(MAGIC) for name in names])
    assert len(names) == 1 or rewritten == "slab2"  # its slabs are of this layout: kept, not rewritten
    async with DirectQueue(reopen()) as again:
        assert await everything(again) == before
        assert await again.dequeue("sms") == []  # still paused
        await again.enqueue("email", b"new")
        assert len(await again.jobs(limit=None)) == len(before["jobs"]) + 1


OLD_LOGS = pytest.mark.parametrize("prefix", ["v1", "slab1", "slab2"])


@OLD_LOGS
async def test_an_old_log_on_a_file_root_opens_and_migrates(tmp_path: Path, prefix: str) -> None:
    with tarfile.open(FIXTURES / f"{prefix}_log.tar.gz") as archive:
        archive.extractall(tmp_path, filter="data")
    path = tmp_path / f"{prefix}_log" / "queue.json"
    await migrates(LocalFileSystemStorage(path), lambda: LocalFileSystemStorage(path), prefix)


@OLD_LOGS
async def test_an_old_log_in_object_storage_opens_and_migrates(file_or_s3: Backend, prefix: str) -> None:
    storage, name = file_or_s3.new_keyed()
    objects = json.loads((FIXTURES / f"{prefix}_log_objects.json").read_text())
    for object_name, content in objects.items():
        if object_name:
            await storage.create(object_name, base64.b64decode(content))
    await storage.write(base64.b64decode(objects[""]), if_match=None)
    await migrates(storage, lambda: file_or_s3.handle(name), prefix)


async def test_an_old_single_object_queue_opens_and_migrates(tmp_path: Path) -> None:
    path = tmp_path / "queue.json"
    shutil.copy(FIXTURES / "v1_single.json", path)
    async with DirectQueue(LocalFileSystemStorage(path), layout="single") as old:
        before = await everything(old)
    assert len(before["jobs"]) == 13
    async with DirectQueue(LocalFileSystemStorage(path), layout="log") as queue:  # migrates to the log
        assert (await everything(queue))["jobs"] == before["jobs"]
        await queue.checkpoint()
    async with DirectQueue(LocalFileSystemStorage(path)) as again:
        assert (await everything(again))["jobs"] == before["jobs"]
