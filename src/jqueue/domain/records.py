"""Records of jobs inside a ``QueueIndex``, their public form, and frozen snapshots of them."""

from __future__ import annotations

from operator import attrgetter
from typing import Any

from jqueue.domain.effects import Added, Payload, from_micros
from jqueue.domain.models import Job, JobStatus


class JobRecord:
    """One job's mutable metadata inside an index; times in epoch microseconds."""

    __slots__ = ("created", "entrypoint", "heartbeat", "id", "order", "payload", "priority", "status")

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
    ) -> None:
        self.id = job_id
        self.entrypoint = entrypoint
        self.priority = priority
        self.created = created
        self.status = status
        self.heartbeat = heartbeat
        self.payload = payload
        self.order = order

    def as_added(self) -> Added:
        """Return an immutable snapshot of this job as it is now (the effect that would add it)."""
        return Added(
            self.id, self.entrypoint, self.priority, self.created, self.status, self.heartbeat, self.payload
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
    )


class IndexSnapshot:
    """The live jobs of an index at one version, read lazily (see ``QueueIndex.freeze``)."""

    def __init__(
        self,
        version: int,
        records: list[JobRecord],
        segments: set[int],
        saved: dict[str, tuple[JobStatus, int | None]],
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
            statuses, heartbeats = columns["status"], columns["heartbeat"]
            for row, job_id in enumerate(columns["id"]):
                before = saved.get(job_id)
                if before is not None:
                    statuses[row], heartbeats[row] = before
        return columns
