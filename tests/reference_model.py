"""A reference model of the queue: whole-state transitions on ``QueueState`` that say what each
operation means in the simplest terms. The index (``jqueue.domain.index``) does the same at a
cost that does not grow with depth, and the property tests check it against this model.

Also here: a whole state to and from the single-object format, and an index built from a
state, for tests that look at stored bytes.
"""

from __future__ import annotations

import heapq
import uuid
from collections.abc import Callable, Iterable
from datetime import datetime

from jqueue.core.formats.single import decode_index, encode_index
from jqueue.domain.effects import Added
from jqueue.domain.errors import JobNotFoundError, LeaseLostError
from jqueue.domain.index import QueueIndex
from jqueue.domain.models import LEASE_EXPIRED, UNLEASED_CLAIM_TIMEOUT, Job, JobStatus, QueueState
from jqueue.domain.schema import domain_values, job_from


def new_job(entrypoint: str, payload: bytes, priority: int = 0) -> Job:
    """Return a queued job with a fresh id and the current time."""
    return Job(id=str(uuid.uuid4()), entrypoint=entrypoint, payload=payload, priority=priority)


def claimed_job(job: Job, now: datetime, lease: str | None = None, expires_at: datetime | None = None) -> Job:
    """Return a copy claimed at ``now`` under ``lease`` until ``expires_at``; one more attempt."""
    return job.model_copy(
        update={
            "status": JobStatus.IN_PROGRESS,
            "heartbeat_at": now,
            "attempts": job.attempts + 1,
            "claimed_at": (*job.claimed_at, now),
            "lease": lease,
            "lease_expires_at": expires_at,
        }
    )


def requeued(job: Job, error: str | None = None) -> Job:
    """Return a copy back in the queued state, without a lease, with ``error`` as its last
    error if given."""
    update = {"status": JobStatus.QUEUED, "heartbeat_at": None, "lease": None, "lease_expires_at": None}
    return job.model_copy(update=update | ({} if error is None else {"last_error": error}))


def beaten(job: Job, now: datetime) -> Job:
    """Return a copy with its heartbeat at ``now`` and its lease as long again from ``now``."""
    expires = job.lease_expires_at
    if expires is not None and job.heartbeat_at is not None:
        expires = now + (expires - job.heartbeat_at)
    return job.model_copy(update={"heartbeat_at": now, "lease_expires_at": expires})


def settled(job: Job, parent: str, result: bytes | None, at: datetime) -> Job:
    """Return a copy of a waiting ``job`` whose ``parent`` was acked at ``at`` with ``result``:
    released at ``at`` when it awaits no other parent."""
    awaiting = tuple(waited for waited in job.awaiting if waited != parent)
    results = list(job.parent_results or (None,) * len(job.after))
    results[job.after.index(parent)] = result
    update: dict[str, object] = {"awaiting": awaiting, "parent_results": tuple(results)}
    if not awaiting and job.status is JobStatus.WAITING:
        update["status"] = JobStatus.QUEUED
        update["released_at"] = at
    return job.model_copy(update=update)


def is_expired(job: Job, now: datetime) -> bool:
    """Whether this job is in progress under a lease that ran out before ``now``.

    A job claimed without a lease expiry (by the original jqueue) counts as leased
    until ``UNLEASED_CLAIM_TIMEOUT`` after its last heartbeat.
    """
    if job.status is not JobStatus.IN_PROGRESS:
        return False
    expires = job.lease_expires_at
    if expires is None:
        if job.heartbeat_at is None:
            return True
        expires = job.heartbeat_at + UNLEASED_CLAIM_TIMEOUT
    return expires < now


def is_stale(job: Job, cutoff: datetime) -> bool:
    """Whether this job is in progress with no heartbeat since ``cutoff``."""
    return job.status is JobStatus.IN_PROGRESS and (job.heartbeat_at is None or job.heartbeat_at < cutoff)


def _priority_order(job: Job) -> tuple[int, datetime]:
    return (job.priority, job.created_at)


class ModelState(QueueState):
    """``QueueState`` with the reference transitions: each returns a new state (or ``self``
    when nothing changed) and leaves ``version`` alone."""

    def _require(self, job_id: str) -> Job:
        job = self.find(job_id)
        if job is None:
            raise JobNotFoundError(job_id)
        return job

    def _with_jobs(self, jobs: Iterable[Job]) -> ModelState:
        return self.model_copy(update={"jobs": tuple(jobs)})

    def with_version(self, version: int) -> ModelState:
        """Return a copy at another version."""
        return self.model_copy(update={"version": version})

    def with_job_added(self, job: Job) -> ModelState:
        """Return a state with ``job`` appended."""
        return self.model_copy(update={"jobs": (*self.jobs, job)})

    def with_jobs_added(self, jobs: Iterable[Job]) -> ModelState:
        """Return a state with ``jobs`` appended."""
        return self.model_copy(update={"jobs": (*self.jobs, *jobs)})

    def with_job_replaced(self, updated: Job) -> ModelState:
        """Return a state where the job with ``updated.id`` is ``updated``.

        Raises
        ------
        JobNotFoundError
            If no job has that id.
        """
        self._require(updated.id)
        return self._with_jobs(updated if j.id == updated.id else j for j in self.jobs)

    def with_job_removed(self, job_id: str, lease: str | None = None) -> ModelState:
        """Return a state without the job ``job_id`` (an ack), fenced by ``lease`` if given.

        Raises
        ------
        JobNotFoundError
            Unfenced, if no job has that id.
        LeaseLostError
            Fenced, if the lease no longer holds the job.
        """
        self._holding(job_id, lease)
        return self._with_jobs(j for j in self.jobs if j.id != job_id)

    def with_job_acked(
        self, job_id: str, at: datetime, lease: str | None = None, result: bytes | None = None
    ) -> ModelState:
        """Return a state without the job ``job_id`` (an ack at ``at`` that keeps ``result``),
        fenced by ``lease`` if given; each job waiting for it keeps the result in its place in
        ``parent_results``, and one that awaits no other parent becomes queued, released at ``at``.

        Raises
        ------
        JobNotFoundError
            Unfenced, if no job has that id.
        LeaseLostError
            Fenced, if the lease no longer holds the job.
        """
        self._holding(job_id, lease)
        return self._with_jobs(
            settled(j, job_id, result, at) if job_id in j.awaiting else j for j in self.jobs if j.id != job_id
        )

    def with_jobs_claimed(
        self,
        entrypoint: str | None,
        batch_size: int,
        now: datetime,
        expires_at: datetime | None = None,
        leases: Callable[[], str] | None = None,
    ) -> tuple[ModelState, list[Job]]:
        """Claim up to ``batch_size`` queued jobs in priority order, each under a new lease.

        Returns
        -------
        tuple of (QueueState, list of Job)
            The new state (``self`` when nothing was claimed) and the claimed jobs.
        """
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, got {batch_size}")
        best = heapq.nsmallest(batch_size, self._queued(entrypoint), key=_priority_order)
        claimed = [claimed_job(job, now, leases() if leases else None, expires_at) for job in best]
        if not claimed:
            return self, []
        by_id = {job.id: job for job in claimed}
        return self._with_jobs(by_id.get(j.id, j) for j in self.jobs), claimed

    def with_job_requeued(self, job_id: str, lease: str | None = None) -> ModelState:
        """Return a state with ``job_id`` back in the queue (a nack), fenced by ``lease`` if given.

        Raises
        ------
        ValueError
            If the job waits for parents (a nack would make it claimable before them).
        """
        job = self._holding(job_id, lease)
        if job.status is JobStatus.WAITING:
            raise ValueError(f"job {job_id!r} waits for its parents")
        return self.with_job_replaced(requeued(job))

    def with_heartbeat(self, job_id: str, now: datetime, lease: str | None = None) -> ModelState:
        """Return a state with the heartbeat of ``job_id`` at ``now`` and its lease extended.

        Unfenced, a job in another status than claimed (say, requeued after going
        stale) leaves the state unchanged; fenced by ``lease``, that is a lost lease.
        """
        job = self._holding(job_id, lease)
        if job.status is not JobStatus.IN_PROGRESS:
            return self
        return self.with_job_replaced(beaten(job, now))

    def requeue_expired(self, now: datetime) -> ModelState:
        """Requeue in-progress jobs whose lease ran out before ``now``; ``self`` if none did."""
        if not any(is_expired(j, now) for j in self.jobs):
            return self
        return self._with_jobs(requeued(j, LEASE_EXPIRED) if is_expired(j, now) else j for j in self.jobs)

    def _holding(self, job_id: str, lease: str | None) -> Job:
        """Return the job; with a ``lease``, only if that lease still holds it.

        Raises
        ------
        JobNotFoundError
            Unfenced, if no job has that id.
        LeaseLostError
            Fenced, if the job is gone, not claimed, or claimed under another lease.
        """
        if lease is None:
            return self._require(job_id)
        job = self.find(job_id)
        if job is None or job.status is not JobStatus.IN_PROGRESS or job.lease != lease:
            raise LeaseLostError(job_id)
        return job

    def requeue_stale(self, cutoff: datetime) -> ModelState:
        """Requeue in-progress jobs whose last heartbeat is before ``cutoff``; ``self`` if none are."""
        if not any(is_stale(j, cutoff) for j in self.jobs):
            return self
        return self._with_jobs(requeued(j) if is_stale(j, cutoff) else j for j in self.jobs)

    def stale_count(self, cutoff: datetime) -> int:
        """Count the in-progress jobs whose last heartbeat is before ``cutoff``."""
        return sum(1 for j in self.jobs if is_stale(j, cutoff))


def index_of(state: QueueState) -> QueueIndex:
    """Return an index holding the jobs of ``state`` (payloads in memory)."""
    index = QueueIndex()
    for job in state.jobs:
        index.apply(Added(*domain_values(job)))
    index.version = state.version
    return index


def encode(state: QueueState, commit_id: str | None = None) -> bytes:
    """Return a whole state in the single-object format."""
    return encode_index(index_of(state), state.version, commit_id)


def decode(data: bytes, location: str = "<bytes>") -> QueueState:
    """Return the state that single-object bytes hold (empty bytes: an empty queue)."""
    index = decode_index(data, location)
    jobs = tuple(job_from(record, record.payload) for record in index.in_order())  # type: ignore[arg-type]
    return QueueState(jobs=jobs, version=index.version)
