"""Choosing a queue's storage layout when it is first used, and migrating to the log.

``"auto"`` (the default) keeps what is there: an existing single-object state stays
in that layout, a queue already in the log layout stays there, and a new queue on a
backend with keyed operations (all four built-in adapters) starts as a log. A
backend with only ``read``/``write`` always uses the single object. ``"log"``
migrates an existing single-object state; ``"single"`` insists on the documented
layout.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Literal

from jqueue.core.formats.marker import decode_marker
from jqueue.core.formats.single import decode_index
from jqueue.core.log.migration import migrate
from jqueue.core.log.store import LogStore
from jqueue.core.loop.retry import RetryPolicy
from jqueue.core.loop.settings import LogSettings
from jqueue.core.loop.store import CommitStore, SingleObjectStore, check_not_empty, describe
from jqueue.domain.errors import CASConflictError, CorruptStateError
from jqueue.ports.storage import KeyedStoragePort, ObjectStoragePort

Layout = Literal["auto", "log", "single"]
LAYOUTS: tuple[Layout, ...] = ("auto", "log", "single")


class StoreOpener:
    """Opens a queue's store on first use, choosing (and if asked, migrating) its layout.

    Parameters
    ----------
    storage : ObjectStoragePort
        The backend.
    retry : RetryPolicy
        Commit retries, for the store.
    layout : {"auto", "log", "single"}
        Which layout to use; see the module documentation.
    settings : LogSettings
        Settings of the log layout.
    """

    def __init__(self, storage: ObjectStoragePort, retry: RetryPolicy, layout: Layout, settings: LogSettings):
        if layout not in LAYOUTS:
            raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
        self.storage = storage
        self.retry = retry
        self.layout = layout
        self.settings = settings
        self._store: CommitStore | None = None
        self._opening = asyncio.Lock()
        self.on_commit: Callable[[], None] | None = None
        """Given to the store, which calls it after each commit that landed."""

    async def store(self) -> CommitStore:
        """Return the store, opening it on the first call."""
        if self._store is None:
            async with self._opening:
                if self._store is None:
                    store = await self._open()
                    if self.on_commit is not None:
                        store.on_commit = self.on_commit
                    self._store = store
        return self._store

    async def close(self) -> None:
        """Let the store finish its background work."""
        if self._store is not None:
            await self._store.close()

    async def _open(self) -> CommitStore:
        storage, location = self.storage, describe(self.storage)
        if not isinstance(storage, KeyedStoragePort):
            if self.layout == "log":
                raise TypeError(f"{location}: the log layout needs get, create, list_names and delete")
            return SingleObjectStore(storage, self.retry)
        for attempt in range(self.retry.max_retries + 1):
            content, etag = await storage.read()
            if etag is None:  # no queue yet: its first commit creates it, reads create nothing
                if self.layout == "single":
                    return SingleObjectStore(storage, self.retry)
                return LogStore(storage, self.retry, self.settings, created=False)
            check_not_empty(content, etag, location)
            is_log, base = decode_marker(content, location)
            if is_log:
                if self.layout == "single":
                    raise CorruptStateError(location, "this queue uses the log layout, not 'single'")
                return LogStore(storage, self.retry, self.settings, base)
            state = decode_index(content, location)
            if self.layout != "log":
                return SingleObjectStore(storage, self.retry)
            migrated_base = await migrate(storage, state, etag)
            if migrated_base is not None:
                return LogStore(storage, self.retry, self.settings, migrated_base)
            await self.retry.wait(attempt + 1)  # another writer changed the queue meanwhile
        raise CASConflictError(f"{location}: the migration to the log layout lost every race")
