"""The ASGI application of ``jqueue serve``: the native HTTP API over a ``QueueHost``.

Every route answers only after the commit it caused is durable (the queues are
``BrokerQueue``: a call returns once its group commit has landed). Errors are
``ErrorResponse`` bodies with a stable code; a batch of acks, nacks, heartbeats or
releases answers per job.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from datetime import timedelta
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from jqueue.adapters.dashboard.pages import Dashboard
from jqueue.adapters.service.answers import HTTPError, answer, error_of, verb_of
from jqueue.adapters.service.host import QueueHost, record_storage
from jqueue.adapters.service.metrics import ServiceMetrics
from jqueue.adapters.service.openapi import openapi_document
from jqueue.adapters.service.operator import OperatorRoutes
from jqueue.adapters.service.queue_routes import QueueRoutes
from jqueue.adapters.service.queued import QueuedRoutes
from jqueue.adapters.service.served import ServedQueues
from jqueue.adapters.service.sightings import Sightings
from jqueue.adapters.service.tenure import DEFAULT_RENEW_EVERY, DEFAULT_STALE_AFTER, BrokerTenure
from jqueue.adapters.service.wire import (
    BROKER_HEADER,
    CREATED_QUEUE_HEADER,
    DEFAULT_MAX_BODY_BYTES,
    ErrorBody,
    ErrorResponse,
    decode,
)
from jqueue.adapters.web.allowed_hosts import AllowedHosts, HostCheck
from jqueue.adapters.web.media import JSON, is_msgpack, wants_msgpack
from jqueue.core.broker import BrokerQueue
from jqueue.core.loop.store import StorageUse
from jqueue.version import __version__

logger = logging.getLogger(__name__)


class Service:
    """The routes of the native API over the queues of ``host``.

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

    def __init__(
        self,
        host: QueueHost,
        tenure: BrokerTenure,
        token: str | None,
        max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    ) -> None:
        self.host = host
        self.tenure = tenure
        self.token = token
        self.max_body_bytes = max_body_bytes
        self.metrics = ServiceMetrics()
        self.sightings = Sightings()

    def routes(self) -> list[Route]:
        """The service's own routes, for a Starlette application (``QueueRoutes`` has the queues')."""
        return [
            Route("/healthz", self._healthz, methods=["GET"]),
            Route("/metrics", self._metrics, methods=["GET"]),
            Route("/openapi.json", self._openapi, methods=["GET"]),
        ]

    async def _healthz(self, request: Request) -> Response:
        tenure = self.tenure
        health = {
            "ok": True,
            "role": tenure.role.value,
            "serving": tenure.serving(),
            "owner": tenure.owner,
            "epoch": tenure.epoch,
            "broker": tenure.record.address if tenure.record is not None else None,
            "version": __version__,
            "pid": os.getpid(),
        }
        return answer(health, wants_msgpack(request.headers))

    async def check_serving(self, request: Request | None = None) -> None:
        named = None if request is None else request.headers.get(BROKER_HEADER)
        if named is not None and named != self.tenure.owner:
            raise HTTPError(503, "not_broker", "this process is not the broker the caller's root names")
        if self.tenure.serving():
            await self.host.serve_epoch(self.tenure.epoch)
        else:
            record = self.tenure.record
            broker = record.address if record is not None and record.address != self.tenure.address else None
            where = f"; the broker is {broker}" if broker else ""
            raise HTTPError(503, "not_broker", f"this process is not the broker of its root{where}", broker)

    async def _openapi(self, request: Request) -> Response:
        return answer(openapi_document(__version__), False)

    async def _metrics(self, request: Request) -> Response:
        try:
            await self.authorize(request)
        except HTTPError as exc:
            status, body = error_of(exc)
            return answer(ErrorResponse(body), False, status)
        text = await self.metrics.render(self.host.open_queues(), self.tenure)
        return Response(text, media_type=CONTENT_TYPE_LATEST)

    def endpoint(
        self,
        call: Callable[[BrokerQueue, Request], Awaitable[Any]],
        *,
        create: bool = False,
        absent: Callable[[Request], Awaitable[Any]] | None = None,
    ) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            started = time.perf_counter()
            msgpack = wants_msgpack(request.headers)
            name, route = request.path_params["queue"], verb_of(request)
            try:
                await self.authorize(request, name)
                await self.check_serving(request)
                self.sightings.saw(name, route, request)
                if absent is not None and not await self.host.exists(name):
                    response, status = answer(await absent(request), msgpack), 200
                else:
                    created = create and not await self.host.exists(name)
                    queue = await self.host.get(name, create=create)
                    response, status = answer(await call(queue, request), msgpack), 200
                    if created:  # the client says that it made a queue (a mistyped name, maybe)
                        response.headers[CREATED_QUEUE_HEADER] = name
            except Exception as exc:
                status, body = error_of(exc)
                response = answer(ErrorResponse(body), msgpack, status)
            label = name if self.host.is_open(name) else ""  # no series per unknown name sent
            self.metrics.requests.labels(label, route, str(status)).inc()
            self.metrics.request_seconds.labels(route).observe(time.perf_counter() - started)
            return response

        return endpoint

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
        raise HTTPError(401, "unauthorized", "a valid 'Authorization: Bearer TOKEN' header is required")

    async def read_body(self, request: Request, kind: type[Any]) -> Any:
        """Return the request's body decoded as ``kind`` (MessagePack or JSON by its
        ``Content-Type``); refuse a body over ``max_body_bytes`` (413) or of another type (415).
        A client that hangs up mid-body raises starlette's ``ClientDisconnect``, which
        ``error_of`` answers with ``CLIENT_CLOSED`` (499) and logs as no error."""
        content_type = request.headers.get("content-type")
        msgpack = is_msgpack(content_type)
        if not msgpack and content_type is not None and not content_type.lower().startswith(JSON):
            wanted = "send application/json or application/msgpack"
            raise HTTPError(415, "unsupported_media_type", f"{wanted}, not {content_type}")
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_body_bytes:
            raise _too_large(self.max_body_bytes)
        chunks, size = [], 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > self.max_body_bytes:
                raise _too_large(self.max_body_bytes)
            chunks.append(chunk)
        return decode(b"".join(chunks), kind, msgpack)


def _too_large(limit: int) -> HTTPError:
    return HTTPError(413, "body_too_large", f"the request body is larger than {limit} bytes")


def create_app(
    root: str,
    *,
    address: str,
    token: str | None = None,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    renew_every: timedelta = DEFAULT_RENEW_EVERY,
    stale_after: timedelta = DEFAULT_STALE_AFTER,
    listen: str | None = None,
    allowed_hosts: Sequence[str] = (),
) -> Starlette:
    """Return the ASGI application that serves every queue under ``root`` while it holds the
    root's broker record (``address`` is the URL it advertises there).

    It answers only requests whose ``Host`` is ``listen`` (the host it listens on; default:
    the host of ``address``), the host of ``address``, a name of ``allowed_hosts``, or a
    loopback name when it listens there (see ``allowed_hosts.AllowedHosts.of``).
    """
    allowed = AllowedHosts.of(listen, address, allowed_hosts, token=token)
    host = QueueHost(root)
    tenure = BrokerTenure(
        record_storage(host.root), address, renew_every=renew_every, stale_after=stale_after
    )
    service = Service(host, tenure, token, max_body_bytes)

    @asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        async with StorageUse(tenure.storage):  # one client for the record's looks, not one each
            with contextlib.suppress(TimeoutError):  # a first look before the first request
                await asyncio.wait_for(tenure.look(), tenure.stale_after)
            keeping = asyncio.create_task(tenure.run(), name="jqueue-broker-tenure")
            try:
                yield
            finally:
                keeping.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await keeping
                await host.close()
                await tenure.release()

    async def not_routed(request: Request, exc: Exception) -> Response:
        status = exc.status_code if isinstance(exc, HTTPException) else 500
        code = {404: "not_found", 405: "method_not_allowed"}.get(status, "bad_request")
        body = ErrorResponse(ErrorBody(code, f"{request.method} {request.scope['path']}: {exc}"))
        return answer(body, wants_msgpack(request.headers), status)

    dashboard = Dashboard(ServedQueues(service), token)
    return Starlette(
        routes=service.routes()
        + QueueRoutes(service).routes()
        + OperatorRoutes(service).routes()
        + QueuedRoutes(service).routes()
        + dashboard.routes(),
        lifespan=lifespan,
        exception_handlers={HTTPException: not_routed},
        middleware=[Middleware(HostCheck, allowed=allowed)],
    )
