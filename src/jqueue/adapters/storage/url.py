"""``storage_from_url``: a storage backend from one URL (``storage_at``: or from a path)."""

from __future__ import annotations

import re
import threading
from urllib.parse import parse_qs, unquote, urlsplit

from jqueue.adapters.storage.filesystem import LocalFileSystemStorage
from jqueue.adapters.storage.memory import InMemoryStorage
from jqueue.domain.errors import InvalidURLError
from jqueue.ports.storage import ObjectStoragePort

_memory_objects: dict[str, InMemoryStorage] = {}
_memory_lock = threading.Lock()

_S3_OPTIONS = frozenset({"endpoint_url", "region"})
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:")


def is_url(location: str) -> bool:
    """Whether a storage location is a URL (``scheme://...``, or any ``name:`` prefix, so that
    ``file:/x`` or ``s3:/bucket`` is not taken for a file's path) rather than a path."""
    return "://" in location or _SCHEME.match(location) is not None


def storage_at(location: str) -> ObjectStoragePort:
    """Build the storage of a URL or of a file's path: the same as ``storage_from_url``.

    Raises
    ------
    InvalidURLError
        If a URL is malformed, its scheme unknown, or a part is missing or unexpected.
    """
    return storage_from_url(location)


def storage_from_url(url: str) -> ObjectStoragePort:
    """Build the storage a URL, or a file's path, names.

    ``memory://name`` (one object per name in this process),
    ``file:///abs/path/queue.json``,
    ``s3://bucket/key?endpoint_url=http://host:9000&region=eu-west-1`` (both optional),
    ``gs://bucket/blob`` (``STORAGE_EMULATOR_HOST`` selects an emulator); a location without
    a scheme is a file's path, absolute or relative to the working directory
    (``queues/jobs.json``), as everywhere a queue is named: ``sync.open_queue``, ``connect``,
    the command line (a ``name:`` prefix is read as a scheme, so that ``file:/x`` or
    ``s3:/bucket`` is not taken for a file).

    Raises
    ------
    InvalidURLError
        If the URL is empty or malformed, its scheme unknown, or a part is missing or
        unexpected.
    """
    if not is_url(url):
        if not url:
            raise InvalidURLError(url, "give a URL (memory, file, s3, gs) or a file's path")
        return LocalFileSystemStorage(url)
    parts = urlsplit(url)
    options = parse_qs(parts.query, keep_blank_values=True)
    if parts.fragment:
        raise InvalidURLError(url, "fragments are not allowed")
    scheme = parts.scheme.lower()
    if scheme != "s3" and options:
        raise InvalidURLError(url, f"{scheme}:// URLs take no query parameters")
    if scheme == "memory":
        name = parts.netloc + parts.path
        if not name:
            raise InvalidURLError(url, "a memory URL needs a name, as in memory://jobs")
        with _memory_lock:
            return _memory_objects.setdefault(name, InMemoryStorage(name=name))
    if scheme == "file":
        path = unquote(parts.path)
        if parts.netloc not in ("", "localhost"):
            raise InvalidURLError(url, "a file URL must be file:///absolute/path (no host)")
        if not path.startswith("/") or path.endswith("/"):
            raise InvalidURLError(url, "a file URL needs an absolute path to a file")
        return LocalFileSystemStorage(path)
    if scheme in ("s3", "gs"):
        bucket, key = parts.netloc, unquote(parts.path.lstrip("/"))
        if not bucket or not key:
            raise InvalidURLError(url, f"expected {scheme}://bucket/object-key")
        if scheme == "gs":
            from jqueue.adapters.storage.gcs import GCSStorage

            return GCSStorage(bucket, key)
        return _s3_storage(url, bucket, key, options)
    raise InvalidURLError(url, "the scheme must be one of memory, file, s3, gs")


def _s3_storage(url: str, bucket: str, key: str, options: dict[str, list[str]]) -> ObjectStoragePort:
    """The ``S3Storage`` of an ``s3://`` URL, with its options checked."""
    unknown = set(options) - _S3_OPTIONS
    if unknown:
        raise InvalidURLError(url, f"unknown option(s) {sorted(unknown)}; allowed: {sorted(_S3_OPTIONS)}")
    if any(len(values) != 1 or not values[0] for values in options.values()):
        raise InvalidURLError(url, "each option must be given once, with a value")
    from jqueue.adapters.storage.s3 import S3Storage

    return S3Storage(
        bucket,
        key,
        endpoint_url=options.get("endpoint_url", [None])[0],
        region_name=options.get("region", [None])[0],
    )
