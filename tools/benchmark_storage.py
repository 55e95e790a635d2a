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

import argparse
import contextlib
import logging
import math
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

from jqueue import InMemoryStorage, LocalFileSystemStorage, ObjectStoragePort
from jqueue.bench.runner import Backend, discard_local_files, run, unique_name, url_backends
from jqueue.bench.settings import BACKENDS, QUEUES, SCENARIOS, Settings, name_list
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


def _name_list(kind: str, allowed: Sequence[str]) -> Callable[[str], list[str]]:
    """Return an argparse ``type`` that parses a comma list of names from ``allowed``."""

    def parse(text: str) -> list[str]:
        try:
            return name_list(kind, text, allowed)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    return parse


def _bounded_int(minimum: int) -> Callable[[str], int]:
    """Return an argparse ``type`` for an integer of at least ``minimum``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}, got {value}")
        return value

    return parse


def _non_negative_float(text: str) -> float:
    """Parse a finite number of at least zero (an argparse ``type``)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0, got {text!r}")
    return value


def build_parser() -> argparse.ArgumentParser:
    """Return the command-line parser."""
    parser = argparse.ArgumentParser(
        prog="benchmark_storage.py",
        description="Benchmark jqueue's DirectQueue and BrokerQueue on memory, file and S3 (moto) storage.",
        epilog="Each (backend, queue, scenario) starts from a fresh queue object. "
        "See the module docstring for the scenarios. Exit status: 0 if every row verified, "
        "1 if some did not, 2 for bad arguments.",
    )
    lists = (
        ("--backends", "backend", BACKENDS, "storage backends"),
        ("--queues", "queue", QUEUES, "queue kinds"),
        ("--scenarios", "scenario", SCENARIOS, "scenarios"),
    )
    for flag, kind, names, what in lists:
        parser.add_argument(
            flag,
            type=_name_list(kind, names),
            default=",".join(names),  # a string default goes through ``type`` too
            metavar="LIST",
            help=f"comma-separated {what}, from: {', '.join(names)} (default: all)",
        )
    parser.add_argument(
        "--ops",
        type=_bounded_int(1),
        default=1000,
        metavar="N",
        help="operations (queue calls) per scenario (default: %(default)s)",
    )
    parser.add_argument(
        "--payload-bytes",
        type=_bounded_int(0),
        default=1024,
        metavar="N",
        help="payload size of each enqueued job (default: %(default)s)",
    )
    parser.add_argument(
        "--get-latency-ms",
        type=_non_negative_float,
        default=0.0,
        metavar="MS",
        help="fixed delay added before every storage read, on any backend (default: 0)",
    )
    parser.add_argument(
        "--put-latency-ms",
        type=_non_negative_float,
        default=0.0,
        metavar="MS",
        help="fixed delay added before every storage write, on any backend (default: 0)",
    )
    parser.add_argument(
        "--dir",
        type=Path,
        default=None,
        help="directory for the file backend's state files, created if needed; the tool deletes "
        "the files it made there (default: a temporary directory, removed afterwards)",
    )
    parser.add_argument(
        "--json",
        type=Path,
        default=None,
        metavar="PATH",
        help="also write the results as JSON to PATH; parent directories are created",
    )
    parser.add_argument(
        "--layout",
        choices=("single", "log"),
        default="log",
        help="storage layout of every queue (default: %(default)s)",
    )
    parser.add_argument(
        "--url",
        default=None,
        help="benchmark this storage URL instead of --backends: every scenario uses a fresh object "
        "beside it (file:, s3:, gs: or memory:); objects made on S3 or GCS are left in place",
    )
    parser.add_argument(
        "--repeat",
        type=_bounded_int(1),
        default=1,
        metavar="N",
        help="run every combination N times and report the run with the median ops/s "
        "(the lower median for even N) (default: %(default)s)",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Parse the options, run the benchmark over their backends; returns the exit status."""
    arguments = list(sys.argv[1:] if argv is None else argv)
    ns = build_parser().parse_args(arguments)
    settings = Settings(
        backends=ns.backends,
        queues=ns.queues,
        scenarios=ns.scenarios,
        ops=ns.ops,
        payload_bytes=ns.payload_bytes,
        get_latency_ms=ns.get_latency_ms,
        put_latency_ms=ns.put_latency_ms,
        directory=ns.dir,
        json_path=ns.json,
        repeat=ns.repeat,
        layout=ns.layout,
        url=ns.url,
    )
    return run(settings, open_backends, [sys.argv[0], *arguments])


if __name__ == "__main__":
    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # moto's server logs every request
    sys.exit(main())
