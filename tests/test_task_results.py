"""What a typed task returned comes back typed (``task.result``), the stored bytes stay as they
were (``queue.result``); ``jqueue.sync`` waits for results, cancels and reaches the management
calls, from plain threads."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import threading
from datetime import timedelta
from pathlib import Path

import pydantic
import pytest

from jqueue import (
    BrokerQueue,
    JobCancelledError,
    JobFailedError,
    JobStatus,
    LocalFileSystemStorage,
    Worker,
    sync,
)
from jqueue.core.runtime.tasks import Task


class Receipt(pydantic.BaseModel):
    to: str
    words: int


@dataclasses.dataclass
class Size:
    width: int
    height: int


async def send(to: str, text: str) -> Receipt:
    return Receipt(to=to, words=len(text.split()))


def measure(width: int) -> Size:  # in a thread
    return Size(width, width // 2)


async def squares(n: int) -> list[int]:
    return [k * k for k in range(n)]


async def greet(name: str) -> str:
    return f"hello {name}"


async def raw(n: int) -> bytes:
    return bytes(range(n))


async def loose(n: int):  # type: ignore[no-untyped-def]
    return {"n": n} if n else "plain text"


async def nothing(n: int) -> None:
    return None


async def broken(n: int) -> int:
    raise ValueError(f"cannot {n}")


FUNCTIONS = (send, measure, squares, greet, raw, loose, nothing, broken)
TASKS = {function.__name__: Task(function, function.__name__) for function in FUNCTIONS}
"""The tasks as a producer sees them: no worker needed to defer or to read a result."""


def make_worker(queue: BrokerQueue) -> Worker:
    worker = Worker(queue, max_attempts=1)
    for function in FUNCTIONS:
        worker.task(function)
    return worker


async def test_a_typed_task_result_comes_back_typed_and_the_bytes_stay(tmp_path: Path) -> None:
    async with BrokerQueue(LocalFileSystemStorage(tmp_path / "q.json")) as queue:
        worker, tasks = make_worker(queue), TASKS
        jobs = {
            "send": await tasks["send"].defer(queue, to="ann@example.com", text="three short words"),
            "measure": await tasks["measure"].defer(queue, width=640),
            "squares": await tasks["squares"].defer(queue, n=4),
            "greet": await tasks["greet"].defer(queue, name="bob"),
            "raw": await tasks["raw"].defer(queue, n=3),
            "loose": await tasks["loose"].defer(queue, n=2),
            "text": await tasks["loose"].defer(queue, n=0),
            "nothing": await tasks["nothing"].defer(queue, n=1),
            "broken": await tasks["broken"].defer(queue, n=7),
        }
        await worker.burst()

        async def typed(name: str, task: str | None = None) -> object:
            return await tasks[task or name].result(queue, jobs[name])

        assert await typed("send") == Receipt(to="ann@example.com", words=3)
        assert await typed("measure") == Size(640, 320)
        assert await typed("squares") == [0, 1, 4, 9]
        assert await typed("greet") == "hello bob"
        assert await typed("raw") == b"\x00\x01\x02"
        assert await typed("loose") == {"n": 2}
        assert await typed("text", "loose") == "plain text"
        assert await typed("nothing") is None
        with pytest.raises(JobFailedError, match="cannot 7"):
            await typed("broken")

        assert json.loads(await queue.result(jobs["send"].id) or b"") == {"to": "ann@example.com", "words": 3}
        assert await queue.result(jobs["raw"].id) == b"\x00\x01\x02"
        with pytest.raises(pydantic.ValidationError):  # a stored value that does not fit says so
            tasks["send"].decode_result(b'{"to": 1}')


def test_sync_code_waits_for_results_cancels_and_manages(tmp_path: Path) -> None:
    url = (tmp_path / "q.json").as_uri()
    stop = threading.Event()

    async def serve_jobs() -> None:  # a worker in its own thread and loop, as a separate process would be
        async with BrokerQueue(LocalFileSystemStorage(tmp_path / "q.json")) as queue:
            worker = make_worker(queue)
            running = asyncio.create_task(worker.run(install_signals=False))
            while not stop.is_set():
                await asyncio.sleep(0.05)
            worker.stop()
            await running

    with sync.open_queue(url) as jobs:
        typed = TASKS
        paused = jobs.enqueue("held", b"x")
        jobs.call(lambda queue: queue.pause("held"))
        assert jobs.stats().paused_claims == ["held"]
        [send] = jobs.enqueue_many([typed["send"].spec(to="cy@example.com", text="one two")])
        [broken] = jobs.enqueue_many([typed["broken"].spec(n=1)])
        runner = threading.Thread(target=asyncio.run, args=(serve_jobs(),))
        runner.start()
        try:
            stored = jobs.result(send, timeout=timedelta(seconds=60))
            assert typed["send"].decode_result(stored) == Receipt(to="cy@example.com", words=2)
            with pytest.raises(JobFailedError):
                jobs.result(broken.id, timeout=timedelta(seconds=60))
            with pytest.raises(TimeoutError):
                jobs.result(paused, timeout=timedelta(seconds=0.2))
            assert jobs.cancel(paused) is True  # waiting: it leaves at once
            with pytest.raises(JobCancelledError):
                jobs.result(paused)
        finally:
            stop.set()
            runner.join(60)
        history = jobs.call(lambda queue: queue.history())
        assert {(r.job_id, r.outcome) for r in history} == {
            (send.id, JobStatus.ACKED),
            (broken.id, JobStatus.DEAD),
            (paused.id, JobStatus.CANCELLED),
        }
        assert [job.id for job in jobs.call(lambda queue: queue.dead_letters())] == [broken.id]
        assert jobs.call(lambda queue: queue.requeue_dead()) == 1
        jobs.call(lambda queue: queue.resume("held"))
        assert jobs.stats().paused_claims == []
