"""``Service``: what every route of ``jqueue serve``'s native API goes through.

Every route answers only after the commit it caused is durable (the queues are
``BrokerQueue``: a call returns once its group commit has landed). Errors are
``ErrorResponse`` bodies with a stable code (``error_codes``); a batch of acks, nacks,
heartbeats or releases answers per job. The service notes which workers call each queue
(``Sightings``), for the dashboard.
"""

from __future__ import annotations

import asyncio
import functools
import hmac
import logging
import os
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

import msgspec
from prometheus_client import CONTENT_TYPE_LATEST
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import Route

from jqueue.adapters.dashboard.source import FORGET_AFTER, Sighting
from jqueue.adapters.service.server.host import QueueHost
from jqueue.adapters.service.server.metrics import ServiceMetrics
from jqueue.adapters.service.server.sharing import SharedRoot, UnforwardedError
from jqueue.adapters.service.server.tenure import BrokerTenure
from jqueue.adapters.service.wire.bodies import (
    BROKER_HEADER,
    CLIENT_HEADER,
    CREATED_QUEUE_HEADER,
    DEFAULT_MAX_BODY_BYTES,
    MAX_WORKER_HEADER,
    WORKER_HEADER,
    ErrorBody,
    ErrorResponse,
    decode,
    encode,
)
from jqueue.adapters.service.wire.error_codes import (
    BODY_TOO_LARGE,
    CLIENT_CLOSED_REQUEST,
    INTERNAL,
    NOT_BROKER,
    NOT_OWNER,
    UNAUTHORIZED,
    UNSUPPORTED_MEDIA_TYPE,
    ErrorCode,
    body_of,
    code_of,
)
from jqueue.adapters.service.wire.operator_calls import QueueNamesResponse
from jqueue.adapters.web.media import JSON, is_msgpack, wants_msgpack
from jqueue.adapters.web.queue_names import UnknownQueueError, queue_of
from jqueue.core.broker import BrokerQueue
from jqueue.domain.errors import NotOwnerError, QueueClosedError, StorageError
from jqueue.ports.queue import WorkerReport
from jqueue.version import __version__

logger = logging.getLogger(__name__)

T = TypeVar("T")
QueueCall = Callable[[BrokerQueue, Request], Awaitable[Any]]
"""A call on a served queue: its answer (a body) for a request."""
AbsentCall = Callable[[Request], Awaitable[Any]]
"""What a call answers for a queue that does not exist."""
Endpoint = Callable[[Request], Awaitable[Response]]


class HTTPError(Exception):
    """An answer that is not 2xx, decided before any queue call: its code, and for ``NOT_BROKER``
    the broker to call instead (when known)."""

    def __init__(self, code: ErrorCode, message: str, broker: str | None = None) -> None:
        super().__init__(message)
        self.status, self.code, self.broker = code.status, code.code, broker


def error_of(exc: BaseException) -> tuple[int, ErrorBody]:
    """Return the status and body that report ``exc`` (see ``error_codes.ERROR_CODES``)."""
    if isinstance(exc, HTTPError):
        return exc.status, ErrorBody(exc.code, str(exc), exc.broker)
    if isinstance(exc, ClientDisconnect):
        closed = CLIENT_CLOSED_REQUEST
        return closed.status, ErrorBody(closed.code, "the client hung up mid-body")
    entry = code_of(exc)
    if entry is not None:
        body = body_of(exc, entry)
        if isinstance(exc, UnknownQueueError):
            body.message = f"no queue named {exc}"
        return entry.status, body
    logger.exception("an unexpected error answered with 500", exc_info=exc)
    return INTERNAL.status, ErrorBody(INTERNAL.code, f"{type(exc).__name__}: {exc}")


def answer(body: object, msgpack: bool, status: int = 200) -> Response:
    """Return the response of ``body`` in MessagePack or JSON."""
    media = "application/msgpack" if msgpack else "application/json"
    return Response(encode(body, msgpack), status_code=status, media_type=media)


def verb_of(request: Request) -> str:
    """The last part of a request's path: the verb of a queue's route (read from the ASGI scope:
    ``request.url`` parses the whole URL)."""
    return str(request.scope["path"]).rpartition("/")[2]


async def read_body(request: Request, kind: type[T], max_body_bytes: int) -> T:
    """Return the request's body decoded as ``kind`` (MessagePack or JSON by its ``Content-Type``);
    refuse a body over ``max_body_bytes`` (413) or of another type (415). A client that hangs
    up mid-body raises starlette's ``ClientDisconnect``, which ``error_of`` answers with
    ``CLIENT_CLOSED_REQUEST`` (499) and logs as no error."""
    content_type = request.headers.get("content-type")
    msgpack = is_msgpack(content_type)
    if not msgpack and content_type is not None and not content_type.lower().startswith(JSON):
        wanted = "send application/json or application/msgpack"
        raise HTTPError(UNSUPPORTED_MEDIA_TYPE, f"{wanted}, not {content_type}")
    return decode(await raw_body(request, max_body_bytes), kind, msgpack)


async def raw_body(request: Request, max_body_bytes: int) -> bytes:
    """Return the request's body; refuse one over ``max_body_bytes`` (413)."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > max_body_bytes:
        raise _too_large(max_body_bytes)
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > max_body_bytes:
            raise _too_large(max_body_bytes)
        chunks.append(chunk)
    return b"".join(chunks)


def _too_large(limit: int) -> HTTPError:
    return HTTPError(BODY_TOO_LARGE, f"the request body is larger than {limit} bytes")


class MakeEndpoint(Protocol):
    """``Service.endpoint``: what makes a queue's route of a call on the queue."""

    def __call__(
        self, call: QueueCall, *, create: bool = False, absent: AbsentCall | None = None
    ) -> Endpoint:
        """The endpoint of ``call`` (see ``Service.endpoint``)."""
        ...


class Sightings:
    """When each worker last called each queue, and its last report (for the dashboard)."""

    def __init__(self) -> None:
        self._seen: dict[str, dict[str, Sighting]] = {}

    def saw(self, queue: str, route: str, request: Request) -> None:
        """Note a call of ``route`` on ``queue`` (a shard's counts as its queue's), if a worker
        made it: a claim, or a call that carries a ``WORKER_HEADER``. The client is named by
        ``CLIENT_HEADER``, or by its address."""
        header = request.headers.get(WORKER_HEADER)
        if header is None and route != "dequeue":
            return
        client = request.headers.get(CLIENT_HEADER) or (request.client.host if request.client else "?")
        queue = queue_of(queue)
        seen = self._seen.setdefault(queue, {})
        before = seen.pop(client, None)  # re-inserted last: the dict stays ordered by last sighting
        report = _report(header) if header is not None else before.report if before else None
        if report is not None and report.stopped:
            return  # its last word: it is gone
        seen[client] = Sighting(queue, client, time.time(), report)
        if len(seen) > MOST_CLIENTS:
            del seen[next(iter(seen))]

    def of(self, queue: str) -> list[Sighting]:
        """Return the workers seen calling ``queue`` within ``FORGET_AFTER`` seconds, the latest first."""
        seen = self._seen.get(queue, {})
        cutoff = time.time() - FORGET_AFTER
        while seen and next(iter(seen.values())).seen < cutoff:
            del seen[next(iter(seen))]
        return list(reversed(seen.values()))

    def everyone(self) -> list[Sighting]:
        """Return the workers seen calling any queue (one that does not exist yet included)."""
        return [seen for queue in sorted(self._seen) for seen in self.of(queue)]


@dataclass(eq=False)
class Service:
    """The gate of every route of the native API over the queues of ``host``: authorization, the
    broker check, the endpoint wrapper and its metrics; and the service's own routes.

    Parameters
    ----------
    host : QueueHost
        The queues.
    tenure : BrokerTenure
        The root's broker record: queue calls are served only while this process holds it.
    token : str or None
        When set, every request but ``/healthz`` needs ``Authorization: Bearer TOKEN``.
    max_body_bytes : int
        Larger request bodies are refused with 413.
    """

    host: QueueHost
    tenure: BrokerTenure
    token: str | None
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    shared: SharedRoot | None = None
    """Set when this process is one of many brokers of its root (``jqueue serve --member``)."""
    metrics: ServiceMetrics = field(default_factory=ServiceMetrics, init=False)
    sightings: Sightings = field(default_factory=Sightings, init=False)

    def routes(self) -> list[Route]:
        """The service's own routes, for a Starlette application (``QueueRoutes`` has the queues',
        ``OperatorRoutes`` the operator's)."""
        return [
            Route("/healthz", self._healthz, methods=["GET"]),
            Route("/metrics", self._metrics, methods=["GET"]),
            Route("/v1/queues", self._queue_names, methods=["GET"]),
        ]

    async def _healthz(self, request: Request) -> Response:
        tenure = self.tenure
        health: dict[str, object] = {
            "ok": True,
            "role": tenure.role.value,
            "serving": tenure.serving() if self.shared is None else self.shared.joined,
            "owner": tenure.owner,
            "epoch": tenure.epoch,
            "broker": tenure.record.address if tenure.record is not None else None,
            "version": __version__,
            "pid": os.getpid(),
        }
        if self.shared is not None:
            health["members"] = self.shared.members.addresses
            health["queues"] = self.host.owned()
            health["trouble"] = self.shared.trouble
        return answer(health, wants_msgpack(request.headers))

    async def check_serving(self, request: Request | None = None) -> None:
        """Refuse (``NOT_BROKER``) a request that names another broker, or any while this process
        is not its root's broker; while it is, read the catalog afresh for a new epoch."""
        named = None if request is None else request.headers.get(BROKER_HEADER)
        if named is not None and named != self.tenure.owner:
            raise HTTPError(NOT_BROKER, "this process is not the broker the caller's root names")
        if self.shared is not None:  # every member serves: its own queues, and the others' by forwarding
            if not self.shared.joined:
                why = f": {self.shared.trouble}" if self.shared.trouble else ""
                raise HTTPError(NOT_OWNER, f"this broker has not joined the brokers of its root yet{why}")
            return
        if self.tenure.serving():
            await self.host.serve_epoch(self.tenure.epoch)
        else:
            record = self.tenure.record
            broker = record.address if record is not None and record.address != self.tenure.address else None
            where = f"; the broker is {broker}" if broker else ""
            raise HTTPError(NOT_BROKER, f"this process is not the broker of its root{where}", broker)

    async def _metrics(self, request: Request) -> Response:
        try:
            await self.authorize(request)
        except HTTPError as exc:
            status, body = error_of(exc)
            return answer(ErrorResponse(body), False, status)
        text = await self.metrics.render(self.host.open_queues(), self.tenure)
        return Response(text, media_type=CONTENT_TYPE_LATEST)

    async def _queue_names(self, request: Request) -> Response:
        try:
            await self.authorize(request)
            await self.check_serving(request)
            body: object = QueueNamesResponse(self.host.found())
            status = 200
        except Exception as exc:
            status, error = error_of(exc)
            body = ErrorResponse(error)
        return answer(body, wants_msgpack(request.headers), status)

    def endpoint(
        self, call: QueueCall, *, create: bool = False, absent: AbsentCall | None = None
    ) -> Endpoint:
        """The endpoint of a queue's route: authorized, served only by the broker, answered with
        what ``call`` answers on the queue (``create``: the call may create it; ``absent``: what
        to answer while it does not exist), counted in the metrics."""

        async def endpoint(request: Request) -> Response:
            started = time.perf_counter()
            msgpack = wants_msgpack(request.headers)
            name, route = request.path_params["queue"], verb_of(request)
            given_up = self.host.given_up(name)
            try:
                await self.authorize(request, name)
                await self.check_serving(request)
                if (forwarded := await self.forwarded(request, name)) is not None:
                    return forwarded
                self.sightings.saw(name, route, request)
                if absent is not None and not await self.host.exists(name):
                    response, status = answer(await absent(request), msgpack), 200
                else:
                    created = create and not await self.host.exists(name)
                    queue = await self.served(name, create=create)
                    response, status = answer(await call(queue, request), msgpack), 200
                    if created:  # the client says that it made a queue (a mistyped name, maybe)
                        response.headers[CREATED_QUEUE_HEADER] = name
            except (Exception, asyncio.CancelledError) as raised:
                exc = typed_failure(name, raised, handed_over=self.host.given_up(name) != given_up)
                await self.failed(name, exc)
                status, body = error_of(exc)
                response = answer(ErrorResponse(body), msgpack, status)
            label = name if self.host.is_open(name) else ""  # no series per unknown name sent
            self.metrics.requests.labels(label, route, str(status)).inc()
            self.metrics.request_seconds.labels(route).observe(time.perf_counter() - started)
            return response

        return endpoint

    async def served(self, name: str, *, create: bool = False) -> BrokerQueue:
        """The open queue ``name`` a call is served on (as ``QueueHost.get``), taken over by this
        process first when it is one of many brokers of its root."""
        if self.shared is None:
            return await self.host.get(name, create=create)
        return await self.host.own(name, self.shared.members.owner, create=create)

    async def forwarded(self, request: Request, name: str) -> Response | None:
        """The answer of the broker that serves queue ``name``, when the root has many and it
        is another (None: this process serves the call)."""
        if self.shared is None or (owner := self.shared.owner_address(name)) is None:
            return None
        try:
            return await self.shared.forward(request, owner, await raw_body(request, self.max_body_bytes))
        except UnforwardedError as exc:
            raise HTTPError(NOT_OWNER, str(exc), exc.address) from exc

    async def failed(self, name: str, exc: Exception) -> None:
        """A call on queue ``name`` failed with ``exc``: one that found the queue taken over by
        another member gives it up here, so that the next look takes it again if it is placed
        on this member (the members saw each other differently for a moment)."""
        if self.shared is not None and isinstance(exc, NotOwnerError) and self.host.owns(name):
            await self.host.give_up(name)

    async def authorize(self, request: Request, queue: str | None = None) -> None:
        """Let the request through if it carries the token, or an API key of the catalog whose
        prefix starts ``queue`` (``Authorization: Bearer KEY``, or the bare key as queued's
        server takes it); every request passes when the service has no token."""
        if self.token is None:
            return
        given = request.headers.get("authorization", "")
        key = given.removeprefix("Bearer ")
        if hmac.compare_digest(key.encode(), self.token.encode()):
            return
        if queue is not None and self.tenure.serving():
            await self.host.serve_epoch(self.tenure.epoch)
            if self.host.catalog.record.key_opens(key, queue):
                return
        raise HTTPError(UNAUTHORIZED, "a valid 'Authorization: Bearer TOKEN' header is required")


def typed_failure(name: str, raised: Exception | asyncio.CancelledError, *, handed_over: bool) -> Exception:
    """The error a call on queue ``name`` that raised ``raised`` answers (``error_of``).

    A cancellation that is not the calling task's own (a storage call cut off under it) is a
    ``StorageError``, not a 500; a storage failure of a call whose queue this broker gave up
    while it ran (``handed_over``: its storage closed under it) is ``QueueClosedError``, which
    the client sends again to the new owner (``closing``). A cancellation of the calling task
    itself is raised again.
    """
    if isinstance(raised, asyncio.CancelledError):
        task = asyncio.current_task()
        if task is None or task.cancelling():
            raise raised
        raised = StorageError(f"a call on queue {name} was cut off", TimeoutError("cancelled under it"))
    if handed_over and isinstance(raised, StorageError):
        return QueueClosedError(f"queue {name} was handed to another broker during the call: {raised}")
    return raised


MOST_CLIENTS = 1_000
"""The most clients remembered per queue; the longest unseen go first."""


@functools.lru_cache(maxsize=MOST_CLIENTS)
def _report(header: str) -> WorkerReport | None:
    """The report a header carries (None if it cannot be read); a worker sends the same one
    for a second, with every call, so each is decoded once."""
    if len(header) > MAX_WORKER_HEADER:
        return None
    try:
        return msgspec.json.decode(header, type=WorkerReport)
    except msgspec.DecodeError:
        return None
