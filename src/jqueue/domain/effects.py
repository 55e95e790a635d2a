"""Resolved effects: what a commit did, recorded so any reader replays it to the same state.

An operation decides its effects against the current state (which jobs a dequeue
claims, at what time); the effects carry those decisions, so replaying them needs
no clock and no choice. Times are integer microseconds since the Unix epoch (UTC).
"""

from __future__ import annotations

from dataclasses import dataclass

from jqueue.domain.schema import Counted, EpochMicros, JobFields, Share, Span


@dataclass(slots=True)
class Added(JobFields):
    """A job entered the queue, with everything about it (see ``JobFields``); never changed
    once made (the index keeps its own record of the job)."""

    @property
    def job_id(self) -> str:
        """The job's id, named as in the other effects."""
        return self.id


@dataclass(frozen=True, slots=True)
class JobEvent:
    """What befell job ``job_id`` at ``at``: the fields every such effect starts with."""

    job_id: str
    at: EpochMicros


@dataclass(frozen=True, slots=True)
class Claimed(JobEvent):
    """A queued job was claimed at ``at`` under ``lease`` until ``expires`` (one more attempt)."""

    lease: str | None = None
    expires: EpochMicros | None = None


@dataclass(frozen=True, slots=True)
class Requeued:
    """A job went back to the queue, claimable from ``not_before`` (at once if None).

    ``error`` becomes the job's last error when given; ``reset`` starts its attempts
    and claim times afresh (a dead letter redriven).
    """

    job_id: str
    not_before: EpochMicros | None = None
    error: str | None = None
    reset: bool = False


@dataclass(frozen=True, slots=True)
class Removed:
    """A job left the queue: acked at ``at`` (leaving a history record, with its handler's
    ``result`` if any), or purged (``at`` None)."""

    job_id: str
    at: EpochMicros | None = None
    result: bytes | None = None


@dataclass(frozen=True, slots=True)
class Died(JobEvent):
    """A job became a dead letter at ``at`` for ``reason``, with its last ``error``."""

    reason: str
    error: str | None = None


@dataclass(frozen=True, slots=True)
class Published:
    """The staged jobs of bulk write ``batch`` became claimable, all at once."""

    batch: str


@dataclass(frozen=True, slots=True)
class Discarded:
    """The staged jobs of bulk write ``batch`` were dropped (an aborted write)."""

    batch: str


@dataclass(frozen=True, slots=True)
class Forgotten:
    """The ``count`` oldest history records were dropped (retention)."""

    count: Counted


@dataclass(frozen=True, slots=True)
class PauseSet:
    """Claims and/or enqueues of ``scope`` (an entrypoint, or None for the whole queue) were
    paused (True) or resumed (False)."""

    scope: str | None
    claims: bool
    enqueues: bool


@dataclass(frozen=True, slots=True)
class ThrottleSet:
    """Claims of ``scope`` (an entrypoint, or None for the whole queue) are limited to ``limit``
    per ``window`` microseconds (``per_tenant``: for each tenant's jobs); a ``limit`` of None
    lifts the throttle."""

    scope: str | None
    limit: Counted | None
    window: Span
    per_tenant: bool = False


@dataclass(frozen=True, slots=True)
class LimitSet:
    """At most ``limit`` jobs of ``scope`` (an entrypoint, or None for the whole queue) may be
    in progress at once (``per_tenant``: of each tenant); a ``limit`` of None lifts it."""

    scope: str | None
    limit: Counted | None
    per_tenant: bool = False


@dataclass(frozen=True, slots=True)
class SinkMarked:
    """Streaming sink ``sink`` committed its batch ``batch_id`` in this commit: a batch with an
    id up to this one is a replay, to be skipped (see ``Controls.marks``)."""

    sink: str
    batch_id: Counted


@dataclass(frozen=True, slots=True)
class Owned:
    """Broker ``owner`` (a ``jqueue serve`` process's id) took the queue over in ``epoch``, later
    than any epoch before: from this entry on, a commit made as another broker is refused, so a
    broker that lost the queue can never commit to it again (see ``Controls.owner``)."""

    owner: str
    epoch: Counted


@dataclass(frozen=True, slots=True)
class Resharded:
    """The queue is now made of ``shards`` logs: this one (shard 0) and ``shards - 1`` beside
    it (see ``domain.sharding``); a count is never lowered."""

    shards: Counted


@dataclass(frozen=True, slots=True)
class Beat(JobEvent):
    """A claimed job's heartbeat moved to ``at``; its lease, if it expires, now expires at
    ``expires``, or when None as long again from ``at`` as it was from the last heartbeat.
    With ``progress``, the attempt's progress (and ``note``) became these; with ``lease``, the
    claim is held under that new lease from now on (the old one no longer fences)."""

    expires: EpochMicros | None = None
    progress: Share | None = None
    note: str | None = None
    lease: str | None = None


@dataclass(frozen=True, slots=True)
class CancelAsked(JobEvent):
    """The worker running a claimed job was asked at ``at`` to stop it (``cancel``)."""


@dataclass(frozen=True, slots=True)
class Cancelled(JobEvent):
    """A job left the queue cancelled at ``at`` (leaving a history record), with its last
    ``error`` when its attempt ended in one."""

    error: str | None = None


@dataclass(frozen=True, slots=True)
class ParentSettled:
    """Parent ``parent`` of waiting job ``job_id`` settled at ``at``: acked (with its ``result``,
    if any), or failed while the job's policy is to run anyway (``result`` None). The job keeps
    the result, and becomes claimable once it awaits no other parent (released at ``at``: its wait
    counts from then; its claim order and its own delay are left as they are)."""

    job_id: str
    parent: str
    result: bytes | None = None
    at: EpochMicros | None = None


Effect = (
    Added
    | Claimed
    | Requeued
    | Removed
    | Beat
    | CancelAsked
    | Cancelled
    | Died
    | Forgotten
    | PauseSet
    | ThrottleSet
    | LimitSet
    | SinkMarked
    | Owned
    | Resharded
    | Published
    | Discarded
    | ParentSettled
)
