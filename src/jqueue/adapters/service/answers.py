"""How ``jqueue serve`` reports a failed call: a status and an ``ErrorBody`` with a stable code."""

from __future__ import annotations

import logging

import msgspec
from starlette.requests import ClientDisconnect
from starlette.responses import Response

from jqueue.adapters.service.host import BadQueueNameError, UnknownQueueError
from jqueue.adapters.service.wire import ErrorBody, encode
from jqueue.domain.errors import (
    CASConflictError,
    CorruptStateError,
    JobCancelledError,
    JobNotFoundError,
    LeaseLostError,
    PayloadTooLargeError,
    QueueClosedError,
    QueuePausedError,
    StorageError,
)

logger = logging.getLogger(__name__)

CLIENT_CLOSED = 499
"""The status counted for a request whose client hung up before it sent its whole body (nginx's
"client closed request"): no error of the service, and no answer reaches the client."""

_ERRORS: list[tuple[type[BaseException], int, str]] = [
    (ClientDisconnect, CLIENT_CLOSED, "client_closed_request"),
    (BadQueueNameError, 400, "bad_queue_name"),
    (UnknownQueueError, 404, "queue_not_found"),
    (JobNotFoundError, 404, "job_not_found"),
    (LeaseLostError, 409, "lease_lost"),
    (JobCancelledError, 409, "cancelled"),
    (QueuePausedError, 409, "paused"),
    (PayloadTooLargeError, 413, "payload_too_large"),
    (CASConflictError, 503, "conflict"),
    (QueueClosedError, 503, "closing"),
    (StorageError, 503, "storage_unavailable"),
    (CorruptStateError, 500, "corrupt_state"),
    (msgspec.DecodeError, 400, "bad_body"),
    (ValueError, 400, "invalid_argument"),
]
"""Each error a call can raise, by the first class that matches: its status and code."""


class HTTPError(Exception):
    """An answer that is not 2xx, decided before any queue call."""

    def __init__(self, status: int, code: str, message: str, broker: str | None = None) -> None:
        super().__init__(message)
        self.status, self.code, self.broker = status, code, broker


def error_of(exc: BaseException) -> tuple[int, ErrorBody]:
    """Return the status and body that report ``exc``."""
    if isinstance(exc, HTTPError):
        return exc.status, ErrorBody(exc.code, str(exc), exc.broker)
    for kind, status, code in _ERRORS:
        if isinstance(exc, kind):
            text = str(exc) or type(exc).__name__
            if isinstance(exc, UnknownQueueError):
                text = f"no queue named {exc}"
            return status, ErrorBody(code, text)
    logger.exception("an unexpected error answered with 500", exc_info=exc)
    return 500, ErrorBody("internal", f"{type(exc).__name__}: {exc}")


def answer(body: object, msgpack: bool, status: int = 200) -> Response:
    """Return the response of ``body`` in MessagePack or JSON."""
    media = "application/msgpack" if msgpack else "application/json"
    return Response(encode(body, msgpack), status_code=status, media_type=media)
