"""Sharded queues (``jqueue.sharded``, ``ShardedQueue``): one queue made of several logs, each job
in the shard its tenant, dedup key, id or first parent gives it, claims visiting the shards in
turn (issue 52, ADR 0022)."""

from __future__ import annotations

import asyncio
from collections import Counter
from datetime import timedelta
from pathlib import Path

import pytest

from jqueue import Job, JobNotFoundError, JobSpec, JobStatus, LeaseLostError, ShardedQueue, Worker, sharded
from jqueue.adapters.service.wire.root import queue_location, shard_location
from jqueue.domain.sharding import routing_key, shard_of


async def test_jobs_go_to_their_tenant_s_shard_and_spread_without_one(tmp_path: Path) -> None:
    async with sharded(str(tmp_path), "jobs", 4) as queue:
        tenants = await queue.enqueue_many([JobSpec("e", b"t", tenant=f"t{n % 5}") for n in range(50)])
        spread = await queue.enqueue_many([JobSpec("e", b"s") for _ in range(200)])
        by_shard = [{job.id for job in await shard.jobs(limit=None)} for shard in queue.shards]
    assert sorted(path.name for path in tmp_path.glob("jobs*.json")) == [
        "jobs.json", "jobs.shard-1.json", "jobs.shard-2.json", "jobs.shard-3.json"
    ]  # fmt: skip
    for job in tenants:
        assert job.id in by_shard[shard_of(routing_key(job.tenant, None, job.id), 4)]
    assert all(len(ids & {job.id for job in spread}) > 20 for ids in by_shard)
    assert sum(len(ids) for ids in by_shard) == 250


async def test_the_enqueue_calls_of_one_queue_work_on_a_sharded_one(tmp_path: Path) -> None:
    async with sharded(str(tmp_path), "jobs", 2) as queue:
        many = await queue.enqueue_many("e", [b"a", b"b", b"c"], priority=3)
        one = await queue.enqueue("e", b"d", 1, dedup_key="k", delay=timedelta(0))
        again = await queue.enqueue("e", b"e", dedup_key="k")
        with pytest.raises(TypeError, match="unexpected keyword argument 'tenantt'"):
            await queue.enqueue("e", b"f", tenantt="t")  # type: ignore[call-arg]
        stats = await queue.stats()
    assert [(job.payload, job.priority) for job in many] == [(b"a", 3), (b"b", 3), (b"c", 3)]
    assert again.id == one.id
    assert stats.entrypoints["e"].queued == 4


async def test_a_workflow_stays_in_its_first_parent_s_shard(tmp_path: Path) -> None:
    async with sharded(str(tmp_path), "jobs", 8) as queue:
        [parent] = await queue.enqueue_many([JobSpec("parent", b"p", tenant="acme")])
        children = await queue.enqueue_many([JobSpec("child", b"c", after=[parent.id]) for _ in range(20)])
        home = shard_of(routing_key("acme", None, parent.id), 8)
        assert {job.id for job in await queue.shards[home].jobs(limit=None)} >= {c.id for c in children}
        [claimed] = await queue.dequeue("parent")
        await queue.ack(claimed, result=b"done")
        drained = await queue.dequeue("child", batch_size=50)
        assert sorted(job.id for job in drained) == sorted(job.id for job in children)
        tenant = next(t for t in (f"t{n}" for n in range(100)) if shard_of(routing_key(t, None, ""), 8) != 0)
        batch = [JobSpec("parent", b"p", tenant=tenant, id="p2")]
        batch += [JobSpec("child", b"c", after=["p2"], id=f"c{n}") for n in range(10)]
        await queue.enqueue_many(batch)  # the parent and its children in one call
        home = shard_of(routing_key(tenant, None, "p2"), 8)
        assert {job.id for job in await queue.shards[home].jobs(limit=None)} == {s.id for s in batch}


async def test_claims_visit_every_shard_and_none_starves(tmp_path: Path) -> None:
    async with sharded(str(tmp_path), "jobs", 4) as queue:
        await queue.enqueue_many([JobSpec("e", b"x", tenant=f"t{n}") for n in range(40)])
        homes: Counter[int] = Counter()
        for _ in range(8):
            [job] = await queue.dequeue()
            homes[shard_of(routing_key(job.tenant, None, job.id), 4)] += 1
        assert sorted(homes) == [0, 1, 2, 3]  # two rounds of turns: each shard gave twice
        assert set(homes.values()) == {2}
        one_left = await queue.dequeue(batch_size=100)
        assert len(one_left) == 32
        assert await queue.dequeue() == []


async def test_acks_with_a_claim_settle_in_every_shard_and_report_each_one(tmp_path: Path) -> None:
    async with sharded(str(tmp_path), "jobs", 3) as queue:
        await queue.enqueue_many([JobSpec("e", b"x", tenant=f"t{n}") for n in range(30)])
        claimed = await queue.dequeue(batch_size=15)
        assert len({queue._located[job.id] for job in claimed}) > 1  # the claim spans shards
        await queue.nack(claimed[0])  # its lease is gone: acking it is an error of its own
        waiting = (await queue.stats()).entrypoints["e"].queued
        acks = [(job, None) for job in claimed] + [("no-such-job", None)]
        outcomes, more = await queue.ack_and_dequeue(acks, batch_size=100)
        assert isinstance(outcomes[0], LeaseLostError)
        assert outcomes[1:-1] == [None] * 14
        assert isinstance(outcomes[-1], JobNotFoundError)
        assert len(more) == waiting  # the first shard's claim, then the others in turn
        assert all([await queue.finished(job.id) for job in claimed[1:]])
        stats = (await queue.stats()).entrypoints["e"]
        assert (stats.queued, stats.in_progress) == (0, waiting)


async def test_reads_add_the_shards_up(tmp_path: Path) -> None:
    async with sharded(str(tmp_path), "jobs", 3) as queue:
        added = await queue.enqueue_many([JobSpec("e", b"x", tenant=f"t{n}") for n in range(30)])
        claimed = await queue.dequeue(batch_size=10)
        await queue.nack(claimed[0], dead=True)
        stats = await queue.stats()
        figures = stats.entrypoints["e"]
        assert (figures.queued, figures.in_progress, figures.dead) == (20, 9, 1)
        listed = await queue.jobs(limit=None)
        assert sorted(job.id for job in listed) == sorted(job.id for job in added)
        assert [job.created_at for job in listed] == sorted(job.created_at for job in listed)
        assert (await queue.find(added[5].id)) is not None
        await queue.ack(claimed[1].id)  # a plain id is found in its shard
        assert await queue.find(claimed[1].id) is None
        assert await queue.cancel(added[-1].id) in (True, False)
        await queue.pause("e")
        assert await queue.dequeue() == []
        await queue.resume("e")
        assert len(await queue.dequeue(batch_size=100)) == 19


@pytest.mark.parametrize("limit", [1, 4, 10, 50])
async def test_pages_of_jobs_walk_every_shard_once(tmp_path: Path, limit: int) -> None:
    async with sharded(str(tmp_path), "jobs", 3) as queue:
        added = await queue.enqueue_many([JobSpec("e", b"x", tenant=f"t{n % 3}") for n in range(30)])
        sizes = [await shard.count() for shard in queue.shards]
        assert sizes == [10, 10, 10]  # three tenants, one shard each: pages end at a shard's end
        seen: list[str] = []
        cursor: int | None = 0
        while cursor is not None:
            page, cursor = await queue.browse(cursor=cursor, limit=limit)
            assert len(page) <= limit
            seen += [job.id for job in page]
        assert sorted(seen) == sorted(job.id for job in added)
        dead, _ = await queue.browse(JobStatus.DEAD)
        assert dead == []
        _, middle = await queue.browse(limit=15)
        assert middle is not None
        assert await queue.browse(cursor=middle, limit=0) == ([], middle)  # a page of none
        assert await queue.shards[0].browse(limit=0) == ([], 0)


async def test_the_figures_of_a_sharded_queue_add_its_shards_up(tmp_path: Path) -> None:
    async with sharded(str(tmp_path), "jobs", 3) as queue:
        await queue.enqueue_many([JobSpec("e", b"x", tenant=f"t{n}", max_attempts=1) for n in range(30)])
        claimed = await queue.dequeue(batch_size=12)
        assert len({queue._located[job.id] for job in claimed}) > 1
        for job in claimed[:6]:
            await queue.ack(job)
        for job in claimed[6:]:
            await queue.nack(job, error="boom\nTraceback ...")
        insight = queue.insight
        flow = await insight.throughput()
        assert (sum(flow.acked), sum(flow.dead), sum(flow.per_entrypoint["e"])) == (6, 6, 12)
        [group] = await insight.dead_groups()
        assert (group.error, sorted(group.ids), group.entrypoints) == (
            "boom",
            sorted(job.id for job in claimed[6:]),
            {"e": 6},
        )
        timings = (await insight.timings())["e"]
        assert (timings.finished, timings.acked, timings.dead) == (12, 6, 6)
        assert (await insight.commit_stats()).commits >= 3 + 3 + 12
    async with sharded(str(tmp_path), "jobs") as again:  # a fresh process: its own commits only
        assert (await again.insight.commit_stats()).commits == 0


async def test_history_dead_letters_and_their_calls_span_the_shards(tmp_path: Path) -> None:
    async with sharded(str(tmp_path), "jobs", 3) as queue:
        await queue.enqueue_many([JobSpec("e", b"x", tenant=f"t{n}", max_attempts=1) for n in range(30)])
        claimed = await queue.dequeue(batch_size=30)
        homes = {queue._located[job.id] for job in claimed}
        for job in claimed[:10]:
            await queue.ack(job, result=job.id.encode())
        for job in claimed[10:20]:
            await queue.nack(job, error="boom")  # max_attempts=1: dead
        assert await queue.count() == 20
        assert await queue.count(JobStatus.DEAD) == 10
        dead = await queue.dead_letters(limit=None)
        assert sorted(job.id for job in dead) == sorted(job.id for job in claimed[10:20])
        assert len({queue._located[job.id] for job in dead}) > 1
        assert len(homes) == 3
        acked = await queue.history(outcome=JobStatus.ACKED)
        assert sorted(r.job_id for r in acked) == sorted(job.id for job in claimed[:10])
        assert [r.finished for r in acked] == sorted(r.finished for r in acked)
        newest = await queue.history(limit=3)
        everything = await queue.history()
        assert newest == everything[-3:]
        assert len(everything) >= 10
        record = await queue.finished(claimed[0].id)
        assert record is not None
        assert record.result == claimed[0].id.encode()
        assert await queue.requeue_dead([dead[0].id, dead[1].id]) == 2
        with pytest.raises(JobNotFoundError):
            await queue.requeue_dead(["no-such-job"])
        assert await queue.requeue_dead() == 8
        assert await queue.count(JobStatus.DEAD) == 0
        assert await queue.purge(JobStatus.QUEUED) == 10
        assert await queue.count() == 10  # the ten still claimed


async def test_workflows_limits_and_requeues_act_on_the_shard_that_holds_the_jobs(tmp_path: Path) -> None:
    async with sharded(str(tmp_path), "jobs", 3) as queue:
        [parent] = await queue.enqueue_many([JobSpec("parent", b"p", tenant="acme")])
        children = await queue.enqueue_many([JobSpec("child", b"c", after=[parent.id]) for _ in range(3)])
        assert {job.id for job in await queue.workflow(children[0].id)} == {
            parent.id,
            *(c.id for c in children),
        }
        await queue.limit(None, 1, per_tenant=True)  # a tenant's jobs live in one shard: exact
        solo = next(f"t{n}" for n in range(99) if shard_of(routing_key(f"t{n}", None, "-"), 3) == 2)
        await queue.enqueue_many([JobSpec("e", b"x", tenant=solo) for _ in range(4)])
        first = await queue.dequeue("e", batch_size=4)
        assert len(first) == 1
        assert await queue.dequeue("e", batch_size=4) == []
        assert await queue.requeue([first[0].id]) == 1  # released: claimable again, still one at a time
        assert len(await queue.dequeue("e", batch_size=4)) == 1
        cancelled = await queue.cancel_workflow(parent.id)
        assert {job.id for job in cancelled} == {parent.id, *(c.id for c in children)}
        assert await queue.count(entrypoint="child") == 0
        with pytest.raises(JobNotFoundError):
            await queue.requeue(["no-such-job"])


async def test_the_count_is_recorded_grows_and_never_shrinks(tmp_path: Path) -> None:
    async with sharded(str(tmp_path), "jobs", 2) as queue:
        await queue.enqueue_many([JobSpec("e", b"x") for _ in range(10)])
    async with sharded(str(tmp_path), "jobs") as reopened:
        assert len(reopened.shards) == 2
        assert len(await reopened.jobs(limit=None)) == 10
    async with sharded(str(tmp_path), "jobs", 4) as grown:
        assert len(grown.shards) == 4
        assert len(await grown.dequeue(batch_size=20)) == 10  # the jobs stay where they were
    with pytest.raises(ValueError, match="lowers"):
        async with sharded(str(tmp_path), "jobs", 3):
            pass
    with pytest.raises(ValueError, match="shards"):
        ShardedQueue(lambda k: None, 0)  # type: ignore[arg-type, return-value]


async def test_jobs_added_under_fewer_shards_are_settled_after_the_count_grows(tmp_path: Path) -> None:
    async with sharded(str(tmp_path), "jobs", 2) as queue:
        added = await queue.enqueue_many([JobSpec("e", str(n).encode()) for n in range(40)])
    async with sharded(str(tmp_path), "jobs", 7) as queue:  # the count grows: keys move
        claimed = await queue.dequeue(batch_size=40)
    moved = [job for job in added if shard_of(routing_key(None, None, job.id), 7) >= 2]
    assert len(moved) > 10  # most of them would be looked for in a shard that does not hold them
    async with sharded(str(tmp_path), "jobs") as fresh:  # knows none of the jobs: guesses, then finds
        by_id = {job.id: job for job in claimed}
        await fresh.heartbeat(by_id[moved[0].id], progress=0.5)
        await fresh.ack(by_id[moved[0].id], result=b"one")
        await fresh.nack(by_id[moved[1].id], dead=True)
        outcomes, _ = await fresh.ack_and_dequeue([(by_id[job.id], None) for job in moved[2:]])
        assert outcomes == [None] * len(moved[2:])
        assert await fresh.result(moved[0].id) == b"one"
        with pytest.raises(JobNotFoundError):
            await fresh.ack("no-such-job")
    async with sharded(str(tmp_path), "jobs") as again:
        stats = await again.stats()
    assert (stats.entrypoints["e"].dead, stats.entrypoints["e"].in_progress) == (1, 40 - len(moved))


async def test_a_worker_and_two_processes_share_a_sharded_queue_exactly_once(tmp_path: Path) -> None:
    """Two sharded queues on one root (as two processes would be): producers through both, a
    worker on each; every job runs once."""
    ran: Counter[str] = Counter()
    async with sharded(str(tmp_path), "jobs", 4) as first, sharded(str(tmp_path), "jobs") as second:

        async def handle(job: Job) -> None:
            ran[job.id] += 1

        workers = [Worker(queue, {"e": handle}, concurrency=4) for queue in (first, second)]
        added = await asyncio.gather(
            first.enqueue_many([JobSpec("e", b"1", tenant=f"t{n % 7}") for n in range(150)]),
            second.enqueue_many([JobSpec("e", b"2") for _ in range(150)]),
        )
        runs = [asyncio.create_task(worker.run(install_signals=False)) for worker in workers]

        async def drained() -> None:
            while len(ran) < 300:
                await asyncio.sleep(0.05)

        await asyncio.wait_for(drained(), timeout=60)
        for worker in workers:
            worker.stop()
        await asyncio.wait_for(asyncio.gather(*runs), timeout=30)
        assert sorted(ran) == sorted(job.id for jobs in added for job in jobs)
        assert set(ran.values()) == {1}
        assert await first.jobs(limit=None) == []


S3_QUERY = "?endpoint_url=http://h:9&region=x"


@pytest.mark.parametrize(
    ("root", "shard_two"),
    [
        ("/r", "/r/jobs.shard-2.json"),
        ("r", "r/jobs.shard-2.json"),
        ("file:///r", "file:///r/jobs.shard-2.json"),
        (f"s3://b/p{S3_QUERY}", f"s3://b/p/jobs.shard-2.json{S3_QUERY}"),
    ],
)
def test_a_shard_lives_beside_its_queue_whatever_the_location(root: str, shard_two: str) -> None:
    location = queue_location(root, "jobs")
    assert shard_location(location, 0) == location
    assert shard_location(location, 2) == shard_two
    assert shard_location(location, 2) == queue_location(root, "jobs.shard-2")
