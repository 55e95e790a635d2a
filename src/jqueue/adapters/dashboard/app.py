"""The ASGI application of ``jqueue dashboard``: the dashboard of one queue, opened directly on
its storage (no broker)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import PurePosixPath
from urllib.parse import urlsplit

from starlette.applications import Starlette
from starlette.middleware import Middleware

from jqueue.adapters.dashboard.pages import Dashboard
from jqueue.adapters.dashboard.source import SingleQueue
from jqueue.adapters.web.allowed_hosts import AllowedHosts, HostCheck
from jqueue.core.broker import BrokerQueue
from jqueue.ports.storage import ObjectStoragePort


def queue_name(url: str) -> str:
    """What the dashboard calls the queue at ``url``: its file name without ``.json``."""
    name = PurePosixPath(urlsplit(url).path).name
    return name.removesuffix(".json") or "queue"


def create_dashboard_app(
    storage: ObjectStoragePort,
    name: str,
    token: str | None,
    *,
    listen: str = "127.0.0.1",
    allowed_hosts: Sequence[str] = (),
) -> Starlette:
    """Return the dashboard of the queue on ``storage`` (opened when the application starts),
    answering requests whose ``Host`` is ``listen`` (the host it listens on), a name of
    ``allowed_hosts``, or a loopback name when it listens there (``AllowedHosts.of``)."""
    allowed = AllowedHosts.of(listen, None, allowed_hosts, token=token)
    queue = BrokerQueue(storage)
    dashboard = Dashboard(SingleQueue(name, queue), token)

    @asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        async with queue:
            yield

    return Starlette(
        routes=dashboard.routes(), lifespan=lifespan, middleware=[Middleware(HostCheck, allowed=allowed)]
    )
