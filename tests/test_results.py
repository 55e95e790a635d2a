"""Results: what a handler returns is kept with its job's history record and waited for with
``queue.result``; a dead job's error keeps its traceback. File and S3, both layouts, through
``jqueue serve``, and on the command line."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest

from conftest import Backend
from jqueue import (
    BrokerQueue,
    DirectQueue,
    Job,
    JobFailedError,
    JobNotFoundError,
    Layout,
    LocalFileSystemStorage,
    Worker,
    connect,
)
from servers import jqueue_serve


async def test_results_are_kept_and_waited_for(file_or_s3: Backend, layout: Layout) -> None:
    storage, name = file_or_s3.new()
    async with (
        BrokerQueue(storage, layout=layout) as queue,
        DirectQueue(file_or_s3.handle(name), layout=layout) as reader,
    ):
        as_bytes, as_json, as_text, nothing = await queue.enqueue_many(
            "work", [b"bytes", b"json", b"text", b"none"]
        )
        bad = await queue.enqueue("work", b"bad", max_attempts=1)
        never = await queue.enqueue("nobody", b"")
        worker = Worker(queue)

        @worker.handler("work")
        async def handle(job: Job) -> object:
            answers: dict[bytes, object] = {
                b"bytes": b"\x00\xff",
                b"json": {"n": 1},
                b"text": "héllo",
                b"none": None,
            }
            if job.payload == b"bad":
                raise KeyError("missing")
            return answers[job.payload]

        waiting = asyncio.create_task(reader.result(as_json.id, timeout=timedelta(seconds=30)))
        await asyncio.sleep(0.1)
        assert not waiting.done()  # it waits for the job to finish, here in another queue object
        await worker.burst()
        assert json.loads(await waiting or b"") == {"n": 1}
        assert await reader.result(as_bytes.id) == b"\x00\xff"
        assert await reader.result(as_text.id) == "héllo".encode()
        assert await reader.result(nothing.id) is None
        with pytest.raises(JobFailedError) as failed:
            await reader.result(bad.id)
        assert failed.value.reason == "max_attempts"
        assert failed.value.error is not None
        assert failed.value.error.startswith("KeyError: 'missing'\nTraceback")
        with pytest.raises(TimeoutError):
            await reader.result(never.id, timeout=timedelta(milliseconds=200))
        with pytest.raises(JobNotFoundError):
            await reader.result("no-such-job")
        assert await queue.checkpoint() in (True, False)  # the results live on in a checkpoint
    async with DirectQueue(file_or_s3.handle(name), layout=layout) as reopened:
        assert await reopened.result(as_bytes.id) == b"\x00\xff"


async def test_a_result_through_the_broker_and_on_the_command_line(tmp_path: Path) -> None:
    (tmp_path / "root").mkdir()
    with jqueue_serve(str(tmp_path / "root"), tmp_path / "serve.log") as url:
        async with connect(url, "jobs") as queue:
            job = await queue.enqueue("sum", b"[1, 2, 3]")
            failing = await queue.enqueue("sum", b"oops", max_attempts=1)
            worker = Worker(queue)

            @worker.handler("sum")
            async def add(job: Job) -> int:
                return sum(json.loads(job.payload))

            await worker.burst()
    path = tmp_path / "root" / "jobs.json"
    async with DirectQueue(LocalFileSystemStorage(path)) as direct:
        assert await direct.result(job.id) == b"6"

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "jqueue", "--storage", str(path), *args]
        return subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)

    shown = await asyncio.to_thread(cli, "result", job.id)
    assert (shown.returncode, shown.stdout) == (0, "6\n")
    by_prefix = await asyncio.to_thread(cli, "result", job.id[:8])  # a finished job by the start of its id
    assert (by_prefix.returncode, by_prefix.stdout) == (0, "6\n")
    dead = await asyncio.to_thread(cli, "result", failing.id)
    assert dead.returncode == 1
    assert "JSONDecodeError" in dead.stderr
    assert "Traceback" in dead.stderr
    assert json.loads((await asyncio.to_thread(cli, "result", job.id, "--json")).stdout)["result"] == "6"
