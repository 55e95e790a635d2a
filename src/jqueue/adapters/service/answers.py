"""How ``jqueue serve`` reports a failed call: a status and an ``ErrorBody`` with a stable code."""

from __future__ import annotations

import logging

from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response

from jqueue.adapters.service.error_codes import body_of, code_of
from jqueue.adapters.service.wire import ErrorBody, encode
from jqueue.adapters.web.queue_names import UnknownQueueError

logger = logging.getLogger(__name__)

CLIENT_CLOSED = 499
"""The status counted for a request whose client hung up before it sent its whole body (nginx's
"client closed request"): no error of the service, and no answer reaches the client."""


class HTTPError(Exception):
    """An answer that is not 2xx, decided before any queue call."""

    def __init__(self, status: int, code: str, message: str, broker: str | None = None) -> None:
        super().__init__(message)
        self.status, self.code, self.broker = status, code, broker


def error_of(exc: BaseException) -> tuple[int, ErrorBody]:
    """Return the status and body that report ``exc`` (see ``error_codes.ERROR_CODES``)."""
    if isinstance(exc, HTTPError):
        return exc.status, ErrorBody(exc.code, str(exc), exc.broker)
    if isinstance(exc, ClientDisconnect):
        return CLIENT_CLOSED, ErrorBody("client_closed_request", "the client hung up mid-body")
    entry = code_of(exc)
    if entry is not None:
        body = body_of(exc, entry)
        if isinstance(exc, UnknownQueueError):
            body.message = f"no queue named {exc}"
        return entry.status, body
    logger.exception("an unexpected error answered with 500", exc_info=exc)
    return 500, ErrorBody("internal", f"{type(exc).__name__}: {exc}")


def answer(body: object, msgpack: bool, status: int = 200) -> Response:
    """Return the response of ``body`` in MessagePack or JSON."""
    media = "application/msgpack" if msgpack else "application/json"
    return Response(encode(body, msgpack), status_code=status, media_type=media)


def verb_of(request: Request) -> str:
    """The last part of a request's path: the verb of a queue's route (read from the ASGI scope:
    ``request.url`` parses the whole URL)."""
    return str(request.scope["path"]).rpartition("/")[2]
