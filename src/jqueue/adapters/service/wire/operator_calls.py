"""The bodies of the native API's operator calls: what a remote operator reads (queues, stats,
jobs, history, dead letters) and steers (pause, resume, throttle, limit, requeue, purge).

Each call is ``POST /v1/queues/{queue}/{verb}`` with the arguments of the ``JobQueue`` method
of the same name, by name (a span ``x`` as ``x_seconds``), and answers the wire form of what the
method returns (each answer type's ``of`` and ``value``). ``OPERATOR_CALLS`` is their one
list, from which the routes, the client's calls and the OpenAPI document are made.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass
from datetime import timedelta
from typing import Annotated, Any, Protocol, Self

import msgspec

from jqueue.adapters.service.wire.bodies import (
    ApiJob,
    BatchSize,
    JobId,
    JobsResponse,
    PositiveSeconds,
    Seconds,
    api_job,
    constraints,
    job_of,
)
from jqueue.core.formats.wire import AwareDatetime, Count, Int64
from jqueue.domain.insight import LISTED
from jqueue.domain.models import Job, JobStatus
from jqueue.domain.records import HistoryRecord
from jqueue.domain.sharding import SHARDS
from jqueue.domain.stats import EntrypointStats, QueueStats

AtLeastOne = Annotated[int, msgspec.Meta(ge=1)]
"""A count of parts: at least one."""
Listed = Annotated[int, constraints(LISTED)]
"""A listing's ``limit``: at most so many (None, where a call takes it: all)."""


class StatsRequest(msgspec.Struct, forbid_unknown_fields=True):
    """``stats`` and ``shards``: no arguments."""


class ReshardRequest(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """``reshard``: the queue's count of shards from now on."""

    shards: Annotated[int, constraints(SHARDS)]


class JobsRequest(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """``jobs`` and ``count``: the jobs with ``status``, of ``entrypoint``, enqueued more than
    ``older_than_seconds`` ago (each filter when given); for ``jobs``, at most ``limit`` (None:
    all), and with ``part`` ``[i, n]`` the i-th of n disjoint parts."""

    status: JobStatus | None = None
    entrypoint: str | None = None
    older_than_seconds: Seconds | None = None
    limit: Listed | None = 100
    part: tuple[Count, AtLeastOne] | None = None


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

    jobs: list[ApiJob]
    next_cursor: int | None

    @classmethod
    def of(cls, page: tuple[list[Job], int | None]) -> PageResponse:
        """Return the wire form of what ``browse`` returns."""
        return cls([api_job(job) for job in page[0]], page[1])

    def value(self) -> tuple[list[Job], int | None]:
        """Return what ``browse`` returned."""
        return [job_of(job) for job in self.jobs], self.next_cursor


class CountResponse(msgspec.Struct):
    """How many jobs a call found or changed."""

    count: int

    @classmethod
    def of(cls, count: int) -> CountResponse:
        """Return the wire form of a count."""
        return cls(count)

    def value(self) -> int:
        """Return the count."""
        return self.count


class JobRequest(msgspec.Struct, forbid_unknown_fields=True):
    """``find``, ``finished``, ``workflow`` and ``cancel_workflow``: one job, by id."""

    job_id: JobId = msgspec.field(name="id")


class FoundResponse(msgspec.Struct):
    """The job as it is now (None if it is not in the queue)."""

    job: ApiJob | None

    @classmethod
    def of(cls, job: Job | None) -> FoundResponse:
        """Return the wire form of what ``find`` returns."""
        return cls(None if job is None else api_job(job))

    def value(self) -> Job | None:
        """Return what ``find`` returned."""
        return None if self.job is None else job_of(self.job)


class HistoryRequest(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """``history``: records of finished jobs, oldest first, the newest ``limit`` (None: all)."""

    entrypoint: str | None = None
    outcome: JobStatus | None = None
    since: AwareDatetime | None = None
    limit: Count | None = None


class HistoryResponse(msgspec.Struct):
    """History records, oldest first."""

    records: list[HistoryRecord]

    @classmethod
    def of(cls, records: list[HistoryRecord]) -> HistoryResponse:
        """Return the wire form of what ``history`` returns."""
        return cls(records)

    def value(self) -> list[HistoryRecord]:
        """Return what ``history`` returned."""
        return self.records


class FinishedResponse(msgspec.Struct):
    """The newest history record of a job (None if the history holds none)."""

    record: HistoryRecord | None

    @classmethod
    def of(cls, record: HistoryRecord | None) -> FinishedResponse:
        """Return the wire form of what ``finished`` returns."""
        return cls(record)

    def value(self) -> HistoryRecord | None:
        """Return what ``finished`` returned."""
        return self.record


class DeadLettersRequest(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """``dead_letters``: dead jobs of ``entrypoint``, oldest enqueue first, at most ``limit``."""

    entrypoint: str | None = None
    limit: Listed | None = 100


class RequeueDeadRequest(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """``requeue_dead``: of ``ids``, or of every dead letter."""

    ids: list[JobId] | None = None


class RequeueRequest(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """``requeue``: of ``ids``."""

    ids: list[JobId]


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
    """``throttle``: at most ``limit`` claims per ``per_seconds`` (``limit`` None lifts it), of
    each tenant apart with ``per_tenant``."""

    limit: Int64 | None
    per_seconds: PositiveSeconds
    entrypoint: str | None = None
    per_tenant: bool = False


class LimitRequest(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """``limit``: at most ``n`` jobs in progress at once (None lifts it), of each tenant apart
    with ``per_tenant``."""

    entrypoint: str | None = None
    n: Int64 | None = None
    per_tenant: bool = False


class DoneResponse(msgspec.Struct):
    """A control call that answers nothing but that it is done, and durable."""

    @classmethod
    def of(cls, _: None) -> DoneResponse:
        """Return the wire form of a call that returns None."""
        return cls()

    def value(self) -> None:
        """Return what the call returned: None."""


class StatsResponse(msgspec.Struct, kw_only=True):
    """``QueueStats``, with its scopes (None: the whole queue) as pairs, not dictionary keys."""

    version: int
    entrypoints: dict[str, EntrypointStats]
    paused_claims: list[str | None]
    paused_enqueues: list[str | None]
    throttles: list[tuple[str | None, int, float]]
    limits: list[tuple[str | None, int]]
    history_records: int
    tenant_throttles: list[tuple[str | None, int, float]] = []
    tenant_limits: list[tuple[str | None, int]] = []

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
            tenant_throttles=[(scope, limit, per) for scope, (limit, per) in stats.tenant_throttles.items()],
            tenant_limits=list(stats.tenant_limits.items()),
        )

    def value(self) -> QueueStats:
        """Return the ``QueueStats`` this is the wire form of."""
        return QueueStats(
            self.version,
            self.entrypoints,
            self.paused_claims,
            self.paused_enqueues,
            {scope: (limit, per) for scope, limit, per in self.throttles},
            dict(self.limits),
            self.history_records,
            {scope: (limit, per) for scope, limit, per in self.tenant_throttles},
            dict(self.tenant_limits),
        )


class QueueNamesResponse(msgspec.Struct):
    """``GET /v1/queues``: the queues of the service's root, sorted."""

    queues: list[str]


class Answer(Protocol):
    """An operator call's answer type: the wire form of what its ``JobQueue`` method returns."""

    @classmethod
    def of(cls, value: Any, /) -> Self:
        """Return the wire form of the method's return value."""
        ...

    def value(self) -> Any:
        """Return the method's return value."""
        ...


@dataclass(frozen=True)
class OperatorCall:
    """One operator call: its verb, what it does, and its body types."""

    verb: str
    summary: str
    request: type[msgspec.Struct]
    response: type[Answer]
    creates: bool = False
    """Whether the call may be the first one of its queue (a control set before any job)."""


OPERATOR_CALLS = (
    OperatorCall(
        "stats", "Counts per entrypoint and status; pauses, throttles, limits.", StatsRequest, StatsResponse
    ),
    OperatorCall("jobs", "Jobs by status, entrypoint and age, without claiming.", JobsRequest, JobsResponse),
    OperatorCall("shards", "The count of shards of the queue.", StatsRequest, CountResponse, creates=True),
    OperatorCall("reshard", "Record a larger count of shards.", ReshardRequest, CountResponse, creates=True),
    OperatorCall("count", "How many jobs `jobs` would list without a limit.", JobsRequest, CountResponse),
    OperatorCall("browse", "One page of jobs from a cursor.", BrowseRequest, PageResponse),
    OperatorCall("find", "One job as it is now.", JobRequest, FoundResponse),
    OperatorCall("history", "Records of finished jobs.", HistoryRequest, HistoryResponse),
    OperatorCall("finished", "The newest history record of a job.", JobRequest, FinishedResponse),
    OperatorCall("dead_letters", "Dead jobs, oldest enqueue first.", DeadLettersRequest, JobsResponse),
    OperatorCall("requeue_dead", "Redrive dead letters, attempts reset.", RequeueDeadRequest, CountResponse),
    OperatorCall("requeue", "Make jobs claimable now, whatever their state.", RequeueRequest, CountResponse),
    OperatorCall("purge", "Delete jobs by status, entrypoint, age or id.", PurgeRequest, CountResponse),
    OperatorCall("pause", "Stop claims (and enqueues) of a scope.", PauseRequest, DoneResponse, creates=True),
    OperatorCall("resume", "Undo a pause.", PauseRequest, DoneResponse, creates=True),
    OperatorCall("throttle", "Claims allowed per window.", ThrottleRequest, DoneResponse, creates=True),
    OperatorCall("limit", "Jobs allowed in progress at once.", LimitRequest, DoneResponse, creates=True),
    OperatorCall(
        "workflow", "The jobs linked to a job by their parents, either way.", JobRequest, JobsResponse
    ),
    OperatorCall(
        "cancel_workflow",
        "Cancel the unfinished jobs of a job's workflow, in one commit.",
        JobRequest,
        JobsResponse,
    ),
)
"""Every operator call."""
OPERATOR_CALL = {call.verb: call for call in OPERATOR_CALLS}
"""Each operator call by its verb."""

_SPAN_SUFFIX = "_seconds"


def request_of(kind: type[msgspec.Struct], arguments: dict[str, Any]) -> msgspec.Struct:
    """Return the request body of type ``kind`` for a call with ``arguments`` (by parameter
    name; a span ``x`` becomes ``x_seconds``, any iterable of ids a list; a field the call
    does not take keeps its default).

    Raises
    ------
    TypeError
        If an argument has no field to go in: the call and its body have drifted apart.
    """
    body: dict[str, Any] = {}
    left = dict(arguments)
    for name in kind.__struct_fields__:
        parameter = name.removesuffix(_SPAN_SUFFIX)
        if name.endswith(_SPAN_SUFFIX) and parameter in left:
            span: timedelta | None = left.pop(parameter)
            body[name] = None if span is None else span.total_seconds()
        elif name in left:
            value = left.pop(name)
            body[name] = list(value) if isinstance(value, Iterable) and not isinstance(value, str) else value
    if left:
        raise TypeError(f"{kind.__name__} has no field for {sorted(left)}")
    return kind(**body)


def arguments_of(body: msgspec.Struct, takes: Collection[str]) -> dict[str, Any]:
    """Return the keyword arguments, among the parameters ``takes``, of the ``JobQueue`` call
    that ``body`` is the request of (a field another call of the same body has is left out)."""
    arguments: dict[str, Any] = {}
    for name in body.__struct_fields__:
        value = getattr(body, name)
        if name.endswith(_SPAN_SUFFIX):
            name = name.removesuffix(_SPAN_SUFFIX)
            value = None if value is None else timedelta(seconds=value)
        if name in takes:
            arguments[name] = value
    return arguments
