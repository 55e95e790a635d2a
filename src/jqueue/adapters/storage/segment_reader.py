"""``SegmentReader``: the reading half of ``SegmentLog``, which indexes a directory of segments.

It opens the lock file and the segments, follows the records other processes append
(stopping at one that is not whole, and telling a torn tail from damage under a shared
lock), and reads records back with their checksums checked. ``SegmentLog`` adds the writes.
"""

from __future__ import annotations

import contextlib
import fcntl
import mmap
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

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
from jqueue.domain.errors import CorruptStateError

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
        if not hold_flock(self._lock_fd, mode, self._lock_path.as_uri()):
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
