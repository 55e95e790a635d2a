"""Benchmark jqueue's queues on its storage backends: memory, file and S3 (moto's server).

This runs the benchmark of ``jqueue.bench`` (its docstring describes the
scenarios and the ``verified`` check; ``jqueue bench --storage URL`` runs it against
any storage) over a matrix of backends: every combination of backend, queue and
scenario runs ``--ops`` calls against a fresh queue object (a new
``InMemoryStorage``, a new file, or a new S3 key). The results go to stdout as a
table and, with ``--json PATH``, to a JSON file with run metadata.

Backends are ``memory``, ``file`` (a temporary directory, or ``--dir``) and
``s3`` (moto's threaded server on a free loopback port, started and stopped by
this tool; it needs the dev dependencies). ``--url`` runs one storage URL instead.
``--get-latency-ms`` / ``--put-latency-ms`` add a fixed sleep before every storage
read / write on any backend, to imitate a remote object store.

Examples
--------
Everything, with the defaults (1000 ops, 1 KiB payloads)::

    .venv/bin/python tools/benchmark_storage.py

A quick run on local backends only::

    .venv/bin/python tools/benchmark_storage.py --ops 100 --backends memory,file

S3 (moto) with the round-trip times of a real object store, three repeats::

    .venv/bin/python tools/benchmark_storage.py --backends s3 --get-latency-ms 60 \\
        --put-latency-ms 100 --ops 200 --repeat 3

Only the broker queue on the mixed workload, results to a chosen file::

    .venv/bin/python tools/benchmark_storage.py --queues broker --scenarios mixed-c50 \\
        --json /tmp/mixed.json

The exit status is 0 when every row verified, 1 when some did not, and 2 for
bad arguments.
"""

from __future__ import annotations

import contextlib
import logging
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType
from typing import Any

from jqueue import InMemoryStorage, LocalFileSystemStorage, ObjectStoragePort
from jqueue.bench.runner import Backend, discard_local_files, main, unique_name, url_backends
from jqueue.bench.settings import Settings
from jqueue.testing import free_port

S3_REGION = "us-east-1"
S3_BUCKET = "jqueue-bench"


class MotoS3:
    """A moto S3 server in a thread of this process, with one bucket.

    Use as a context manager; ``make_storage`` then returns an ``S3Storage`` on a
    new key each call. Fake credentials are passed explicitly (to boto3 and to an
    ``aioboto3.Session``), so no real AWS credentials are looked up.
    """

    access_key = "bench-access-key"
    secret_key = "bench-secret-key"

    def __init__(self) -> None:
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self._server: Any = None
        self._session: Any = None

    def __enter__(self) -> MotoS3:
        import aioboto3  # type: ignore[import-untyped, unused-ignore]
        import boto3  # type: ignore[import-untyped, unused-ignore]
        from moto.server import ThreadedMotoServer

        self._server = ThreadedMotoServer(ip_address="127.0.0.1", port=self.port, verbose=False)
        self._server.start()
        try:
            client = boto3.client(
                "s3",
                endpoint_url=self.endpoint,
                region_name=S3_REGION,
                aws_access_key_id=self.access_key,
                aws_secret_access_key=self.secret_key,
            )
            client.create_bucket(Bucket=S3_BUCKET)
            client.close()
            self._session = aioboto3.Session(
                aws_access_key_id=self.access_key,
                aws_secret_access_key=self.secret_key,
                region_name=S3_REGION,
            )
        except BaseException:
            self._server.stop()
            raise
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._server is not None:
            self._server.stop()
            self._server = None

    def make_storage(self, key: str) -> ObjectStoragePort:
        """Return an ``S3Storage`` for ``key`` in the benchmark bucket."""
        from jqueue.adapters.storage.s3 import S3Storage

        return S3Storage(
            S3_BUCKET, key, endpoint_url=self.endpoint, region_name=S3_REGION, session=self._session
        )


class MemoryBackend:
    """A new ``InMemoryStorage`` per run (gone with its last reference)."""

    name = "memory"

    def fresh(self, tag: str) -> ObjectStoragePort:
        """Return a new in-memory object."""
        return InMemoryStorage(name=unique_name(tag))

    def discard(self, storage: ObjectStoragePort) -> None:
        """Nothing to remove."""


class FileBackend:
    """A new state file per run in ``directory``, deleted afterwards."""

    name = "file"

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def fresh(self, tag: str) -> ObjectStoragePort:
        """Return a storage on a new file."""
        return LocalFileSystemStorage(self.directory / f"{unique_name(tag)}.json")

    def discard(self, storage: ObjectStoragePort) -> None:
        """Delete the run's files."""
        discard_local_files(storage)


class S3Backend:
    """A new key per run on a running moto server (keys die with the server)."""

    name = "s3"

    def __init__(self, s3: MotoS3) -> None:
        self.s3 = s3

    def fresh(self, tag: str) -> ObjectStoragePort:
        """Return a storage on a new key."""
        return self.s3.make_storage(f"bench/{unique_name(tag)}.json")

    def discard(self, storage: ObjectStoragePort) -> None:
        """Nothing to remove."""


@contextlib.contextmanager
def file_directory(directory: Path | None) -> Iterator[Path]:
    """Yield ``directory`` (created if needed), or a temporary one removed afterwards."""
    if directory is not None:
        directory.mkdir(parents=True, exist_ok=True)
        yield directory
        return
    with tempfile.TemporaryDirectory(prefix="jqueue-bench-") as tmp:
        yield Path(tmp)


def open_backends(settings: Settings, stack: contextlib.ExitStack) -> list[Backend]:
    """Return the backends of ``--backends`` (or of ``--url``), starting moto's server for ``s3``."""
    if settings.url is not None:
        return url_backends(settings, stack)
    backends: list[Backend] = []
    for name in settings.backends:
        if name == "memory":
            backends.append(MemoryBackend())
        elif name == "file":
            backends.append(FileBackend(stack.enter_context(file_directory(settings.directory))))
        elif name == "s3":
            backends.append(S3Backend(stack.enter_context(MotoS3())))
    return backends


if __name__ == "__main__":
    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # moto's server logs every request
    sys.exit(main(open_backends=open_backends))
