"""Workflows of typed tasks (ADR 0019): signatures composed into chains, groups and chords,
enqueued in one commit, each step given its parents' results as its own annotation types them."""

from __future__ import annotations

import enum
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict

from conftest import Backend
from jqueue import (
    DirectQueue,
    InMemoryStorage,
    JobCancelledError,
    JobFailedError,
    JobStatus,
    Layout,
    Outcome,
    Task,
    Worker,
    chain,
    connect,
    group,
)
from jqueue.adapters.service.wire.root import root_storage
from queues import log_entries, open_queue
from servers import jqueue_serve

WAIT = timedelta(seconds=30)


class Order(BaseModel):
    item: str
    count: int


def tasks(worker: Worker) -> dict[str, Task[..., Any]]:
    """The tasks of these tests, registered with ``worker``."""

    @worker.task
    async def add(x: int, y: int) -> int:
        return x + y

    @worker.task
    async def total(values: list[int], bonus: int = 0) -> int:
        return sum(values) + bonus

    @worker.task
    def order(count: int, item: str) -> Order:
        return Order(item=item, count=count)

    @worker.task
    def describe(placed: Order, prefix: str = "") -> str:
        return f"{prefix}{placed.count} x {placed.item}"

    @worker.task
    def shout(text: str) -> str:
        return text.upper()

    @worker.task
    def raw(data: bytes) -> bytes:
        return data[::-1]

    @worker.task
    def fail(reason: str) -> int:
        raise ValueError(reason)

    @worker.task
    def present(values: list[int | None]) -> list[bool]:
        return [value is not None for value in values]

    return {task.entrypoint: task for task in (add, total, order, describe, shout, raw, fail, present)}


async def drain(worker: Worker) -> None:
    await worker.run(until_empty=True, install_signals=False)


async def test_a_chain_with_a_group_and_a_chord_passes_results_along(
    file_or_s3: Backend, queue_kind: str
) -> None:
    # the layouts keep parents alike (test_dependencies runs both): the log's, whose commits count
    layout: Layout = "log"
    storage, _ = file_or_s3.new()
    async with open_queue(queue_kind, storage, layout=layout) as queue:
        worker = Worker(queue, max_attempts=1)
        t = tasks(worker)
        flow = chain(
            t["add"].s(1, 2),  # 3
            t["add"].s(10),  # 13, given as x
            group(t["add"].s(y=100), t["add"].s(y=1000)),  # 113 and 1013, each given 13
            t["total"].s(bonus=5),  # the chord's callback: [113, 1013] -> 1131
            t["order"].s(item="widget"),  # count: 1131
            t["describe"].s(prefix="> "),  # a pydantic model passed along
            t["shout"].s(),
        )
        entries = len(await log_entries(storage))
        jobs = await flow.defer(queue)
        if layout == "log" and queue_kind == "direct":
            assert len(await log_entries(storage)) == entries + 1  # the whole workflow: one commit
        assert [job.status for job in jobs] == [JobStatus.QUEUED] + [JobStatus.WAITING] * 7
        assert jobs[4].after == (jobs[2].id, jobs[3].id)  # the callback waits for the group
        assert jobs[2].after == jobs[3].after == (jobs[1].id,)
        await drain(worker)
        assert await flow.result(queue, timeout=WAIT) == "> 1131 X WIDGET"
        assert await t["total"].result(queue, jobs[4].id, timeout=WAIT) == 1131


async def test_a_group_of_one_still_gives_its_callback_a_list() -> None:
    async with DirectQueue(InMemoryStorage()) as queue:
        worker = Worker(queue)
        t = tasks(worker)
        flow = group([t["add"].s(1, 1)]) | t["total"].s()
        await flow.defer(queue)
        await drain(worker)
        assert await flow.result(queue, timeout=WAIT) == 2
        parts = group(t["add"].s(n, n) for n in range(5))
        await parts.defer(queue)
        await drain(worker)
        assert await parts.result(queue, timeout=WAIT) == [0, 2, 4, 6, 8]


async def test_bytes_and_text_results_reach_a_step_as_they_were_returned() -> None:
    async with DirectQueue(InMemoryStorage()) as queue:
        worker = Worker(queue)
        t = tasks(worker)
        flow = t["raw"].s(b"abc") | t["raw"].s() | t["shout"].s()
        await flow.defer(queue)
        await drain(worker)
        assert await flow.result(queue, timeout=WAIT) == "ABC"


async def test_a_failed_member_cancels_the_callback_unless_it_runs_anyway() -> None:
    async with DirectQueue(InMemoryStorage()) as queue:
        worker = Worker(queue, max_attempts=1)
        t = tasks(worker)
        cancelled = group(t["add"].s(1, 1), t["fail"].s("no")) | t["total"].s()
        runs = group(t["add"].s(1, 1), t["fail"].s("no")) | t["present"].s().set(on_parent_failure="run")
        [*_, failing, callback] = await cancelled.defer(queue)
        [*_, callback_that_runs] = await runs.defer(queue)
        await drain(worker)
        ended = await queue.finished(callback.id)
        assert ended is not None
        assert (ended.outcome, ended.error) == (JobStatus.CANCELLED, f"parent {failing.id} died")
        with pytest.raises(JobCancelledError, match=f"was cancelled: parent {failing.id} died") as raised:
            await cancelled.result(queue, timeout=WAIT)
        assert raised.value.reason == f"parent {failing.id} died"
        assert await runs.result(queue, timeout=WAIT) == [True, False]
        assert callback_that_runs.on_parent_failure == "run"


async def test_a_result_that_does_not_fit_the_next_step_fails_it_with_the_reason() -> None:
    async with DirectQueue(InMemoryStorage()) as queue:
        worker = Worker(queue)
        t = tasks(worker)
        flow = t["shout"].s("not a number") | t["add"].s(y=1)
        [_, step] = await flow.defer(queue)
        stats = await worker.run(until_empty=True, install_signals=False)
        assert stats.outcomes[Outcome.DEAD] == 1  # no retry: it would never fit
        [dead] = await queue.dead_letters()
        assert dead.id == step.id
        assert "does not fit add's arguments" in (dead.last_error or "")


async def test_a_workflow_deferred_again_adds_nothing() -> None:
    async with DirectQueue(InMemoryStorage()) as queue:
        worker = Worker(queue)
        t = tasks(worker)
        flow = t["add"].s(1, 2) | t["add"].s(3)
        first = await flow.defer(queue)
        again = await flow.defer(queue)  # as after an unknown outcome
        assert [job.id for job in again] == [job.id for job in first]
        assert (await queue.stats()).entrypoints["add"].queued == 1
        await drain(worker)
        assert [job.id for job in await flow.defer(queue)] == [job.id for job in first]  # in the history
        assert "add" not in (await queue.stats()).entrypoints


def test_malformed_workflows_are_refused_before_anything_is_sent() -> None:
    worker = Worker(DirectQueue(InMemoryStorage()))
    t = tasks(worker)
    step = t["add"].s(1, 2)
    with pytest.raises(ValueError, match="appears twice"):
        chain(step, t["add"].s(1), step).specs()
    with pytest.raises(TypeError, match="'y' is unbound"):
        t["add"].s(1).specs()  # a first step has no parent to give y
    with pytest.raises(ValueError, match="at least one"):
        chain()
    with pytest.raises(ValueError, match="at least one"):
        group([])
    with pytest.raises(TypeError):
        t["add"].s(1, 2, 3)
    with pytest.raises(ValueError, match="int"):  # pydantic's, naming the parameter's type
        t["add"].s("one", 2)
    [alone] = t["total"].s([1, 2]).specs()  # bonus has a default: the step needs no parent
    assert alone.payload == b'{"values":[1,2],"bonus":0}'
    [_, after] = (t["add"].s(1, 2) | t["total"].s([1, 2])).specs()  # nor does it take the result
    assert after.payload == alone.payload


async def test_a_workflow_through_jqueue_serve_is_one_request(tmp_path: Path) -> None:
    (tmp_path / "root").mkdir()
    with jqueue_serve(str(tmp_path / "root"), tmp_path / "serve.log") as url:
        async with connect(url, "jobs") as queue:
            worker = Worker(queue)
            t = tasks(worker)
            flow = group(t["add"].s(n, 1) for n in range(20)) | t["total"].s()
            await queue.enqueue("start", b"")  # the queue exists, as a log
            stored = root_storage(str(tmp_path / "root"), "jobs")
            entries = len(await log_entries(stored))
            jobs = await flow.defer(queue)
            assert len(jobs) == 21
            assert len(await log_entries(stored)) == entries + 1  # one request, one commit
            await drain(worker)
            assert await flow.result(queue, timeout=WAIT) == sum(range(20)) + 20


async def test_a_step_types_each_parent_result_as_that_parents_task_kept_it() -> None:
    async with DirectQueue(InMemoryStorage()) as queue:
        worker = Worker(queue, max_attempts=1)

        @worker.task
        def text(value: str) -> str:
            return value

        @worker.task
        def maybe_text(value: str) -> str | None:
            return value

        @worker.task
        def data(value: str) -> bytes:
            return value.encode("latin-1")

        @worker.task
        def echo(value: str | None) -> str:
            return repr(value)

        @worker.task
        def echo_data(value: bytes | None) -> str:
            return repr(value)

        @worker.task
        def join(values: list[str] | None) -> str:
            return repr(values)

        @worker.task
        def join_some(values: list[str | None]) -> str:
            return repr(values)

        @worker.task
        def fail() -> str:
            raise ValueError("no")

        cases = {
            "text 42": (text.s("42") | echo.s(), "'42'"),
            "text null": (text.s("null") | echo.s(), "'null'"),
            "json text": (maybe_text.s("hello") | echo.s(), "'hello'"),
            "bytes": (data.s("\xff\x00") | echo_data.s(), repr(b"\xff\x00")),
            "group of text": (group(text.s("a"), text.s("7")) | join.s(), "['a', '7']"),
            "mixed group, a failed member run anyway": (
                group(text.s("a"), maybe_text.s("b"), fail.s()) | echo.s().set(on_parent_failure="run"),
                None,  # a list does not fit str | None: the step fails, with the reason
            ),
        }
        flows = {name: flow for name, (flow, _) in cases.items()}
        for flow in flows.values():
            await flow.defer(queue)
        await drain(worker)
        for name, (flow, expected) in cases.items():
            if expected is None:
                with pytest.raises(JobFailedError, match="does not fit echo's arguments"):
                    await flow.result(queue, timeout=WAIT)
            else:
                assert await flow.result(queue, timeout=WAIT) == expected, name
        tolerant = group(text.s("a"), fail.s()) | join_some.s().set(on_parent_failure="run")
        await tolerant.defer(queue)
        await drain(worker)
        assert await tolerant.result(queue, timeout=WAIT) == "['a', None]"


class Colour(enum.Enum):
    RED = "red"


class Strict(BaseModel):
    model_config = ConfigDict(strict=True)
    id: uuid.UUID
    at: datetime
    colour: Colour


async def test_a_steps_own_arguments_are_validated_as_a_calls_are() -> None:
    async with DirectQueue(InMemoryStorage()) as queue:
        worker = Worker(queue, max_attempts=1)

        @worker.task
        def first() -> int:
            return 1

        @worker.task
        def step(count: int, strict: Strict) -> str:
            return f"{count} {strict.colour.value}"

        value = Strict(id=uuid.uuid4(), at=datetime.now(UTC), colour=Colour.RED)
        flow = first.s() | step.s(strict=value)
        await flow.defer(queue)
        await drain(worker)
        assert await flow.result(queue, timeout=WAIT) == "1 red"


async def test_a_receiver_the_task_no_longer_has_fails_the_step_at_once() -> None:
    async with DirectQueue(InMemoryStorage()) as queue:
        producer = Worker(queue)

        @producer.task
        def first() -> int:
            return 1

        @producer.task(entrypoint="step")
        def old_step(old: int) -> int:
            return old

        flow = first.s() | old_step.s()
        [_, step] = await flow.defer(queue)
        worker = Worker(queue, max_attempts=5)  # deployed since: the parameter was renamed
        worker.task(first.function)

        @worker.task(entrypoint="step")
        def new_step(new_name: int) -> int:
            return new_name

        await drain(worker)
        [dead] = await queue.dead_letters()
        assert (dead.id, dead.attempts) == (step.id, 1)  # no retry: it would never fit
        assert "no parameter 'old'" in (dead.last_error or "")


def test_a_signature_takes_no_dedup_key() -> None:
    worker = Worker(DirectQueue(InMemoryStorage()))
    signature = tasks(worker)["add"].s(1, 2)
    with pytest.raises(TypeError):
        signature.set(dedup_key="x")  # type: ignore[call-arg]
    moved = signature.set(priority=3)
    assert (moved.id, moved.options) == (signature.id, {"priority": 3})
