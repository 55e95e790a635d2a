"""Typed tasks: arguments validated and encoded when deferred, validated again when run; on a
file queue and through ``jqueue serve``."""

from __future__ import annotations

import dataclasses
import json
import logging
from datetime import timedelta
from pathlib import Path

import pydantic
import pytest

from conftest import Backend
from jqueue import (
    BrokerQueue,
    DirectQueue,
    Job,
    Layout,
    LocalFileSystemStorage,
    Outcome,
    Worker,
    connect,
    current_job,
)
from jqueue.domain.errors import headline
from servers import jqueue_serve


async def test_a_task_is_deferred_with_checked_arguments_and_run_with_them(
    file_or_s3: Backend, layout: Layout
) -> None:
    seen: list[tuple[str, int, list[str]]] = []
    async with DirectQueue(file_or_s3.new()[0], layout=layout) as queue:
        worker = Worker(queue)

        @worker.task
        async def send_email(to: str, retries: int = 1, cc: list[str] | None = None) -> None:
            seen.append((to, retries, cc or []))

        @worker.task(entrypoint="resize", timeout=timedelta(seconds=5))
        def resize_image(path: str, width: int) -> int:  # sync: runs in a thread
            seen.append((path, width, []))
            return width

        job = await send_email.defer(queue, "a@example.com", retries="3", cc=["b@example.com"])  # type: ignore[arg-type]
        assert (job.entrypoint, json.loads(job.payload)) == (
            "send_email",
            {"to": "a@example.com", "retries": 3, "cc": ["b@example.com"]},
        )
        await resize_image.defer(queue, path="/x.png", width=64)
        delayed = dataclasses.replace(send_email.spec(to="later@example.com"), delay=timedelta(hours=1))
        await queue.enqueue_many([delayed])
        with pytest.raises(pydantic.ValidationError):
            await send_email.defer(queue, to="x", retries="many")  # type: ignore[arg-type]
        with pytest.raises(TypeError):
            await send_email.defer(queue, to="x", unknown=1)  # type: ignore[call-arg]
        assert resize_image("/direct.png", 2) == 2  # still callable as itself

        stats = await worker.burst()
        assert stats.acked == 2
        assert sorted(seen) == [
            ("/direct.png", 2, []),
            ("/x.png", 64, []),
            ("a@example.com", 3, ["b@example.com"]),
        ]


async def test_a_payload_that_does_not_fit_dies_at_once(tmp_path: Path) -> None:
    async with DirectQueue(LocalFileSystemStorage(tmp_path / "q.json")) as queue:
        worker = Worker(queue)

        @worker.task
        async def charge(cents: int) -> None:
            raise AssertionError("never called")

        await queue.enqueue("charge", b'{"cents": "lots"}', max_attempts=5)
        stats = await worker.burst()
        assert stats.outcomes[Outcome.DEAD] == 1
        [dead] = await queue.dead_letters()
        assert dead.attempts == 1
        assert dead.last_error is not None
        assert dead.last_error.startswith("Fail: the payload does not fit charge's arguments")
        assert headline(dead.last_error) == (  # the field is named on the line that listings show
            "Fail: the payload does not fit charge's arguments: 1 validation error for charge_arguments:"
            " cents: Input should be a valid integer, unable to parse string as an integer"
        )


async def test_an_error_is_logged_and_listed_whole_on_one_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    class Order(pydantic.BaseModel):
        customer: str
        quantity: int

    long_reason = "the warehouse " + "is far away and " * 20 + "said no"
    async with DirectQueue(LocalFileSystemStorage(tmp_path / "q.json")) as queue:

        async def check(job: Job) -> None:  # a plain handler validating its payload itself
            Order.model_validate_json(job.payload)

        async def refuse(job: Job) -> None:
            raise ValueError(f"cannot ship:\n{long_reason}")

        worker = Worker(queue, {"check": check, "refuse": refuse}, max_attempts=1)
        await queue.enqueue("check", b'{"customer": "ann"}')
        await queue.enqueue("refuse", b"")
        with caplog.at_level(logging.ERROR, logger="jqueue.worker"):
            await worker.burst()
        errors = {job.entrypoint: headline(job.last_error or "") for job in await queue.dead_letters()}
    assert errors == {
        "check": "ValidationError: 1 validation error for Order: quantity: Field required",
        "refuse": f"ValueError: cannot ship: {long_reason}",
    }
    logged = {record.entrypoint: record.getMessage() for record in caplog.records}  # type: ignore[attr-defined]
    assert logged["check"].endswith(
        "check: dead (ValidationError: 1 validation error for Order: quantity: Field required)"
    )
    assert logged["refuse"].endswith(f"refuse: dead (ValueError: cannot ship: {long_reason})")


async def test_an_empty_payload_calls_a_task_without_arguments(tmp_path: Path) -> None:
    calls: list[int] = []
    async with DirectQueue(LocalFileSystemStorage(tmp_path / "q.json")) as queue:
        worker = Worker(queue)

        @worker.task
        async def tick(step: int = 1) -> None:  # as a cron tick, or `jqueue enqueue tick`, runs it
            calls.append(step)

        @worker.task
        async def needs(cents: int) -> None:
            raise AssertionError("never called")

        await queue.enqueue("tick", b"")
        await queue.enqueue("needs", b"")
        stats = await worker.burst()
        assert (calls, stats.acked, stats.outcomes[Outcome.DEAD]) == ([1], 1, 1)
        [dead] = await queue.dead_letters()
        assert dead.last_error is not None
        assert "cents" in dead.last_error


def test_a_task_needs_annotated_keyword_parameters() -> None:
    worker = Worker(BrokerQueue(LocalFileSystemStorage("/nonexistent/q.json")))
    with pytest.raises(TypeError, match="needs a type annotation"):

        @worker.task
        def untyped(x) -> None:  # type: ignore[no-untyped-def]
            return None

    with pytest.raises(TypeError, match="by keyword"):

        @worker.task
        def positional(x: int, /) -> None:
            return None


async def test_a_task_through_the_broker(tmp_path: Path) -> None:
    (tmp_path / "root").mkdir()
    done: list[int] = []
    with jqueue_serve(str(tmp_path / "root"), tmp_path / "serve.log") as url:
        async with connect(url, "jobs") as queue:
            worker = Worker(queue)

            @worker.task
            async def add(a: int, b: int) -> None:
                done.append(a + b)

            await add.defer(queue, 2, b=3)
            await worker.burst()
    assert done == [5]


async def test_a_handler_reads_its_attempt_from_current_job(tmp_path: Path) -> None:
    seen: list[tuple[str, int]] = []
    async with DirectQueue(LocalFileSystemStorage(tmp_path / "q.json")) as queue:
        worker = Worker(queue, max_attempts=3, backoff=None)

        @worker.task
        async def flaky(n: int) -> int:
            attempt = current_job().attempts
            seen.append(("loop", attempt))
            if attempt < 3:
                raise ValueError(f"attempt {attempt} fails")
            return attempt

        @worker.task
        def threaded(n: int) -> None:  # in a thread: the same context
            seen.append(("thread", current_job().attempts))

        job = await flaky.defer(queue, n=1)
        await threaded.defer(queue, n=1)
        stats = await worker.burst()
        assert (stats.acked, stats.outcomes[Outcome.RETRIED]) == (2, 2)
        assert sorted(seen) == [("loop", 1), ("loop", 2), ("loop", 3), ("thread", 1)]
        assert await flaky.result(queue, job) == 3
