"""``QueueIndex`` against the pure ``QueueState`` transitions, with rollbacks at random points."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from functools import partial

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from jqueue import Job, JobNotFoundError, JobStatus, LeaseLostError, QueueState
from jqueue.domain.effects import Added
from jqueue.domain.index import QueueIndex
from jqueue.domain.records import Frozen
from jqueue.domain.schema import CHANGING_FIELDS, domain_values, job_from
from jqueue.domain.times import to_micros
from reference_model import ModelState, index_of, is_expired

T0 = datetime(2026, 1, 1, tzinfo=UTC)
ENTRYPOINTS = st.sampled_from(["email", "sms", "push"])


def snapshot(state: QueueState) -> list[dict[str, object]]:
    return [job.model_dump() for job in state.jobs]


def as_state(index: QueueIndex) -> QueueState:
    """The index as a ``QueueState`` (every payload here is in memory)."""
    jobs = []
    for record in index.in_order():
        assert isinstance(record.payload, bytes)
        jobs.append(job_from(record.as_added(), record.payload))
    return QueueState(jobs=tuple(jobs), version=index.version)


class IndexAgainstStates(RuleBasedStateMachine):
    """Every operation runs on a ``QueueState`` and on a ``QueueIndex``; they must agree."""

    def __init__(self) -> None:
        super().__init__()
        self.state = ModelState()
        self.index = QueueIndex()
        self.clock = T0
        self.in_transaction: ModelState | None = None
        self.savepoint: tuple[tuple[int, int], ModelState] | None = None
        self.frozen: tuple[Frozen, ModelState] | None = None
        self.last_frozen: ModelState | None = None  # the state at the previous freeze
        self.tokens = 0
        self.leases: list[tuple[str, str]] = []  # (job id, lease) of every claim, kept after it is lost

    def token(self) -> str:
        self.tokens += 1
        return f"lease-{self.tokens}"

    def now(self, advance: bool) -> datetime:
        # The clock often stands still, so equal priorities and times need the insertion order.
        if advance:
            self.clock += timedelta(seconds=1)
        return self.clock

    @rule(entrypoint=ENTRYPOINTS, priority=st.integers(-1, 1), advance=st.booleans())
    def enqueue(self, entrypoint: str, priority: int, advance: bool) -> None:
        job = Job(entrypoint=entrypoint, payload=b"p", priority=priority, created_at=self.now(advance))
        self.state = self.state.with_job_added(job)
        created = to_micros(job.created_at)
        self.index.apply(Added(job.id, entrypoint, priority, created, job.status, None, job.payload))

    @precondition(lambda self: bool(self.state.jobs))
    @rule(data=st.data(), entrypoint=ENTRYPOINTS, advance=st.booleans())
    def enqueue_child(self, data: st.DataObject, entrypoint: str, advance: bool) -> None:
        live = [j.id for j in self.state.jobs]
        parents = tuple(data.draw(st.lists(st.sampled_from(live), min_size=1, max_size=3, unique=True)))
        child = Job(
            entrypoint=entrypoint,
            payload=b"c",
            created_at=self.now(advance),
            status=JobStatus.WAITING,
            after=parents,
            awaiting=parents,
        )
        self.state = self.state.with_job_added(child)
        self.index.apply(Added(*domain_values(child)))

    @rule(
        entrypoint=st.one_of(st.none(), ENTRYPOINTS),
        batch=st.integers(1, 3),
        advance=st.booleans(),
        lease_seconds=st.one_of(st.none(), st.integers(0, 3)),
    )
    def claim(self, entrypoint: str | None, batch: int, advance: bool, lease_seconds: int | None) -> None:
        now = self.now(advance)
        expires = None if lease_seconds is None else now + timedelta(seconds=lease_seconds)
        start = self.tokens
        self.state, jobs = self.state.with_jobs_claimed(entrypoint, batch, now, expires, self.token)
        self.tokens = start  # the index draws the same tokens in the same order
        micros = None if expires is None else to_micros(expires)
        entrypoints = None if entrypoint is None else (entrypoint,)
        effects = self.index.claim(entrypoints, batch, to_micros(now), micros, self.token)
        assert [(e.job_id, e.lease) for e in effects] == [(j.id, j.lease) for j in jobs]
        self.leases.extend((j.id, j.lease) for j in jobs if j.lease is not None)

    @precondition(lambda self: bool(self.leases))
    @rule(data=st.data(), action=st.sampled_from(["ack", "nack", "heartbeat"]), advance=st.booleans())
    def act_fenced(self, data: st.DataObject, action: str, advance: bool) -> None:
        # The lease of any claim so far: still held, or lost to a sweep, a nack, an ack or a new claim.
        job_id, lease = data.draw(st.sampled_from(self.leases))
        now = self.now(advance)
        result = f"r-{job_id[:4]}".encode()
        on_state: dict[str, Callable[[], ModelState]] = {
            "ack": partial(self.state.with_job_acked, job_id, now, lease, result),
            "nack": partial(self.state.with_job_requeued, job_id, lease),
            "heartbeat": partial(self.state.with_heartbeat, job_id, now, lease),
        }
        on_index: dict[str, Callable[[], object]] = {
            "ack": partial(self.index.remove, job_id, lease, to_micros(now), result),
            "nack": partial(self.index.nack, job_id, lease, to_micros(now)),
            "heartbeat": partial(self.index.heartbeat, job_id, to_micros(now), lease),
        }
        try:
            new_state = on_state[action]()
        except LeaseLostError:
            with pytest.raises(LeaseLostError):
                on_index[action]()
            return
        self.state = new_state
        on_index[action]()

    @rule(jump=st.sampled_from([0, 1, 2, 4, 400]))  # 400 s: past the timeout of claims without a lease expiry
    def leases_run_out(self, jump: int) -> None:
        self.clock += timedelta(seconds=jump)
        expired = {j.id for j in self.state.jobs if is_expired(j, self.clock)}
        self.state = self.state.requeue_expired(self.clock)
        assert {e.job_id for e in self.index.requeue_expired(to_micros(self.clock))} == expired

    @precondition(lambda self: bool(self.state.jobs))
    @rule(data=st.data(), action=st.sampled_from(["ack", "nack", "heartbeat"]))
    def act_on_existing(self, data: st.DataObject, action: str) -> None:
        job_id = data.draw(st.sampled_from([j.id for j in self.state.jobs]))
        if action == "ack":
            self.state = self.state.with_job_acked(job_id, self.clock, None, b"r")
            self.index.remove(job_id, None, to_micros(self.clock), b"r")
        elif action == "nack":
            try:
                new_state = self.state.with_job_requeued(job_id)
            except ValueError:  # a waiting job
                with pytest.raises(ValueError, match="wait"):
                    self.index.nack(job_id, None, to_micros(self.clock))
                return
            self.state = new_state
            self.index.nack(job_id, None, to_micros(self.clock))
        else:
            now = self.now(True)
            before = self.state
            self.state = self.state.with_heartbeat(job_id, now)
            assert bool(self.index.heartbeat(job_id, to_micros(now))) == (self.state is not before)

    @rule(job_id=st.uuids().map(str), action=st.sampled_from(["remove", "requeue", "beat"]))
    def act_on_unknown(self, job_id: str, action: str) -> None:
        calls: dict[str, Callable[[], object]] = {
            "remove": partial(self.index.remove, job_id),
            "requeue": partial(self.index.nack, job_id, None, 0),
            "beat": partial(self.index.heartbeat, job_id, 0),
        }
        call = calls[action]
        with pytest.raises(JobNotFoundError):
            call()

    @rule(age=st.integers(0, 4))
    def sweep(self, age: int) -> None:
        cutoff = self.clock - timedelta(seconds=age)
        count = self.state.stale_count(cutoff)
        self.state = self.state.requeue_stale(cutoff)
        assert len(self.index.requeue_stale(to_micros(cutoff), to_micros(cutoff))) == count

    @precondition(lambda self: self.in_transaction is None)
    @rule()
    def begin(self) -> None:
        self.index.journal.begin()
        self.in_transaction = self.state

    @precondition(lambda self: self.in_transaction is not None)
    @rule(keep=st.booleans())
    def end(self, keep: bool) -> None:
        assert self.in_transaction is not None
        if keep:
            self.index.journal.commit()
        else:
            self.index.journal.rollback()
            self.state = self.in_transaction
        self.in_transaction = None
        self.savepoint = None

    @precondition(lambda self: self.in_transaction is not None)
    @rule()
    def mark(self) -> None:
        self.savepoint = (self.index.journal.savepoint(), self.state)

    @precondition(lambda self: self.savepoint is not None)
    @rule()
    def undo_to_mark(self) -> None:
        assert self.savepoint is not None
        mark, self.state = self.savepoint
        self.index.journal.rollback_to(mark)
        self.savepoint = None

    @precondition(lambda self: self.frozen is None and self.in_transaction is None)  # as a store freezes
    @rule(every_job=st.booleans())
    def freeze(self, every_job: bool) -> None:
        frozen = self.index.freeze(every_job=every_job)
        if not every_job and self.last_frozen is not None:  # every job changed since is in changed
            before = {job.id: job.model_dump() for job in self.last_frozen.jobs}
            now = {job.id: job.model_dump() for job in self.state.jobs}
            touched = {i for i in before.keys() | now.keys() if before.get(i) != now.get(i)}
            assert touched <= frozen.changed.keys()
        else:
            assert frozen.changed.keys() == {job.id for job in self.state.jobs}
        self.frozen, self.last_frozen = (frozen, self.state), self.state

    @precondition(lambda self: self.frozen is not None)
    @rule()
    def read_the_frozen_jobs_and_thaw(self) -> None:
        """The jobs live at the freeze, as they were then, whatever happened since."""
        assert self.frozen is not None
        frozen, then = self.frozen
        if frozen.changed.keys() >= {job.id for job in then.jobs}:
            rows = []
            for job_id in frozen.changed:
                record = frozen.live(job_id)
                if record is None:
                    continue
                state = frozen.saved.get(job_id) or record.claim_state()
                values = dict(zip(CHANGING_FIELDS, state, strict=True))
                rows.append((record.order, job_id, values["status"], values["heartbeat"]))
            expected = [
                (j.id, j.status, None if j.heartbeat_at is None else to_micros(j.heartbeat_at))
                for j in then.jobs
            ]
            assert [row[1:] for row in sorted(rows)] == expected
        self.index.thaw()
        self.frozen = None

    @invariant()
    def index_equals_state(self) -> None:
        assert snapshot(as_state(self.index)) == snapshot(self.state)
        assert len(self.index) == len(self.state.jobs)

    @invariant()
    def rebuilt_index_equals_state(self) -> None:
        rebuilt = index_of(self.state)
        assert snapshot(as_state(rebuilt)) == snapshot(self.state)


TestIndexAgainstStates = IndexAgainstStates.TestCase
