"""``SegmentCache``: recently used payload segments (log entries), bounded in bytes."""

from __future__ import annotations

from collections import OrderedDict


class SegmentCache:
    """Least-recently-used payload lists by segment number, up to ``max_bytes`` of payload.

    Parameters
    ----------
    max_bytes : int
        Payload bytes kept at most; a segment larger than that is not kept.
    """

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._segments: OrderedDict[int, list[bytes]] = OrderedDict()
        self._sizes: dict[int, int] = {}
        self._total = 0

    def get(self, segment: int) -> list[bytes] | None:
        """Return the payloads of ``segment`` if cached."""
        payloads = self._segments.get(segment)
        if payloads is not None:
            self._segments.move_to_end(segment)
        return payloads

    def put(self, segment: int, payloads: list[bytes]) -> None:
        """Keep the payloads of ``segment``, evicting the least recently used."""
        size = sum(len(p) for p in payloads)
        if not payloads or size > self.max_bytes or segment in self._segments:
            return
        self._segments[segment] = payloads
        self._sizes[segment] = size
        self._total += size
        while self._total > self.max_bytes:
            evicted, _ = self._segments.popitem(last=False)
            self._total -= self._sizes.pop(evicted)
