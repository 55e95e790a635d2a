"""The bytes of a segment file: its header, its records, and the blocking writes that make them.

A segment starts with its version's header: magic, segment number and, from version 2, the
capacity it was made with (so that a truncated segment is told from a short one). A record is
``RECORD`` (magic, CRC-32, content length, name length, kind, flags), then the name, then the
content, then, from version 2, ``TRAILER`` (the record's size and an end magic); the CRC
covers the lengths, the kind, the name and the content, not the flags byte, which a delete
flips in place. The trailer is what tells a torn append (a prefix of a record, or pages of it
never written) from damage (a record written whole that fails its checksum): see
``tail_damage``.
"""

from __future__ import annotations

import contextlib
import os
import struct
import time
import zlib
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class SegmentVersion:
    """What differs between the versions of the segment format.

    Attributes
    ----------
    magic : bytes
        The first eight bytes of a segment of this version.
    header : struct.Struct
        The segment's header (magic, number and, from version 2, capacity).
    trailer : int
        The bytes each record has after its content (0 before version 2).
    """

    magic: bytes
    header: struct.Struct
    trailer: int

    def record_size(self, name_length: int, content_length: int) -> int:
        """The bytes a record with a name and content of these lengths takes."""
        return RECORD.size + name_length + content_length + self.trailer


RECORD = struct.Struct("<IIIHBB")
TRAILER = struct.Struct("<QI")
"""A record's size, then ``_END_MAGIC``, whose bytes no single flipped bit can make zero."""
V1 = SegmentVersion(b"jqseg\x00\x00\x01", struct.Struct("<8sQ"), 0)
"""Segments written before trailers: read, and sealed by the first write of this version."""
V2 = SegmentVersion(b"jqseg\x00\x00\x02", struct.Struct("<8sQQ"), TRAILER.size)
"""The version new segments are written in."""
VERSIONS = {version.magic: version for version in (V1, V2)}
PAGE = 4096
"""The unit in which a crash can leave a written file's pages unwritten."""
_END_MAGIC = 0x3CC35AA5
RECORD_MAGIC = 0x3152514A
TOMBSTONE_PLACE = struct.Struct("<QQ")
OBJECT, SEAL, TOMBSTONE = 1, 2, 3
DELETED = 1
FLAGS_AT = RECORD.size - 1
ZEROS = bytes(RECORD.size)
_CRC_FIELDS = slice(8, 15)
_MAGIC_BYTES = struct.pack("<I", RECORD_MAGIC)
_ORPHAN_AGE_SECONDS = 3600.0


def encode_record(kind: int, name: str, content: bytes, version: SegmentVersion = V2) -> bytes:
    """Return the bytes of a record in a segment of ``version``."""
    encoded = name.encode()
    head = RECORD.pack(RECORD_MAGIC, 0, len(content), len(encoded), kind, 0)
    crc = zlib.crc32(content, zlib.crc32(encoded, zlib.crc32(head[_CRC_FIELDS])))
    parts = [RECORD.pack(RECORD_MAGIC, crc, len(content), len(encoded), kind, 0), encoded, content]
    if version.trailer:
        parts.append(TRAILER.pack(version.record_size(len(encoded), len(content)), _END_MAGIC))
    return b"".join(parts)


def record_matches(data: bytes | memoryview, at: int, end: int, version: SegmentVersion) -> bool:
    """Whether the record in ``data[at:end]`` has the CRC its header says and, in a segment of
    ``version``, the trailer its size says."""
    view = memoryview(data)
    body_end = end - version.trailer
    if version.trailer and TRAILER.unpack_from(view, body_end) != (end - at, _END_MAGIC):
        return False
    return head_matches(view[at : at + RECORD.size], view[at + RECORD.size : body_end], b"")


def head_matches(head: bytes | memoryview, name: bytes | memoryview, content: bytes | memoryview) -> bool:
    """Whether a record's header, name and content (read apart) agree with the header's CRC."""
    crc: int = RECORD.unpack_from(head)[1]
    return zlib.crc32(content, zlib.crc32(name, zlib.crc32(head[_CRC_FIELDS]))) == crc


def whole_record_after(data: bytes, version: SegmentVersion) -> int | None:
    """Return the offset of the first whole record in ``data`` after its first byte, if any."""
    found = data.find(_MAGIC_BYTES, 1)
    while found >= 0:
        if found + RECORD.size <= len(data):
            _, _, length, name_length, _, _ = RECORD.unpack_from(data, found)
            end = found + version.record_size(name_length, length)
            if end <= len(data) and record_matches(data, found, end, version):
                return found
        found = data.find(_MAGIC_BYTES, found + 1)
    return None


def tail_damage(rest: bytes, offset: int, version: SegmentVersion) -> str | None:
    """Say what is wrong with ``rest``, the bytes from a record that is not whole to the end of
    the newest segment (at ``offset`` in its file, with nobody appending), or None if they are
    what a torn append leaves: part of one record, then zeros.

    An append writes a record in one call and syncs it before anyone is told it committed. A
    writer killed in that call leaves a prefix of the record; a machine that stops before the
    sync may also leave whole pages of it unwritten. A record whose last byte (its trailer's
    end magic) was written where its header or its trailer says it ends was written whole: if
    it fails its checksum and no page of it is missing, it is damage, and it may be a commit
    that was acknowledged. Before version 2 (no trailer) the two cannot be told apart.
    """
    if (found := whole_record_after(rest, version)) is not None:
        return f"a damaged record, with a whole record {found} bytes after it"
    last = len(rest.rstrip(b"\0"))
    if not version.trailer or last < RECORD.size + TRAILER.size:
        return None
    magic, _, length, name_length, _, _ = RECORD.unpack_from(rest)
    said = {TRAILER.unpack_from(rest, last - TRAILER.size)}
    if magic == RECORD_MAGIC:
        said.add((version.record_size(name_length, length), _END_MAGIC))
    if (last, _END_MAGIC) not in said:
        return None  # it ends before its end: the rest of it never arrived
    first_page = -offset % PAGE
    pages = range(first_page, last - PAGE + 1, PAGE)
    if any(not rest[page : page + PAGE].strip(b"\0") for page in pages):
        return None  # a page of it never arrived (the machine stopped before the sync)
    return f"a record of {last} bytes, written whole, fails its checksum"


def write_at(fd: int, data: bytes, offset: int) -> None:
    """Write all of ``data`` at ``offset``."""
    view = memoryview(data)
    while view:
        written = os.pwrite(fd, view, offset)
        view, offset = view[written:], offset + written


def segment_header(number: int, capacity: int) -> bytes:
    """Return the header of a new segment (the newest version)."""
    return V2.header.pack(V2.magic, number, capacity)


def preallocate(fd: int, size: int) -> None:
    """Give the file ``size`` bytes of allocated zeros, so appends change no metadata."""
    try:
        os.posix_fallocate(fd, 0, size)
    except OSError:  # a file system without it: a sparse file works, its syncs cost more
        os.ftruncate(fd, size)


def segment_numbers(directory: Path, after: int = 0) -> list[int]:
    """Return the numbers of the segment files in ``directory`` above ``after``, in order."""
    numbers = []
    for entry in os.scandir(directory):
        stem, dot, suffix = entry.name.partition(".")
        if dot and suffix == "seg" and stem.isdigit() and int(stem) > after:
            numbers.append(int(stem))
    return sorted(numbers)


def sweep_old_temporaries(directory: Path) -> None:
    """Remove the temporary segments of writers that died long ago."""
    cutoff = time.time() - _ORPHAN_AGE_SECONDS
    for entry in os.scandir(directory):
        if entry.name.startswith(".") and entry.name.endswith(".tmp"):
            with contextlib.suppress(FileNotFoundError):
                if entry.stat().st_mtime < cutoff:
                    os.unlink(entry.path)
