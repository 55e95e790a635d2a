"""Replay equivalence: random operations through the log (two writers, checkpoints,
compaction and restarts at random points) give the state the pure transitions build in memory."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from jqueue import InMemoryStorage, Job, LogSettings, QueueState
from jqueue.core.commits import StoreOpener
from jqueue.core.log.store import LogStore
from jqueue.core.loop.retry import RetryPolicy
from jqueue.domain.effects import Added
from jqueue.domain.index import QueueIndex
from jqueue.domain.times import to_micros, utc_now
from reference_model import ModelState

T0 = datetime(2026, 1, 1, tzinfo=UTC)
ENTRYPOINTS = st.sampled_from(["email", "sms"])


def dump(state: QueueState) -> list[dict[str, Any]]:
    return [job.model_dump() for job in state.jobs]


class LogAgainstStates(RuleBasedStateMachine):
    """Two log stores write one queue; the pure ``QueueState`` is the reference."""

    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.storage = InMemoryStorage(name="replay")
        self.state = ModelState()
        self.clock = T0
        self.opened: list[LogStore] = []
        self.writers = [self.open_store(), self.open_store()]

    def teardown(self) -> None:
        for store in self.opened:
            self.run(store.close())
        self.loop.close()

    def run(self, coroutine: Any) -> Any:
        return self.loop.run_until_complete(coroutine)

    def open_store(self) -> LogStore:
        opener = StoreOpener(self.storage, RetryPolicy(max_retries=50, base_delay=0.0), "log", LogSettings())
        store = self.run(opener.store())
        assert isinstance(store, LogStore)
        self.opened.append(store)
        return store

    def now(self, advance: bool) -> datetime:
        if advance:
            self.clock += timedelta(seconds=1)
        return self.clock

    def commit(self, writer: int, change: Callable[[QueueIndex], object]) -> None:
        def transition(index: QueueIndex) -> None:
            change(index)

        self.run(self.writers[writer].apply(transition))

    @rule(
        writer=st.integers(0, 1), entrypoint=ENTRYPOINTS, priority=st.integers(-1, 1), advance=st.booleans()
    )
    def enqueue(self, writer: int, entrypoint: str, priority: int, advance: bool) -> None:
        job = Job(
            entrypoint=entrypoint,
            payload=f"p{priority}".encode(),
            priority=priority,
            created_at=self.now(advance),
        )
        self.state = self.state.with_job_added(job)
        added = Added(job.id, entrypoint, priority, to_micros(job.created_at), job.status, None, job.payload)
        self.commit(writer, lambda index: index.apply(added))

    @rule(
        writer=st.integers(0, 1),
        entrypoint=st.one_of(st.none(), ENTRYPOINTS),
        batch=st.integers(1, 3),
        advance=st.booleans(),
    )
    def claim(self, writer: int, entrypoint: str | None, batch: int, advance: bool) -> None:
        now = self.now(advance)
        self.state, expected = self.state.with_jobs_claimed(entrypoint, batch, now)
        claimed: list[str] = []

        def transition(index: QueueIndex) -> None:
            entrypoints = None if entrypoint is None else (entrypoint,)
            claimed[:] = [c.job_id for c in index.claim(entrypoints, batch, to_micros(now))]

        self.commit(writer, transition)
        assert claimed == [job.id for job in expected]

    @precondition(lambda self: bool(self.state.jobs))
    @rule(writer=st.integers(0, 1), data=st.data(), action=st.sampled_from(["ack", "nack", "heartbeat"]))
    def act(self, writer: int, data: st.DataObject, action: str) -> None:
        job_id = data.draw(st.sampled_from([j.id for j in self.state.jobs]))
        now = self.now(True)
        if action == "ack":
            self.state = self.state.with_job_removed(job_id)
            self.commit(writer, lambda index: index.remove(job_id))
        elif action == "nack":
            self.state = self.state.with_job_requeued(job_id)
            self.commit(writer, lambda index: index.nack(job_id, None, to_micros(now)))
        else:
            self.state = self.state.with_heartbeat(job_id, now)
            self.commit(writer, lambda index: index.heartbeat(job_id, to_micros(now)))

    @rule(writer=st.integers(0, 1), age=st.integers(0, 3))
    def sweep(self, writer: int, age: int) -> None:
        cutoff = self.clock - timedelta(seconds=age)
        self.state = self.state.requeue_stale(cutoff)
        self.commit(writer, lambda index: index.requeue_stale(to_micros(cutoff), to_micros(cutoff)))

    @rule(writer=st.integers(0, 1), compact=st.booleans())
    def checkpoint(self, writer: int, compact: bool) -> None:
        store = self.writers[writer]
        self.run(store.checkpoint())
        if compact:
            # Compaction relies on no writer's view being older than the retention: here,
            # every writer catches up first, then everything a checkpoint covers may go.
            for other in self.writers:
                self.run(other.read_state())
            self.run(store.compact(self.cutoff()))

    def cutoff(self) -> int:
        """A compaction cutoff after every checkpoint, but before the slab a writer's merge
        stored and has yet to name (in production the retention keeps it: a merge is named
        while it is younger than a quarter of the retention, or never)."""
        cutoff = to_micros(utc_now()) - 1
        for writer in self.writers:
            merging = writer._checkpoints._merging  # a merge in progress stores its slab after now
            if merging is not None and merging[1].done() and merging[1].exception() is None:
                merged = merging[1].result()
                if merged.slab is not None:
                    cutoff = min(cutoff, merged.written_at - 1)
        return cutoff

    @rule(writer=st.integers(0, 1))
    def a_writer_restarts(self, writer: int) -> None:
        """The writer goes on as a new process that opens the newest checkpoint: its claimable
        jobs are cold rows of the checkpoint's slabs (ADR 0015)."""
        self.writers[writer] = self.open_store()

    @invariant()
    def a_fresh_reader_replays_the_same_state(self) -> None:
        fresh = self.open_store()
        assert dump(self.run(fresh.read_state())) == dump(self.state)

    @rule()
    def both_writers_catch_up_and_agree_with_the_reference(self) -> None:
        # A rule, not an invariant: between these, a writer is usually behind the other, so its
        # next commit loses the race, rolls back and is re-applied on the newer state.
        for store in self.writers:
            assert dump(self.run(store.read_state())) == dump(self.state)


TestLogAgainstStates = LogAgainstStates.TestCase
TestLogAgainstStates.settings = settings(max_examples=60, stateful_step_count=30, deadline=None)
