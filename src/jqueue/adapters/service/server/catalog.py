"""``Catalog``: the queues a ``jqueue serve`` root holds, with the settings of the queued API.

The catalog is one record under the root (``ROOT/_queues.json``), changed by compare-and-swap,
so that every broker of the root, one after another, sees the same queues, suspensions and
throttles. A queue's jobs stay in its own storage (``ROOT/NAME.json``); a queue made there by
the Python API joins the catalog when the service first opens it. A deleted queue is
remembered as deleted, so that its (emptied) storage is not taken for a live queue.
"""

from __future__ import annotations

import asyncio
import hmac
from collections.abc import Callable
from typing import Annotated

import msgspec

from jqueue.domain.errors import CASConflictError, CorruptStateError
from jqueue.domain.values import INT64_MAX
from jqueue.ports.storage import ObjectStoragePort

CATALOG_NAME = "_queues.json"
"""The catalog's name under the root (no queue name starts with ``_``)."""
ENDPOINTS = ("push", "poll", "update", "delete")
"""The queued endpoints that can be suspended."""
_ATTEMPTS = 20


class Throttle(msgspec.Struct, forbid_unknown_fields=True):
    """At most ``max_polls_per_time_window`` poll requests per ``time_window_sec`` seconds
    (queued's throttle, as its API and the catalog both spell it)."""

    max_polls_per_time_window: Annotated[int, msgspec.Meta(ge=1, le=INT64_MAX)]
    time_window_sec: Annotated[int, msgspec.Meta(ge=1, le=86_400 * 365)]


class QueueSettings(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True):
    """A queue's suspended endpoints and poll throttle."""

    suspended: list[str] = msgspec.field(default_factory=list)
    throttle: Throttle | None = None


class CatalogRecord(msgspec.Struct, forbid_unknown_fields=True):
    """The record: the live queues with their settings, the deleted ones, and the API keys
    of the queued API (each key opens the queues whose names start with its prefix)."""

    queues: dict[str, QueueSettings] = msgspec.field(default_factory=dict)
    deleted: list[str] = msgspec.field(default_factory=list)
    api_keys: dict[str, str] = msgspec.field(default_factory=dict)

    def key_opens(self, key: str, queue: str) -> bool:
        """Whether API key ``key`` opens ``queue`` (every key is compared in constant time)."""
        matches = [
            hmac.compare_digest(key.encode(), k.encode()) and queue.startswith(p)
            for k, p in self.api_keys.items()
        ]
        return any(matches)


class Catalog:
    """Reads and changes the catalog record in ``storage``.

    Only the broker changes it; a change reads the record afresh and retries a lost
    compare-and-swap a bounded number of times.
    """

    def __init__(self, storage: ObjectStoragePort, where: str) -> None:
        self.storage = storage
        self.where = where
        self.record = CatalogRecord()
        self._lock = asyncio.Lock()

    async def load(self) -> CatalogRecord:
        """Read the record (an empty one if there is none yet)."""
        content, etag = await self.storage.read()
        self.record = self._decoded(content) if etag is not None else CatalogRecord()
        return self.record

    async def change(self, edit: Callable[[CatalogRecord], None]) -> CatalogRecord:
        """Apply ``edit`` to the newest record and write it back by compare-and-swap (unless
        the edit changed nothing: many brokers list the same queue at once)."""
        async with self._lock:
            for _ in range(_ATTEMPTS):
                content, etag = await self.storage.read()
                record = self._decoded(content) if etag is not None else CatalogRecord()
                edit(record)
                edited = msgspec.json.encode(record)
                if etag is not None and edited == content:
                    self.record = record
                    return record
                try:
                    await self.storage.write(edited, if_match=etag)
                except CASConflictError:
                    continue
                self.record = record
                return record
        raise CASConflictError(f"the queue catalog at {self.where} kept changing under {_ATTEMPTS} tries")

    def _decoded(self, content: bytes) -> CatalogRecord:
        try:
            return msgspec.json.decode(content, type=CatalogRecord)
        except (msgspec.DecodeError, UnicodeDecodeError) as exc:
            raise CorruptStateError(self.where, f"not a queue catalog: {exc}") from exc


def added(name: str) -> Callable[[CatalogRecord], None]:
    """An edit that lists queue ``name`` (keeping its settings if it is listed)."""

    def edit(record: CatalogRecord) -> None:
        record.queues.setdefault(name, QueueSettings())
        if name in record.deleted:
            record.deleted.remove(name)

    return edit


def removed(name: str) -> Callable[[CatalogRecord], None]:
    """An edit that marks queue ``name`` deleted."""

    def edit(record: CatalogRecord) -> None:
        record.queues.pop(name, None)
        if name not in record.deleted:
            record.deleted.append(name)

    return edit
