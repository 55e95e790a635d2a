"""Where the log layout keeps a payload: a reference packs the entry (segment) that carried the
job's add and the payload's position in it into one int, so that a million references cost
little to build and to keep. Only the log layout reads them; to the domain they are opaque."""

from __future__ import annotations

import operator
from itertools import repeat

_POSITION_BITS = 24
POSITIONS_PER_SEGMENT = 1 << _POSITION_BITS


def payload_ref(segment: int, position: int) -> int:
    """Return the reference to item ``position`` of log entry ``segment`` (``segment << 24 | position``)."""
    if not 0 <= position < POSITIONS_PER_SEGMENT:
        raise ValueError(f"an entry holds at most {POSITIONS_PER_SEGMENT} payloads")
    return segment << _POSITION_BITS | position


def payload_place(ref: int) -> tuple[int, int]:
    """Return the ``(segment, position)`` of a payload reference."""
    return ref >> _POSITION_BITS, ref & (POSITIONS_PER_SEGMENT - 1)


def refs_from_columns(segments: list[int], positions: list[int]) -> list[int]:
    """Return ``payload_ref(s, p)`` for each pair, in C-level loops (a checkpoint's million rows)."""
    if positions and (min(positions) < 0 or max(positions) >= POSITIONS_PER_SEGMENT):
        raise ValueError("a payload position is out of range")
    shifted = map(operator.lshift, segments, repeat(_POSITION_BITS))
    return list(map(operator.or_, shifted, positions))


def columns_from_refs(refs: list[int]) -> tuple[list[int], list[int]]:
    """Return the segments and positions of ``refs``, in C-level loops."""
    segments = list(map(operator.rshift, refs, repeat(_POSITION_BITS)))
    return segments, list(map(operator.and_, refs, repeat(POSITIONS_PER_SEGMENT - 1)))
