"""The ASGI application of ``jqueue dashboard``: the dashboard of one queue (a sharded one
whole), opened directly on its storage (no broker)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from pathlib import PurePosixPath
from urllib.parse import urlsplit

from starlette.applications import Starlette
from starlette.middleware import Middleware

from jqueue.adapters.dashboard.pages import Dashboard
from jqueue.adapters.dashboard.source import SingleQueue
from jqueue.adapters.web.allowed_hosts import AllowedHosts, HostCheck
from jqueue.core.broker import BrokerQueue
from jqueue.core.sharded import ShardedQueue
from jqueue.ports.storage import ObjectStoragePort


def queue_name(url: str) -> str:
    """What the dashboard calls the queue at ``url``: its file name without ``.json``."""
    name = PurePosixPath(urlsplit(url).path).name
    return name.removesuffix(".json") or "queue"


def create_dashboard_app(
    shard_storage: Callable[[int], ObjectStoragePort],
    name: str,
    token: str | None,
    *,
    listen: str = "127.0.0.1",
    allowed_hosts: Sequence[str] = (),
) -> Starlette:
    """Return the dashboard of the queue whose shard ``k`` is on ``shard_storage(k)`` (opened
    when the application starts, its shards added up if it has several), answering requests
    whose ``Host`` is ``listen`` (the host it listens on), a name of ``allowed_hosts``, or a
    loopback name when it listens there (``AllowedHosts.of``)."""
    allowed = AllowedHosts.of(listen, None, allowed_hosts, token=token)
    queue = ShardedQueue(lambda k: BrokerQueue(shard_storage(k)))
    dashboard = Dashboard(SingleQueue(name, queue), token)

    @asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        async with queue:
            yield

    return Starlette(
        routes=dashboard.routes(), lifespan=lifespan, middleware=[Middleware(HostCheck, allowed=allowed)]
    )
