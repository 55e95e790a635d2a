"""A sharded queue as a state machine (issue 52): producers enqueue with tenants, dedup keys
and parents, workers claim, ack, nack and release, an operator requeues, cancels and
redrives, and a second process opens the same shards; after every step each job lives in
exactly one shard, the one its routing gives it, and the figures the sharded queue reads add
up to what the model expects."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any, TypeVar

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from jqueue import BrokerQueue, InMemoryStorage, JobSpec, JobStatus, ShardedQueue
from jqueue.domain.errors import JobNotFoundError, LeaseLostError
from jqueue.domain.sharding import routing_key, shard_of

T = TypeVar("T")
SHARDS = 3
TENANTS = st.sampled_from([None, "acme", "globex", "initech"])
KEYS = st.sampled_from([None, "k1", "k2"])


class ShardedLifecycle(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.storages = [InMemoryStorage(name=f"shard-{k}") for k in range(SHARDS)]
        self.queue = self._open()
        self.live: dict[str, tuple[str | None, str | None, tuple[str, ...]]] = {}
        """The jobs the model holds in the queue: (tenant, dedup key, parents) by id."""
        self.claimed: dict[str, Any] = {}
        self.acked: set[str] = set()
        self.dead: set[str] = set()
        self.made = 0
        self.keyed: dict[str, dict[int, str]] = {}
        """The job that holds each dedup key in each shard (a key is exact within a shard: the
        same key under two tenants may name a job in each of their shards)."""

    def _new_id(self) -> str:
        """Ids in order, so that a run draws the same jobs when Hypothesis replays it."""
        self.made += 1
        return f"j{self.made}"

    def _open(self) -> ShardedQueue:
        queue = ShardedQueue(lambda k: BrokerQueue(self.storages[k]), SHARDS)
        self.run(queue.start())
        return queue

    def run(self, call: Awaitable[T]) -> T:
        return self.loop.run_until_complete(call)

    def teardown(self) -> None:
        self.run(self.queue.stop())
        self.loop.close()

    # --- producers ------------------------------------------------------------------

    @rule(tenant=TENANTS, key=KEYS, count=st.integers(1, 4))
    def enqueue(self, tenant: str | None, key: str | None, count: int) -> None:
        specs = [
            JobSpec("e", b"x", tenant=tenant, dedup_key=key if n == 0 else None, id=self._new_id())
            for n in range(count)
        ]
        jobs = self.run(self.queue.enqueue_many(specs))
        for spec, job in zip(specs, jobs, strict=True):
            assert spec.id is not None
            home = shard_of(routing_key(tenant, spec.dedup_key, spec.id), SHARDS)
            if spec.dedup_key is not None:
                holders = self.keyed.setdefault(spec.dedup_key, {})
                if home in holders:  # in the queue, dead or acked: it answers
                    assert job.id == holders[home]
                    continue
                holders[home] = job.id
            self.live[job.id] = (tenant, spec.dedup_key, ())

    @precondition(lambda self: self.live)
    @rule(data=st.data(), children=st.integers(1, 3))
    def enqueue_children(self, data: st.DataObject, children: int) -> None:
        parent = data.draw(st.sampled_from(sorted(self.live)))
        specs = [  # run once the parent settles, dead or acked: it stays in the model until it does
            JobSpec("e", b"c", after=[parent], on_parent_failure="run", id=self._new_id())
            for _ in range(children)
        ]
        jobs = self.run(self.queue.enqueue_many(specs))
        for job in jobs:
            self.live[job.id] = (None, None, (parent,))

    # --- workers --------------------------------------------------------------------

    @rule(size=st.integers(1, 5))
    def claim(self, size: int) -> None:
        for job in self.run(self.queue.dequeue(batch_size=size)):
            assert job.id in self.live
            assert job.id not in self.claimed
            assert all(parent not in self.live for parent in job.after)  # parents first
            self.claimed[job.id] = job

    @precondition(lambda self: self.claimed)
    @rule(data=st.data(), how=st.sampled_from(["ack", "nack", "dead", "release", "ack_and_claim"]))
    def settle(self, data: st.DataObject, how: str) -> None:
        job = self.claimed.pop(data.draw(st.sampled_from(sorted(self.claimed))))
        if how == "ack":
            self.run(self.queue.ack(job))
        elif how == "ack_and_claim":
            outcomes, more = self.run(self.queue.ack_and_dequeue([(job, None)], batch_size=2))
            assert outcomes == [None]
            for other in more:
                assert other.id in self.live
                assert other.id not in self.claimed
                self.claimed[other.id] = other
        elif how == "release":
            self.run(self.queue.release(job))
            return
        else:
            self.run(self.queue.nack(job, dead=how == "dead", max_attempts=1))
            self.dead.add(job.id)
            self._leave(job.id)
            return
        self.acked.add(job.id)
        self._leave(job.id)

    def _leave(self, job_id: str) -> None:
        self.live.pop(job_id)

    # --- an operator ------------------------------------------------------------------

    @precondition(lambda self: self.dead)
    @rule()
    def redrive(self) -> None:
        ids = sorted(self.dead)
        assert self.run(self.queue.requeue_dead(ids)) == len(ids)
        for job_id in ids:
            record = self.run(self.queue.find(job_id))
            assert record is not None
            self.live[job_id] = (record.tenant, record.dedup_key, record.after)
        self.dead.clear()

    @precondition(lambda self: self.claimed)
    @rule(data=st.data())
    def lose_a_lease(self, data: st.DataObject) -> None:
        job = self.claimed.pop(data.draw(st.sampled_from(sorted(self.claimed))))
        assert self.run(self.queue.requeue([job.id])) == 1
        try:
            self.run(self.queue.ack(job))
        except LeaseLostError:
            return
        raise AssertionError("an ack under a lease that was requeued landed")

    @rule()
    def reopen(self) -> None:
        """Another process opens the same shards (the count comes from shard 0)."""
        self.run(self.queue.stop())
        self.queue = ShardedQueue(lambda k: BrokerQueue(self.storages[k]))
        self.run(self.queue.start())
        assert len(self.queue.shards) == SHARDS

    @rule()
    def unknown_ids_are_refused(self) -> None:
        try:
            self.run(self.queue.requeue(["no-such-job"]))
        except JobNotFoundError:
            return
        raise AssertionError("a requeue of an unknown id changed something")

    # --- invariants -------------------------------------------------------------------

    @invariant()
    def each_job_lives_in_its_one_shard(self) -> None:
        held = [{job.id for job in self.run(shard.jobs(limit=None))} for shard in self.queue.shards]
        assert sum(map(len, held)) == len(set().union(*held))  # in one shard at most
        live_or_dead = set(self.live) | self.dead
        assert set().union(*held) == live_or_dead
        home: dict[str, int] = {job_id: k for k, ids in enumerate(held) for job_id in ids}
        for job_id, (tenant, key, parents) in self.live.items():
            if parents:
                assert home[job_id] == home.get(parents[0], home[job_id])  # with its first parent
            else:
                assert home[job_id] == shard_of(routing_key(tenant, key, job_id), SHARDS)

    @invariant()
    def the_figures_add_up(self) -> None:
        figures = self.run(self.queue.stats()).entrypoints.get("e")
        in_progress = 0 if figures is None else figures.in_progress
        assert in_progress == len(self.claimed)
        assert self.run(self.queue.count()) == len(self.live) + len(self.dead)
        assert self.run(self.queue.count(JobStatus.DEAD)) == len(self.dead)
        finished = {r.job_id for r in self.run(self.queue.history(outcome=JobStatus.ACKED))}
        assert finished == self.acked


ShardedLifecycle.TestCase.settings = settings(max_examples=25, stateful_step_count=30, deadline=None)
TestShardedLifecycle = ShardedLifecycle.TestCase
