"""The bodies of the native API's operator calls: what a remote operator reads (queues, stats,
jobs, history, dead letters) and steers (pause, resume, throttle, limit, requeue, purge).

Each call is ``POST /v1/queues/{queue}/{verb}`` with the arguments of the ``JobQueue`` method
of the same name (spans in seconds); ``OPERATOR_CALLS`` is their one list, from which the
routes, the client's calls and the OpenAPI document are made.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any

import msgspec

from jqueue.adapters.service.wire import ApiJob, BatchSize, JobId, JobsResponse, PositiveSeconds, Seconds
from jqueue.core.formats.wire import AwareDatetime, Count, Int64
from jqueue.domain.models import JobStatus
from jqueue.domain.records import HistoryRecord
from jqueue.domain.stats import EntrypointStats, QueueStats

if TYPE_CHECKING:
    _ApiJobs = list[Any]
    _ApiJob = Any
else:
    _ApiJobs = list[ApiJob]
    _ApiJob = ApiJob

Limit = Annotated[int, msgspec.Meta(ge=1)]
"""At most so many (None, where a call takes it: all)."""


class StatsRequest(msgspec.Struct, forbid_unknown_fields=True):
    """``stats``: no arguments."""


class JobsRequest(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """``jobs`` and ``count``: the jobs with ``status``, of ``entrypoint``, enqueued more than
    ``older_than_seconds`` ago (each filter when given), at most ``limit`` (None: all)."""

    status: JobStatus | None = None
    entrypoint: str | None = None
    older_than_seconds: Seconds | None = None
    limit: Limit | None = 100


class BrowseRequest(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """``browse``: one page of jobs from ``cursor`` (as ``jobs`` filters them, and by ``dedup_key``)."""

    status: JobStatus | None = None
    entrypoint: str | None = None
    older_than_seconds: Seconds | None = None
    dedup_key: str | None = None
    cursor: Count = 0
    limit: BatchSize = 50


class PageResponse(msgspec.Struct):
    """A page of jobs and the cursor of the next (None at the end)."""

    jobs: _ApiJobs
    next_cursor: int | None


class CountResponse(msgspec.Struct):
    """How many jobs a call found or changed."""

    count: int


class JobRequest(msgspec.Struct, forbid_unknown_fields=True):
    """``find`` and ``finished``: one job, by id."""

    id: JobId


class FoundResponse(msgspec.Struct):
    """The job as it is now (None if it is not in the queue)."""

    job: _ApiJob | None


class HistoryRequest(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """``history``: records of finished jobs, oldest first, the newest ``limit`` (None: all)."""

    entrypoint: str | None = None
    outcome: JobStatus | None = None
    since: AwareDatetime | None = None
    limit: Count | None = None


class HistoryResponse(msgspec.Struct):
    """History records, oldest first."""

    records: list[HistoryRecord]


class FinishedResponse(msgspec.Struct):
    """The newest history record of a job (None if the history holds none)."""

    record: HistoryRecord | None


class DeadLettersRequest(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """``dead_letters``: dead jobs of ``entrypoint``, oldest enqueue first, at most ``limit``."""

    entrypoint: str | None = None
    limit: Limit | None = 100


class IdsRequest(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """``requeue`` (of ``ids``) and ``requeue_dead`` (of ``ids``, or of every dead letter)."""

    ids: list[JobId] | None = None


class PurgeRequest(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """``purge``: delete jobs with ``status`` (None: any), of ``entrypoint``, enqueued more than
    ``older_than_seconds`` ago, among ``ids`` (each filter when given)."""

    status: JobStatus | None = JobStatus.DEAD
    entrypoint: str | None = None
    older_than_seconds: Seconds | None = None
    ids: list[JobId] | None = None


class PauseRequest(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """``pause`` (with ``enqueues``: refuse new jobs too) and ``resume`` of ``entrypoint``
    (None: the whole queue)."""

    entrypoint: str | None = None
    enqueues: bool = False


class ThrottleRequest(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """``throttle``: at most ``limit`` claims per ``per_seconds`` (``limit`` None lifts it)."""

    limit: Int64 | None
    per_seconds: PositiveSeconds
    entrypoint: str | None = None


class LimitRequest(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """``limit``: at most ``n`` jobs in progress at once (None lifts it)."""

    entrypoint: str | None = None
    n: Int64 | None = None


class DoneResponse(msgspec.Struct):
    """A control call that answers nothing but that it is done, and durable."""


class StatsResponse(msgspec.Struct, kw_only=True):
    """``QueueStats``, with its scopes (None: the whole queue) as pairs, not dictionary keys."""

    version: int
    entrypoints: dict[str, EntrypointStats]
    paused_claims: list[str | None]
    paused_enqueues: list[str | None]
    throttles: list[tuple[str | None, int, float]]
    limits: list[tuple[str | None, int]]
    history_records: int

    @classmethod
    def of(cls, stats: QueueStats) -> StatsResponse:
        """Return the wire form of ``stats``."""
        return cls(
            version=stats.version,
            entrypoints=stats.entrypoints,
            paused_claims=stats.paused_claims,
            paused_enqueues=stats.paused_enqueues,
            throttles=[(scope, limit, per) for scope, (limit, per) in stats.throttles.items()],
            limits=list(stats.limits.items()),
            history_records=stats.history_records,
        )

    def stats(self) -> QueueStats:
        """Return the ``QueueStats`` this is the wire form of."""
        return QueueStats(
            self.version,
            self.entrypoints,
            self.paused_claims,
            self.paused_enqueues,
            {scope: (limit, per) for scope, limit, per in self.throttles},
            dict(self.limits),
            self.history_records,
        )


class QueueNamesResponse(msgspec.Struct):
    """``GET /v1/queues``: the queues of the service's root, sorted."""

    queues: list[str]


@dataclass(frozen=True)
class OperatorCall:
    """One operator call: its verb, what it does, and its body types."""

    verb: str
    summary: str
    request: type[Any]
    response: type[Any]
    creates: bool = False
    """Whether the call may be the first one of its queue (a control set before any job)."""


OPERATOR_CALLS = (
    OperatorCall(
        "stats", "Counts per entrypoint and status; pauses, throttles, limits.", StatsRequest, StatsResponse
    ),
    OperatorCall("jobs", "Jobs by status, entrypoint and age, without claiming.", JobsRequest, JobsResponse),
    OperatorCall("count", "How many jobs `jobs` would list without a limit.", JobsRequest, CountResponse),
    OperatorCall("browse", "One page of jobs from a cursor.", BrowseRequest, PageResponse),
    OperatorCall("find", "One job as it is now.", JobRequest, FoundResponse),
    OperatorCall("history", "Records of finished jobs.", HistoryRequest, HistoryResponse),
    OperatorCall("finished", "The newest history record of a job.", JobRequest, FinishedResponse),
    OperatorCall("dead_letters", "Dead jobs, oldest enqueue first.", DeadLettersRequest, JobsResponse),
    OperatorCall("requeue_dead", "Redrive dead letters, attempts reset.", IdsRequest, CountResponse),
    OperatorCall("requeue", "Make jobs claimable now, whatever their state.", IdsRequest, CountResponse),
    OperatorCall("purge", "Delete jobs by status, entrypoint, age or id.", PurgeRequest, CountResponse),
    OperatorCall("pause", "Stop claims (and enqueues) of a scope.", PauseRequest, DoneResponse, creates=True),
    OperatorCall("resume", "Undo a pause.", PauseRequest, DoneResponse, creates=True),
    OperatorCall("throttle", "Claims allowed per window.", ThrottleRequest, DoneResponse, creates=True),
    OperatorCall("limit", "Jobs allowed in progress at once.", LimitRequest, DoneResponse, creates=True),
)
"""Every operator call."""
