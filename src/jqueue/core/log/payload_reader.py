"""``PayloadReader``: the bytes behind a log-layout queue's payload references.

A payload stays in the object that first carried it (a log entry, a bulk write's part, or
the base of a migrated queue); a reference names that segment and a position in it. Recent
segments are in a ``SegmentCache``; others are fetched once, however many callers wait.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from jqueue.core.formats.entry import decode_payloads
from jqueue.core.formats.marker import entry_name
from jqueue.core.formats.payload_refs import payload_place
from jqueue.core.log.parts import is_part, part_name
from jqueue.core.log.segment_cache import SegmentCache
from jqueue.core.loop.store import describe_named
from jqueue.domain.errors import CorruptStateError
from jqueue.domain.schema import Payload
from jqueue.ports.storage import KeyedStoragePort


def segment_name(segment: int, base: str | None, location: str) -> str:
    """Return the name of the object holding payload segment ``segment``: a part, an entry, or
    for segment 0 the ``base`` of a migrated queue (a queue at ``location`` without one has none)."""
    if is_part(segment):
        return part_name(segment)
    if segment == 0:
        if base is None:
            raise CorruptStateError(location, "a payload refers to a base object it does not have")
        return base
    return entry_name(segment)


class PayloadReader:
    """Reads payloads by reference, through a cache of recent segments.

    Parameters
    ----------
    keyed : KeyedStoragePort
        The queue's storage.
    location : str
        The queue's main object, for messages.
    cache_bytes : int
        Payload bytes of recent segments kept in memory.
    """

    def __init__(self, keyed: KeyedStoragePort, location: str, cache_bytes: int) -> None:
        self.keyed = keyed
        self.location = location
        self.cache = SegmentCache(cache_bytes)
        self._loading: dict[int, asyncio.Future[list[bytes]]] = {}

    def where(self, name: str) -> str:
        """Return the location of a named object of the queue, for messages."""
        return describe_named(self.keyed, name)

    async def payloads(self, payloads: Sequence[Payload], base: str | None) -> list[bytes]:
        """Return each payload's bytes, reading the segments that are not cached (``base``: the
        object of segment 0, if the queue was migrated)."""
        found: list[bytes] = []
        for payload in payloads:
            if isinstance(payload, bytes):
                found.append(payload)
                continue
            segment, position = payload_place(payload)
            payloads_there = self.cache.get(segment) or await self._load(segment, base)
            if position >= len(payloads_there):
                name = segment_name(segment, base, self.location)
                raise CorruptStateError(self.where(name), f"has no payload {position}")
            found.append(payloads_there[position])
        return found

    async def _load(self, segment: int, base: str | None) -> list[bytes]:
        """Fetch a segment once, however many callers need it at the same time."""
        loading = self._loading.get(segment)
        if loading is None:
            loading = self._loading[segment] = asyncio.ensure_future(self._fetch(segment, base))
            loading.add_done_callback(lambda _: self._loading.pop(segment, None))
        return await asyncio.shield(loading)

    async def _fetch(self, segment: int, base: str | None) -> list[bytes]:
        name = segment_name(segment, base, self.location)
        data = await self.keyed.get(name)
        if data is None:
            raise CorruptStateError(self.where(name), "a live job's payload entry is missing")
        payloads = decode_payloads(data, segment, self.where(name))
        self.cache.put(segment, payloads)
        return payloads
