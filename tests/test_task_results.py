"""What a typed task returned comes back typed (``task.result``), the stored bytes stay as they
were (``queue.result``); ``jqueue.sync`` waits for results, cancels and reaches the management
calls, from plain threads."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import math
import threading
from datetime import timedelta
from pathlib import Path
from typing import Annotated

import pydantic
import pytest

from jqueue import (
    BrokerQueue,
    JobCancelledError,
    JobFailedError,
    JobStatus,
    LocalFileSystemStorage,
    Outcome,
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


class Opaque:
    """A value that neither JSON nor a return annotation can hold."""


async def test_a_result_that_cannot_be_kept_fails_its_job_once_whatever_the_handler(tmp_path: Path) -> None:
    async def plain(job: object) -> object:  # a bytes handler returning what JSON cannot hold
        return Opaque()

    async def unannotated(n: int):  # type: ignore[no-untyped-def]
        return {"n": Opaque()}

    async def unserializable(n: int) -> int:
        return Opaque()  # type: ignore[return-value]

    async def wrong_type(n: int) -> int:
        return "many"  # type: ignore[return-value]

    def wrong_model(n: int) -> Receipt:  # in a thread
        return {"to": n}  # type: ignore[return-value]

    async def wrong_text(n: int) -> str:
        return n  # type: ignore[return-value]

    async def out_of_range(n: int) -> float:  # serializes (as null), but would not decode
        return math.inf

    async with BrokerQueue(LocalFileSystemStorage(tmp_path / "q.json")) as queue:
        worker = Worker(queue, {"plain": plain}, backoff=None)  # max_attempts: the default 5
        functions = (unannotated, unserializable, wrong_type, wrong_model, wrong_text, out_of_range)
        tasks = [worker.task(function) for function in functions]
        jobs = [await queue.enqueue("plain", b""), *[await task.defer(queue, n=1) for task in tasks]]
        stats = await worker.burst()
        assert (stats.acked, stats.outcomes[Outcome.RETRIED], stats.outcomes[Outcome.DEAD]) == (0, 0, 7)
        dead = {job.id: job for job in await queue.dead_letters()}
        assert set(dead) == {job.id for job in jobs}
        reasons = {dead[job.id].entrypoint: dead[job.id].last_error or "" for job in jobs}
        assert all(dead[job.id].attempts == 1 for job in jobs)
        assert all(reason.startswith("its result was not kept: ") for reason in reasons.values()), reasons
        assert "Opaque is not bytes, text or JSON" in reasons["plain"]
        assert "dict is not bytes, text or JSON (Object of type Opaque" in reasons["unannotated"]
        refused = "{} returned {}, which its return annotation {} refuses"
        assert "unserializable returned Opaque" in reasons["unserializable"]
        assert refused.format("wrong_type", "str", "int") in reasons["wrong_type"]
        assert refused.format("wrong_model", "dict", "Receipt") in reasons["wrong_model"]
        assert refused.format("wrong_text", "int", "str") in reasons["wrong_text"]
        assert refused.format("out_of_range", "float", "float") in reasons["out_of_range"]
        with pytest.raises(JobFailedError, match="its result was not kept"):
            await tasks[2].result(queue, jobs[3])


async def test_annotated_constraints_hold_for_arguments_and_results(tmp_path: Path) -> None:
    async def order(quantity: Annotated[int, pydantic.Field(gt=0)]) -> Annotated[int, pydantic.Field(lt=100)]:
        return quantity * 10

    async with BrokerQueue(LocalFileSystemStorage(tmp_path / "q.json")) as queue:
        worker = Worker(queue, backoff=None)
        task = worker.task(order)
        with pytest.raises(pydantic.ValidationError, match="greater than 0"):
            await task.defer(queue, quantity=0)  # refused at enqueue, nothing added
        assert (await queue.read_state()).jobs == ()
        small, big = await task.defer(queue, quantity=3), await task.defer(queue, quantity=20)
        stats = await worker.burst()
        assert (stats.acked, stats.outcomes[Outcome.DEAD]) == (1, 1)
        assert await task.result(queue, small, timeout=timedelta(seconds=10)) == 30
        [dead] = await queue.dead_letters()
        assert dead.id == big.id
        assert "less than 100" in (dead.last_error or "")
