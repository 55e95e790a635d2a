"""Fair share between tenants (ADR 0021): an entrypoint's claimable jobs stand in one line per
tenant, and claims serve the lines in turn at each priority, from the records and from the
cold rows of a checkpoint's slabs alike; a claim undone gives its turn back. Limits and
throttles per tenant hold for every process."""

from __future__ import annotations

from collections import Counter
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from fairness import Turns
from jqueue import (
    CorruptStateError,
    DirectQueue,
    InMemoryStorage,
    JobSpec,
    LocalFileSystemStorage,
    LogSettings,
)
from jqueue.core.formats.slab import SLAB_PREFIX, open_slab
from jqueue.core.log.slabs import SlabSet
from jqueue.core.log.store import LogStore
from jqueue.domain.effects import Added, LimitSet, ThrottleSet
from jqueue.domain.index import QueueIndex
from jqueue.domain.models import JobStatus

SECOND = 1_000_000
T0 = 1_800_000_000 * SECOND
TENANTS = (None, "acme", "globex", "initech")
NEVER = LogSettings(checkpoint_every=10**9)  # only the checkpoints a test asks for

OPERATIONS = st.lists(
    st.one_of(
        st.tuples(
            st.just("enqueue"),
            st.sampled_from(["a", "b"]),
            st.sampled_from(TENANTS),
            st.integers(0, 1),
            st.integers(1, 5),
        ),
        st.tuples(st.just("claim"), st.sampled_from([None, ("a",)]), st.integers(1, 4)),
        st.tuples(st.just("cancel"), st.integers(0, 10**6)),
    ),
    max_size=60,
)


def claimable(index: QueueIndex, entrypoints: tuple[str, ...] | None) -> list[tuple[object, ...]]:
    return [
        (r.priority, r.created, r.order, r.id, r.entrypoint, r.tenant)
        for r in index.in_order()
        if r.status is JobStatus.QUEUED and (entrypoints is None or r.entrypoint in entrypoints)
    ]


@settings(max_examples=300, deadline=None)
@given(OPERATIONS)
def test_claims_serve_the_lines_in_turn(operations: list[tuple[Any, ...]]) -> None:
    index, turns, clock, serial = QueueIndex(), Turns(), T0, 0
    for operation in operations:
        clock += SECOND
        if operation[0] == "enqueue":
            _, entrypoint, tenant, priority, count = operation
            for _ in range(count):
                serial += 1
                fields = (f"job-{serial}", entrypoint, priority, clock, JobStatus.QUEUED, None, b"p")
                index.apply(Added(*fields, tenant=tenant))
        elif operation[0] == "claim":
            _, entrypoints, batch = operation
            before = claimable(index, entrypoints)
            peeked = [r.id for r in index.peek(entrypoints, batch, clock)]
            claimed = [c.job_id for c in index.claim(entrypoints, batch, clock)]
            assert claimed == peeked  # a claim undone gave its turn back
            turns.check(before, claimed)
        else:
            queued = [r.id for r in index.in_order() if r.status is JobStatus.QUEUED]
            if queued:
                index.cancel(queued[operation[1] % len(queued)], None, clock)
        order = index.order  # the count of the lines' heap entries that prunes them is kept right
        assert order._ready_entries == sum(map(len, order._ready.values()))


_ENTRYPOINTS, _TENANTS = st.sampled_from(["a", "b"]), st.sampled_from(TENANTS)
_CLAIM = st.tuples(st.just("claim"), st.sampled_from([None, ("a",)]), st.integers(1, 4), st.booleans())
_ACK = st.tuples(st.just("ack"), st.integers(0, 10**6))
LIMITED_OPERATIONS = st.lists(
    st.one_of(
        st.tuples(st.just("enqueue"), _ENTRYPOINTS, _TENANTS, st.integers(1, 4)),
        _CLAIM,
        _CLAIM,  # claims and acks, the steps that park and unpark lines, come up more often
        _ACK,
        _ACK,
        st.tuples(st.just("limit"), st.sampled_from([None, "a"]), st.sampled_from([None, 1, 2])),
        st.tuples(st.just("throttle"), st.sampled_from([None, "b"]), st.sampled_from([None, 1, 3])),
        st.tuples(st.just("wait"), st.sampled_from([1, 10, 60])),
    ),
    min_size=8,
    max_size=80,
)
WINDOW = 30 * SECOND


_PARKED = [("enqueue", "a", "acme", 3), ("claim", None, 2, False)]
"""Acme's first job claimed, and its line parked by the same claim."""


@settings(max_examples=300, deadline=None)
@given(st.sampled_from([1, 2]), LIMITED_OPERATIONS)
@example(1, [*_PARKED, ("ack", 0), ("claim", None, 2, False)])  # a job of it settles
@example(1, [*_PARKED, ("limit", None, 2), ("claim", None, 2, False)])  # its limit is raised
@example(2, [("throttle", None, 1), *_PARKED, ("wait", 60), ("claim", None, 2, False)])  # a window ends
def test_a_tenant_at_its_limit_waits_and_starts_as_soon_as_it_may(
    first_limit: int, operations: list[tuple[Any, ...]]
) -> None:
    """Blocked lines are parked between claims: a claim must still take every job that its
    tenant's limits and throttles let start, once a job of it settles or a window ends."""
    index, clock, serial = QueueIndex(), T0, 0
    index.apply(LimitSet(None, first_limit, per_tenant=True))
    limits: dict[str | None, int | None] = {None: first_limit}  # None: lifted
    throttles: dict[str | None, int | None] = {}
    started: list[tuple[int, str, str | None]] = []  # (window, entrypoint, tenant) of each claim

    def running(scope: str | None, tenant: str | None) -> int:
        return sum(
            r.status is JobStatus.IN_PROGRESS and r.tenant == tenant and scope in (None, r.entrypoint)
            for r in index.in_order()
        )

    def may_start(entrypoint: str, tenant: str | None) -> bool:
        for scope in (None, entrypoint):
            if (limit := limits.get(scope)) is not None and running(scope, tenant) >= limit:
                return False
            used = sum(
                1 for w, e, t in started if w == clock // WINDOW and t == tenant and scope in (None, e)
            )
            if (throttle := throttles.get(scope)) is not None and used >= throttle:
                return False
        return True

    for operation in operations:
        clock += SECOND
        match operation:
            case ("enqueue", entrypoint, tenant, count):
                for _ in range(count):
                    serial += 1
                    fields = (f"job-{serial}", entrypoint, 0, clock, JobStatus.QUEUED, None, b"p")
                    index.apply(Added(*fields, tenant=tenant))
            case ("claim", entrypoints, batch, peek):
                peeked = [r.id for r in index.peek(entrypoints, batch, clock)] if peek else None
                claimed = [c.job_id for c in index.claim(entrypoints, batch, clock)]
                assert peeked is None or claimed == peeked
                for job_id in claimed:
                    record = index.records[job_id]
                    started.append((clock // WINDOW, record.entrypoint, record.tenant))
                    for scope in (None, record.entrypoint):  # a claim never takes a tenant past a limit
                        limit = limits.get(scope)
                        assert limit is None or running(scope, record.tenant) <= limit
                if len(claimed) < batch:  # nothing else may start
                    assert not [
                        r.id
                        for r in index.in_order()
                        if r.status is JobStatus.QUEUED
                        and (entrypoints is None or r.entrypoint in entrypoints)
                        and may_start(r.entrypoint, r.tenant)
                    ]
            case ("ack", pick):
                running_ids = [r.id for r in index.in_order() if r.status is JobStatus.IN_PROGRESS]
                if running_ids:
                    index.remove(running_ids[pick % len(running_ids)], None, clock)
            case ("limit", scope, limit):
                index.apply(LimitSet(scope, limit, per_tenant=True))
                limits[scope] = limit
            case ("throttle", scope, limit):
                index.apply(ThrottleSet(scope, limit, WINDOW, per_tenant=True))
                throttles[scope] = limit
            case ("wait", seconds):
                clock += seconds * SECOND


async def fill(queue: DirectQueue, floods: dict[str | None, int]) -> dict[str, str | None]:
    """Enqueue ``floods[tenant]`` jobs per tenant, one tenant after the other; return each job's tenant."""
    tenants: dict[str, str | None] = {}
    for tenant, count in floods.items():
        jobs = await queue.enqueue_many([JobSpec("work", b"%d" % n, tenant=tenant) for n in range(count)])
        tenants.update(dict.fromkeys((job.id for job in jobs), tenant))
        assert {job.tenant for job in jobs} == {tenant}
    return tenants


async def test_a_tenant_with_one_job_starts_within_the_next_round(tmp_path: Path) -> None:
    storage = LocalFileSystemStorage(tmp_path / "queue.json")
    async with DirectQueue(storage, log=NEVER) as queue:
        await fill(queue, {"flood": 5_000, "small": 1})
        first = await queue.dequeue("work", batch_size=2)
        assert [job.tenant for job in first] == ["flood", "small"]
        more = await queue.dequeue("work", batch_size=3)
        assert [job.tenant for job in more] == ["flood"] * 3
        assert [job.payload for job in [first[0], *more]] == [b"0", b"1", b"2", b"3"]  # in line's order


async def test_cold_lines_are_served_in_turn_after_a_reopen(tmp_path: Path) -> None:
    storage = LocalFileSystemStorage(tmp_path / "queue.json")
    async with DirectQueue(storage, log=NEVER) as queue:
        await fill(queue, {"acme": 9_000, None: 3, "globex": 2})
        await queue.checkpoint()
    async with DirectQueue(LocalFileSystemStorage(tmp_path / "queue.json"), log=NEVER) as reopened:
        assert await reopened.count() == 9_005
        store = await reopened._opener.store()
        assert isinstance(store, LogStore)
        assert isinstance(store.index.cold, SlabSet)
        assert len(store.index.cold) == 9_005  # every job is a cold row
        first = await reopened.dequeue("work", batch_size=6)
        assert [job.tenant for job in first] == [None, "acme", "globex"] * 2  # the slab's order of lines
        rest = await reopened.dequeue("work", batch_size=4)
        assert [job.tenant for job in rest] == [None, "acme", "acme", "acme"]
        more = await reopened.enqueue("work", b"late", tenant="initech")  # a new line: last in the round
        assert [job.tenant for job in await reopened.dequeue("work", batch_size=2)] == ["acme", "initech"]
        assert more.tenant == "initech"


async def test_priority_comes_before_the_turn(tmp_path: Path) -> None:
    async with DirectQueue(LocalFileSystemStorage(tmp_path / "queue.json")) as queue:
        await fill(queue, {"acme": 3, "globex": 3})
        urgent = await queue.enqueue("work", b"urgent", -1, tenant="acme")
        claimed = await queue.dequeue("work", batch_size=3)
        assert [job.id for job in claimed][:1] == [urgent.id]
        assert [job.tenant for job in claimed[1:]] == ["globex", "acme"]  # acme was served last


async def test_limits_and_throttles_per_tenant_hold_in_every_process(tmp_path: Path) -> None:
    path = tmp_path / "queue.json"
    async with (
        DirectQueue(LocalFileSystemStorage(path)) as one,
        DirectQueue(LocalFileSystemStorage(path)) as other,
    ):
        await fill(one, {"acme": 5, "globex": 5, None: 5})
        await one.throttle(2, timedelta(hours=1), "work", per_tenant=True)
        first = await one.dequeue("work", batch_size=10)
        assert Counter(job.tenant for job in first) == {"acme": 2, "globex": 2, None: 2}
        assert await other.dequeue("work", batch_size=10) == []  # the window's claims are spent
        await other.throttle(None, timedelta(hours=1), "work", per_tenant=True)
        await other.limit(None, 3, per_tenant=True)  # the whole queue's jobs of each tenant
        second = await other.dequeue("work", batch_size=10)
        assert Counter(job.tenant for job in second) == {"acme": 1, "globex": 1, None: 1}
        await one.ack_many([job for job in first if job.tenant == "acme"])
        third = await one.dequeue("work", batch_size=10)
        assert [job.tenant for job in third] == ["acme", "acme"]
        stats = await other.stats()
        assert (stats.tenant_limits, stats.tenant_throttles, stats.limits) == ({None: 3}, {}, {})
        with pytest.raises(ValueError, match="negative"):
            await one.limit("work", -1, per_tenant=True)


async def test_a_slab_whose_lines_do_not_fit_its_rows_is_reported() -> None:
    storage = InMemoryStorage(name="lines")
    async with DirectQueue(storage, log=NEVER) as queue:
        await fill(queue, {"acme": 3, "globex": 2})
        await queue.checkpoint()
    [name] = await storage.list_names(SLAB_PREFIX)
    data = await storage.get(name) or b""
    assert open_slab(data, name).header.lines == [("work", "acme", 0, 3), ("work", "globex", 3, 5)]
    renamed = data.replace(b'"acme"', b'"acmf"')  # as long: the header's lines say another tenant
    with pytest.raises(CorruptStateError, match="has a job of another tenant"):
        open_slab(renamed, name).block(0)
    crossed = data.replace(b'"globex",3,5', b'"globex",4,5')
    with pytest.raises(CorruptStateError, match="the lines of 'work' do not follow each other"):
        open_slab(crossed, name)
