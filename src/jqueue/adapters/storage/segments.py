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
import mmap
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from jqueue.adapters.storage import segment_format as fmt
from jqueue.adapters.storage.file_lock import hold_flock
from jqueue.adapters.storage.object_files import fsync_dir
from jqueue.adapters.storage.segment_format import (
    DELETED,
    FLAGS_AT,
    OBJECT,
    RECORD,
    RECORD_MAGIC,
    SEAL,
    TOMBSTONE,
    TOMBSTONE_PLACE,
    V1,
    VERSIONS,
    ZEROS,
    SegmentVersion,
    head_matches,
    record_matches,
    segment_numbers,
    sweep_old_temporaries,
    tail_damage,
)
from jqueue.adapters.storage.segment_index import Place, SegmentIndex
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


_FIRST_READ = 4096
_CHUNK = 1 << 20


@dataclass(slots=True)
class Segment:
    """One open segment file."""

    number: int
    fd: int
    capacity: int
    version: SegmentVersion

    @property
    def start(self) -> int:
        """Where its first record goes (after its header)."""
        return self.version.header.size


class SegmentReader:
    """The index of the segments under ``directory``, kept up to date by reading them.

    Not thread-safe by itself: ``SegmentLog`` serialises its calls with ``_mutex``.
    """

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._lock_path = directory / "lock"
        self._lock_uri = self._lock_path.as_uri()  # for messages: as_uri costs a claim microseconds
        self._mutex = threading.Lock()
        self._lock_fd = -1
        self._lock_id: tuple[int, int] | None = None
        self._holding = False
        self._segments: dict[int, Segment] = {}
        self._index = SegmentIndex()
        self._tail = 0
        self._end = 0
        self._dirty = False
        self._quick = False

    # --- opening and catching up ----------------------------------------------------------

    def _ready(self, *, create: bool) -> bool:
        """Open the lock file (starting over if the directory was replaced); False if there is
        no store and ``create`` is false."""
        if self._lock_fd >= 0:
            try:
                found = os.stat(self._lock_path)
            except FileNotFoundError:
                found = None
            if found is None or (found.st_dev, found.st_ino) != self._lock_id:
                self._reset()
        if self._lock_fd >= 0:
            return True
        if not self._lock_path.exists():
            if not create:
                return False
            if not self.directory.is_dir():
                self.directory.mkdir(parents=True, exist_ok=True)
                fsync_dir(self.directory.parent)
        self._lock_fd = os.open(self._lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        found = os.fstat(self._lock_fd)
        self._lock_id = (found.st_dev, found.st_ino)
        if create:
            sweep_old_temporaries(self.directory)
        return True

    def _catch_up(self) -> None:
        """Read the records appended since our last look, following seals to newer segments."""
        if self._tail == 0:
            for number in segment_numbers(self.directory):
                segment = self._open_segment(number)
                if segment is not None:  # else reclaimed since the listing
                    if self._dirty:
                        self._check_damage(self._segments[self._tail], self._end)
                    self._tail = number
                    self._end, _ = self._scan(segment, segment.start)
        else:
            self._end, sealed = self._scan(self._segments[self._tail], self._end)
            while sealed:
                later = segment_numbers(self.directory, after=self._tail)
                segment = self._open_segment(later[0]) if later else None
                if segment is None:
                    raise CorruptStateError(
                        self._path(self._tail).as_uri(), "sealed, but no newer segment exists"
                    )
                self._tail = segment.number
                self._end, sealed = self._scan(segment, segment.start)
        if self._dirty and self._quick:
            return  # a writer may be mid-append: its record is not committed yet
        if self._dirty and not self._holding:
            with self._locked(fcntl.LOCK_SH):  # no writer is mid-append now: look again
                self._catch_up()
        elif self._dirty:
            self._check_damage(self._segments[self._tail], self._end)

    def _path(self, number: int) -> Path:
        return self.directory / f"{number:012d}.seg"

    def _open_segment(self, number: int) -> Segment | None:
        path = self._path(number)
        try:
            fd = os.open(path, os.O_RDWR)
        except FileNotFoundError:
            return None
        try:
            version, capacity = _read_header(fd, number, path)
        except CorruptStateError:
            os.close(fd)
            raise
        segment = self._segments[number] = Segment(number, fd, capacity, version)
        return segment

    def _scan(self, segment: Segment, start: int) -> tuple[int, bool]:
        """Index the whole records from ``start``; return where they end and whether a seal ends
        them. Sets ``_dirty`` when bytes that are not a whole record follow them."""
        position, buffer, buffered_at, read = start, b"", start, _FIRST_READ
        self._dirty = False
        while position + RECORD.size <= segment.capacity:
            if position + RECORD.size > buffered_at + len(buffer):
                buffer, buffered_at, read = os.pread(segment.fd, read, position), position, _CHUNK
            at = position - buffered_at
            magic, _, length, name_length, kind, flags = RECORD.unpack_from(buffer, at)
            size = segment.version.record_size(name_length, length)
            if magic != RECORD_MAGIC or position + size > segment.capacity:
                self._dirty = buffer[at : at + RECORD.size] != ZEROS
                break
            if at + size > len(buffer) and kind == OBJECT and self._followed(segment, position + size):
                # A record with a whole header after it was complete when that one was written:
                # its content (checked at every read) need not be read now.
                name = os.pread(segment.fd, name_length, position + RECORD.size).decode()
                self._note(Place(segment.number, position, size), kind, flags, name, b"")
                position, buffer, buffered_at = position + size, b"", position + size
                continue
            if at + size > len(buffer):
                buffer, buffered_at, at = os.pread(segment.fd, max(_CHUNK, size), position), position, 0
            if not record_matches(buffer, at, at + size, segment.version):
                self._dirty = True
                break
            if kind == SEAL:
                return position, True
            body = memoryview(buffer)[at + RECORD.size : at + size - segment.version.trailer]
            name = bytes(body[:name_length]).decode()
            self._note(Place(segment.number, position, size), kind, flags, name, body[name_length:])
            position += size
        return position, False

    def _followed(self, segment: Segment, position: int) -> bool:
        """Whether a whole record header (of any kind) starts at ``position``."""
        head = os.pread(segment.fd, RECORD.size, position)
        return len(head) == RECORD.size and RECORD.unpack_from(head)[0] == RECORD_MAGIC

    def _check_damage(self, segment: Segment, end: int) -> None:
        """Report a bad record that is not what a torn append leaves (nobody is appending: we
        hold a lock, or the segment is sealed), and a segment cut short since it was made."""
        path = self._path(segment.number)
        segment.version, segment.capacity = _read_header(segment.fd, segment.number, path)  # grown? cut?
        rest = os.pread(segment.fd, segment.capacity - end, end)
        where = f"{path.as_uri()}#{end}"
        if rest[: RECORD.size] != ZEROS and (damage := tail_damage(rest, end, segment.version)) is not None:
            raise CorruptStateError(where, damage)

    # --- records --------------------------------------------------------------------------

    def _note(self, place: Place, kind: int, flags: int, name: str, content: memoryview | bytes) -> None:
        """Index a record just read or written."""
        if kind == TOMBSTONE:
            self._index.remove(name, *TOMBSTONE_PLACE.unpack(content))
        elif kind == OBJECT and not flags & DELETED:
            self._index.add(name, place)

    def _read_live(self, name: str, place: Place) -> bytes | None:
        """Return the record's content, or None (and forget it) if it was deleted."""
        segment = self._segments.get(place.segment)
        if segment is None:
            return None
        skip = RECORD.size + len(name.encode())
        head = os.pread(segment.fd, skip, place.offset)  # apart from the content: no copy of it
        content = os.pread(segment.fd, place.size - skip - segment.version.trailer, place.offset + skip)
        if (
            len(head) + len(content) + segment.version.trailer < place.size
            or RECORD.unpack_from(head)[0] != RECORD_MAGIC
            or not head_matches(head[: RECORD.size], head[RECORD.size :], content)
        ):
            where = f"{self._path(place.segment).as_uri()}#{place.offset}"
            raise CorruptStateError(where, f"the record of {name!r} fails its checksum")
        if head[FLAGS_AT] & DELETED:
            self._index.remove(name, place.segment, place.offset)
            return None
        return content

    def _map_live(self, name: str, place: Place) -> memoryview | None:
        """Return the record's content mapped read-only, or None (and forget it) if it was deleted."""
        segment = self._segments.get(place.segment)
        if segment is None:
            return None
        encoded = name.encode()  # not empty: a short read fails the first test
        head = os.pread(segment.fd, RECORD.size + len(encoded), place.offset)
        if head[RECORD.size :] != encoded or RECORD.unpack_from(head)[0] != RECORD_MAGIC:
            where = f"{self._path(place.segment).as_uri()}#{place.offset}"
            raise CorruptStateError(where, f"the record of {name!r} is not where its segment's index says")
        if head[FLAGS_AT] & DELETED:
            self._index.remove(name, place.segment, place.offset)
            return None
        mapping = mmap.mmap(segment.fd, 0, access=mmap.ACCESS_READ)
        if place.offset + place.size > len(mapping):
            where = f"{self._path(place.segment).as_uri()}#{place.offset}"
            raise CorruptStateError(where, f"the record of {name!r} runs past its segment's end")
        end = place.offset + place.size - segment.version.trailer
        return memoryview(mapping)[place.offset + len(head) : end]

    def _is_live(self, name: str, place: Place) -> bool:
        """Whether the record is not deleted (forgetting it if it is)."""
        segment = self._segments.get(place.segment)
        if segment is not None and not os.pread(segment.fd, 1, place.offset + FLAGS_AT)[0] & DELETED:
            return True
        self._index.remove(name, place.segment, place.offset)
        return False

    # --- the lock and the files ----------------------------------------------------------

    @contextlib.contextmanager
    def _locked(self, mode: int) -> Iterator[bool]:
        """Hold the lock file's ``flock`` in ``mode``; with ``LOCK_NB``, yield False (holding
        nothing) while another process holds it."""
        if not hold_flock(self._lock_fd, mode, self._lock_uri):
            yield False
            return
        self._holding = True
        try:
            yield True
        finally:
            self._holding = False
            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)

    def _reset(self) -> None:
        for segment in self._segments.values():
            os.close(segment.fd)
        if self._lock_fd >= 0:
            os.close(self._lock_fd)
        self._segments.clear()
        self._index.clear()
        self._lock_fd, self._lock_id, self._tail, self._end, self._dirty = -1, None, 0, 0, False


def _read_header(fd: int, number: int, path: Path) -> tuple[SegmentVersion, int]:
    """Return a segment file's version and capacity, checking that it is the segment it is
    named as and (from version 2) that it is as long as it was made."""
    header = os.pread(fd, max(version.header.size for version in VERSIONS.values()), 0)
    version = VERSIONS.get(header[:8])
    if version is None or len(header) < version.header.size:
        raise CorruptStateError(path.as_uri(), "not a jqueue segment file")
    _, found, *made = version.header.unpack_from(header)
    if found != number:
        raise CorruptStateError(path.as_uri(), f"holds the header of segment {found}")
    size = os.fstat(fd).st_size
    if version is V1:
        return version, size
    capacity: int = made[0]
    if size < capacity:
        raise CorruptStateError(path.as_uri(), f"{size} bytes long, short of the {capacity} it was made with")
    return version, capacity


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
