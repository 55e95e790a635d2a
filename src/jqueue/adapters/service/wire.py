"""The native HTTP API's bodies: msgspec types shared by ``jqueue serve`` and its client.

A body is JSON (payloads as base64, times as ISO 8601) or MessagePack (payloads as binary,
times as timestamps), chosen by ``Content-Type`` for requests and ``Accept`` for responses.
Decoding validates a whole body in one pass; an error answers with a stable ``code``.
"""

from __future__ import annotations

import os
import socket
from datetime import timedelta
from typing import TYPE_CHECKING, Annotated, Any

import msgspec

from jqueue.core.formats.wire import AwareDatetime, Fraction, Int64, wire_type
from jqueue.domain.models import Job, trusted_job
from jqueue.domain.schema import FIELDS
from jqueue.domain.spec import LONGEST_SPAN, MAX_ID_LENGTH, JobSpec
from jqueue.domain.values import INT64_MAX

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
MAX_WORKER_HEADER = 16_384
"""The longest ``WORKER_HEADER`` a broker reads; a longer one is ignored."""
TOKEN_VARIABLE = "JQUEUE_TOKEN"
"""The environment variable that gives the service's token where none is passed (``jqueue serve``,
``jqueue dashboard``, ``connect``)."""


def client_name() -> str:
    """Return this process's name for ``CLIENT_HEADER``: ``host:pid``."""
    return f"{socket.gethostname()}:{os.getpid()}"


LONGEST_SECONDS = int(LONGEST_SPAN.total_seconds())
"""``LONGEST_SPAN`` in seconds: the bound of every span the HTTP APIs take, as of ``JobSpec``'s."""
Seconds = Annotated[float, msgspec.Meta(ge=0, le=LONGEST_SECONDS)]
"""A delay: from 0 to ``LONGEST_SPAN``."""
PositiveSeconds = Annotated[float, msgspec.Meta(gt=0, le=LONGEST_SECONDS)]
"""A ttl or a visibility timeout: positive, at most ``LONGEST_SPAN`` (as ``checked_span``)."""
Attempts = Annotated[int, msgspec.Meta(ge=1, le=INT64_MAX)]
"""``max_attempts``: at least 1, and 64 bits (``checked_int64``)."""
JobId = Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_ID_LENGTH)]
"""A job id, as ``JobSpec`` takes it: 1 to ``MAX_ID_LENGTH`` characters."""
DEFAULT_MAX_BODY_BYTES = 64 << 20
"""Larger request bodies are refused (413) unless ``jqueue serve --max-body-bytes`` says more."""
MAX_BATCH = 10_000
"""The most jobs one dequeue or peek request asks for."""
BatchSize = Annotated[int, msgspec.Meta(ge=1, le=MAX_BATCH)]

_BY_PUBLIC = {f.public: f for f in FIELDS}
ApiJob: Any = msgspec.defstruct(
    "ApiJob",
    [(name, wire_type(_BY_PUBLIC[name], AwareDatetime)) for name in Job.model_fields],
    kw_only=True,
)
"""A job in a response: every attribute of ``Job``, by the same names."""

if TYPE_CHECKING:
    _ApiJobs = list[Any]
else:
    _ApiJobs = list[ApiJob]


class NewJob(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """One job to enqueue, with the options of ``JobSpec`` (spans in seconds). With an ``id``,
    a repeated request adds nothing twice (the client sets one for every job)."""

    entrypoint: str
    payload: bytes
    priority: Int64 = 0
    delay_seconds: Seconds | None = None
    not_before: AwareDatetime | None = None
    dedup_key: str | None = None
    max_attempts: Attempts | None = None
    ttl_seconds: PositiveSeconds | None = None
    id: JobId | None = None

    def spec(self) -> JobSpec:
        """Return the ``JobSpec`` of this job (raises ``ValueError`` for options that clash)."""
        return JobSpec(
            self.entrypoint,
            self.payload,
            self.priority,
            delay=_span(self.delay_seconds),
            not_before=self.not_before,
            dedup_key=self.dedup_key,
            max_attempts=self.max_attempts,
            ttl=_span(self.ttl_seconds),
            id=self.id,
        )


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


class ResultRequest(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """``POST /v1/queues/{queue}/result``: wait until job ``id`` is finished, at most
    ``wait_seconds`` (a long poll)."""

    id: JobId
    wait_seconds: Annotated[float, msgspec.Meta(ge=0, le=MAX_WAIT_SECONDS)] = 10.0


class ResultResponse(msgspec.Struct, omit_defaults=True):
    """How job ``id`` ended: ``outcome`` ``acked`` (with its handler's ``result``), ``dead``
    (with its ``error`` and ``reason``), ``cancelled``, or ``running`` if it has not finished
    within the wait."""

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

    jobs: _ApiJobs


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


class ItemResult(msgspec.Struct, omit_defaults=True):
    """The answer for one job of a batch: ``error`` is None when it succeeded; for ``cancel``,
    ``cancelled`` says whether the job left the queue at once (else its worker is to stop it)."""

    error: ErrorBody | None = None
    cancelled: bool = False


class ResultsResponse(msgspec.Struct):
    """One answer per job of a batch, in the order of the request."""

    results: list[ItemResult]


def _span(seconds: float | None) -> timedelta | None:
    return None if seconds is None else timedelta(seconds=seconds)


def api_job(job: Job) -> Any:
    """Return the wire form of a job."""
    return ApiJob(**job.__dict__)


def job_of(wire: Any) -> Job:
    """Return the ``Job`` of a decoded wire job (msgspec checked every field's type)."""
    return trusted_job(**{name: getattr(wire, name) for name in Job.model_fields})


_json_encoder = msgspec.json.Encoder()
_msgpack_encoder = msgspec.msgpack.Encoder()


def encode(body: Any, msgpack: bool) -> bytes:
    """Encode a body as MessagePack or JSON."""
    return _msgpack_encoder.encode(body) if msgpack else _json_encoder.encode(body)


def decode(data: bytes, kind: type[Any], msgpack: bool) -> Any:
    """Decode a body as ``kind`` from MessagePack or JSON (raises ``msgspec.DecodeError``, or
    ``msgspec.ValidationError``, a subclass, for a body of the wrong shape)."""
    return msgspec.msgpack.decode(data, type=kind) if msgpack else msgspec.json.decode(data, type=kind)
