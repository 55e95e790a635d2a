"""``connect``: a queue through the broker of a root, or committed directly (``broker=``)."""

from __future__ import annotations

import os
from datetime import timedelta
from types import TracebackType
from typing import Any, Literal

from jqueue.adapters.service.client.caller import (
    DEFAULT_CALL_TIMEOUT,
    DEFAULT_FAILOVER_TIMEOUT,
    BrokerFinder,
    is_service_url,
)
from jqueue.adapters.service.client.remote_queue import RemoteQueue
from jqueue.adapters.service.wire.bodies import TOKEN_VARIABLE
from jqueue.adapters.service.wire.root import root_storage, shard_storage
from jqueue.adapters.web.queue_names import QUEUE_NAME, BadQueueNameError, shard_name
from jqueue.core.broker import BrokerQueue
from jqueue.core.sharded import ShardedQueue

Broker = Literal["auto", "require", "off"]


class connect:  # noqa: N801  (used as a function: ``async with connect(...) as queue``)
    """Open queue ``queue`` through the broker of ``target``: ``async with connect(target, "jobs")
    as queue``.

    ``target`` is a service (``http://host:port``) or the storage root the services share (a
    directory, ``file://``, ``s3://`` or ``gs://`` prefix), whose broker record names the one
    serving it. ``broker``: ``"require"`` (the default) always calls a broker, and fails
    with ``ServiceError`` when none takes a call within ``failover_timeout``; ``"off"``
    commits directly as a ``BrokerQueue`` on the root; ``"auto"`` calls the broker if the
    root has one when the queue is opened, and else commits directly. The queue yielded
    satisfies ``Queue`` and takes the calls of a ``BrokerQueue`` (a ``RemoteQueue``, or a
    ``BrokerQueue`` when committing directly). ``token`` (by default the ``JQUEUE_TOKEN``
    environment variable's), ``timeout`` (the longest a request waits for its answer),
    ``failover_timeout`` and ``requests_in_flight`` go to the ``RemoteQueue``.
    """

    def __init__(
        self,
        target: str,
        queue: str,
        *,
        token: str | None = None,
        broker: Broker = "require",
        timeout: timedelta = DEFAULT_CALL_TIMEOUT,
        failover_timeout: timedelta = DEFAULT_FAILOVER_TIMEOUT,
        requests_in_flight: int = 8,
    ) -> None:
        if broker not in ("auto", "require", "off"):
            raise ValueError(f"broker must be 'auto', 'require' or 'off', not {broker!r}")
        if broker != "require" and is_service_url(target):
            raise ValueError(f"broker={broker!r} needs the storage root, not a service URL")
        self.target, self.queue, self.broker = target, queue, broker
        self._options: dict[str, Any] = {
            "token": os.environ.get(TOKEN_VARIABLE) if token is None else token,
            "timeout": timeout,
            "failover_timeout": failover_timeout,
            "requests_in_flight": requests_in_flight,
        }
        self._opened: RemoteQueue | BrokerQueue | None = None

    async def __aenter__(self) -> RemoteQueue | BrokerQueue:
        direct = self.broker == "off"
        if self.broker == "auto":
            direct = await BrokerFinder(self.target).find() is None
        opened: RemoteQueue | BrokerQueue
        if direct:
            opened = BrokerQueue(root_storage(self.target, self.queue))
        else:
            opened = RemoteQueue(self.target, self.queue, **self._options)
        await opened.start()
        self._opened = opened
        return opened

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._opened is not None:
            opened, self._opened = self._opened, None
            await opened.stop()


def sharded(
    target: str, queue: str, shards: int | None = None, *, broker: Broker = "off", **options: Any
) -> ShardedQueue:
    """Queue ``queue`` of ``target`` as a ``ShardedQueue`` of ``shards`` logs: ``async with
    sharded(root, "jobs", 4) as queue``. More shards than the queue has grows it; None keeps
    its count (1 for a queue never sharded).

    ``broker``: ``"off"`` (the default) commits directly on the storage root ``target``, each
    shard a ``BrokerQueue`` taking ``options``; ``"require"`` calls the ``jqueue serve`` of
    ``target`` (a service URL, or a root its members serve), each shard a ``RemoteQueue``
    taking ``options``, so that the members of a root serve its shards apart.

    Raises
    ------
    BadQueueNameError
        For a name that is not a queue's (or is a shard's).
    """
    if broker not in ("require", "off"):
        raise ValueError(f"broker must be 'require' or 'off' for a sharded queue, not {broker!r}")
    if not QUEUE_NAME.fullmatch(queue) or shard_name(queue, 1) == queue or "." in queue:
        raise BadQueueNameError(f"{queue!r} is not the name of a queue that can be sharded")
    if broker == "require":
        finder = BrokerFinder(target)
        return ShardedQueue(
            lambda k: RemoteQueue(target, shard_name(queue, k), **options).finding_the_broker_with(finder),
            shards,
        )
    return ShardedQueue(lambda k: BrokerQueue(shard_storage(target, queue, k), **options), shards)
