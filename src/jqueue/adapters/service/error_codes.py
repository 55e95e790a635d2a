"""The native API's error codes, one table both ways: the service answers an exception with its
status and code (and the attributes that make it up), and ``RemoteQueue`` raises the same
exception again, so a call fails through ``jqueue serve`` as it fails on the queue itself."""

from __future__ import annotations

from dataclasses import dataclass

import msgspec

from jqueue.adapters.service.wire import ErrorBody
from jqueue.adapters.web.queue_names import BadQueueNameError, UnknownQueueError
from jqueue.domain import errors

Detail = str | int | None


@dataclass(frozen=True)
class ErrorCode:
    """An exception class, the status and code that answer it, and the attributes it carries
    across (``fields``). ``raised``: whether a client raises the class itself again; a code
    about the service (its queues, its body, its shutdown) stays a ``ServiceError``."""

    kind: type[BaseException]
    status: int
    code: str
    fields: tuple[str, ...] = ()
    raised: bool = True


ERROR_CODES = (
    ErrorCode(BadQueueNameError, 400, "bad_queue_name", raised=False),
    ErrorCode(UnknownQueueError, 404, "queue_not_found", raised=False),
    ErrorCode(errors.JobNotFoundError, 404, "job_not_found", ("job_id",)),
    ErrorCode(errors.LeaseLostError, 409, "lease_lost", ("job_id",)),
    ErrorCode(errors.JobCancelledError, 409, "cancelled", ("job_id", "reason")),
    ErrorCode(errors.QueuePausedError, 409, "paused", ("entrypoint",)),
    ErrorCode(errors.PayloadTooLargeError, 413, "payload_too_large", ("size", "limit", "job_id")),
    ErrorCode(errors.CASConflictError, 503, "conflict"),
    ErrorCode(errors.QueueClosedError, 503, "closing", raised=False),  # the service is stopping
    ErrorCode(errors.StorageError, 503, "storage_unavailable"),
    ErrorCode(errors.CorruptStateError, 500, "corrupt_state", ("location",)),
    ErrorCode(msgspec.DecodeError, 400, "bad_body", raised=False),
    ErrorCode(ValueError, 400, "invalid_argument"),
)
"""Each error a call can raise, by the first class that matches."""

_BY_CODE = {entry.code: entry for entry in ERROR_CODES}


def code_of(exc: BaseException) -> ErrorCode | None:
    """The entry of ``exc``: the first whose class it is an instance of (None if none is)."""
    return next((entry for entry in ERROR_CODES if isinstance(exc, entry.kind)), None)


def body_of(exc: BaseException, entry: ErrorCode) -> ErrorBody:
    """The body that answers ``exc`` (its message, and its ``fields`` as ``details``)."""
    details = {name: getattr(exc, name, None) for name in entry.fields}
    return ErrorBody(entry.code, str(exc) or type(exc).__name__, details=details or None)


def status_of(exc: BaseException) -> int | None:
    """The status a service answers ``exc`` with, or answered it with (None if it answers none)."""
    if isinstance(exc, errors.ServiceError):
        return exc.status
    entry = code_of(exc)
    return None if entry is None else entry.status


def raised(body: ErrorBody, status: int | None = None) -> Exception:
    """The exception a client raises for an error ``body`` (answered with ``status``, by default
    its code's): the class of its code, with the same message and attributes, or a
    ``ServiceError``."""
    entry = _BY_CODE.get(body.code)
    if status is None:
        status = 500 if entry is None else entry.status
    if entry is None or not entry.raised or not issubclass(entry.kind, Exception):
        return errors.ServiceError(status, body.code, body.message, body.broker)
    exc = entry.kind.__new__(entry.kind)
    Exception.__init__(exc, body.message)
    for name in entry.fields:
        setattr(exc, name, (body.details or {}).get(name))
    if isinstance(exc, errors.StorageError):
        exc.cause = errors.ServiceError(status, body.code, body.message)
    return exc
