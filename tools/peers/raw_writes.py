"""The physical limit for ``benchmark_peers.py``: bare loops of durable writes of 1.2 KB records.

Each pattern takes a directory and a count and returns ops/s and CPU per op. Add a pattern by
adding a function to ``RAW_PATTERNS``.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable
from pathlib import Path

RECORD = os.urandom(1200)


def _timed(count: int, loop: Callable[[], None]) -> dict[str, float]:
    started, cpu = time.perf_counter(), time.process_time()
    loop()
    seconds = time.perf_counter() - started
    return {
        "ops_per_s": round(count / seconds, 1),
        "cpu_ms_per_op": round((time.process_time() - cpu) * 1000 / count, 4),
    }


def file_per_write(directory: Path, count: int) -> dict[str, float]:
    """What a file commit cost before segment files: temporary file, fsync, link, unlink, directory fsync."""

    def loop() -> None:
        dir_fd = os.open(directory, os.O_RDONLY)
        for n in range(count):
            temporary = directory / f".{uuid.uuid4().hex}.tmp"
            fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            os.write(fd, RECORD)
            os.fsync(fd)
            os.close(fd)
            os.link(temporary, directory / f"{n:020d}")
            os.unlink(temporary)
            os.fsync(dir_fd)
        os.close(dir_fd)

    return _timed(count, loop)


def append_fdatasync(directory: Path, count: int) -> dict[str, float]:
    """What a file commit costs now: a write into a preallocated segment, then ``fdatasync``."""
    fd = os.open(directory / "segment", os.O_RDWR | os.O_CREAT, 0o644)
    os.posix_fallocate(fd, 0, max(8 << 20, count * len(RECORD)))
    os.fsync(fd)

    def loop() -> None:
        for n in range(count):
            os.pwrite(fd, RECORD, n * len(RECORD))
            os.fdatasync(fd)

    try:
        return _timed(count, loop)
    finally:
        os.close(fd)


RAW_PATTERNS: dict[str, Callable[[Path, int], dict[str, float]]] = {
    "file-per-write": file_per_write,
    "append+fdatasync": append_fdatasync,
}
