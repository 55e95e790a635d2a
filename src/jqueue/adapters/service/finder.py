"""``BrokerFinder``: where a client sends its calls, and where it goes when the broker moves."""

from __future__ import annotations

import asyncio

import msgspec

from jqueue.adapters.service.host import record_storage
from jqueue.adapters.service.lease import BrokerRecord
from jqueue.domain.errors import CorruptStateError
from jqueue.ports.storage import ObjectStoragePort

SERVICE_SCHEMES = ("http://", "https://")


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
        self._record: ObjectStoragePort | None = None
        self._lock = asyncio.Lock()

    async def find(self) -> str | None:
        """The broker's URL: the one in use, else the record's (None if there is no record).
        Concurrent calls share one read of the record."""
        if self.address is not None or self.root is None:
            return self.address
        async with self._lock:
            if self.address is None:
                if self._record is None:
                    self._record = record_storage(self.root)
                content, etag = await self._record.read()
                if etag is not None:
                    try:
                        self.address = msgspec.json.decode(content, type=BrokerRecord).address
                    except (msgspec.DecodeError, UnicodeDecodeError) as exc:
                        where = f"{self.root}/_broker.json"
                        raise CorruptStateError(where, f"not a broker record: {exc}") from exc
        return self.address

    def moved(self, hint: str | None) -> None:
        """The broker in use did not serve: go to ``hint``, or look at the record again."""
        if hint is not None:
            self.address = hint
        elif self.root is not None:
            self.address = None
