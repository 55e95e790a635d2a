"""The ASGI application of ``jqueue serve``: the native HTTP API (``server``), the queued-compatible
API (``queued``), the OpenAPI document of both and the dashboard, over the queues of one
storage root; what puts the server's parts together."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from datetime import timedelta

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from jqueue.adapters.dashboard.pages import Dashboard
from jqueue.adapters.service.openapi import openapi_document
from jqueue.adapters.service.queued.routes import QueuedRoutes
from jqueue.adapters.service.server.endpoints import Service, answer
from jqueue.adapters.service.server.host import QueueHost
from jqueue.adapters.service.server.members import Members
from jqueue.adapters.service.server.operator_routes import OperatorRoutes
from jqueue.adapters.service.server.queue_routes import QueueRoutes
from jqueue.adapters.service.server.served import ServedQueues
from jqueue.adapters.service.server.sharing import SharedRoot
from jqueue.adapters.service.server.tenure import DEFAULT_RENEW_EVERY, DEFAULT_STALE_AFTER, BrokerTenure
from jqueue.adapters.service.wire.bodies import DEFAULT_MAX_BODY_BYTES, ErrorBody, ErrorResponse
from jqueue.adapters.service.wire.error_codes import BAD_REQUEST, METHOD_NOT_ALLOWED, NOT_FOUND
from jqueue.adapters.service.wire.root import record_storage
from jqueue.adapters.web.allowed_hosts import AllowedHosts, HostCheck
from jqueue.adapters.web.media import wants_msgpack
from jqueue.core.loop.store import StorageUse
from jqueue.version import __version__

ROUTING_CODES = {code.status: code for code in (NOT_FOUND, METHOD_NOT_ALLOWED)}
"""The codes of a request no route took, by the status Starlette refused it with (any other:
``BAD_REQUEST``)."""


def _lifespan(
    tenure: BrokerTenure, host: QueueHost, shared: SharedRoot | None
) -> Callable[[Starlette], AbstractAsyncContextManager[None]]:
    """The application's lifespan: it keeps the broker record while it serves (and, one of many
    brokers, its membership and its share of the queues), and closes the queues and releases
    the record when it stops."""

    @asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        # one client for the looks at the broker record and at the catalog, not one a look
        async with StorageUse(tenure.storage), StorageUse(host.catalog.storage):
            with contextlib.suppress(TimeoutError):  # a first look before the first request
                await asyncio.wait_for(tenure.look(), tenure.stale_after)
            tasks = [asyncio.create_task(tenure.run(), name="jqueue-broker-tenure")]
            if shared is not None:
                tasks.append(asyncio.create_task(shared.run(), name="jqueue-broker-members"))
                with contextlib.suppress(TimeoutError):  # joined before the first request, mostly
                    await asyncio.wait_for(shared.looked.wait(), tenure.stale_after)
            try:
                yield
            finally:
                for task in tasks:
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await task
                await host.close()
                if shared is not None:
                    await shared.close()
                await tenure.release()

    return lifespan


async def _not_routed(request: Request, exc: Exception) -> Response:
    """The answer to a request no route takes (an unknown path or method)."""
    status = exc.status_code if isinstance(exc, HTTPException) else 500
    code = ROUTING_CODES.get(status, BAD_REQUEST).code
    body = ErrorResponse(ErrorBody(code, f"{request.method} {request.scope['path']}: {exc}"))
    return answer(body, wants_msgpack(request.headers), status)


async def _openapi(request: Request) -> Response:
    """``GET /openapi.json``."""
    return answer(openapi_document(__version__), False)


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
    member: bool = True,
) -> Starlette:
    """Return the ASGI application that serves every queue under ``root`` while it holds the
    root's broker record (``address`` is the URL it advertises there).

    It answers only requests whose ``Host`` is ``listen`` (the host it listens on; default:
    the host of ``address``), the host of ``address``, a name of ``allowed_hosts``, or a
    loopback name when it listens there (see ``allowed_hosts.AllowedHosts.of``).

    With ``member``, it is one of the root's many brokers: it serves the queues placed on it
    and forwards the calls of the others to their members (``SharedRoot``).
    """
    allowed = AllowedHosts.of(listen, address, allowed_hosts, token=token)
    host = QueueHost(root)
    tenure = BrokerTenure(
        record_storage(host.root), address, renew_every=renew_every, stale_after=stale_after, member=member
    )
    shared = None
    if member:
        members = Members(
            host.root,
            tenure.owner,
            address,
            renew_every=renew_every.total_seconds(),
            stale_after=stale_after.total_seconds(),
        )
        shared = SharedRoot(host, members)
    service = Service(host, tenure, token, max_body_bytes, shared)
    dashboard = Dashboard(ServedQueues(service), token)
    return Starlette(
        routes=[
            Route("/openapi.json", _openapi, methods=["GET"]),
            *service.routes(),
            *QueueRoutes(service.endpoint, host, service.metrics, max_body_bytes).routes(),
            *OperatorRoutes(service.endpoint, max_body_bytes).routes(),
            *QueuedRoutes(service).routes(),
            *dashboard.routes(),
        ],
        lifespan=_lifespan(tenure, host, shared),
        exception_handlers={HTTPException: _not_routed},
        middleware=[Middleware(HostCheck, allowed=allowed)],
    )
