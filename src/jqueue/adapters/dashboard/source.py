"""Where the dashboard finds its queues: the queues ``jqueue serve`` holds open under its root,
or one queue opened by ``jqueue dashboard``."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from jqueue.adapters.service.host import UnknownQueueError
from jqueue.core.broker import BrokerQueue


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

    async def get(self, name: str) -> BrokerQueue:
        """The open queue ``name`` (``UnknownQueueError`` if there is none)."""
        ...

    def broker(self) -> BrokerView | None:
        """The broker serving the queues, or None without one."""
        ...

    def workers(self, name: str) -> dict[str, float] | None:
        """The clients that claimed from ``name`` lately, with when (epoch seconds); None when
        they cannot be known (no broker sees them)."""
        ...


class SingleQueue:
    """One queue opened directly on its storage: ``jqueue dashboard --storage URL``.

    Parameters
    ----------
    name : str
        What the dashboard calls it.
    queue : BrokerQueue
        The queue, started by the caller.
    """

    def __init__(self, name: str, queue: BrokerQueue) -> None:
        self.name = name
        self.queue = queue

    async def names(self) -> list[str]:
        """The one queue's name."""
        return [self.name]

    async def get(self, name: str) -> BrokerQueue:
        """The queue, if ``name`` is its name."""
        if name != self.name:
            raise UnknownQueueError(name)
        return self.queue

    def broker(self) -> BrokerView | None:
        """None: no broker serves this queue here."""
        return None

    def workers(self, name: str) -> dict[str, float] | None:
        """None: workers that commit directly are not seen."""
        return None
