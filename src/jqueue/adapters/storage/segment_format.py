"""The bytes of a segment file: its header, its records, and the blocking writes that make them.

A segment starts with ``FILE_HEADER`` (magic, segment number). A record is ``RECORD``
(magic, CRC-32, content length, name length, kind, flags), then the name, then the content;
the CRC covers the lengths, the kind, the name and the content, not the flags byte, which a
delete flips in place.
"""

from __future__ import annotations

import contextlib
import os
import struct
import time
import zlib
from pathlib import Path

FILE_HEADER = struct.Struct("<8sQ")
FILE_MAGIC = b"jqseg\x00\x00\x01"
RECORD = struct.Struct("<IIIHBB")
RECORD_MAGIC = 0x3152514A
TOMBSTONE_PLACE = struct.Struct("<QQ")
OBJECT, SEAL, TOMBSTONE = 1, 2, 3
DELETED = 1
FLAGS_AT = RECORD.size - 1
ZEROS = bytes(RECORD.size)
_CRC_FIELDS = slice(8, 15)
_MAGIC_BYTES = struct.pack("<I", RECORD_MAGIC)
_ORPHAN_AGE_SECONDS = 3600.0


def encode_record(kind: int, name: str, content: bytes) -> bytes:
    """Return the bytes of a record."""
    encoded = name.encode()
    head = RECORD.pack(RECORD_MAGIC, 0, len(content), len(encoded), kind, 0)
    crc = zlib.crc32(content, zlib.crc32(encoded, zlib.crc32(head[_CRC_FIELDS])))
    return b"".join((RECORD.pack(RECORD_MAGIC, crc, len(content), len(encoded), kind, 0), encoded, content))


def checksum_matches(data: bytes | memoryview, at: int, end: int) -> bool:
    """Whether the record in ``data[at:end]`` has the CRC its header says."""
    view = memoryview(data)
    return head_matches(view[at : at + RECORD.size], view[at + RECORD.size : end], b"")


def head_matches(head: bytes | memoryview, name: bytes | memoryview, content: bytes | memoryview) -> bool:
    """Whether a record's header, name and content (read apart) agree with the header's CRC."""
    crc: int = RECORD.unpack_from(head)[1]
    return zlib.crc32(content, zlib.crc32(name, zlib.crc32(head[_CRC_FIELDS]))) == crc


def whole_record_after(data: bytes) -> int | None:
    """Return the offset of the first whole record in ``data`` after its first byte, if any."""
    found = data.find(_MAGIC_BYTES, 1)
    while found >= 0:
        if found + RECORD.size <= len(data):
            _, _, length, name_length, _, _ = RECORD.unpack_from(data, found)
            end = found + RECORD.size + name_length + length
            if end <= len(data) and checksum_matches(data, found, end):
                return found
        found = data.find(_MAGIC_BYTES, found + 1)
    return None


def write_at(fd: int, data: bytes, offset: int) -> None:
    """Write all of ``data`` at ``offset``."""
    view = memoryview(data)
    while view:
        written = os.pwrite(fd, view, offset)
        view, offset = view[written:], offset + written


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
