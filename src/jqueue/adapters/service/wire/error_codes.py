"""The native API's error codes, one table both ways: the service answers an exception with its
status and code (and the attributes that make it up), and ``RemoteQueue`` raises the same
exception again, so a call fails through ``jqueue serve`` as it fails on the queue itself.

The codes that answer no exception of the queue's (the service's own: ``NOT_BROKER``,
``UNAUTHORIZED``..., the queued API's, and a client's own when no answer came: status 0) are
here too, so that the server, the client and the command line name each code once.
"""

from __future__ import annotations

from dataclasses import dataclass

import msgspec

from jqueue.adapters.service.wire.bodies import ErrorBody
from jqueue.adapters.web.queue_names import BadQueueNameError, UnknownQueueError
from jqueue.domain import errors

Detail = str | int | None


@dataclass(frozen=True)
class ErrorCode:
    """A code and the status that answers it (0: a client's own, for a call with no answer); for
    a code that answers an exception, its class (``kind``) and the attributes it carries across
    (``fields``). ``raised``: whether a client raises the class itself again; a code about the
    service (its queues, its body, its shutdown) or of no class stays a ``ServiceError``."""

    code: str
    status: int
    kind: type[BaseException] | None = None
    fields: tuple[str, ...] = ()
    raised: bool = True

    def error(
        self, message: str, broker: str | None = None, *, status: int | None = None
    ) -> errors.ServiceError:
        """The ``ServiceError`` of this code (answered with ``status``, by default the code's)."""
        return errors.ServiceError(self.status if status is None else status, self.code, message, broker)


BAD_QUEUE_NAME = ErrorCode("bad_queue_name", 400, BadQueueNameError, raised=False)
QUEUE_NOT_FOUND = ErrorCode("queue_not_found", 404, UnknownQueueError, raised=False)
JOB_NOT_FOUND = ErrorCode("job_not_found", 404, errors.JobNotFoundError, ("job_id",))
LEASE_LOST = ErrorCode("lease_lost", 409, errors.LeaseLostError, ("job_id",))
CANCELLED = ErrorCode("cancelled", 409, errors.JobCancelledError, ("job_id", "reason"))
PAUSED = ErrorCode("paused", 409, errors.QueuePausedError, ("entrypoint",))
PAYLOAD_TOO_LARGE = ErrorCode(
    "payload_too_large", 413, errors.PayloadTooLargeError, ("size", "limit", "job_id")
)
CONFLICT = ErrorCode("conflict", 503, errors.CASConflictError)
NOT_OWNER = ErrorCode("not_owner", 503, errors.NotOwnerError, ("owner",), raised=False)
"""Another broker of the root took the queue over (the body names it, as ``broker`` its address
when known): a client sends the call again to it."""
CLOSING = ErrorCode("closing", 503, errors.QueueClosedError, raised=False)  # the service is stopping
STORAGE_UNAVAILABLE = ErrorCode("storage_unavailable", 503, errors.StorageError)
CORRUPT_STATE = ErrorCode("corrupt_state", 500, errors.CorruptStateError, ("location",))
BAD_BODY = ErrorCode("bad_body", 400, msgspec.DecodeError, raised=False)
INVALID_ARGUMENT = ErrorCode("invalid_argument", 400, ValueError)


NOT_BROKER = ErrorCode("not_broker", 503)
"""This process is not the broker of its root, or not the one the caller's root names (the body
names the broker to call instead, when known)."""
UNAUTHORIZED = ErrorCode("unauthorized", 401)
"""The request carries neither the service's token nor an API key that covers its queue."""
UNSUPPORTED_MEDIA_TYPE = ErrorCode("unsupported_media_type", 415)
"""A body in a media type the route does not read (JSON and MessagePack are read)."""
BODY_TOO_LARGE = ErrorCode("body_too_large", 413)
"""A body larger than the service's ``max_body_bytes``."""
NOT_FOUND = ErrorCode("not_found", 404)
"""No such route (a service older than it), or a queued resource that does not exist."""
METHOD_NOT_ALLOWED = ErrorCode("method_not_allowed", 405)
"""A route asked with a method it does not take."""
BAD_REQUEST = ErrorCode("bad_request", 400)
"""Another request the routing refused."""
CLIENT_CLOSED_REQUEST = ErrorCode("client_closed_request", 499)
"""Counted for a request whose client hung up before it sent its whole body (nginx's "client
closed request"): no error of the service, and no answer reaches the client."""
INTERNAL = ErrorCode("internal", 500)
"""An error of the service itself (its message names the exception)."""
QUEUE_EXISTS = ErrorCode("queue_exists", 409)
"""The queued API: creating a queue that exists."""
MESSAGE_NOT_FOUND = ErrorCode("message_not_found", 404)
"""The queued API: a message that no job of the queue is (or a poll tag that no lease begins with)."""
SUSPENDED = ErrorCode("suspended", 503)
"""The queued API: the endpoint is suspended for the queue."""
THROTTLED = ErrorCode("throttled", 429)
"""The queued API: the queue's poll throttle refused the poll."""
UNSUPPORTED = ErrorCode("unsupported", 400)
"""The queued API: an option this service does not offer."""
UNREACHABLE = ErrorCode("unreachable", 0)
"""No connection to the service: nothing was sent."""
NO_ANSWER = ErrorCode("no_answer", 0)
"""Sent, and no answer came: the call may have landed."""
NO_BROKER = ErrorCode("no_broker", 0)
"""No broker is registered for the root."""
BAD_ANSWER = ErrorCode("bad_answer", 0)
"""An answer that is not a ``jqueue serve``'s (raised with the status it came with)."""


def _declared(raised_by_calls: bool) -> tuple[ErrorCode, ...]:
    """The codes declared above, in their order: those of an exception a call raises, or the others."""
    codes = (value for value in globals().values() if isinstance(value, ErrorCode))
    return tuple(code for code in codes if (code.kind is not None) is raised_by_calls)


ERROR_CODES = _declared(raised_by_calls=True)
"""Each error a call can raise, by the first class that matches (their order above)."""
SERVICE_CODES = _declared(raised_by_calls=False)
"""The codes of no exception of the queue's."""

_BY_CODE = {entry.code: entry for entry in (*ERROR_CODES, *SERVICE_CODES)}
if len(_BY_CODE) != len(ERROR_CODES) + len(SERVICE_CODES):  # an alias, or a code string used twice
    raise RuntimeError("two error codes share a name or a code")


def code_of(exc: BaseException) -> ErrorCode | None:
    """The entry of ``exc``: the first whose class it is an instance of (None if none is)."""
    return next((e for e in ERROR_CODES if e.kind is not None and isinstance(exc, e.kind)), None)


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
    kind = None if entry is None or not entry.raised else entry.kind
    if entry is None or kind is None or not issubclass(kind, Exception):
        return errors.ServiceError(status, body.code, body.message, body.broker)
    exc = kind.__new__(kind)
    Exception.__init__(exc, body.message)
    for name in entry.fields:
        setattr(exc, name, (body.details or {}).get(name))
    if isinstance(exc, errors.StorageError):
        exc.cause = errors.ServiceError(status, body.code, body.message)
    return exc
