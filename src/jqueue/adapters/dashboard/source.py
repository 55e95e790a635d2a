"""Where the dashboard finds its queues: the queues ``jqueue serve`` holds open under its root,
or one queue opened by ``jqueue dashboard``."""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from jqueue.adapters.web.queue_names import UnknownQueueError
from jqueue.core.broker import BrokerQueue
from jqueue.core.sharded import ShardedQueue
from jqueue.ports.queue import WorkerReport

ShownQueue = BrokerQueue | ShardedQueue
"""A queue as the dashboard reads and steers it: one log, or a sharded queue's logs added up."""


@dataclass
class BrokerView:
    """The broker, as the dashboard shows it.

    Attributes
    ----------
    address : str
        The URL the broker advertises.
    epoch : int
        Its epoch.
    since : datetime or None
        When this process became the broker.
    """

    address: str
    epoch: int
    since: datetime | None


FORGET_AFTER = 600.0
"""A worker not seen for this many seconds is no longer listed (it shows as stale before)."""
STALE_AFTER = 15.0
"""A worker that made no call for this many seconds is shown as stale: a live one calls every
few seconds (a claim, a heartbeat or a wait for changes)."""


@dataclass
class Sighting:
    """A worker as its broker last saw it.

    Attributes
    ----------
    queue : str
        The queue it called.
    client : str
        The process, as ``host:pid``.
    seen : float
        When, in epoch seconds.
    report : WorkerReport or None
        What it said of itself (None for a client that sends no report).
    """

    queue: str
    client: str
    seen: float
    report: WorkerReport | None

    @property
    def host(self) -> str:
        """The host the worker runs on."""
        return self.client.rpartition(":")[0] or self.client

    @property
    def pid(self) -> str:
        """Its process id (empty if unknown)."""
        return self.client.rpartition(":")[2] if ":" in self.client else ""

    @property
    def stale(self) -> bool:
        """Whether it made no call for ``STALE_AFTER`` seconds."""
        return time.time() - self.seen > STALE_AFTER


class NotServingError(Exception):
    """This process does not serve the queues now; ``broker`` is the one that does, if known."""

    def __init__(self, broker: str | None) -> None:
        super().__init__(broker)
        self.broker = broker


class QueueSource(Protocol):
    """The queues a dashboard shows."""

    async def names(self) -> list[str]:
        """The queues, sorted.

        Raises
        ------
        NotServingError
            If this process may not serve them now.
        """
        ...

    async def get(self, name: str) -> ShownQueue:
        """The open queue ``name`` (``UnknownQueueError`` if there is none)."""
        ...

    def broker(self) -> BrokerView | None:
        """The broker serving the queues, or None without one."""
        ...

    def workers(self, name: str) -> list[Sighting] | None:
        """The workers that called ``name`` lately, the latest first; None when they cannot be
        known (no broker sees them)."""
        ...

    def all_workers(self) -> list[Sighting] | None:
        """The workers that called any queue lately (one that does not exist yet included);
        None when they cannot be known."""
        ...


class SingleQueue:
    """One queue opened directly on its storage: ``jqueue dashboard --storage URL``.

    Parameters
    ----------
    name : str
        What the dashboard calls it.
    queue : ShownQueue
        The queue, started by the caller.
    """

    def __init__(self, name: str, queue: ShownQueue) -> None:
        self.name = name
        self.queue = queue

    async def names(self) -> list[str]:
        """The one queue's name."""
        return [self.name]

    async def get(self, name: str) -> ShownQueue:
        """The queue, if ``name`` is its name."""
        if name != self.name:
            raise UnknownQueueError(name)
        return self.queue

    def broker(self) -> BrokerView | None:
        """None: no broker serves this queue here."""
        return None

    def workers(self, name: str) -> list[Sighting] | None:
        """None: workers that commit directly are not seen."""
        return None

    def all_workers(self) -> list[Sighting] | None:
        """None: workers that commit directly are not seen."""
        return None
