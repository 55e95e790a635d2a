"""Property tests of the pure state transitions against a plain model of the queue."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from jqueue import Job, JobNotFoundError, JobStatus
from reference_model import ModelState, is_stale

T0 = datetime(2026, 1, 1, tzinfo=UTC)
ENTRYPOINTS = st.sampled_from(["email", "sms"])


class QueueModel(RuleBasedStateMachine):
    """Drives ``QueueState`` with random operations and checks it against a dict."""

    def __init__(self) -> None:
        super().__init__()
        self.state = ModelState()
        self.clock = T0
        self.model: dict[str, tuple[str, int, int, JobStatus]] = {}  # id -> entrypoint, priority, seq, status
        self.seq = 0

    def tick(self) -> datetime:
        self.clock += timedelta(seconds=1)
        return self.clock

    def queued(self, entrypoint: str | None) -> list[str]:
        ids = [
            i
            for i, (ep, _, _, status) in self.model.items()
            if status is JobStatus.QUEUED and entrypoint in (None, ep)
        ]
        return sorted(ids, key=lambda i: (self.model[i][1], self.model[i][2]))

    @rule(entrypoint=ENTRYPOINTS, priority=st.integers(-2, 2))
    def enqueue(self, entrypoint: str, priority: int) -> None:
        self.seq += 1
        job = Job(entrypoint=entrypoint, payload=b"p", priority=priority, created_at=self.tick())
        self.state = self.state.with_job_added(job)
        self.model[job.id] = (entrypoint, priority, self.seq, JobStatus.QUEUED)

    @rule(entrypoint=st.one_of(st.none(), ENTRYPOINTS), batch=st.integers(1, 3))
    def claim(self, entrypoint: str | None, batch: int) -> None:
        before = self.state
        expected = self.queued(entrypoint)[:batch]
        self.state, claimed = self.state.with_jobs_claimed(entrypoint, batch, self.tick())
        assert [j.id for j in claimed] == expected
        if not claimed:
            assert self.state is before
        for job_id in expected:
            ep, priority, seq, _ = self.model[job_id]
            self.model[job_id] = (ep, priority, seq, JobStatus.IN_PROGRESS)

    @precondition(lambda self: bool(self.model))
    @rule(data=st.data(), action=st.sampled_from(["ack", "nack", "heartbeat"]))
    def act_on_existing(self, data: st.DataObject, action: str) -> None:
        job_id = data.draw(st.sampled_from(sorted(self.model)))
        ep, priority, seq, _ = self.model[job_id]
        if action == "ack":
            self.state = self.state.with_job_removed(job_id)
            del self.model[job_id]
        elif action == "nack":
            self.state = self.state.with_job_requeued(job_id)
            self.model[job_id] = (ep, priority, seq, JobStatus.QUEUED)
        else:
            now = self.tick()
            before = self.state
            self.state = self.state.with_heartbeat(job_id, now)
            found = self.state.find(job_id)
            assert found is not None
            if found.status is JobStatus.IN_PROGRESS:
                assert found.heartbeat_at == now
            else:
                assert self.state is before

    @rule(job_id=st.uuids().map(str), action=st.sampled_from(["ack", "nack", "heartbeat"]))
    def act_on_unknown(self, job_id: str, action: str) -> None:
        calls = {
            "ack": lambda: self.state.with_job_removed(job_id),
            "nack": lambda: self.state.with_job_requeued(job_id),
            "heartbeat": lambda: self.state.with_heartbeat(job_id, self.clock),
        }
        with pytest.raises(JobNotFoundError) as raised:
            calls[action]()
        assert raised.value.job_id == job_id

    @rule(age=st.integers(0, 5))
    def sweep(self, age: int) -> None:
        cutoff = self.clock - timedelta(seconds=age)
        stale = {j.id for j in self.state.jobs if is_stale(j, cutoff)}
        assert self.state.stale_count(cutoff) == len(stale)
        self.state = self.state.requeue_stale(cutoff)
        for job_id in stale:
            ep, priority, seq, _ = self.model[job_id]
            self.model[job_id] = (ep, priority, seq, JobStatus.QUEUED)

    @invariant()
    def matches_the_model(self) -> None:
        assert {j.id: j.status for j in self.state.jobs} == {i: m[3] for i, m in self.model.items()}
        assert [j.id for j in self.state.queued_jobs()] == self.queued(None)
        for job in self.state.jobs:
            assert (job.heartbeat_at is None) == (job.status is JobStatus.QUEUED)


TestQueueModel = QueueModel.TestCase
