"""Jobs and the queue state as callers see them: frozen values.

Nothing here does I/O. ``Job`` and ``QueueState`` are what callers see: a queue keeps its
jobs in a ``QueueIndex`` (``jqueue.domain.index``), as ``JobRecord`` values whose fields
``jqueue.domain.schema`` defines, and builds these from them. The transitions live on the
index; ``tests/reference_model.py`` keeps a whole-state model of them that the index is
property-tested against.
"""

from __future__ import annotations

import base64
import binascii
import os
from collections.abc import Iterator
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, field_serializer, field_validator

from jqueue.domain.times import utc_now

UNLEASED_CLAIM_TIMEOUT = timedelta(minutes=5)
"""How long a claim without a lease expiry holds its job after its last heartbeat
(the documented jqueue's default stale timeout)."""

LEASE_EXPIRED = "lease expired"
"""The error recorded on a job whose lease ran out."""


def new_job_id() -> str:
    """Return a new job id: a random UUID (version 4) in its canonical text form."""
    raw = bytearray(os.urandom(16))  # as uuid.uuid4(), at half its cost: a batch makes one per job
    raw[6] = (raw[6] & 0x0F) | 0x40
    raw[8] = (raw[8] & 0x3F) | 0x80
    h = raw.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


class JobStatus(StrEnum):
    """Where a job is in its life: ``STAGED``, ``WAITING``, ``QUEUED``, ``IN_PROGRESS``, ``DEAD``
    (a dead letter), or finished: ``ACKED`` or ``CANCELLED``."""

    QUEUED = "queued"
    IN_PROGRESS = "in_progress"
    DEAD = "dead"
    ACKED = "acked"
    """Finished: seen in history records and in the job a deduplicated enqueue returns."""
    STAGED = "staged"
    """Written by a bulk write that is not published yet: invisible to claims."""
    CANCELLED = "cancelled"
    """Finished by ``cancel``: seen in history records only."""
    WAITING = "waiting"
    """Waiting for its parents (``after``) to settle: invisible to claims."""


class ParentFailure(StrEnum):
    """What a job that waits for parents (``after``) does when one of them fails (dies, is
    cancelled or is purged): ``CANCEL`` it (the default), or ``RUN`` it once the others settle."""

    CANCEL = "cancel"
    RUN = "run"


def _from_base64(value: object) -> object:
    """A payload or result given as text is base64, as in the documented jqueue."""
    if isinstance(value, str):
        try:
            return base64.b64decode(value, validate=True)
        except binascii.Error as exc:
            raise ValueError(f"not valid base64: {exc}") from exc
    return value


class Job(BaseModel):
    """One unit of work.

    Attributes
    ----------
    id : str
        A UUID assigned at enqueue time.
    entrypoint : str
        The logical name that routes the job to its handler.
    payload : bytes
        Opaque bytes (base64 in JSON).
    status : JobStatus
        ``QUEUED``, ``IN_PROGRESS`` or ``DEAD`` in the queue; ``STAGED`` before a bulk write
        is published; ``WAITING`` until its parents (``after``) settle; ``ACKED`` for a
        finished job a deduplicated enqueue returns.
    priority : int
        Lower runs first.
    created_at : datetime
        UTC time of enqueue.
    heartbeat_at : datetime or None
        UTC time of the last claim or heartbeat; None while queued.
    attempts : int
        How many times the job has been claimed.
    lease : str or None
        The token of the current claim; it changes on every claim. Passing the
        claimed ``Job`` to ``ack``/``nack``/``heartbeat`` checks it (fencing).
    lease_expires_at : datetime or None
        When the current claim runs out and the job returns to the queue, unless a
        heartbeat extends it.
    max_attempts : int or None
        Claims allowed before a failure makes the job dead; None for the queue's default.
    not_before : datetime or None
        The job is not claimable before this time (a delay, or a retry's backoff); a
        claim keeps it, so a running job shows when it became due.
    deadline : datetime or None
        Past this time (its enqueue time plus its ``ttl``) the job dies instead of
        being claimed.
    dedup_key : str or None
        While a job with this key is in the queue (or was acked within the history's
        retention), enqueueing the key again returns that job.
    last_error : str or None
        The error of the last failed attempt.
    dead_reason : str or None
        Why a ``DEAD`` job died: ``max_attempts``, ``ttl``, or ``failed`` (its handler gave up on
        it, or a ``nack`` with ``dead``).
    dead_at : datetime or None
        When a ``DEAD`` job died.
    claimed_at : tuple of datetime
        When the job was claimed, each time.
    batch : str or None
        The bulk write that added the job (see ``stage_many``), if one did.
    cancel_requested_at : datetime or None
        When ``cancel`` asked the worker running this job to stop (it stops at its next
        heartbeat).
    progress : float or None
        How far the running attempt got, from 0 to 1, as its handler reported it with
        ``current_job().progress`` (stored with a heartbeat); None before the first report.
    progress_note : str or None
        The note that came with ``progress``.
    after : tuple of str
        The parents: the job waits (``WAITING``) until each is acked, or has failed (died, was
        cancelled or purged) when ``on_parent_failure`` is ``run``.
    on_parent_failure : str or None
        ``run``, or None for the default, ``cancel`` (see ``ParentFailure``).
    awaiting : tuple of str
        The parents not settled yet.
    parent_results : tuple of (bytes or None)
        The parents' results, in the order of ``after`` (None for a parent with none, or not
        settled yet); empty until the first parent settles.
    traceparent : str or None
        The W3C trace context of the span that enqueued the job (OpenTelemetry): a worker runs
        it in that trace.
    released_at : datetime or None
        When the commit that settled its last parent released it (a job with ``after``): its
        wait counts from then.
    tenant : str or None
        Whose job it is (a customer, say): claims serve an entrypoint's tenants in turn, at
        each priority, and limits may count per tenant.
    timeout : timedelta or None
        How long one attempt may run: a worker stops its handler past it (in place of the
        handler's own ``timeout``), and the attempt fails as a timeout.
    """

    model_config = ConfigDict(frozen=True)

    id: str = Field(default_factory=new_job_id)
    entrypoint: str
    payload: bytes
    status: JobStatus = JobStatus.QUEUED
    priority: int = 0
    created_at: AwareDatetime = Field(default_factory=utc_now)
    heartbeat_at: AwareDatetime | None = None
    attempts: int = 0
    lease: str | None = None
    lease_expires_at: AwareDatetime | None = None
    max_attempts: int | None = None
    not_before: AwareDatetime | None = None
    deadline: AwareDatetime | None = None
    dedup_key: str | None = None
    last_error: str | None = None
    dead_reason: str | None = None
    dead_at: AwareDatetime | None = None
    claimed_at: tuple[AwareDatetime, ...] = ()
    batch: str | None = None
    cancel_requested_at: AwareDatetime | None = None
    progress: float | None = None
    progress_note: str | None = None
    after: tuple[str, ...] = ()
    on_parent_failure: str | None = None
    awaiting: tuple[str, ...] = ()
    parent_results: tuple[bytes | None, ...] = ()
    traceparent: str | None = None
    released_at: AwareDatetime | None = None
    tenant: str | None = None
    timeout: timedelta | None = None

    @field_validator("payload", mode="before")
    @classmethod
    def _payload_from_base64(cls, value: object) -> object:
        return _from_base64(value)

    @field_validator("parent_results", mode="before")
    @classmethod
    def _results_from_base64(cls, value: object) -> object:
        return tuple(map(_from_base64, value)) if isinstance(value, list | tuple) else value

    @field_serializer("payload", when_used="json")
    def _payload_to_base64(self, value: bytes) -> str:
        return base64.b64encode(value).decode("ascii")

    @field_serializer("parent_results", when_used="json")
    def _results_to_base64(self, value: tuple[bytes | None, ...]) -> list[str | None]:
        return [None if item is None else base64.b64encode(item).decode("ascii") for item in value]


_EVERY_JOB_FIELD = frozenset(Job.model_fields)
_set = object.__setattr__


def trusted_job(**fields: Any) -> Job:
    """Return the ``Job`` of every field's value, each already valid: what
    ``Job.model_construct`` makes, without its loop over aliases and defaults per field (a
    batch builds one ``Job`` per job). ``tests/test_job_schema.py`` checks the two agree."""
    job = Job.__new__(Job)
    _set(job, "__dict__", fields)
    _set(job, "__pydantic_fields_set__", set(_EVERY_JOB_FIELD))
    _set(job, "__pydantic_extra__", None)
    _set(job, "__pydantic_private__", None)
    return job


_FENCE_TEMPLATE = Job(id="", entrypoint="", payload=b"").__dict__


def fencing_job(job_id: str, lease: str) -> Job:
    """Return a ``Job`` that carries only an id and a lease: what a queue call reads of the
    ``Job`` it is given to fence the call with that lease."""
    return trusted_job(**{**_FENCE_TEMPLATE, "id": job_id, "lease": lease})


def _priority_order(job: Job) -> tuple[int, datetime]:
    return (job.priority, job.created_at)


class QueueState(BaseModel):
    """The whole queue at one version.

    Attributes
    ----------
    jobs : tuple of Job
        Every job, in insertion order.
    version : int
        Incremented on every committed write.
    """

    model_config = ConfigDict(frozen=True)

    jobs: tuple[Job, ...] = ()
    version: int = 0

    def _queued(self, entrypoint: str | None) -> Iterator[Job]:
        return (
            j
            for j in self.jobs
            if j.status is JobStatus.QUEUED and (entrypoint is None or j.entrypoint == entrypoint)
        )

    def queued_jobs(self, entrypoint: str | None = None) -> tuple[Job, ...]:
        """Return the queued jobs (of one entrypoint, if given), lowest (priority, created_at) first."""
        return tuple(sorted(self._queued(entrypoint), key=_priority_order))

    def in_progress_jobs(self) -> tuple[Job, ...]:
        """Return the jobs that are claimed and not yet acked."""
        return tuple(j for j in self.jobs if j.status is JobStatus.IN_PROGRESS)

    def find(self, job_id: str) -> Job | None:
        """Return the job with this id, or None."""
        return next((j for j in self.jobs if j.id == job_id), None)
