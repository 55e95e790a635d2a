"""``SegmentLog``: a local queue's named objects as records in append-only segment files.

A create appends one record to the newest, preallocated segment under an exclusive
``flock`` and syncs it once (``fdatasync``); readers take no lock and stop at a record that
is not whole. Torn tails are zeroed by the next writer, damage is reported and left alone,
deletes flip a flag in place and append a tombstone, and sparse segments are compacted and
unlinked. The design and its reasons: ``docs/decisions/0006-file-segments.md``.

Methods block and are thread-safe (the adapter calls them from worker threads), except
``try_get`` and ``try_create``, which never wait for another thread or process and may run
on the event loop.
"""

from __future__ import annotations

import contextlib
import enum
import fcntl
import math
import os
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from jqueue.adapters.storage import segment_format as fmt
from jqueue.adapters.storage.object_files import fsync_dir
from jqueue.adapters.storage.segment_index import Place
from jqueue.adapters.storage.segment_reader import Segment, SegmentReader
from jqueue.domain.errors import CASConflictError, CorruptStateError

T = TypeVar("T")

SEGMENT_BYTES = 8 << 20
_QUICK_BYTES = 1 << 20
_QUICK_CREATE_BYTES = 256 << 10
_QUICK_SYNC_SECONDS = 0.002


class Busy(enum.Enum):
    """``try_get`` or ``try_create`` could not answer without waiting."""

    BUSY = "busy"


BUSY = Busy.BUSY


class SegmentLog(SegmentReader):
    """Named immutable objects in segment files under ``directory``.

    Parameters
    ----------
    directory : Path
        Where the segments live; created by the first ``create``.
    segment_bytes : int
        The size of a new segment (a larger record gets a segment of its own size).
    """

    def __init__(self, directory: Path, segment_bytes: int = SEGMENT_BYTES) -> None:
        super().__init__(directory)
        self.segment_bytes = segment_bytes
        self._tidied = False
        self._sync_seconds = 0.0

    # --- the four calls -----------------------------------------------------------------

    def get(self, name: str) -> bytes | None:
        """Return the object's content, or None."""
        with self._mutex:
            found = self._get(name, math.inf, self._read_live)
        assert not isinstance(found, Busy)
        return found

    def mapped(self, name: str) -> memoryview | None:
        """Return the object's content mapped read-only from its segment (not read, so its
        checksum is not checked), or None."""
        with self._mutex:
            found = self._get(name, math.inf, self._map_live)
        assert not isinstance(found, Busy)
        return found

    def try_get(self, name: str) -> bytes | Busy | None:
        """``get`` if it cannot block: no other thread is in a call, the record is small, and
        no writer's half-written record must be waited for; else ``BUSY``."""
        if not self._mutex.acquire(blocking=False):
            return BUSY
        try:
            if self._tail == 0:
                return BUSY  # the first look reads every segment
            self._quick = True
            return self._get(name, _QUICK_BYTES, self._read_live)
        finally:
            self._quick = False
            self._mutex.release()

    def _get(self, name: str, largest: float, read: Callable[[str, Place], T | None]) -> T | Busy | None:
        """Return the live record of ``name`` as ``read`` gives it (looking again once, after
        catching up), ``BUSY`` if it is larger than ``largest``, or None."""
        if not self._ready(create=False):
            return None
        for attempt in range(2):
            if attempt:
                self._catch_up()
            place = self._index.place(name)
            if place is None:
                continue
            if place.size > largest:
                return BUSY
            if (found := read(name, place)) is not None:
                return found
        return None

    def create(self, name: str, content: bytes) -> None:
        """Append the object, durably, unless a live object has this name."""
        with self._mutex:
            self._ready(create=True)
            with self._locked(fcntl.LOCK_EX):
                self._create(name, content, quick=False)

    def try_create(self, name: str, content: bytes) -> Busy | None:
        """``create`` if it cannot wait for long: no other thread or process is writing, the
        record is small and fits the newest segment, and this disk's syncs have been fast;
        else ``BUSY`` (and nothing written)."""
        if len(content) > _QUICK_CREATE_BYTES or self._sync_seconds > _QUICK_SYNC_SECONDS:
            return BUSY
        if not self._mutex.acquire(blocking=False):
            return BUSY
        try:
            if not self._ready(create=True) or self._tail == 0 or not self._tidied:
                return BUSY  # the first write reads every segment and tidies them
            with self._locked(fcntl.LOCK_EX | fcntl.LOCK_NB) as held:
                return self._create(name, content, quick=True) if held else BUSY
        finally:
            self._mutex.release()

    def _create(self, name: str, content: bytes, *, quick: bool) -> Busy | None:
        self._catch_up()
        self._repair_tail()
        place = self._index.place(name)
        if place is not None and self._is_live(name, place):
            raise CASConflictError(f"{self.directory.as_uri()}/{name} exists")
        if quick and not self._fits(fmt.V2.record_size(len(name.encode()), len(content))):
            return BUSY  # rolling to a new segment costs more syncs, and may compact
        tail = self._tail
        self._sync(self._append(fmt.OBJECT, name, content).fd)
        self._tidy(since=tail)
        return None

    def list_names(self, prefix: str, start_after: str) -> list[str]:
        """Return the live names that start with ``prefix`` and sort after ``start_after``."""
        with self._mutex:
            if not self._ready(create=False):
                return []
            self._catch_up()
            found = sorted(n for n in self._index.names() if n.startswith(prefix) and n > start_after)
            places = [(name, self._index.place(name)) for name in found]
            return [name for name, place in places if place is not None and self._is_live(name, place)]

    def delete(self, name: str) -> None:
        """Remove the object if it exists."""
        with self._mutex:
            if not self._ready(create=False):
                return
            with self._locked(fcntl.LOCK_EX):
                self._catch_up()
                self._repair_tail()
                tail = self._tail
                if self._index.place(name) is not None:
                    self._kill(name)
                self._tidy(since=tail)

    def close(self) -> None:
        """Close the files (the next call opens them again)."""
        with self._mutex:
            self._reset()

    # --- appending ----------------------------------------------------------------------

    def _fits(self, size: int) -> bool:
        """Whether a record of ``size`` bytes fits the newest segment (with room for a seal); an
        older version's segment takes no more records."""
        segment = self._segments.get(self._tail)
        return (
            segment is not None
            and segment.version is fmt.V2
            and self._end + size + fmt.V2.record_size(0, 0) <= segment.capacity
        )

    def _append(self, kind: int, name: str, content: bytes) -> Segment:
        """Write a record at the end (not synced); return the segment it went to."""
        record = fmt.encode_record(kind, name, content)
        segment = self._segments[self._tail] if self._fits(len(record)) else self._roll(len(record))
        fmt.write_at(segment.fd, record, self._end)
        place = Place(segment.number, self._end, len(record))
        self._end += len(record)
        self._note(place, kind, 0, name, content)
        return segment

    def _roll(self, size: int) -> Segment:
        """Create the next segment whole, then seal the current one to point at it."""
        number = self._tail + 1
        capacity = max(self.segment_bytes, fmt.V2.header.size + size + fmt.V2.record_size(0, 0))
        temporary = self.directory / f".{number:012d}.{uuid.uuid4().hex}.tmp"
        fd = os.open(temporary, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            fmt.write_at(fd, fmt.segment_header(number, capacity), 0)
            fmt.preallocate(fd, capacity)
            os.fsync(fd)
            os.link(temporary, self._path(number))
            segment = self._segments[number] = Segment(number, fd, capacity, fmt.V2)
        except FileExistsError:  # a writer died between creating it and sealing the one before
            os.close(fd)
            segment = self._adopt(number, capacity)
        except BaseException:
            os.close(fd)
            raise
        finally:
            temporary.unlink(missing_ok=True)
        fsync_dir(self.directory)
        if self._tail:
            current = self._segments[self._tail]
            fmt.write_at(current.fd, fmt.encode_record(fmt.SEAL, "", b"", current.version), self._end)
            self._sync(current.fd)
        self._tail, self._end = number, segment.start
        return segment

    def _adopt(self, number: int, capacity: int) -> Segment:
        segment = self._open_segment(number)
        if segment is None:
            raise CASConflictError(f"{self._path(number).as_uri()} vanished while being created")
        if os.pread(segment.fd, fmt.RECORD.size, segment.start) != fmt.ZEROS:
            raise CorruptStateError(
                self._path(number).as_uri(), "holds records, but the segment before it is not sealed"
            )
        if segment.capacity < capacity:
            fmt.preallocate(segment.fd, capacity)
            if segment.version is fmt.V2:
                fmt.write_at(segment.fd, fmt.segment_header(number, capacity), 0)
            os.fsync(segment.fd)
            segment.capacity = capacity
        return segment

    def _repair_tail(self) -> None:
        """Zero what a writer that died mid-append left after the last whole record (we hold the
        lock, and ``_catch_up`` found no whole record after it)."""
        if not self._dirty:
            return
        segment = self._segments[self._tail]
        rest = os.pread(segment.fd, segment.capacity - self._end, self._end)
        fmt.write_at(segment.fd, bytes(len(rest.rstrip(b"\0"))), self._end)
        self._sync(segment.fd)
        self._dirty = False

    def _kill(self, name: str) -> None:
        """Delete every copy of ``name``: flags first (synced), then tombstones for the others."""
        places = self._index.copies(name)
        touched = {place.segment: self._segments[place.segment] for place in places}
        for place in places:
            fmt.write_at(touched[place.segment].fd, bytes([fmt.DELETED]), place.offset + fmt.FLAGS_AT)
        for segment in touched.values():
            self._sync(segment.fd)
        for place in places:
            self._append(fmt.TOMBSTONE, name, fmt.TOMBSTONE_PLACE.pack(place.segment, place.offset))
        for segment in touched.values():
            self._reclaim(segment)

    def _tidy(self, since: int) -> None:
        """Reclaim the segments sealed since ``since`` (all sealed ones, the first time): a
        segment of tombstones is never touched by a delete."""
        if self._tidied and since == self._tail:
            return
        for number in sorted(n for n in self._segments if (since if self._tidied else 0) <= n < self._tail):
            if (segment := self._segments.get(number)) is not None:
                self._reclaim(segment)
        self._tidied = True

    def _reclaim(self, segment: Segment) -> None:
        """Unlink a sealed segment with nothing live, moving the live records of a sparse one
        to the end first."""
        if segment.number == self._tail or self._index.live[segment.number] * 4 >= segment.capacity:
            return
        moved = {}
        for name, place in self._index.current_in(segment.number):
            content = self._read_live(name, place)
            if content is not None:
                target = self._append(fmt.OBJECT, name, content)
                moved[target.number] = target
        for target in moved.values():
            self._sync(target.fd)
        for name, place in self._index.shadows_in(segment.number):
            fmt.write_at(segment.fd, bytes([fmt.DELETED]), place.offset + fmt.FLAGS_AT)
            self._append(fmt.TOMBSTONE, name, fmt.TOMBSTONE_PLACE.pack(place.segment, place.offset))
        with contextlib.suppress(FileNotFoundError):
            self._path(segment.number).unlink()
        os.close(segment.fd)
        del self._segments[segment.number]
        self._index.forget_segment(segment.number)
        fsync_dir(self.directory)

    # --- housekeeping ---------------------------------------------------------------------

    def _sync(self, fd: int) -> None:
        """``fdatasync``, keeping a moving average of how long it takes."""
        started = time.perf_counter()
        os.fdatasync(fd)
        self._sync_seconds += (time.perf_counter() - started - self._sync_seconds) / 8

    def _reset(self) -> None:
        super()._reset()
        self._tidied = False
