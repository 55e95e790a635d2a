"""A job's own ``timeout``: how long one attempt may run, honoured by the worker in place of the
handler's time limit, kept by every layout and carried by ``jqueue serve`` and the CLI."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest

from jqueue import DirectQueue, Job, JobSpec, LocalFileSystemStorage, QueuePolicy, Worker, connect
from jqueue.core.commits import Layout
from servers import jqueue_serve
from test_service import post


@pytest.mark.parametrize("layout", ["log", "single"])
async def test_a_jobs_timeout_stops_a_handler_that_has_none(tmp_path: Path, layout: Layout) -> None:
    storage = LocalFileSystemStorage(tmp_path / "q.json")
    async with DirectQueue(storage, layout=layout, policy=QueuePolicy(max_attempts=1)) as queue:
        await queue.enqueue("work", b"slow", timeout=timedelta(milliseconds=300))
        await queue.enqueue("work", b"quick")
        worker = Worker(queue)
        stopped = asyncio.Event()

        @worker.handler("work")
        async def handle(job: Job) -> None:
            if job.payload == b"slow":
                try:
                    await asyncio.sleep(30)
                except asyncio.CancelledError:
                    stopped.set()
                    raise

        stats = await worker.burst()
        assert stopped.is_set()
        assert (stats.timed_out, stats.acked) == (1, 1)
        [dead] = await queue.dead_letters()
        assert (dead.payload, dead.timeout, dead.last_error) == (
            b"slow",
            timedelta(milliseconds=300),
            "timed out after 0.3 s",
        )


async def test_a_jobs_timeout_replaces_the_handlers_either_way(tmp_path: Path) -> None:
    async with DirectQueue(
        LocalFileSystemStorage(tmp_path / "q.json"), policy=QueuePolicy(max_attempts=1)
    ) as queue:
        longer = await queue.enqueue("work", b"a", timeout=timedelta(seconds=20))
        default = await queue.enqueue("work", b"b")
        worker = Worker(queue)

        @worker.handler("work", timeout=timedelta(milliseconds=200))
        async def handle(job: Job) -> None:
            await asyncio.sleep(0.6)  # past the handler's limit, within the job's own

        stats = await worker.burst()
        assert (stats.acked, stats.timed_out) == (1, 1)
        [finished] = [record for record in await queue.history() if record.job_id == longer.id]
        assert finished.outcome == "acked"
        [dead] = await queue.dead_letters()
        assert (dead.id, dead.last_error) == (default.id, "timed out after 0.2 s")


async def test_a_timeout_out_of_range_is_refused_before_anything_is_committed(tmp_path: Path) -> None:
    async with DirectQueue(LocalFileSystemStorage(tmp_path / "q.json")) as queue:
        for bad in (timedelta(0), timedelta(seconds=-1)):
            with pytest.raises(ValueError, match="timeout must be positive"):
                await queue.enqueue("work", b"x", timeout=bad)
        assert await queue.count() == 0


async def test_the_timeout_travels_through_jqueue_serve(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    with jqueue_serve(str(root), tmp_path / "serve.log") as url:
        async with connect(url, "q") as remote:
            [added] = await remote.enqueue_many([JobSpec("work", b"x", timeout=timedelta(seconds=90))])
            assert added.timeout == timedelta(seconds=90)
            [claimed] = await remote.dequeue()
            assert claimed.timeout == timedelta(seconds=90)
        new = {"entrypoint": "work", "payload": "eQ==", "timeout_seconds": 1.5}
        status, answer = await asyncio.to_thread(
            post, f"{url}/v1/queues/q/enqueue", json.dumps({"jobs": [new]}).encode()
        )
        assert status == 200, answer
        [job] = answer["jobs"]
        assert job["timeout_seconds"] == 1.5  # a span on the wire is seconds, as in the request
        zero = json.dumps({"jobs": [{**new, "timeout_seconds": 0}]}).encode()
        status, answer = await asyncio.to_thread(post, f"{url}/v1/queues/q/enqueue", zero)
        assert status == 400, answer


def test_the_cli_sets_and_shows_a_timeout(tmp_path: Path) -> None:
    env = os.environ | {"JQUEUE_STORAGE": (tmp_path / "q.json").as_uri()}
    command = [sys.executable, "-m", "jqueue"]
    done = subprocess.run(
        [*command, "enqueue", "work", "x", "--timeout", "2.5", "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    [job] = json.loads(done.stdout)
    assert job["timeout_seconds"] == 2.5  # as over HTTP
    shown = subprocess.run(
        [*command, "show", job["id"]], env=env, capture_output=True, text=True, timeout=120
    )
    assert shown.returncode == 0, shown.stderr
    row = next(line for line in shown.stdout.splitlines() if " timeout_seconds " in line)
    assert row.split("│")[2].strip() == "2.5"
    wrong = subprocess.run(
        [*command, "enqueue", "work", "x", "--timeout", "0"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert wrong.returncode != 0
    assert "--timeout must be positive" in wrong.stderr
