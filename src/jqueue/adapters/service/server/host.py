"""``QueueHost``: the queues under one storage root, each served by one group-commit loop."""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path

from jqueue.adapters.service.server.catalog import CATALOG_NAME, Catalog, added, removed
from jqueue.adapters.service.wire.root import queue_location, root_location, root_storage
from jqueue.adapters.storage.filesystem import LocalFileSystemStorage
from jqueue.adapters.storage.url import is_url, storage_at
from jqueue.adapters.web.queue_names import QUEUE_NAME, UnknownQueueError, queue_of
from jqueue.core.broker import BrokerQueue
from jqueue.domain.errors import InvalidURLError, JQueueError, QueueClosedError

logger = logging.getLogger(__name__)

ABSENT_TRUSTED_FOR = 2.0
"""Seconds a queue found absent from the storage is taken as absent without reading it again
(one made meanwhile by the Python API, not through the service, is seen that late)."""
MOST_ABSENT_KEPT = 4_096
"""Queue names found absent kept at most (past it, those no longer trusted are dropped)."""


def checked_root(root: str) -> str:
    """Return ``root`` if queues can live under it; a plain path (or a ``file://`` URL, returned
    as its path) must be a directory."""
    if is_url(root):
        checked = storage_at(queue_location(root, "check"))  # InvalidURLError for a bad URL
        if not isinstance(checked, LocalFileSystemStorage):
            return root
        root = str(checked.path.parent)  # a directory whose queue files can be listed
    if not Path(root).is_dir():
        raise InvalidURLError(
            root, "is not a directory (create it, or give a URL such as s3://bucket/prefix)"
        )
    return str(Path(root).absolute())


class QueueHost:
    """Opens the queues under ``root`` on first use and keeps them open until ``close``; the
    root's ``Catalog`` says which queues exist.

    Parameters
    ----------
    root : str
        A directory, or a storage URL prefix (``s3://bucket/prefix``, ``gs://bucket/prefix``).
    """

    def __init__(self, root: str) -> None:
        self.root = checked_root(root)
        where = root_location(self.root, CATALOG_NAME)
        self.catalog = Catalog(storage_at(where), where)
        self._open: dict[str, BrokerQueue] = {}
        self._owned: dict[str, BrokerQueue] = {}  # the open queue object each was taken over on
        self._lock = asyncio.Lock()
        self._opening: dict[str, asyncio.Lock] = {}
        self._given_up: dict[str, int] = {}
        self._probes: dict[str, asyncio.Future[tuple[bytes, str | None]]] = {}
        self._absent: dict[str, float] = {}  # queue -> until when it is taken as absent
        self._epoch = -1

    def owns(self, name: str) -> bool:
        """Whether this process took queue ``name`` over (see ``own``)."""
        return name in self._owned

    def owned(self) -> list[str]:
        """The queues this process took over, sorted."""
        return sorted(self._owned)

    async def own(self, name: str, broker: str, *, create: bool = False) -> BrokerQueue:
        """Return the open queue ``name`` (as ``get``), taken over by ``broker`` unless this very
        queue object was: its commits are then fenced by the ``Owned`` entry in its log. (A
        queue given up and opened again is a new object, which must take the queue over again:
        before, a take-over that ended after a concurrent ``give_up`` left the name owned, and
        the next object opened for it served calls unfenced.)

        Raises
        ------
        NotOwnerError
            If another broker took the queue over while this one decided to.
        QueueClosedError
            If the queue was given up while it was being taken over (the caller tries again).
        """
        queue = await self.get(name, create=create)
        if self._owned.get(name) is not queue:
            seen = await queue.owner()
            owned = await queue.take_over(broker, None if seen is None else seen.owner)
            if self._open.get(name) is not queue:
                raise QueueClosedError(f"queue {name} was given up while this broker took it over")
            if seen is None or seen.owner != broker:
                logger.warning("took queue %s over (epoch %d)", name, owned.epoch)
            self._owned[name] = queue
        return queue

    def given_up(self, name: str) -> int:
        """How many times this process gave queue ``name`` up (``give_up``)."""
        return self._given_up.get(name, 0)

    async def give_up(self, name: str) -> None:
        """Stop serving queue ``name`` (another broker takes it): commit what was submitted, close it."""
        self._given_up[name] = self._given_up.get(name, 0) + 1
        async with self._lock:
            self._owned.pop(name, None)
            queue = self._open.pop(name, None)
        if queue is not None:
            try:
                await queue.stop()
            except JQueueError as exc:  # its last calls were refused: the new owner has them
                logger.warning("queue %s was given up: %s", name, exc)

    async def serve_epoch(self, epoch: int) -> None:
        """Read the catalog afresh when this process starts serving ``epoch``: the broker
        before it may have changed it."""
        if epoch != self._epoch:
            async with self._lock:
                if epoch != self._epoch:
                    await self.catalog.load()
                    self._epoch = epoch

    async def get(self, name: str, *, create: bool = False) -> BrokerQueue:
        """Return the open queue ``name``; unless ``create`` (an enqueue, whose commit creates
        the queue, or a queued ``PUT``), it must exist.

        A queue exists if the catalog lists it, or if its storage holds a queue that the
        catalog does not say was deleted (one made by the Python API), or if it is a shard of
        one that exists; that one is listed.

        Raises
        ------
        BadQueueNameError
            For a name that is not ``QUEUE_NAME``.
        UnknownQueueError
            If the queue does not exist and ``create`` is false.
        """
        queue = self._open.get(name)
        if queue is not None:
            return queue
        async with self._opening.setdefault(name, asyncio.Lock()):  # queues open side by side
            if (queue := self._open.get(name)) is not None:
                return queue
            listed = name in self.catalog.record.queues
            if not listed and not create and not await self.exists(name):
                raise UnknownQueueError(name)
            queue = BrokerQueue(root_storage(self.root, name))
            await queue.start()  # a file that is not a queue fails here, before the catalog lists it
            if not listed:
                try:
                    await self.catalog.change(added(name))
                except BaseException:
                    await queue.stop()
                    raise
            self._open[name] = queue
            return queue

    async def exists(self, name: str) -> bool:
        """Whether queue ``name`` exists (as ``get`` judges it): a shard of a queue that exists
        does, empty until its first job."""
        if name in self._open or name in self.catalog.record.queues or await self._in_storage(name):
            return True
        sharded = queue_of(name)
        return sharded != name and await self.exists(sharded)

    async def _in_storage(self, name: str) -> bool:
        """Whether the storage holds queue ``name``: one read for all the calls that ask at once,
        and a queue found absent is taken as absent for ``ABSENT_TRUSTED_FOR`` (workers poll
        a queue that is not made yet, and a read opens a storage client of its own)."""
        if name in self.catalog.record.deleted or self._absent.get(name, 0.0) > time.monotonic():
            return False
        probe = self._probes.get(name)
        if probe is None:
            probe = self._probes[name] = asyncio.ensure_future(root_storage(self.root, name).read())
            probe.add_done_callback(lambda _: self._probes.pop(name, None))
        found = (await asyncio.shield(probe))[1] is not None
        if not found:
            now = time.monotonic()
            if len(self._absent) >= MOST_ABSENT_KEPT:
                self._absent = {gone: until for gone, until in self._absent.items() if until > now}
            self._absent[name] = now + ABSENT_TRUSTED_FOR
        return found

    async def delete(self, name: str) -> None:
        """Delete queue ``name``: purge its jobs, close it and mark it deleted in the catalog
        (its storage stays, empty, for any process that still has it open)."""
        queue = await self.get(name)
        await queue.purge(status=None)
        async with self._lock:
            self._open.pop(name, None)
            self._owned.pop(name, None)
            await self.catalog.change(removed(name))
        await queue.stop()

    def names(self) -> list[str]:
        """The queues the catalog lists, sorted."""
        return sorted(self.catalog.record.queues)

    def found(self) -> list[str]:
        """The queues the catalog lists and, under a directory root (a path or ``file://``), the
        queue files made by the Python API or the CLI that it does not say were deleted; sorted.
        (Object-store roots are not listed: their queues appear once used through the service.)"""
        names = set(self.catalog.record.queues)
        if not is_url(self.root):
            on_disk = {
                path.stem for path in Path(self.root).glob("*.json") if QUEUE_NAME.fullmatch(path.stem)
            }
            names |= on_disk - set(self.catalog.record.deleted)
        return sorted(names)

    def is_open(self, name: str) -> bool:
        """Whether queue ``name`` is open (it exists)."""
        return name in self._open

    def open_queues(self) -> dict[str, BrokerQueue]:
        """The queues opened so far, by name."""
        return dict(self._open)

    async def close(self) -> None:
        """Commit what was submitted and close every open queue."""
        queues, self._open, self._owned = list(self._open.values()), {}, {}
        for queue in queues:
            await queue.stop()
