"""Cancel and progress: ``queue.cancel`` removes a waiting job at once and stops a running one at
its worker's next heartbeat (an async handler cancelled, a thread told, a process killed, a
command's process group killed); ``current_job().progress`` rides on the heartbeats. File and S3,
both layouts, through ``jqueue serve``, and on the command line."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import pytest

from conftest import Backend
from jqueue import (
    BrokerQueue,
    DirectQueue,
    Job,
    JobCancelledError,
    JobNotFoundError,
    JobStatus,
    Layout,
    LocalFileSystemStorage,
    Outcome,
    Worker,
    connect,
    current_job,
)
from jqueue.domain.times import utc_now
from servers import jqueue_serve
from worker_handlers import sleep_in_process

BEATING = timedelta(seconds=1.5)
"""A visibility timeout whose heartbeats (every third of it) come quickly."""


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with contextlib.suppress(OSError):  # a zombie not yet reaped by its parent is dead
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] != "Z"
    return True


async def wait_for(condition: object, seconds: float = 20.0) -> None:
    deadline = time.monotonic() + seconds
    while not await condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, "the condition did not hold in time"
        await asyncio.sleep(0.05)


async def test_a_waiting_job_is_cancelled_at_once(file_or_s3: Backend, layout: Layout) -> None:
    storage, name = file_or_s3.new()
    async with (
        DirectQueue(storage, layout=layout) as q,
        DirectQueue(file_or_s3.handle(name), layout=layout) as other,
    ):
        dying = await q.enqueue("work", b"c", max_attempts=1)
        [claimed] = await q.dequeue("work")
        await q.nack(claimed, error="broken")  # its last attempt: dead
        queued = await q.enqueue("work", b"a")
        delayed = await q.enqueue("work", b"b", delay=timedelta(hours=1))
        kept = await q.enqueue("work", b"d")
        assert [job.status for job in await q.jobs()] == [JobStatus.DEAD] + [JobStatus.QUEUED] * 3
        assert [await other.cancel(job.id) for job in (queued, delayed, dying)] == [True] * 3
        assert [job.id for job in await q.jobs()] == [kept.id]
        for job in (queued, delayed, dying):
            record = await q.finished(job.id)
            assert record is not None
            assert (record.outcome, record.job_id) == (JobStatus.CANCELLED, job.id)
            with pytest.raises(JobCancelledError):
                await q.result(job.id)
            with pytest.raises(JobNotFoundError):
                await q.cancel(job.id)  # finished: nothing to cancel
        finished = await q.finished(dying.id)
        assert finished is not None
        assert finished.error == "broken"  # the history keeps its last error
        assert (await q.stats()).entrypoints["work"].queued == 1


async def test_a_heartbeat_of_a_cancelled_job_whose_lease_ran_out_says_cancelled(tmp_path: Path) -> None:
    async with DirectQueue(LocalFileSystemStorage(tmp_path / "q.json")) as q:
        job = await q.enqueue("render", b"frame")
        [claimed] = await q.dequeue("render", visibility_timeout=timedelta(seconds=0.2))
        assert await q.cancel(job.id) is False  # running: its worker is asked at its next beat
        assert claimed.lease_expires_at is not None
        while utc_now() <= claimed.lease_expires_at:  # the worker missed its beats
            await asyncio.sleep(0.05)
        await q.enqueue("other", b"")  # a commit returns the expired claim: it ends cancelled
        record = await q.finished(job.id)
        assert record is not None
        assert record.outcome is JobStatus.CANCELLED
        with pytest.raises(JobCancelledError):  # not a lost lease: its worker stops the handler
            await q.heartbeat(claimed)


async def test_a_running_job_stops_at_its_next_heartbeat_and_is_not_retried(
    file_or_s3: Backend, layout: Layout
) -> None:
    storage, name = file_or_s3.new()
    async with (
        BrokerQueue(storage, layout=layout, visibility_timeout=BEATING) as q,
        DirectQueue(file_or_s3.handle(name), layout=layout) as operator,
    ):
        job = await q.enqueue("render", b"frame", max_attempts=5)
        worker = Worker(q)
        reported, interrupted = asyncio.Event(), asyncio.Event()

        @worker.handler("render")
        async def render(job: Job) -> None:
            current_job().progress(0.25, note="a quarter")
            reported.set()
            try:
                await asyncio.sleep(120)
            except asyncio.CancelledError:
                interrupted.set()
                raise

        running = asyncio.create_task(worker.burst())
        await reported.wait()

        async def progress_stored() -> bool:
            found = await operator.find(job.id)
            return found is not None and found.progress == 0.25

        await wait_for(progress_stored)  # stored by a heartbeat, seen by another queue object
        shown = await operator.find(job.id)
        assert shown is not None
        assert (shown.progress_note, shown.cancel_requested_at) == ("a quarter", None)
        asked_at = time.monotonic()
        assert await operator.cancel(job.id) is False  # running: its worker is asked
        flagged = await operator.find(job.id)
        assert flagged is not None
        assert (flagged.status, flagged.cancel_requested_at is not None) == (JobStatus.IN_PROGRESS, True)
        assert await operator.cancel(job.id) is False  # asked again: nothing new
        stats = await asyncio.wait_for(running, 60)
        took = time.monotonic() - asked_at
        assert interrupted.is_set()
        assert (stats.outcomes[Outcome.CANCELLED], stats.acked, stats.failed) == (1, 0, 0)
        assert took < 5 * BEATING.total_seconds()
        record = await operator.finished(job.id)
        assert record is not None
        assert (record.outcome, record.attempts) == (JobStatus.CANCELLED, 1)
        assert await operator.jobs() == []  # not retried although it had attempts left
        with pytest.raises(JobCancelledError):
            await operator.result(job.id)


async def test_a_thread_handler_is_told_and_a_process_handler_is_killed(tmp_path: Path) -> None:
    pid_file = tmp_path / "handler.pid"
    async with BrokerQueue(LocalFileSystemStorage(tmp_path / "q.json"), visibility_timeout=BEATING) as q:
        in_thread = await q.enqueue("thread", b"")
        in_process = await q.enqueue("process", str(pid_file).encode())
        worker = Worker(q, concurrency=2)
        seen_in_thread: list[bool] = []

        @worker.handler("thread")
        def looping(job: Job) -> None:
            context = current_job()  # the worker's context reaches its threads
            context.progress(0.5)
            deadline = time.monotonic() + 60
            while not context.cancelled and time.monotonic() < deadline:
                time.sleep(0.02)
            seen_in_thread.append(context.cancelled)

        worker.handler("process", in_process=True)(sleep_in_process)
        running = asyncio.create_task(worker.burst())
        await wait_for(lambda: asyncio.sleep(0, pid_file.exists() and pid_file.read_text() != ""))
        pid = int(pid_file.read_text())
        assert alive(pid)
        assert await q.cancel(in_thread.id) is False
        assert await q.cancel(in_process.id) is False
        stats = await asyncio.wait_for(running, 30)
        assert stats.outcomes[Outcome.CANCELLED] == 2
        await wait_for(lambda: asyncio.sleep(0, seen_in_thread == [True]))
        assert not alive(pid)
        outcomes = {r.job_id: r.outcome for r in await q.history()}
        assert outcomes == {in_thread.id: JobStatus.CANCELLED, in_process.id: JobStatus.CANCELLED}


async def test_progress_is_checked_and_needs_a_handler(tmp_path: Path) -> None:
    with pytest.raises(LookupError, match="outside a handler"):
        current_job()
    async with DirectQueue(LocalFileSystemStorage(tmp_path / "q.json")) as q:
        await q.enqueue("check", b"")
        worker = Worker(q)
        refused: list[str] = []

        @worker.handler("check")
        async def check(job: Job) -> None:
            for fraction, note in ((1.5, None), (float("nan"), None), (-0.1, None), (0.5, 3)):
                try:
                    current_job().progress(fraction, note)  # type: ignore[arg-type]
                except ValueError as exc:
                    refused.append(str(exc))
            current_job().progress(1, "x" * 5000)  # a long note is cut, not refused

        assert (await worker.burst()).acked == 1
        assert len(refused) == 4
        job = await q.enqueue("check", b"")
        [claimed] = await q.dequeue()
        await q.heartbeat(claimed, progress=1.0, note="x" * 5000)
        shown = await q.find(job.id)
        assert shown is not None
        assert (shown.progress, len(shown.progress_note or "")) == (1.0, 1000)
        with pytest.raises(ValueError, match="from 0 to 1"):
            await q.heartbeat(claimed, progress=2.0)


async def test_cancel_progress_and_results_through_the_broker(tmp_path: Path) -> None:
    (tmp_path / "root").mkdir()
    path = tmp_path / "root" / "jobs.json"
    with jqueue_serve(str(tmp_path / "root"), tmp_path / "serve.log") as url:
        async with (
            connect(url, "jobs") as remote,
            connect(url, "jobs") as operator,
        ):
            waiting = await remote.enqueue("slow", b"later", delay=timedelta(hours=1))
            job = await remote.enqueue("slow", b"now")
            worker = Worker(remote, visibility_timeout=BEATING)

            @worker.handler("slow")
            async def slow(job: Job) -> None:
                current_job().progress(0.75, note="nearly")
                await asyncio.sleep(120)

            running = asyncio.create_task(worker.burst())
            async with DirectQueue(LocalFileSystemStorage(path)) as reader:

                async def progress_stored() -> bool:
                    found = await reader.find(job.id)
                    return found is not None and found.progress == 0.75

                await wait_for(progress_stored)
            assert await operator.cancel(waiting.id) is True
            assert await operator.cancel(job.id) is False
            stats = await asyncio.wait_for(running, 20)
            assert stats.outcomes[Outcome.CANCELLED] == 1
            for cancelled in (waiting, job):
                with pytest.raises(JobCancelledError):
                    await operator.result(cancelled.id, timeout=timedelta(seconds=5))
            with pytest.raises(JobNotFoundError):
                await operator.cancel(job.id)
            with pytest.raises(JobNotFoundError):
                await operator.result("no-such-job")
            done = await operator.enqueue("quick", b"")
            quick = Worker(operator)

            @quick.handler("quick")
            async def answer(job: Job) -> dict[str, int]:
                return {"answer": 42}

            waiter = asyncio.create_task(remote.result(done.id, timeout=timedelta(seconds=20)))
            await quick.burst()
            assert json.loads(await waiter or b"") == {"answer": 42}
            with pytest.raises(TimeoutError):
                await remote.result((await remote.enqueue("nobody", b"")).id, timeout=timedelta(seconds=0.3))


def test_jqueue_cancel_kills_a_running_command_and_its_children(tmp_path: Path) -> None:
    path = tmp_path / "q.json"
    pids = tmp_path / "pids"

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "jqueue", "--storage", str(path), *args]
        return subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)

    added = cli("enqueue", "convert", "", "--json")
    assert added.returncode == 0, added.stderr
    [job] = json.loads(added.stdout)
    job_id = job["id"]
    script = f"sleep 120 & echo $$ $! > {pids}.tmp && mv {pids}.tmp {pids}; wait"
    command = [sys.executable, "-m", "jqueue", "--storage", str(path), "exec", "convert", "--burst"]
    command += ["--visibility-timeout", "0.6", "--json", "--", "sh", "-c", script]
    worker = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        while not pids.exists():
            assert worker.poll() is None, worker.communicate()
            assert time.monotonic() < deadline
            time.sleep(0.05)
        shell, child = map(int, pids.read_text().split())
        assert alive(shell)
        assert alive(child)
        asked = cli("cancel", job_id[:8])  # the start of an id will do
        assert asked.returncode == 0, asked.stderr
        assert "asked the workers of 1 job to stop" in asked.stdout
        out, err = worker.communicate(timeout=30)
    finally:
        if worker.poll() is None:
            worker.send_signal(signal.SIGKILL)
    assert worker.returncode == 0, err
    assert json.loads(out)["cancelled"] == 1
    assert not alive(shell)
    assert not alive(child)  # the command's own child, killed with its process group
    shown = cli("result", job_id)
    assert shown.returncode != 0
    assert "cancelled" in shown.stderr
    again = cli("cancel", job_id)
    assert again.returncode != 0
    assert "not in the queue" in again.stderr
