"""Values a caller passes once are checked against their declared ``Bounds``, whose message names
the value and what it got: the worker runtime's, the bulk writes', the client's, the benchmark's,
the test kit's and Spark's options."""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from datetime import timedelta

import pytest

from jqueue import DirectQueue, InMemoryStorage, QueuePolicy
from jqueue.adapters.service.client.remote_queue import Coalescer
from jqueue.bench.settings import Settings
from jqueue.core.runtime.heartbeat import HeartbeatManager
from jqueue.core.runtime.queue_set import QueueSet
from jqueue.core.runtime.worker import Worker
from jqueue.domain.models import Job
from jqueue.domain.spec import LONGEST_SPAN
from jqueue.domain.values import Bounds
from jqueue.testing import Faults


async def _nothing_sent(key: str, items: list[int]) -> list[int | BaseException]:
    answers: list[int | BaseException] = list(items)
    return answers


async def _handle(job: Job) -> None:
    pass


async def _called(call: Callable[[DirectQueue], object], queue: DirectQueue) -> None:
    """Make the call, and await it if it is a coroutine."""
    made = call(queue)
    if isinstance(made, Awaitable):
        await made


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: QueuePolicy(ttl=timedelta(0)), "ttl must be positive, got 0 s"),
        (
            lambda: QueuePolicy(history_retention=-timedelta(seconds=1)),
            "history_retention must be positive, got -1 s",
        ),
        (lambda: QueuePolicy(staged_timeout=LONGEST_SPAN * 2), "staged_timeout must be at most 365000 days"),
        (lambda: QueuePolicy(history_limit=-1), "history_limit must not be negative, got -1"),
        (lambda: Coalescer(_nothing_sent, max_in_flight=0), "max_in_flight must be at least 1, got 0"),
        (lambda: Settings(ops=0), "ops must be at least 1, got 0"),
        (lambda: Settings(payload_bytes=-1), "payload_bytes must not be negative, got -1"),
        (lambda: Settings(repeat=0), "repeat must be at least 1, got 0"),
        (lambda: Faults(fail_rate=-0.1), "fail_rate must not be negative, got -0.1"),
        (lambda: Faults(fail_rate=1.5), "fail_rate must be at most 1, got 1.5"),
    ],
)
def test_a_value_out_of_its_bounds_is_refused(make: Callable[[], object], message: str) -> None:
    with pytest.raises(ValueError, match=f"^{re.escape(message)}"):
        make()


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda q: Worker(q, concurrency=0), "concurrency must be at least 1, got 0"),
        (lambda q: Worker(q, {"e": _handle}, timeout=timedelta(0)), "timeout must be positive, got 0 s"),
        (lambda q: HeartbeatManager(q, "job", timedelta(0)), "interval must be positive, got 0 s"),
        (lambda q: QueueSet([q]).dequeue(batch_size=0), "batch_size must be at least 1, got 0"),
        (lambda q: q.bulk.stage_many([], ""), "batch must be at least 1 character, got 0"),
        (lambda q: q.bulk.add_parts([], ("sink", -1)), "a batch id must not be negative, got -1"),
    ],
)
async def test_a_value_out_of_its_bounds_is_refused_by_the_runtime_and_the_bulk_writes(
    call: Callable[[DirectQueue], object], message: str
) -> None:
    async with DirectQueue(InMemoryStorage()) as queue:
        with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
            await _called(call, queue)


def test_spark_options_out_of_their_bounds_are_refused() -> None:
    pytest.importorskip("pyspark")
    from jqueue.adapters.spark.consumer import ConsumerReader
    from jqueue.adapters.spark.reader import JQueueReader
    from jqueue.adapters.spark.workers import run_workers

    with pytest.raises(ValueError, match=r"^parallelism must be at least 1, got 0$"):
        run_workers(None, "memory://", {}, parallelism=0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"^partitions must be at least 1, got 0$"):
        JQueueReader({"path": "memory://", "partitions": "0"})
    consumer = {"path": "memory://", "consumerId": "c"}
    for option, value, message in (
        ("maxJobsPerTrigger", "0", "maxJobsPerTrigger must be at least 1, got 0"),
        ("leaseSeconds", "0", "leaseSeconds must be positive, got 0.0"),
        ("leaseSeconds", "1e400", "leaseSeconds must be at most"),
        ("partitions", "0", "partitions must be at least 1, got 0"),
    ):
        with pytest.raises(ValueError, match=f"^{re.escape(message)}"):
            ConsumerReader({**consumer, option: value})


@pytest.mark.parametrize("bounds", [Bounds(ge=0), Bounds(gt=0.0), Bounds(le=1.0)])
def test_nan_is_refused_by_any_numeric_bound(bounds: Bounds) -> None:
    with pytest.raises(ValueError, match="x must be a number, got nan"):
        bounds.check("x", float("nan"))


def test_a_zero_handler_timeout_is_refused_not_taken_for_none() -> None:
    worker = Worker(DirectQueue(InMemoryStorage()))
    with pytest.raises(ValueError, match="timeout must be positive, got 0 s"):
        worker.register("e", _handle, timeout=timedelta(0))


async def test_a_listings_limit_is_bounded_alike_in_python_and_on_the_wire() -> None:
    """``LISTED``: 0 lists nothing, a negative limit is refused with the field's name, and the
    operator API's bodies take exactly what the Python call takes."""
    import msgspec

    from jqueue.adapters.service.wire.operator_calls import JobsRequest

    async with DirectQueue(InMemoryStorage()) as queue:
        await queue.enqueue("e", b"x")
        assert await queue.jobs(limit=0) == []
        assert await queue.history(limit=0) == []
        for call in (queue.jobs(limit=-1), queue.history(limit=-1), queue.browse(limit=-1)):
            with pytest.raises(ValueError, match="limit must not be negative, got -1"):
                await call
    assert msgspec.json.decode(b'{"limit": 0}', type=JobsRequest).limit == 0
    with pytest.raises(msgspec.ValidationError):
        msgspec.json.decode(b'{"limit": -1}', type=JobsRequest)
