"""Records of jobs inside a ``QueueIndex``, their public form, and frozen snapshots of them."""

from __future__ import annotations

from datetime import datetime
from operator import attrgetter
from typing import Any

from jqueue.domain.effects import Added, Payload, from_micros, to_micros
from jqueue.domain.models import Job, JobStatus

ClaimState = tuple[JobStatus, int | None, int, str | None, int | None]
"""The fields a claim changes: status, heartbeat, attempts, lease, lease expiry."""


class JobRecord:
    """One job's mutable metadata inside an index; times in epoch microseconds."""

    __slots__ = (
        "attempts",
        "created",
        "entrypoint",
        "expires",
        "heartbeat",
        "id",
        "lease",
        "order",
        "payload",
        "priority",
        "status",
    )

    def __init__(
        self,
        job_id: str,
        entrypoint: str,
        priority: int,
        created: int,
        status: JobStatus,
        heartbeat: int | None,
        payload: Payload,
        order: int,
        attempts: int = 0,
        lease: str | None = None,
        expires: int | None = None,
    ) -> None:
        self.id = job_id
        self.entrypoint = entrypoint
        self.priority = priority
        self.created = created
        self.status = status
        self.heartbeat = heartbeat
        self.payload = payload
        self.order = order
        self.attempts = attempts
        self.lease = lease
        self.expires = expires

    def claim_state(self) -> ClaimState:
        """Return the fields a claim, a heartbeat or a requeue change."""
        return self.status, self.heartbeat, self.attempts, self.lease, self.expires

    def set_claim_state(self, state: ClaimState) -> None:
        """Set the fields a claim, a heartbeat or a requeue change."""
        self.status, self.heartbeat, self.attempts, self.lease, self.expires = state

    def as_added(self) -> Added:
        """Return an immutable snapshot of this job as it is now (the effect that would add it)."""
        return Added(
            self.id,
            self.entrypoint,
            self.priority,
            self.created,
            self.status,
            self.heartbeat,
            self.payload,
            self.attempts,
            self.lease,
            self.expires,
        )


def job_from(snapshot: Added, payload: bytes) -> Job:
    """Return the public ``Job`` for a record snapshot, with its payload bytes."""
    return Job.model_construct(
        id=snapshot.job_id,
        entrypoint=snapshot.entrypoint,
        payload=payload,
        status=snapshot.status,
        priority=snapshot.priority,
        created_at=from_micros(snapshot.created),
        heartbeat_at=None if snapshot.heartbeat is None else from_micros(snapshot.heartbeat),
        attempts=snapshot.attempts,
        lease=snapshot.lease,
        lease_expires_at=None if snapshot.expires is None else from_micros(snapshot.expires),
    )


def added_from(job: Job) -> Added:
    """Return the effect that adds ``job`` exactly as it is (payload in memory)."""

    def micros(moment: datetime | None) -> int | None:
        return None if moment is None else to_micros(moment)

    return Added(
        job.id,
        job.entrypoint,
        job.priority,
        to_micros(job.created_at),
        job.status,
        micros(job.heartbeat_at),
        job.payload,
        job.attempts,
        job.lease,
        micros(job.lease_expires_at),
    )


_CLAIM_FIELDS = ("status", "heartbeat", "attempts", "lease", "expires")


class IndexSnapshot:
    """The live jobs of an index at one version, read lazily (see ``QueueIndex.freeze``)."""

    def __init__(
        self, version: int, records: list[JobRecord], segments: set[int], saved: dict[str, ClaimState]
    ) -> None:
        self.version = version
        self.segments = segments
        self._records = records
        self._saved = saved

    def columns(self) -> dict[str, list[Any]]:
        """Return one list per record field (``id``, ``entrypoint``, ... ``payload``, ``order``) as of
        the snapshot, built with C-level loops so that the event loop is held up only briefly."""
        records = self._records
        columns = {name: list(map(attrgetter(name), records)) for name in JobRecord.__slots__}
        # Read after the columns: a change made meanwhile saved the old values first.
        saved = dict(self._saved)
        if saved:
            changed = [columns[name] for name in _CLAIM_FIELDS]
            for row, job_id in enumerate(columns["id"]):
                before = saved.get(job_id)
                if before is not None:
                    for column, value in zip(changed, before, strict=True):
                        column[row] = value
        return columns
