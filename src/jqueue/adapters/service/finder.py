"""``BrokerFinder``: where a client sends its calls, and where it goes when the broker moves."""

from __future__ import annotations

import asyncio
import time

import msgspec

from jqueue.adapters.service.host import record_storage
from jqueue.adapters.service.tenure import BrokerRecord
from jqueue.core.loop.store import StorageUse
from jqueue.domain.errors import CorruptStateError
from jqueue.ports.storage import ObjectStoragePort

SERVICE_SCHEMES = ("http://", "https://")
RECHECK_EVERY = 1.0
"""Seconds between two reads of the broker record while a call waits for its answer."""


def is_service_url(target: str) -> bool:
    """Whether ``target`` names a service (``http(s)://``) rather than a storage root."""
    return target.lower().startswith(SERVICE_SCHEMES)


class BrokerFinder:
    """The broker of a client: a fixed service URL, or the one the root's broker record names.

    Parameters
    ----------
    target : str
        ``http(s)://host:port``, or a storage root (a directory, ``file://``, ``s3://``,
        ``gs://`` prefix) whose ``_broker.json`` names the broker.
    """

    def __init__(self, target: str) -> None:
        self.root = None if is_service_url(target) else target
        self.address: str | None = target.rstrip("/") if self.root is None else None
        self.owner: str | None = None
        """The broker the root's record names for ``address`` (its ``owner``); None for a service URL."""
        self._record: ObjectStoragePort | None = None
        self._held: StorageUse | None = None
        self._lock = asyncio.Lock()
        self._checked_at = -RECHECK_EVERY
        self._recorded: str | None = None

    async def open(self) -> None:
        """Hold the root's record storage open (its client, its connections) until ``close``:
        each read would otherwise open a client of its own, tens of milliseconds on S3."""
        if self.root is not None and self._held is None:
            held = StorageUse(self._storage())
            await held.__aenter__()
            self._held = held

    async def close(self) -> None:
        """Let go of what ``open`` held."""
        held, self._held = self._held, None
        if held is not None:
            await held.__aexit__(None, None, None)

    async def find(self) -> str | None:
        """The broker's URL: the one in use, else the record's (None if there is no record).
        Concurrent calls share one read of the record."""
        if self.address is not None or self.root is None:
            return self.address
        async with self._lock:
            if self.address is None:
                record = await self._read()
                self.address, self.owner = (None, None) if record is None else (record.address, record.owner)
        return self.address

    async def moved_from(self, address: str) -> str | None:
        """The broker the root's record names if it is no longer ``address`` (another process took
        over from it), else None; what a call asks while its answer is slow, so that a frozen
        or unreachable broker costs no more than a killed one. The record is read at most
        once every ``RECHECK_EVERY`` seconds, whoever asks; a service URL never moves."""
        if self.root is None:
            return None
        async with self._lock:
            if time.monotonic() - self._checked_at >= RECHECK_EVERY:
                record = await self._read()
                self._recorded = None if record is None else record.address
                self._checked_at = time.monotonic()
        recorded = self._recorded
        return recorded if recorded is not None and recorded != address else None

    async def _read(self) -> BrokerRecord | None:
        """The root's record, or None if it has none or its broker stopped (released it)."""
        content, etag = await self._storage().read()
        if etag is None:
            return None
        try:
            record = msgspec.json.decode(content, type=BrokerRecord)
        except (msgspec.DecodeError, UnicodeDecodeError) as exc:
            raise CorruptStateError(f"{self.root}/_broker.json", f"not a broker record: {exc}") from exc
        return None if record.released else record

    def _storage(self) -> ObjectStoragePort:
        assert self.root is not None
        if self._record is None:
            self._record = record_storage(self.root)
        return self._record

    def owner_at(self, address: str) -> str | None:
        """The broker a call to ``address`` is meant for (``BROKER_HEADER``), if the record named it."""
        return self.owner if address == self.address else None

    def moved(self, hint: str | None) -> None:
        """The broker in use did not serve: go to ``hint`` for a service URL; for a root, look at
        its record again (a hint comes from whatever answers at the old address, which may
        serve another root now)."""
        if self.root is None:
            self.address = hint or self.address
        else:
            self.address = self.owner = None
