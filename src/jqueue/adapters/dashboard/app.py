"""The ASGI application of ``jqueue dashboard``: the dashboard of one queue, opened directly on
its storage (no broker)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import PurePosixPath
from urllib.parse import urlsplit

from starlette.applications import Starlette

from jqueue.adapters.dashboard.pages import Dashboard
from jqueue.adapters.dashboard.source import SingleQueue
from jqueue.core.broker import BrokerQueue
from jqueue.ports.storage import ObjectStoragePort


def queue_name(url: str) -> str:
    """What the dashboard calls the queue at ``url``: its file name without ``.json``."""
    name = PurePosixPath(urlsplit(url).path).name
    return name.removesuffix(".json") or "queue"


def create_dashboard_app(storage: ObjectStoragePort, name: str, token: str | None) -> Starlette:
    """Return the dashboard of the queue on ``storage`` (opened when the application starts)."""
    queue = BrokerQueue(storage)
    dashboard = Dashboard(SingleQueue(name, queue), token)

    @asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        async with queue:
            yield

    return Starlette(routes=dashboard.routes(), lifespan=lifespan)
