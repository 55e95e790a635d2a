"""How far ``after`` goes: a job has at most ``MAX_PARENTS`` parents, refused as bad input by
every way in (``JobSpec``, ``enqueue``, workflows, the HTTP API), and a parent's settle costs
O(1) per child, however many parents the child has, in memory and across checkpoints,
rollbacks and a reopen."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, ClassVar

import pytest

from jqueue import DirectQueue, JobSpec, JobStatus, Layout, LocalFileSystemStorage, Task, group
from jqueue.domain.index import QueueIndex
from jqueue.domain.spec import MAX_PARENTS
from jqueue.domain.times import to_micros
from servers import jqueue_serve

TOO_MANY = [f"p{n}" for n in range(MAX_PARENTS + 1)]


def test_a_spec_with_more_parents_than_the_limit_is_refused_naming_it() -> None:
    assert len(JobSpec("join", b"", after=TOO_MANY[:MAX_PARENTS]).after or ()) == MAX_PARENTS
    with pytest.raises(
        ValueError, match=rf"after must hold at most {MAX_PARENTS} items, got {MAX_PARENTS + 1}"
    ):
        JobSpec("join", b"", after=TOO_MANY)


async def test_enqueue_and_a_workflow_over_the_limit_commit_nothing(tmp_path: Path) -> None:
    async def add(x: int, y: int) -> int:
        return x + y

    async def total(values: list[int]) -> int:
        return sum(values)

    adding, totalling = Task(add, "add"), Task(total, "total")
    async with DirectQueue(LocalFileSystemStorage(tmp_path / "q.json")) as queue:
        await queue.enqueue_many([JobSpec("p", b"", id=parent) for parent in TOO_MANY])
        version = (await queue.read_state()).version
        with pytest.raises(ValueError, match="after must hold at most"):
            await queue.enqueue("join", b"", after=TOO_MANY)
        with pytest.raises(ValueError, match="after must hold at most"):
            await queue.enqueue_many([JobSpec("one", b""), JobSpec("join", b"", after=TOO_MANY)])
        flow = group(adding.s(n, 1) for n in range(MAX_PARENTS + 1)) | totalling.s()
        with pytest.raises(ValueError, match="after must hold at most"):
            await flow.defer(queue)
        state = await queue.read_state()
        assert (state.version, len(state.jobs)) == (version, len(TOO_MANY))


def _post(url: str, body: dict[str, Any]) -> tuple[int, Any]:
    request = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def test_the_http_api_answers_too_many_parents_with_400(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    with jqueue_serve(str(root), tmp_path / "serve.log") as url:
        enqueue = f"{url}/v1/queues/q/enqueue"
        parents = [{"entrypoint": "p", "payload": "", "id": parent} for parent in TOO_MANY]
        assert _post(enqueue, {"jobs": parents})[0] == 200
        status, answer = _post(enqueue, {"jobs": [{"entrypoint": "join", "payload": "", "after": TOO_MANY}]})
        assert (status, answer["error"]["code"]) == (400, "bad_body"), answer
        assert str(MAX_PARENTS) in answer["error"]["message"]
        status, answer = _post(f"{url}/v1/queues/q/peek", {"entrypoints": ["join"]})
        assert (status, answer["jobs"]) == (200, [])
        fits = {"entrypoint": "join", "payload": "", "after": TOO_MANY[:MAX_PARENTS]}
        status, answer = _post(enqueue, {"jobs": [fits]})
        assert status == 200, answer
        assert answer["jobs"][0]["status"] == "waiting"


class CountedId(str):
    """A job id that counts each time the index hashes or compares one (a touch)."""

    touches: ClassVar[int] = 0

    def __hash__(self) -> int:
        CountedId.touches += 1
        return str.__hash__(self)

    def __eq__(self, other: object) -> bool:
        CountedId.touches += 1
        return str.__eq__(self, other)

    def __ne__(self, other: object) -> bool:
        return not self == other


NOW = datetime(2030, 1, 1, tzinfo=UTC)


def _fan_in(parents: int, children: int = 1) -> tuple[QueueIndex, list[CountedId]]:
    """An index of ``parents`` jobs and ``children`` jobs waiting for all of them."""
    index = QueueIndex()
    ids = [CountedId(f"parent-{n}") for n in range(parents)]
    for parent in ids:
        index.apply(JobSpec("p", b"", id=parent).build(NOW))
    for n in range(children):
        index.apply(JobSpec("join", b"", id=f"child-{n}", after=ids).build(NOW))
    return index, ids


def _touches_of_each_ack(index: QueueIndex, parents: list[CountedId]) -> list[int]:
    touches = []
    for n, parent in enumerate(parents):
        CountedId.touches = 0
        index.remove(parent, None, to_micros(NOW), b"%d" % n)
        touches.append(CountedId.touches)
    return touches


@pytest.mark.parametrize("parents", [10, 3000])
def test_a_parent_ack_touches_a_bounded_number_of_parent_ids_per_child(parents: int) -> None:
    """Past the first settle of a child (which reads its parents once), each ack touches the
    same few ids whatever the child's number of parents: none of the others."""
    index, ids = _fan_in(parents, children=2)
    touches = _touches_of_each_ack(index, ids)
    assert max(touches[1:-1]) <= 60, touches[:5]
    assert sum(touches) <= 40 * parents, sum(touches)  # the first and the last settle read them all
    for child in ("child-0", "child-1"):
        record = index.job(child)
        assert record is not None
        assert (record.status, record.awaiting) == (JobStatus.QUEUED, ())
        assert record.parent_results == tuple(b"%d" % n for n in range(parents))


def test_settles_undone_and_redone_across_freezes_keep_the_child_true() -> None:
    index, ids = _fan_in(50)
    at = to_micros(NOW)
    for parent in ids[:10]:
        index.remove(parent, None, at, parent.encode())
    frozen = index.freeze()
    child = frozen.live("child-0")
    assert child is not None
    assert type(child.awaiting) is tuple  # what a checkpoint reads, even from another thread
    assert type(child.parent_results) is tuple
    assert child.awaiting == tuple(ids[10:])
    index.thaw()
    index.journal.begin()
    for parent in ids[10:20]:
        index.remove(parent, None, at, parent.encode())
    mark = index.journal.savepoint()
    for parent in ids[20:25]:
        index.remove(parent, None, at, parent.encode())
    index.journal.rollback_to(mark)  # the five settles undone: their parents are awaited again
    record = index.job("child-0")
    assert record is not None
    assert record.awaiting == tuple(ids[20:])
    snapshot = record.as_added()
    assert type(snapshot.awaiting) is tuple
    assert snapshot.parent_results == tuple(parent.encode() for parent in ids[:20]) + (None,) * 30
    assert [child.id for child in index.dependencies.children_of(ids[22])] == ["child-0"]
    assert index.dependencies.children_of(ids[15]) == []
    for parent in ids[20:]:
        index.remove(parent, None, at, parent.encode())
    index.journal.commit()
    added = index.records["child-0"].as_added()
    assert (added.status, added.awaiting) == (JobStatus.QUEUED, ())
    assert added.parent_results == tuple(parent.encode() for parent in ids)


async def test_a_wide_fan_in_settles_across_checkpoints_and_a_reopen(tmp_path: Path, layout: Layout) -> None:
    parents = [f"p{n}" for n in range(400)]
    async with DirectQueue(LocalFileSystemStorage(tmp_path / "q.json"), layout=layout) as queue:
        await queue.enqueue_many([JobSpec("p", b"", id=parent) for parent in parents])
        await queue.enqueue("join", b"", id="join", after=parents)
        for start in range(0, 300, 50):
            claimed = await queue.dequeue("p", batch_size=50)
            for job in claimed:
                await queue.ack(job, result=job.id.encode())
            if start == 100 and layout == "log":
                assert await queue.checkpoint()
        child = await queue.find("join")
        assert child is not None
        assert type(child.awaiting) is tuple  # a Job holds tuples, whatever the index holds
        assert type(child.parent_results) is tuple
        settled = set(parents) - set(child.awaiting)
        assert len(settled) == 300
    async with DirectQueue(LocalFileSystemStorage(tmp_path / "q.json"), layout=layout) as queue:
        reopened = await queue.find("join")
        assert reopened is not None
        assert (reopened.status, reopened.awaiting) == (JobStatus.WAITING, child.awaiting)
        assert reopened.parent_results == child.parent_results
        while claimed := await queue.dequeue("p", batch_size=50):
            await queue.ack_many(claimed)
        [released] = await queue.dequeue("join")
        expected = tuple(parent.encode() if parent in settled else None for parent in parents)
        assert released.parent_results == expected
