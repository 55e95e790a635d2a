"""Several ``jqueue serve --member`` processes on one root: each serves the queues placed on it,
forwards the calls of the others, and takes a dead member's queues over (issue 52)."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import signal
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from jqueue import (
    BrokerQueue,
    DirectQueue,
    JobSpec,
    JobStatus,
    LocalFileSystemStorage,
    RemoteQueue,
    connect,
    sharded,
)
from jqueue.adapters.service.client import caller as caller_module
from jqueue.adapters.service.server.catalog import Catalog, CatalogRecord, added
from jqueue.adapters.service.server.host import QueueHost
from jqueue.adapters.service.server.members import Members
from jqueue.adapters.service.server.sharing import SharedRoot
from jqueue.adapters.service.wire.root import record_storage
from jqueue.core.formats.entry import ENTRY_PREFIX, decode_entry, entry_seq
from jqueue.domain.effects import Owned
from jqueue.domain.errors import NotOwnerError, QueueClosedError
from jqueue.ports.storage import ObjectStoragePort
from jqueue.testing import instrumented
from servers import jqueue_serve
from test_broker_failover import get, wait_for
from test_broker_outages import frozen

pytestmark = pytest.mark.slow

MEMBER = ["--member", "--renew-every", "0.2", "--stale-after", "1"]
QUEUES = [f"q{n}" for n in range(6)]


def enqueue(url: str, queue: str, payload: str = "") -> tuple[int, dict[str, Any], str | None]:
    """Enqueue one job over the native API: the status, the body, and the owner a forward named."""
    encoded = base64.b64encode(payload.encode()).decode()
    body = json.dumps({"jobs": [{"entrypoint": "e", "payload": encoded}]}).encode()
    request = urllib.request.Request(
        f"{url}/v1/queues/{queue}/enqueue", body, {"Content-Type": "application/json"}, method="POST"
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read()), response.headers.get("X-JQueue-Owner")
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read()), None


def owners_in_log(root: Path, queue: str) -> list[Owned]:
    """The ``Owned`` entries of a queue's log, in order (a file root keeps them in segments)."""
    storage = LocalFileSystemStorage(root / f"{queue}.json")

    async def read() -> list[Owned]:
        found: list[tuple[int, Owned]] = []
        for name in await storage.list_names(ENTRY_PREFIX):
            seq, data = entry_seq(name), await storage.get(name)
            assert seq is not None
            assert data is not None
            found += [(seq, e) for e in decode_entry(data, seq, name).effects if isinstance(e, Owned)]
        return [owned for _, owned in sorted(found, key=lambda item: item[0])]

    return asyncio.run(read())


async def _made_queues(tmp_path: Path) -> Path:
    root = tmp_path / "root"
    root.mkdir()
    for name in QUEUES:
        await DirectQueue(LocalFileSystemStorage(root / f"{name}.json")).enqueue("e", b"first")
    return root


def _root_with_queues(tmp_path: Path) -> Path:
    return asyncio.run(_made_queues(tmp_path))


def _shared(urls: list[str]) -> bool:
    """Whether every member sees them all and every queue is served by exactly one of them."""
    healths = [get(f"{url}/healthz") for url in urls]
    if any(len(health["members"]) != len(urls) for health in healths):
        return False
    served = sorted(name for health in healths for name in health["queues"])
    return served == QUEUES


@contextlib.contextmanager
def two_members(root: Path, tmp_path: Path) -> Iterator[tuple[str, str]]:
    """Two members of ``root``, once they share its queues."""
    with (
        jqueue_serve(str(root), tmp_path / "a.log", options=MEMBER) as first,
        jqueue_serve(str(root), tmp_path / "b.log", options=MEMBER) as second,
    ):
        wait_for(lambda: _shared([first, second]), 20)
        yield first, second


def test_members_share_the_queues_and_forward_the_others_calls(tmp_path: Path) -> None:
    root = _root_with_queues(tmp_path)
    with two_members(root, tmp_path) as (first, second):
        shares = {url: get(f"{url}/healthz")["queues"] for url in (first, second)}
        assert all(len(names) == len(QUEUES) // 2 for names in shares.values()), shares
        for url in (first, second):
            for name in QUEUES:
                status, answer, owner = enqueue(url, name, url)
                assert status == 200, answer
                assert owner == (None if name in shares[url] else next(u for u in shares if u != url))
        for url, names in shares.items():
            owner_id = get(f"{url}/healthz")["owner"]
            for name in names:
                assert owners_in_log(root, name)[-1].owner == owner_id


def test_a_killed_member_s_queues_answer_from_another_within_seconds(tmp_path: Path) -> None:
    root = _root_with_queues(tmp_path)
    with two_members(root, tmp_path) as (first, second):
        lost = get(f"{first}/healthz")["queues"]
        killed = get(f"{first}/healthz")["owner"]
        assert (root / f"_member-{killed}.json").exists()
        os.kill(get(f"{first}/healthz")["pid"], signal.SIGKILL)
        killed_at = time.monotonic()
        wait_for(lambda: all(enqueue(second, name)[0] == 200 for name in lost), 15)
        took = time.monotonic() - killed_at
        assert sorted(get(f"{second}/healthz")["queues"]) == QUEUES
        # the member that took the dead one out removed its beat (and, on a file root, its lock)
        assert not list(root.glob(f"_member-{killed}.json*"))
    assert took < 5, f"{took:.1f} s"  # about stale-after (1 s) and a look; generous for a busy machine
    for name in lost:
        assert [owned.epoch for owned in owners_in_log(root, name)] == [1, 2]


def test_a_stopped_member_hands_its_queues_over_and_a_new_one_takes_its_share(tmp_path: Path) -> None:
    root = _root_with_queues(tmp_path)
    with jqueue_serve(str(root), tmp_path / "a.log", options=MEMBER) as first:
        wait_for(lambda: _shared([first]), 20)
        with jqueue_serve(str(root), tmp_path / "b.log", options=MEMBER) as second:
            started = time.monotonic()
            wait_for(lambda: _shared([first, second]), 20)
            joined_in = time.monotonic() - started
        wait_for(lambda: _shared([first]), 10)  # a clean stop leaves at once
    assert joined_in < 10
    assert not list(root.glob("_member-*"))  # each removed its beat on its way out
    assert json.loads((root / "_brokers.json").read_text()) == {"members": {}}


async def test_a_client_of_the_root_keeps_working_through_a_member_s_death(tmp_path: Path) -> None:
    root = await _made_queues(tmp_path)
    with two_members(root, tmp_path) as (first, second):
        async with contextlib.AsyncExitStack() as stack:
            queues = [await stack.enter_async_context(connect(str(root), name)) for name in QUEUES]
            assert all(isinstance(queue, RemoteQueue) for queue in queues)
            added = [await queue.enqueue("e", b"1") for queue in queues]
            front = get(f"{first}/healthz")["broker"]
            served = {url: get(f"{url}/healthz")["queues"] for url in (first, second)}
            for name, queue in zip(QUEUES, queues, strict=True):
                direct = queue._caller.owner  # type: ignore[union-attr]
                assert direct == (None if name in served[front] else next(u for u in served if u != front))
            os.kill(get(f"{first}/healthz")["pid"], signal.SIGKILL)
            added += [await queue.enqueue("e", b"2") for queue in queues]
            claimed = [job for queue in queues for job in await queue.dequeue(batch_size=10)]
        assert {job.id for job in added} <= {job.id for job in claimed}
        assert len(claimed) == 3 * len(QUEUES)  # the first job of each queue, and the two added
        assert get(f"{second}/healthz")["queues"] == QUEUES


def test_the_queued_api_works_through_any_member(tmp_path: Path) -> None:
    """Push, poll and delete through the member that does not serve the queue: each call is
    forwarded, and a poll tag resolves at the owner."""
    from test_queued_api import Client

    root = _root_with_queues(tmp_path)
    with two_members(root, tmp_path) as (first, second):
        served = get(f"{first}/healthz")["queues"]
        other = next(name for name in QUEUES if name not in served)
        client = Client(first)
        [pushed] = client.push(other, "hello")
        polled = [m for m in client.poll(other, count=10) if m["id"] == pushed]
        assert [m["contents"] for m in polled] == ["hello"]
        status, answer = client.delete(other, (pushed, polled[0]["poll_tag"]))
        assert status == 200, answer
        assert pushed not in [m["id"] for m in Client(second).poll(other, count=10)]


def test_a_root_served_by_one_broker_before_is_shared_by_members_after(tmp_path: Path) -> None:
    """An old root (one broker record, queues without an owner): members take its queues over
    at epoch 1 and keep every job, and the broker record still names a broker for old clients."""
    root = _root_with_queues(tmp_path)
    with jqueue_serve(
        str(root), tmp_path / "old.log", options=["--renew-every", "0.2", "--stale-after", "1"]
    ) as old:
        for name in QUEUES:
            assert enqueue(old, name, "before")[0] == 200
    with two_members(root, tmp_path) as (first, second):
        ids = {get(f"{url}/healthz")["owner"] for url in (first, second)}
        for name in QUEUES:
            owners = owners_in_log(root, name)
            assert owners[0].epoch == 1  # the old broker never took it: the first member did
            assert owners[-1].owner in ids
        record = json.loads((root / "_broker.json").read_text())
        assert record["address"] in (first, second)
        assert not record["released"]

    async def count() -> dict[str, int]:
        found = {}
        for name in QUEUES:
            async with DirectQueue(LocalFileSystemStorage(root / f"{name}.json")) as queue:
                found[name] = len(await queue.jobs(limit=None))
        return found

    assert asyncio.run(count()) == dict.fromkeys(
        QUEUES, 2
    )  # the first job, and the one through the old broker


async def test_a_sharded_queue_is_served_by_every_member(tmp_path: Path) -> None:
    """A queue of four shards through two members: each member serves some of its shards (each
    shard a log placed like a queue), a client sends each call to its shard's member, and every
    job is claimed once."""
    root = tmp_path / "root"
    root.mkdir()
    units = ["jobs", "jobs.shard-1", "jobs.shard-2", "jobs.shard-3"]

    def placed() -> bool:
        """Whether the members serve the four shards, two each (once each has looked at them all)."""
        served = [get(f"{url}/healthz")["queues"] for url in (first, second)]
        return sorted(n for names in served for n in names) == units and all(len(n) == 2 for n in served)

    with (
        jqueue_serve(str(root), tmp_path / "a.log", options=MEMBER) as first,
        jqueue_serve(str(root), tmp_path / "b.log", options=MEMBER) as second,
    ):
        wait_for(lambda: all(len(get(f"{url}/healthz")["members"]) == 2 for url in (first, second)), 20)
        async with sharded(first, "jobs", 4, broker="require") as queue:
            added = await queue.enqueue_many([JobSpec("e", b"x", tenant=f"t{n % 16}") for n in range(200)])
            wait_for(placed, 20)
            claimed = []
            while batch := await queue.dequeue(batch_size=50):
                claimed += batch
                for job in batch:
                    await queue.ack(job)
            assert sorted(job.id for job in claimed) == sorted(job.id for job in added)
            assert await queue.jobs(limit=None) == []
    assert sorted(path.name for path in root.glob("jobs*.json")) == [f"{unit}.json" for unit in units]


def test_a_member_that_finds_its_queue_taken_takes_it_back_if_placed_on_it(tmp_path: Path) -> None:
    """Another broker takes a queue over behind a member's back (as a member with an old view
    of the members would): the member's next call is refused and changes nothing, it gives the
    queue up, and its next look takes it again; a client only retries."""
    root = _root_with_queues(tmp_path)

    async def take(owner: str) -> None:
        async with BrokerQueue(LocalFileSystemStorage(root / "q0.json")) as rogue:
            await rogue.take_over("rogue", replacing=owner)

    async def claim(url: str) -> int:
        async with connect(url, "q0") as queue:
            return len(await queue.dequeue(batch_size=10))

    with jqueue_serve(str(root), tmp_path / "a.log", options=MEMBER) as member:
        wait_for(lambda: _shared([member]), 20)
        owner = get(f"{member}/healthz")["owner"]
        asyncio.run(take(owner))
        status, answer, _ = enqueue(member, "q0")
        assert (status, answer["error"]["code"]) == (503, "not_owner")
        wait_for(lambda: enqueue(member, "q0")[0] == 200, 10)
        assert asyncio.run(claim(member)) == 2  # the first job, and the one enqueued after
    owners = [owned.owner for owned in owners_in_log(root, "q0")]
    assert owners == [owner, "rogue", owner]


def test_a_call_forwarded_to_a_frozen_member_ends_once_the_member_is_taken_out(tmp_path: Path) -> None:
    root = _root_with_queues(tmp_path)
    with two_members(root, tmp_path) as (first, second):
        name = get(f"{second}/healthz")["queues"][0]
        status, added, _ = enqueue(first, name)
        assert status == 200, added
        waited = json.dumps({"id": added["jobs"][0]["id"], "wait_seconds": 30}).encode()
        request = urllib.request.Request(
            f"{first}/v1/queues/{name}/result", waited, {"Content-Type": "application/json"}, method="POST"
        )

        def long_poll() -> tuple[int, dict[str, Any]]:
            try:
                with urllib.request.urlopen(request, timeout=60) as response:
                    return response.status, json.loads(response.read())
            except urllib.error.HTTPError as error:
                return error.code, json.loads(error.read())

        async def freeze_during_the_poll() -> tuple[int, dict[str, Any], float]:
            poll = asyncio.create_task(asyncio.to_thread(long_poll))
            await asyncio.sleep(0.5)  # forwarded to the owner, which holds it open
            with frozen(get(f"{second}/healthz")["pid"], root):
                started = time.monotonic()
                status, answer = await poll
                return status, answer, time.monotonic() - started

        status, answer, took = asyncio.run(freeze_during_the_poll())
        # not the forward's own 120 s timeout: the frozen member is taken out, its calls end
        assert (status, answer["error"]["code"]) == (503, "not_owner"), answer
        assert took < 15, f"{took:.1f} s"
        wait_for(lambda: enqueue(first, name)[0] == 200, 15)  # sent again, it is served (a retry)


async def test_a_member_whose_looks_are_slow_keeps_its_beat_and_its_membership(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    root = f"memory://slow-looks-{uuid.uuid4().hex}"

    def member(owner: str) -> SharedRoot:
        members = Members(root, owner, f"http://{owner}", renew_every=0.05, stale_after=0.3)
        return SharedRoot(QueueHost(root), members)

    slow, watcher = member("a"), member("b")
    running = [asyncio.create_task(shared.run()) for shared in (slow, watcher)]
    try:
        started = time.monotonic()
        while sorted(watcher.members.addresses) != ["a", "b"] or not slow.joined:
            assert time.monotonic() - started < 30, "the two members never saw each other"
            await asyncio.sleep(0.02)
        loaded = slow.host.catalog.load

        async def slow_load() -> CatalogRecord:
            await asyncio.sleep(1.0)  # a look waiting on a slow bucket: three stale_after long
            return await loaded()

        monkeypatch.setattr(slow.host.catalog, "load", slow_load)
        slowed = time.monotonic()
        while time.monotonic() - slowed < 1.5:
            assert "a" in watcher.members.addresses, "a live member with a slow look was taken out"
            await asyncio.sleep(0.02)
    finally:
        for task in running:
            task.cancel()
        await asyncio.gather(*running, return_exceptions=True)
        for shared in (slow, watcher):
            await shared.host.close()
            await shared.close()


async def test_many_brokers_listing_a_listed_queue_write_the_catalog_once(tmp_path: Path) -> None:
    storage = instrumented(LocalFileSystemStorage(tmp_path / "_catalog.json"), keyed=False)
    catalogs = [Catalog(storage, "the catalog") for _ in range(8)]
    await catalogs[0].change(added("q"))
    await asyncio.gather(*(catalog.change(added("q")) for catalog in catalogs))
    assert storage.calls["write"] == 1, "each broker rewrote a catalog that listed the queue already"
    assert all(list(catalog.record.queues) == ["q"] for catalog in catalogs)
    await catalogs[0].change(added("r"))
    assert sorted((await catalogs[1].load()).queues) == ["q", "r"]


async def test_the_shards_of_a_sharded_queue_of_a_root_read_its_broker_record_through_one_storage(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each shard is a queue of its own, with its own calls; one finder serves them all, so a
    queue of 16 shards on S3 opens one storage client for the broker record, not 16 (64 of them
    held a soak's producer up for 3 s)."""
    root = tmp_path / "root"
    root.mkdir()
    opened: list[str] = []

    def counted(target: str) -> ObjectStoragePort:
        opened.append(target)
        return record_storage(target)

    monkeypatch.setattr(caller_module, "record_storage", counted)
    with jqueue_serve(str(root), tmp_path / "a.log", options=MEMBER):
        async with sharded(str(root), "jobs", 16, broker="require") as queue:
            await queue.enqueue_many([JobSpec("e", b"x", tenant=f"t{n}") for n in range(64)])
            assert len(await queue.jobs(limit=None)) == 64
    assert len(opened) == 1, "each shard found the broker through a storage of its own"


async def test_a_shard_without_jobs_reads_as_empty_through_the_service(tmp_path: Path) -> None:
    """A shard's log is made by its first job: until then a read of the sharded queue adds it up
    as empty (before, the service answered 404 for it and the whole read failed)."""
    root = tmp_path / "root"
    root.mkdir()
    with jqueue_serve(str(root), tmp_path / "a.log", options=MEMBER) as url:
        async with sharded(url, "fresh", 4, broker="require") as queue:
            assert await queue.jobs(limit=None) == []
            job = (await queue.enqueue_many([JobSpec("e", b"x", tenant="one")]))[0]
            assert [found.id for found in await queue.jobs(limit=None)] == [job.id]
            assert (await queue.stats()).total(JobStatus.QUEUED) == 1
    with jqueue_serve(str(root), tmp_path / "b.log", options=MEMBER) as url:
        async with sharded(url, "missing", 4, broker="require") as queue:
            assert await queue.jobs(limit=None) == []  # a queue no call made yet reads as empty too


async def test_the_second_watcher_to_take_a_dead_member_out_writes_nothing(tmp_path: Path) -> None:
    """Both watchers of a dead member take it out; the members record is the one key every member
    writes (each write a race on a slow bucket), so the second, finding it out, writes nothing."""
    root = str(tmp_path)
    first, second, dead = (
        Members(root, owner, f"http://{owner}", renew_every=0.05, stale_after=0.3) for owner in "abc"
    )
    for member in (first, second, dead):
        await member.join()
    watched_writes = []
    for watcher in (first, second):
        counted = instrumented(watcher.registry, keyed=False)
        watcher.registry = counted
        await watcher._change(lambda members: members.pop("c", None))
        watched_writes.append(counted.calls["write"])
        assert sorted(watcher.addresses) == ["a", "b"]
    assert watched_writes == [1, 0], "the second watcher rewrote a record that no longer listed the dead"


async def test_a_queue_given_up_while_it_was_taken_over_is_taken_over_again_before_it_serves(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A look gives a queue up while a call takes it over: the call fails (``closing``, sent
    again), and the next object opened for it takes it over again, so its commits are fenced
    (before, the name stayed owned and the next object served calls without an owner check)."""
    root = f"memory://given-up-{uuid.uuid4().hex}"
    host, other = QueueHost(root), QueueHost(root)
    await host.catalog.change(added("q"))
    taken, release = asyncio.Event(), asyncio.Event()
    real = BrokerQueue.take_over

    async def slow_take_over(queue: BrokerQueue, broker: str, replacing: str | None = None) -> Owned:
        owned = await real(queue, broker, replacing)
        taken.set()
        await release.wait()
        return owned

    monkeypatch.setattr(BrokerQueue, "take_over", slow_take_over)
    taking = asyncio.create_task(host.own("q", "a"))
    await taken.wait()
    await host.give_up("q")  # the look, meanwhile
    release.set()
    with pytest.raises(QueueClosedError):
        await taking
    assert not host.owns("q")
    monkeypatch.undo()
    try:
        queue = await host.own("q", "a")
        await other.own("q", "b")  # another member takes it
        with pytest.raises(NotOwnerError):
            await queue.enqueue("e", b"from a deposed member")
    finally:
        await host.close()
        await other.close()
