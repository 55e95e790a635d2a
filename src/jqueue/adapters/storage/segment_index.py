"""``SegmentIndex``: where the record of each live object is, and how much of each segment lives.

Pure bookkeeping for ``SegmentLog``, no I/O. An object normally has one record; while its
record is being moved out of a sparse segment it briefly has two, and the older copies are
its shadows until their tombstones arrive. A queue may hold millions of records within its
retention, so each current place is kept packed in one int, in a dict of str to int that
the cyclic collector does not track, not as an object it would visit at every full
collection.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(slots=True, frozen=True)
class Place:
    """A record's segment, byte offset and size."""

    segment: int
    offset: int
    size: int


_FIELD_BITS = 48
"""Bits of a packed place's offset and of its size (records stay far below 256 TiB)."""
_SEGMENT_SHIFT = 2 * _FIELD_BITS
_FIELD_MASK = (1 << _FIELD_BITS) - 1


def _packed(place: Place) -> int:
    if (place.offset | place.size) >> _FIELD_BITS:
        raise ValueError(f"a record at {place.offset} of {place.size} bytes is out of range")
    return place.segment << _SEGMENT_SHIFT | place.offset << _FIELD_BITS | place.size


def _unpacked(packed: int) -> Place:
    return Place(packed >> _SEGMENT_SHIFT, packed >> _FIELD_BITS & _FIELD_MASK, packed & _FIELD_MASK)


class SegmentIndex:
    """The live records of a segment log, by name and by segment."""

    def __init__(self) -> None:
        self._places: dict[str, int] = {}
        self.live: defaultdict[int, int] = defaultdict(int)
        self._shadows: dict[str, list[Place]] = {}

    def place(self, name: str) -> Place | None:
        """Where the current record of ``name`` is, if it is known."""
        found = self._places.get(name)
        return None if found is None else _unpacked(found)

    def names(self) -> Iterable[str]:
        """The names that have a current record."""
        return self._places.keys()

    def add(self, name: str, place: Place) -> None:
        """Record a live record of ``name``; an earlier one becomes its shadow."""
        earlier = self.place(name)
        if earlier is not None:
            self._shadows.setdefault(name, []).append(earlier)
        self._places[name] = _packed(place)
        self.live[place.segment] += place.size

    def remove(self, name: str, segment: int, offset: int) -> None:
        """Forget the record of ``name`` at this place (its current one or a shadow), if known."""
        place = self.place(name)
        shadows = self._shadows.get(name, [])
        if place is not None and (place.segment, place.offset) == (segment, offset):
            if shadows:
                self._places[name] = _packed(shadows.pop())
            else:
                del self._places[name]
        else:
            matching = [p for p in shadows if (p.segment, p.offset) == (segment, offset)]
            if not matching:
                return
            place = matching[0]
            shadows.remove(place)
        if not shadows:
            self._shadows.pop(name, None)
        self.live[segment] -= place.size

    def copies(self, name: str) -> list[Place]:
        """Every live record of ``name``, the current one first."""
        return [_unpacked(self._places[name]), *self._shadows.get(name, [])]

    def current_in(self, segment: int) -> list[tuple[str, Place]]:
        """The objects whose current record is in ``segment``."""
        places = self._places.items()
        return [(name, _unpacked(packed)) for name, packed in places if packed >> _SEGMENT_SHIFT == segment]

    def shadows_in(self, segment: int) -> list[tuple[str, Place]]:
        """The older copies that lie in ``segment``."""
        return [(name, p) for name, places in self._shadows.items() for p in places if p.segment == segment]

    def forget_segment(self, segment: int) -> None:
        """Drop the live count of a segment that is gone."""
        self.live.pop(segment, None)

    def clear(self) -> None:
        """Forget everything."""
        self._places.clear()
        self.live.clear()
        self._shadows.clear()
