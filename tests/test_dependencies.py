"""Jobs that wait for parents (``after``, ADR 0019): a child is claimable only once every parent
is acked, gets their results in the order of ``after``, and a failed parent cancels it (or
lets it run, by its policy), in the commit that settles the parent. File and S3, both
layouts, direct and brokered, across checkpoints and reopening."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import msgspec
import pytest

from conftest import Backend
from jqueue import (
    BrokerQueue,
    DirectQueue,
    InMemoryStorage,
    Job,
    JobNotFoundError,
    JobSpec,
    JobStatus,
    Layout,
    LocalFileSystemStorage,
    ObjectStoragePort,
    Outcome,
    PayloadTooLargeError,
    Worker,
    connect,
)
from jqueue.adapters.service.wire.bodies import ErrorBody
from jqueue.adapters.service.wire.error_codes import body_of, code_of, raised
from jqueue.domain.schema import PUBLIC_FORM
from queues import open_queue
from servers import jqueue_serve


async def claim_all(queue: DirectQueue | BrokerQueue) -> dict[str, Job]:
    return {job.id: job for job in await queue.dequeue(batch_size=100)}


async def test_a_child_runs_once_its_parents_are_acked_with_their_results(
    file_or_s3: Backend, layout: Layout, queue_kind: str
) -> None:
    storage, name = file_or_s3.new()
    async with open_queue(queue_kind, storage, layout=layout) as queue:
        first = await queue.enqueue("step", b"1", id="first")
        second = await queue.enqueue("step", b"2", id="second")
        child = await queue.enqueue("join", b"", after=[second.id, first.id, first.id])
        assert child.status is JobStatus.WAITING
        assert child.after == (second.id, first.id)  # the caller's order, each parent once
        assert child.awaiting == child.after
        assert child.parent_results == ()

        claimed = await claim_all(queue)
        assert set(claimed) == {first.id, second.id}
        await queue.ack(claimed[first.id], result=b"one")
        assert await claim_all(queue) == {}  # still waiting for the second
        waiting = await queue.find(child.id)
        assert waiting is not None
        assert (waiting.status, waiting.awaiting) == (JobStatus.WAITING, (second.id,))
        assert waiting.parent_results == (None, b"one")

        await queue.ack(claimed[second.id], result=b"two")
        [released] = (await claim_all(queue)).values()
        assert released.id == child.id
        assert released.parent_results == (b"two", b"one")
        assert released.awaiting == ()

    async with DirectQueue(file_or_s3.handle(name), layout=layout) as reopened:
        job = await reopened.find(child.id)
        assert job is not None
        assert job.parent_results == (
            b"two",
            b"one",
        )


async def test_a_failed_parent_cancels_its_children_and_theirs_or_lets_them_run(
    new_storage: Callable[[], ObjectStoragePort], kind: str
) -> None:
    async with open_queue(kind, new_storage()) as queue:
        parent = await queue.enqueue("p", b"", id="parent")
        child = await queue.enqueue("c", b"", id="child", after=[parent.id])
        grandchild = await queue.enqueue("g", b"", id="grandchild", after=[child.id])
        anyway = await queue.enqueue("r", b"", id="anyway", after=[parent.id], on_parent_failure="run")
        [claimed] = await queue.dequeue()
        await queue.nack(claimed, error="boom", dead=True)

        [runs] = await queue.dequeue(batch_size=10)
        assert runs.id == anyway.id
        assert runs.parent_results == (None,)
        history = {record.job_id: record for record in await queue.history()}
        for job_id in (child.id, grandchild.id):
            assert history[job_id].outcome is JobStatus.CANCELLED
        assert history[child.id].error == f"parent {parent.id} died"
        assert history[grandchild.id].error == f"parent {child.id} was cancelled"

        # A dead letter revived later runs again; the children it failed stay decided.
        await queue.requeue_dead([parent.id])
        [again] = await queue.dequeue()
        await queue.ack(again)
        assert await queue.dequeue(batch_size=10) == []


@pytest.mark.parametrize("how", ["cancel", "purge"])
async def test_a_cancelled_or_purged_parent_settles_its_children(
    new_storage: Callable[[], ObjectStoragePort], kind: str, how: str
) -> None:
    async with open_queue(kind, new_storage()) as queue:
        parent = await queue.enqueue("p", b"", id="parent")
        child = await queue.enqueue("c", b"", after=[parent.id])
        anyway = await queue.enqueue("r", b"", after=[parent.id], on_parent_failure="run")
        if how == "cancel":
            await queue.cancel(parent.id)
        else:
            assert await queue.purge(status=None, ids=[parent.id]) == 1
        [runs] = await queue.dequeue(batch_size=10)
        assert runs.id == anyway.id
        [record] = [r for r in await queue.history() if r.job_id == child.id]
        verb = "was cancelled" if how == "cancel" else "was purged"
        assert (record.outcome, record.error) == (JobStatus.CANCELLED, f"parent {parent.id} {verb}")


async def test_parents_settled_before_the_child_arrives(
    new_storage: Callable[[], ObjectStoragePort], kind: str
) -> None:
    async with open_queue(kind, new_storage()) as queue:
        for job_id in ("done", "dead", "gone"):
            await queue.enqueue("p", b"", id=job_id)
        claimed = await claim_all(queue)
        await queue.ack(claimed["done"], result=b"r")
        await queue.nack(claimed["dead"], error="x", dead=True)
        await queue.cancel(claimed["gone"])  # its worker's cancel: it ends at once

        ready = await queue.enqueue("c", b"", after=["done"])
        assert (ready.status, ready.parent_results) == (JobStatus.QUEUED, (b"r",))
        cancelled = await queue.enqueue("c", b"", after=["done", "dead"])
        assert cancelled.status is JobStatus.CANCELLED  # answered with its history record
        anyway = await queue.enqueue("c", b"", after=["gone", "done"], on_parent_failure="run")
        assert (anyway.status, anyway.parent_results) == (JobStatus.QUEUED, (None, b"r"))
        assert {job.id for job in await queue.dequeue(batch_size=10)} == {ready.id, anyway.id}


async def test_an_unknown_parent_is_refused_and_nothing_is_added(
    new_storage: Callable[[], ObjectStoragePort], kind: str
) -> None:
    async with open_queue(kind, new_storage()) as queue:
        with pytest.raises(JobNotFoundError, match="nowhere"):
            await queue.enqueue_many([JobSpec("p", b"", id="p1"), JobSpec("c", b"", after=["p1", "nowhere"])])
        with pytest.raises(JobNotFoundError, match="later"):  # a parent comes before its child
            await queue.enqueue_many([JobSpec("c", b"", after=["later"]), JobSpec("p", b"", id="later")])
        assert await queue.count() == 0
        with pytest.raises(ValueError, match="itself"):
            JobSpec("c", b"", id="same", after=["same"])
        with pytest.raises(ValueError, match="on_parent_failure"):
            JobSpec("c", b"", after=["x"], on_parent_failure="sometimes")
        with pytest.raises(ValueError, match="after"):
            JobSpec("c", b"", after="p1")  # a str is one id per letter: refused


async def test_a_workflow_is_one_commit_and_a_waiting_job_is_left_waiting(
    new_storage: Callable[[], ObjectStoragePort],
) -> None:
    async with DirectQueue(new_storage()) as queue:
        version = (await queue.stats()).version
        jobs = await queue.enqueue_many(
            [
                JobSpec("fan", b"1", id="a"),
                JobSpec("fan", b"2", id="b"),
                JobSpec("sum", b"", id="total", after=["a", "b"]),
            ]
        )
        assert [job.status for job in jobs] == [JobStatus.QUEUED, JobStatus.QUEUED, JobStatus.WAITING]
        stats = await queue.stats()
        assert stats.version == version + 1
        assert stats.entrypoints["sum"].waiting == 1
        assert stats.total(JobStatus.WAITING) == 1
        await queue.requeue(["total"])  # an operator's requeue does not skip the parents
        with pytest.raises(ValueError, match="waits for its parents"):
            await queue.nack("total")
        assert {job.id for job in await queue.dequeue(batch_size=10)} == {"a", "b"}


async def test_children_wait_across_checkpoints_and_a_reopen(tmp_path: object) -> None:
    storage = LocalFileSystemStorage(f"{tmp_path}/q.json")
    async with DirectQueue(storage) as queue:
        parents = await queue.enqueue_many("p", [b""] * 5000)  # more than a slab block's rows
        children = await queue.enqueue_many(
            [JobSpec("c", b"", after=[parent.id]) for parent in parents[:4200]]
        )
        assert await queue.checkpoint()
    async with DirectQueue(LocalFileSystemStorage(f"{tmp_path}/q.json")) as queue:
        assert (await queue.stats()).entrypoints["c"].waiting == len(children)
        claimed = await queue.dequeue("p", batch_size=10)
        await queue.ack_many(claimed)
        released = await queue.dequeue("c", batch_size=100)
        child_of = {parent.id: child.id for parent, child in zip(parents, children, strict=False)}
        assert {job.id for job in released} == {child_of[job.id] for job in claimed}


async def test_a_worker_passes_results_down_a_chain() -> None:
    async with DirectQueue(InMemoryStorage()) as queue:
        await queue.enqueue_many(
            [
                JobSpec("add", b"1", id="one"),
                JobSpec("add", b"2", id="two", after=["one"]),
                JobSpec("add", b"3", id="three", after=["two"]),
            ]
        )
        worker = Worker(queue)
        seen: list[str] = []

        @worker.handler("add")
        async def add(job: Job) -> bytes:
            before = int(job.parent_results[0] or b"0") if job.parent_results else 0
            seen.append(job.id)
            return str(before + int(job.payload)).encode()

        for _ in range(3):
            await worker.burst()
        assert seen == ["one", "two", "three"]
        assert await queue.result("three", timeout=timedelta(seconds=5)) == b"6"


async def test_parents_through_jqueue_serve_and_the_command_line(tmp_path: Path) -> None:
    (tmp_path / "root").mkdir()
    with jqueue_serve(str(tmp_path / "root"), tmp_path / "serve.log") as url:
        async with connect(url, "jobs") as queue:
            parent = await queue.enqueue("p", b"", id="parent")
            child = await queue.enqueue("c", b"", after=[parent.id], on_parent_failure="run")
            assert (child.status, child.after, child.on_parent_failure) == (
                JobStatus.WAITING,
                (parent.id,),
                "run",
            )
            with pytest.raises(JobNotFoundError):  # the error crosses the wire typed
                await queue.enqueue("c", b"", after=["nowhere"])
            [claimed] = await queue.dequeue("p")
            await queue.ack(claimed, result=b"\x00\xff")
            [released] = await queue.dequeue("c")
            assert released.parent_results == (b"\x00\xff",)

    path = tmp_path / "root" / "jobs.json"

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "jqueue", "--storage", str(path), *args]
        return subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)

    added = await asyncio.to_thread(cli, "enqueue", "c", "--after", "parent", "--json")
    assert added.returncode == 0, added.stderr
    assert json.loads(added.stdout)[0]["status"] == "queued"  # its parent was acked: settled at once
    refused = await asyncio.to_thread(cli, "enqueue", "c", "--after", "nowhere")
    assert refused.returncode != 0
    assert "nowhere" in refused.stderr
    wrong = await asyncio.to_thread(cli, "enqueue", "c", "--after", "parent", "--on-parent-failure", "x")
    assert wrong.returncode != 0
    assert "cancel" in wrong.stderr


async def test_a_call_whose_jobs_wait_for_each_other_behind_a_failed_parent() -> None:
    async with DirectQueue(InMemoryStorage()) as queue:
        await queue.enqueue("p", b"", id="gone")
        await queue.cancel("gone")
        answers = await queue.enqueue_many(
            [
                JobSpec("c", b"", id="child", after=["gone"]),
                JobSpec("g", b"", id="grandchild", after=["child", "gone"]),
                JobSpec("r", b"", id="anyway", after=["child"], on_parent_failure="run"),
            ]
        )
        # each answer is the job as the commit left it: two cancelled, one released by the cancel
        assert [job.status for job in answers] == [JobStatus.CANCELLED, JobStatus.CANCELLED, JobStatus.QUEUED]
        [runs] = await queue.dequeue(batch_size=10)
        assert runs.id == "anyway"
        assert runs.parent_results == (None,)


async def test_staged_and_numbered_jobs_with_parents() -> None:
    async with DirectQueue(InMemoryStorage()) as queue:
        await queue.enqueue("p", b"", id="parent")
        with pytest.raises(ValueError, match="staged"):  # a write is to become visible whole
            await queue.bulk.stage_many([JobSpec("c", b"", after=["parent"])], "write-1")
        await queue.bulk.stage_many([JobSpec("s", b"", id="staged")], "write-2")
        with pytest.raises(ValueError, match="staged"):
            await queue.enqueue("c", b"", after=["staged"])
        numbers = iter(range(100, 200))
        [numbered] = await queue.bulk.enqueue_numbered(
            PUBLIC_FORM, [JobSpec("c", b"", after=["parent"])], lambda: next(numbers)
        )
        assert (numbered.id, numbered.status) == ("100", JobStatus.WAITING)


async def test_a_parent_answered_by_an_existing_job_is_waited_for_under_that_jobs_id() -> None:
    async with DirectQueue(InMemoryStorage()) as queue:
        await queue.enqueue("p", b"", id="first", dedup_key="nightly")
        parent, child = await queue.enqueue_many(
            [JobSpec("p", b"", id="again", dedup_key="nightly"), JobSpec("c", b"", after=["again"])]
        )
        assert parent.id == "first"  # deduplicated: the job that holds the key
        assert (child.status, child.after) == (JobStatus.WAITING, ("first",))
        [claimed] = await queue.dequeue("p")
        await queue.ack(claimed, result=b"done")
        [released] = await queue.dequeue("c")
        assert released.parent_results == (b"done",)


async def test_a_result_that_would_take_a_child_past_the_payload_limit_is_refused(
    file_or_s3: Backend, queue_kind: str
) -> None:
    storage, _ = file_or_s3.new()
    async with open_queue(queue_kind, storage, max_payload_bytes=100) as queue:
        await queue.enqueue_many([JobSpec("p", b"", id=f"p{n}") for n in range(2)])
        await queue.enqueue("join", b"", id="join", after=["p0", "p1"])
        claimed = await claim_all(queue)
        await queue.ack(claimed["p0"], result=b"x" * 60)
        with pytest.raises(PayloadTooLargeError) as raised:  # 60 + 41 summed, each under the limit
            await queue.ack(claimed["p1"], result=b"y" * 41)
        assert (raised.value.size, raised.value.limit, raised.value.job_id) == (101, 100, "join")
        assert "join" in str(raised.value)
        child, parent = await queue.find("join"), await queue.find("p1")
        assert child is not None  # the failed ack committed nothing
        assert parent is not None
        assert (child.awaiting, child.parent_results) == (("p1",), (b"x" * 60, None))
        assert parent.status is JobStatus.IN_PROGRESS
        await queue.ack(claimed["p1"], result=b"y" * 40)  # at the limit: kept
        released = await queue.find("join")
        assert released is not None
        assert (released.status, released.parent_results) == (JobStatus.QUEUED, (b"x" * 60, b"y" * 40))


async def test_a_worker_whose_result_cannot_be_kept_ends_the_job_dead_and_goes_on() -> None:
    async with DirectQueue(InMemoryStorage(), max_payload_bytes=100) as queue:
        await queue.enqueue_many(
            [
                JobSpec("big", b"", id="too-big"),
                JobSpec("half", b"", id="left"),
                JobSpec("half", b"", id="right"),
                JobSpec("join", b"", id="join", after=["left", "right"]),
            ]
        )
        worker = Worker(queue)

        @worker.handler("big")
        async def big(job: Job) -> bytes:
            return b"x" * 101  # over the limit on its own

        @worker.handler("half")
        async def half(job: Job) -> bytes:
            return b"h" * 60  # under the limit, but not with the other half's beside it in join

        stats = await worker.run(until_empty=True, install_signals=False)
        assert (stats.outcomes[Outcome.ACKED], stats.outcomes[Outcome.DEAD]) == (1, 2)
        dead = {job.id: job for job in await queue.dead_letters()}
        assert "payload of 101 bytes" in (dead.pop("too-big").last_error or "")
        [(half_id, half_job)] = dead.items()  # whichever half settled second
        assert "join's parents would be 120 bytes" in (half_job.last_error or "")
        cancelled = await queue.finished("join")
        assert cancelled is not None
        assert (cancelled.outcome, cancelled.error) == (JobStatus.CANCELLED, f"parent {half_id} died")


def test_the_child_named_by_a_refused_ack_crosses_the_wire() -> None:
    refused = PayloadTooLargeError(120, 100, "join")
    entry = code_of(refused)
    assert entry is not None
    again = raised(msgspec.json.decode(msgspec.json.encode(body_of(refused, entry)), type=ErrorBody))
    assert isinstance(again, PayloadTooLargeError)
    assert (again.size, again.limit, again.job_id, str(again)) == (120, 100, "join", str(refused))


async def test_a_child_whose_finished_parents_results_are_over_the_limit_is_refused() -> None:
    async with DirectQueue(InMemoryStorage(), max_payload_bytes=100) as queue:
        await queue.enqueue_many([JobSpec("p", b"", id=f"p{n}") for n in range(2)])
        for job in (await claim_all(queue)).values():
            await queue.ack(job, result=b"x" * 60)  # each under the limit; 120 summed
        with pytest.raises(PayloadTooLargeError) as raised:
            await queue.enqueue_many(
                [JobSpec("ok", b""), JobSpec("join", b"", id="join", after=["p0", "p1"])]
            )
        assert (raised.value.size, raised.value.limit, raised.value.job_id) == (120, 100, "join")
        assert await queue.count() == 0  # nothing of the call was added
        assert (await queue.enqueue("join", b"", after=["p0"])).parent_results == (b"x" * 60,)


async def test_a_released_child_keeps_when_it_was_released_and_its_own_order() -> None:
    async with DirectQueue(InMemoryStorage()) as queue:
        await queue.enqueue("p", b"", id="parent")
        later = datetime.now(UTC) + timedelta(hours=1)
        await queue.enqueue_many(
            [
                JobSpec("c", b"", id="child", after=["parent"]),
                JobSpec("c", b"", id="delayed", after=["parent"], not_before=later),
            ]
        )
        [parent] = await queue.dequeue("p")
        await queue.ack(parent)
        acked = await queue.finished("parent")
        child, delayed = await queue.find("child"), await queue.find("delayed")
        assert acked is not None
        assert child is not None
        assert delayed is not None
        assert child.released_at == acked.finished_at  # its wait counts from here, not its enqueue
        assert child.not_before is None  # claimable at once, whatever the acker's clock says
        assert (delayed.released_at, delayed.not_before) == (acked.finished_at, later)
        assert await queue.requeue([child.id]) == 0  # claimable already: nothing to do
        stats = (await queue.stats()).entrypoints["c"]
        assert (stats.queued, stats.scheduled) == (1, 1)
