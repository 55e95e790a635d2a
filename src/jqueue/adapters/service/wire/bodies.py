"""The native HTTP API's bodies: msgspec types shared by ``jqueue serve`` and its client.

A body is JSON (payloads as base64, times as ISO 8601) or MessagePack (payloads as binary,
times as timestamps), chosen by ``Content-Type`` for requests and ``Accept`` for responses.
Decoding validates a whole body in one pass; an error answers with a stable ``code``.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import msgspec

from jqueue.core.formats.wire import AwareDatetime, Fraction, Int64, wire_type
from jqueue.domain.models import Job, ParentFailure, trusted_job
from jqueue.domain.schema import FIELDS, JobForm, Kind, public_constructor
from jqueue.domain.spec import (
    ATTEMPTS,
    JOB_ID,
    POSITIVE_SPAN,
    SPAN,
    SPEC_FIELDS,
    JobSpec,
    SpecField,
    payload_bytes,
)
from jqueue.domain.values import Bounds

T = TypeVar("T")

CLIENT_HEADER = "X-JQueue-Client"
"""A request header naming the client process (``host:pid``), for the dashboard's list of workers."""
BROKER_HEADER = "X-JQueue-Broker"
"""A request header naming the broker a client found in its root's record (the record's
``owner``): a process that is not that broker refuses the call (503 ``not_broker``), so a
stale record whose address now belongs to another process, of another root perhaps, never
takes a call meant for this root."""
WORKER_HEADER = "X-JQueue-Worker"
"""A request header in which a worker's calls carry its ``WorkerReport`` (JSON), for the
dashboard's workers and periodic jobs."""
CREATED_QUEUE_HEADER = "X-JQueue-Created-Queue"
"""A response header that a call which created its queue (the first enqueue to a new name)
carries, with the queue's name: the command line says that it made a queue."""
FORWARDED_HEADER = "X-JQueue-Forwarded-By"
"""A request header naming the broker that forwarded the call to the queue's owner (a root
served by many brokers): the owner answers it, and never forwards it again."""
OWNER_HEADER = "X-JQueue-Owner"
"""A response header of a forwarded call: the address of the broker that serves the queue, to
which a client sends the queue's next calls itself."""
MAX_WORKER_HEADER = 16_384
"""The longest ``WORKER_HEADER`` a broker reads; a longer one is ignored."""
TOKEN_VARIABLE = "JQUEUE_TOKEN"
"""The environment variable that gives the service's token where none is passed (``jqueue serve``,
``jqueue dashboard``, ``connect``)."""


def client_name() -> str:
    """Return this process's name for ``CLIENT_HEADER``: ``host:pid``."""
    return f"{socket.gethostname()}:{os.getpid()}"


def _number(bound: Any) -> Any:
    return bound.total_seconds() if isinstance(bound, timedelta) else bound


def constraints(bounds: Bounds) -> msgspec.Meta:
    """Return ``bounds`` as msgspec's constraints of a wire value, spans in seconds."""
    given: dict[str, Any] = {
        "ge": _number(bounds.ge),
        "gt": _number(bounds.gt),
        "le": _number(bounds.le),
        "min_length": bounds.min_length,
        "max_length": bounds.max_length,
    }
    meta: msgspec.Meta = msgspec.Meta(**given)
    return meta


Seconds = Annotated[float, constraints(SPAN)]
"""A delay: from 0 to ``LONGEST_SPAN`` (``SPAN``)."""
PositiveSeconds = Annotated[float, constraints(POSITIVE_SPAN)]
"""A ttl or a visibility timeout (``POSITIVE_SPAN``)."""
Attempts = Annotated[int, constraints(ATTEMPTS)]
"""``max_attempts`` (``ATTEMPTS``)."""
JobId = Annotated[str, constraints(JOB_ID)]
"""A job id, as ``JobSpec`` takes it (``JOB_ID``)."""
DEFAULT_MAX_BODY_BYTES = 64 << 20
"""Larger request bodies are refused (413) unless ``jqueue serve --max-body-bytes`` says more."""
MAX_BATCH = 10_000
"""The most jobs one dequeue or peek request asks for."""
BatchSize = Annotated[int, msgspec.Meta(ge=1, le=MAX_BATCH)]

_BY_PUBLIC = {f.public: f for f in FIELDS}
SPAN_ATTRIBUTES = tuple(f.public for f in FIELDS if f.kind is Kind.SPAN)
"""The ``Job`` attributes that are spans of time: on the wire ``<name>_seconds``, a number of
seconds, as a request's spans are (a job's ``timeout`` is ``timeout_seconds``)."""


def _api_job_field(name: str) -> tuple[str, object]:
    if name in SPAN_ATTRIBUTES:
        return f"{name}_seconds", PositiveSeconds | None
    return name, wire_type(_BY_PUBLIC[name], AwareDatetime)


_WIRE_BASES: dict[object, object] = {
    str: str,
    bytes: bytes,
    int: int,
    timedelta: float,
    datetime: AwareDatetime,
    Sequence[str]: tuple[str, ...],
    ParentFailure: ParentFailure,
}
"""The wire type of each base type of a ``JobSpec`` field (a span: seconds)."""


def _wire_name(spec_field: SpecField) -> str:
    return f"{spec_field.name}_seconds" if spec_field.base is timedelta else spec_field.name


def _new_job_field(spec_field: SpecField) -> tuple[str, object] | tuple[str, object, object]:
    name, base, limit = _wire_name(spec_field), _WIRE_BASES[spec_field.base], constraints(spec_field.bounds)
    if spec_field.nullable:
        return name, Annotated[base, limit] | None, None
    kind: object = Annotated[base, limit]
    return (name, kind) if spec_field.required else (name, kind, spec_field.default)


# Both structs are made from the one declaration of their fields (``Job``'s and ``JobSpec``'s);
# the type checker sees what the service does with them: build them by keyword, read them by name.
if TYPE_CHECKING:
    from jqueue.core.formats.wire import DerivedStruct

    class ApiJob(DerivedStruct):
        """A job in a response: every attribute of ``Job``, by the same names."""

    class NewJob(DerivedStruct):
        """One job to enqueue: the fields of ``JobSpec``, spans in seconds."""

else:
    ApiJob = msgspec.defstruct(
        "ApiJob",
        [_api_job_field(name) for name in Job.model_fields],
        kw_only=True,
    )
    """A job in a response: every attribute of ``Job``, by the same names (a span as seconds,
    ``SPAN_ATTRIBUTES``)."""
    NewJob = msgspec.defstruct(
        "NewJob",
        [_new_job_field(spec_field) for spec_field in SPEC_FIELDS],
        kw_only=True,
        forbid_unknown_fields=True,
    )
    """One job to enqueue: the fields of ``JobSpec`` by the same names, spans in seconds
    (``delay_seconds``, ``ttl_seconds``), with its limits. With an ``id``, a repeated request adds
    nothing twice (the client sets one for every job)."""

_WIRE_NAMES = tuple((f.name, _wire_name(f)) for f in SPEC_FIELDS)
_SPANS = tuple((f.name, _wire_name(f)) for f in SPEC_FIELDS if f.base is timedelta)


def new_job(spec: JobSpec, job_id: str) -> NewJob:
    """Return the ``NewJob`` of ``spec``, under ``job_id``."""
    values = {wire: getattr(spec, name) for name, wire in _WIRE_NAMES}
    for _, wire in _SPANS:
        values[wire] = None if values[wire] is None else values[wire].total_seconds()
    values["payload"], values["id"] = payload_bytes(spec.payload), job_id
    return NewJob(**values)


def spec_of(job: NewJob) -> JobSpec:
    """Return the ``JobSpec`` of a decoded ``NewJob`` (raises ``ValueError`` for options that clash)."""
    values = {name: getattr(job, wire) for name, wire in _WIRE_NAMES}
    for name, _ in _SPANS:
        values[name] = None if values[name] is None else timedelta(seconds=values[name])
    return JobSpec(**values)


class EnqueueRequest(msgspec.Struct, forbid_unknown_fields=True):
    """``POST /v1/queues/{queue}/enqueue``: add jobs, all in one commit."""

    jobs: list[NewJob]


class DequeueRequest(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """``POST /v1/queues/{queue}/dequeue``: claim up to ``batch_size`` jobs (of these entrypoints)."""

    entrypoints: list[str] | None = None
    batch_size: BatchSize = 1
    visibility_timeout_seconds: PositiveSeconds | None = None


class PeekRequest(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """``POST /v1/queues/{queue}/peek``: the jobs a dequeue would claim now, claiming none."""

    entrypoints: list[str] | None = None
    limit: BatchSize = 1


MAX_WAIT_SECONDS = 30.0
"""The longest a ``changes`` request waits for a change."""


class ChangesRequest(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """``POST /v1/queues/{queue}/changes``: wait until the queue's change count is past ``seen``
    (a long poll), at most ``wait_seconds``."""

    seen: Int64
    wait_seconds: Annotated[float, msgspec.Meta(ge=0, le=MAX_WAIT_SECONDS)] = 10.0


class ResultRequest(msgspec.Struct, kw_only=True, forbid_unknown_fields=True, omit_defaults=True):
    """``POST /v1/queues/{queue}/result``: wait until job ``id`` is finished, at most
    ``wait_seconds`` (a long poll). With the ``lease`` of a claim of the job, an ack under
    another of its claims answers ``ACKED_BY_ANOTHER_CLAIM`` instead of ``acked``."""

    id: JobId
    wait_seconds: Annotated[float, msgspec.Meta(ge=0, le=MAX_WAIT_SECONDS)] = 10.0
    lease: str | None = None


ACKED_BY_ANOTHER_CLAIM = "acked_by_another_claim"
"""The outcome of a job acked under a claim other than the one whose lease the caller gave: what
an ack repeated after a lost answer learns when its claim's lease ran out and another finished it."""


RUNNING = "running"
"""The outcome of a job that has not finished within the wait."""


class ResultResponse(msgspec.Struct, omit_defaults=True):
    """How job ``id`` ended: ``outcome`` ``acked`` (with its handler's ``result``), ``dead``
    (with its ``error`` and ``reason``), ``cancelled`` (the ``JobStatus`` of each), ``RUNNING``
    if it has not finished within the wait, or ``ACKED_BY_ANOTHER_CLAIM``."""

    outcome: str
    result: bytes | None = None
    error: str | None = None
    reason: str | None = None


class ChangesResponse(msgspec.Struct):
    """The queue's change count on the service (it starts anew when the service does)."""

    generation: int


class JobRef(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True):
    """A job by id; with the lease of its claim, the call is fenced by it. An ack may carry the
    handler's ``result``, a heartbeat the job's ``progress`` and its ``note``."""

    id: JobId
    lease: str | None = None
    result: bytes | None = None
    progress: Fraction | None = None
    note: str | None = None


class SettleRequest(msgspec.Struct, kw_only=True, forbid_unknown_fields=True, omit_defaults=True):
    """``ack``, ``heartbeat`` and ``release`` of jobs; ``nack`` also takes its options."""

    jobs: list[JobRef]
    delay_seconds: Seconds | None = None
    error: str | None = None
    max_attempts: Attempts | None = None
    dead: bool = False


class JobsResponse(msgspec.Struct):
    """Jobs, in the order of the request."""

    jobs: list[ApiJob]

    @classmethod
    def of(cls, jobs: list[Job]) -> JobsResponse:
        """Return the wire form of ``jobs``."""
        return cls([api_job(job) for job in jobs])

    def value(self) -> list[Job]:
        """Return the jobs this is the wire form of."""
        return [job_of(job) for job in self.jobs]


class ErrorBody(msgspec.Struct, omit_defaults=True):
    """What failed: a stable ``code`` and a message for people; for ``not_broker``, the URL of
    the broker to call instead (when one is known); ``details``, the attributes of the error
    (a ``job_id``, a payload's ``size`` and ``limit``...; see ``error_codes``)."""

    code: str
    message: str
    broker: str | None = None
    details: dict[str, str | int | None] | None = None


class ErrorResponse(msgspec.Struct):
    """The body of every response that is not 2xx."""

    error: ErrorBody


ACK_AND_DEQUEUE = "ack-and-dequeue"
"""The route (``POST /v1/queues/{queue}/ack-and-dequeue``) that acks and claims in one commit."""


class AckAndDequeueRequest(DequeueRequest, kw_only=True, forbid_unknown_fields=True):
    """``POST /v1/queues/{queue}/ack-and-dequeue``: ack ``acks`` (as ``ack`` does) and claim up to
    ``batch_size`` jobs (0: none), in one commit."""

    acks: list[JobRef]
    batch_size: Annotated[int, msgspec.Meta(ge=0, le=MAX_BATCH)] = 1


class ItemResult(msgspec.Struct, omit_defaults=True):
    """The answer for one job of a batch: ``error`` is None when it succeeded; for ``cancel``,
    ``cancelled`` says whether the job left the queue at once (else its worker is to stop it)."""

    error: ErrorBody | None = None
    cancelled: bool = False


class ResultsResponse(msgspec.Struct):
    """One answer per job of a batch, in the order of the request."""

    results: list[ItemResult]


class AckAndDequeueResponse(JobsResponse):
    """The jobs claimed, and one answer per ack, in the order of the request."""

    results: list[ItemResult]


def _api_job_of(**attributes: Any) -> ApiJob:
    """The wire form of a job's public attributes: its spans as seconds."""
    for name in SPAN_ATTRIBUTES:
        span = attributes.pop(name)
        attributes[f"{name}_seconds"] = None if span is None else span.total_seconds()
    return ApiJob(**attributes)


def api_job(job: Job) -> ApiJob:
    """Return the wire form of a job."""
    return _api_job_of(**job.__dict__)


WIRE_FORM: JobForm[ApiJob] = JobForm(public_constructor(_api_job_of), api_job)
"""The service's answers: each job's wire form, made from its record (``JobQueue.dequeue_as``)."""


def job_of(wire: ApiJob) -> Job:
    """Return the ``Job`` of a decoded wire job (msgspec checked every field's type; ``ApiJob``
    has the fields of ``Job``, by the same names, spans as seconds)."""
    attributes = msgspec.structs.asdict(wire)
    for name in SPAN_ATTRIBUTES:
        seconds = attributes.pop(f"{name}_seconds")
        attributes[name] = None if seconds is None else timedelta(seconds=seconds)
    return trusted_job(**attributes)


_json_encoder = msgspec.json.Encoder()
_msgpack_encoder = msgspec.msgpack.Encoder()


def encode(body: object, msgpack: bool) -> bytes:
    """Encode a body as MessagePack or JSON."""
    return _msgpack_encoder.encode(body) if msgpack else _json_encoder.encode(body)


def decode(data: bytes, kind: type[T], msgpack: bool) -> T:
    """Decode a body as ``kind`` from MessagePack or JSON (raises ``msgspec.DecodeError``, or
    ``msgspec.ValidationError``, a subclass, for a body of the wrong shape; text that is not
    UTF-8 is a ``DecodeError`` too)."""
    try:
        return msgspec.msgpack.decode(data, type=kind) if msgpack else msgspec.json.decode(data, type=kind)
    except UnicodeDecodeError as exc:  # msgspec raises it as it is for a string of bad bytes
        raise msgspec.DecodeError(f"text that is not UTF-8 ({exc.reason} at byte {exc.start})") from None
