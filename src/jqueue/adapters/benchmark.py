"""Benchmark jqueue's queues on its storage backends.

Every combination of backend, queue and scenario runs ``--ops`` calls against a
fresh queue object (a new ``InMemoryStorage``, a new file, or a new S3 key) and
records the latency of each call. Afterwards the tool reads the queue state back
and checks that the calls really happened (the ``verified`` field). The results
go to stdout as a table and to a JSON file with run metadata.

Scenarios
---------
enqueue-seq
    One caller enqueues ``--ops`` jobs one after another.
enqueue-c10, enqueue-c50
    The ``--ops`` enqueues are split over 10 / 50 concurrent callers.
dequeue-seq
    The queue is filled with ``--ops`` jobs first (untimed, through a
    ``BrokerQueue`` fed by concurrent enqueues); then one caller dequeues one
    job per call until it has claimed them all.
mixed-c50
    50 concurrent callers each loop enqueue -> dequeue -> ack (of what the
    dequeue returned); every call counts as one op, ``--ops`` calls in total.

Backends are ``memory``, ``file`` (a temporary directory, or ``--dir``) and
``s3`` (moto's threaded server on a free loopback port, started and stopped by
this tool). ``--get-latency-ms`` / ``--put-latency-ms`` add a fixed sleep before
every storage read / write on any backend, to imitate a remote object store.

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
import asyncio
import contextlib
import json
import logging
import math
import os
import platform
import shlex
import shutil
import socket
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar
from urllib.parse import urlsplit, urlunsplit

import jqueue
from jqueue import (
    BrokerQueue,
    CASConflictError,
    DirectQueue,
    InMemoryStorage,
    Job,
    JobStatus,
    KeyedStoragePort,
    Layout,
    LocalFileSystemStorage,
    ObjectStoragePort,
    QueueState,
    storage_from_url,
)
from jqueue.core.queue import JobQueue as QueueOperations

BACKENDS = ("memory", "file", "s3")
QUEUES = ("direct", "broker")
SCENARIOS = ("enqueue-seq", "enqueue-c10", "enqueue-c50", "dequeue-seq", "mixed-c50")
ENTRYPOINT = "bench"
S3_REGION = "us-east-1"
S3_BUCKET = "jqueue-bench"
MAX_ERROR_SAMPLES = 5

R = TypeVar("R")

log = logging.getLogger("benchmark_storage")


# ---------------------------------------------------------------------------
# Arguments
# ---------------------------------------------------------------------------


def _name_list(kind: str, allowed: Sequence[str]) -> Callable[[str], list[str]]:
    """Return an argparse ``type`` that parses a comma list of names from ``allowed``.

    Parameters
    ----------
    kind : str
        What the names are, for error messages ("backend", "queue"...).
    allowed : sequence of str
        The valid names.

    Returns
    -------
    callable
        Converts ``"a,b"`` to ``["a", "b"]`` (order kept, duplicates dropped).
    """

    def parse(text: str) -> list[str]:
        names = [part.strip() for part in text.split(",") if part.strip()]
        if not names:
            raise argparse.ArgumentTypeError(f"no {kind} given")
        unknown = [name for name in names if name not in allowed]
        if unknown:
            raise argparse.ArgumentTypeError(
                f"unknown {kind} {', '.join(map(repr, unknown))} (choose from {', '.join(allowed)})"
            )
        return list(dict.fromkeys(names))

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
        prog="jqueue bench",
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


@dataclass(frozen=True)
class Settings:
    """The parsed command line.

    Attributes
    ----------
    backends, queues, scenarios : list of str
        What to run.
    ops : int
        Calls per scenario.
    payload_bytes : int
        Payload size of each job.
    get_latency_ms, put_latency_ms : float
        Delay added before each storage read / write.
    directory : Path or None
        Where the file backend writes; None for a temporary directory.
    json_path : Path or None
        The JSON output file, if any.
    repeat : int
        Runs per combination.
    layout : {"single", "log"}
        Storage layout of every queue.
    url : str or None
        Benchmark this storage (fresh objects beside the URL) instead of ``backends``.
    """

    backends: list[str]
    queues: list[str]
    scenarios: list[str]
    ops: int
    payload_bytes: int
    get_latency_ms: float
    put_latency_ms: float
    directory: Path | None
    json_path: Path
    repeat: int
    layout: Layout = "log"
    url: str | None = None

    @property
    def has_latency(self) -> bool:
        """Whether any artificial storage latency is configured."""
        return self.get_latency_ms > 0 or self.put_latency_ms > 0

    def backend_label(self, backend: str) -> str:
        """Return the backend's name as shown in the output, e.g. ``s3+lat(60/100)``."""
        if not self.has_latency:
            return backend
        return f"{backend}+lat({_fmt_ms(self.get_latency_ms)}/{_fmt_ms(self.put_latency_ms)})"


def _fmt_ms(value: float) -> str:
    return str(int(value)) if value == int(value) else f"{value:g}"


def parse_settings(argv: Sequence[str] | None = None) -> Settings:
    """Parse ``argv`` (default: ``sys.argv[1:]``) into ``Settings``; exits 2 on bad arguments."""
    ns = build_parser().parse_args(argv)
    return Settings(
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


# ---------------------------------------------------------------------------
# Storage wrapper: counts requests and optionally adds latency
# ---------------------------------------------------------------------------


@dataclass
class StorageCounters:
    """Storage requests seen by ``InstrumentedStorage``.

    Attributes
    ----------
    reads, writes : int
        Requests made.
    conflicts : int
        Writes rejected with ``CASConflictError``.
    """

    reads: int = 0
    writes: int = 0
    conflicts: int = 0


class InstrumentedStorage:
    """Wraps any storage: sleeps a fixed time before each request, and counts them.

    Opening and closing (``async with``) are passed on to the wrapped storage when
    it supports them, so a queue still manages the inner storage's client.

    Parameters
    ----------
    inner : ObjectStoragePort
        The storage that does the work.
    get_latency_ms, put_latency_ms : float
        Delay before each ``read()`` / ``write()``, in milliseconds.
    """

    def __init__(
        self, inner: ObjectStoragePort, get_latency_ms: float = 0.0, put_latency_ms: float = 0.0
    ) -> None:
        self.inner = inner
        self.get_delay = get_latency_ms / 1000.0
        self.put_delay = put_latency_ms / 1000.0
        self.counters = StorageCounters()
        url = getattr(inner, "url", None)
        self.url = url if isinstance(url, str) else repr(inner)

    async def read(self) -> tuple[bytes, str | None]:
        """Sleep ``get_latency_ms``, then read from the inner storage."""
        self.counters.reads += 1
        if self.get_delay:
            await asyncio.sleep(self.get_delay)
        return await self.inner.read()

    async def write(self, content: bytes, if_match: str | None = None) -> str:
        """Sleep ``put_latency_ms``, then write to the inner storage."""
        self.counters.writes += 1
        if self.put_delay:
            await asyncio.sleep(self.put_delay)
        try:
            return await self.inner.write(content, if_match)
        except CASConflictError:
            self.counters.conflicts += 1
            raise

    def _keyed(self) -> KeyedStoragePort:
        if not isinstance(self.inner, KeyedStoragePort):
            raise TypeError(f"{self.url} has no keyed operations")
        return self.inner

    async def get(self, name: str) -> bytes | None:
        """Sleep ``get_latency_ms``, then get a named object."""
        self.counters.reads += 1
        if self.get_delay:
            await asyncio.sleep(self.get_delay)
        return await self._keyed().get(name)

    async def create(self, name: str, content: bytes) -> None:
        """Sleep ``put_latency_ms``, then create a named object."""
        self.counters.writes += 1
        if self.put_delay:
            await asyncio.sleep(self.put_delay)
        try:
            await self._keyed().create(name, content)
        except CASConflictError:
            self.counters.conflicts += 1
            raise

    async def list_names(self, prefix: str, start_after: str = "") -> list[str]:
        """Sleep ``get_latency_ms``, then list named objects."""
        self.counters.reads += 1
        if self.get_delay:
            await asyncio.sleep(self.get_delay)
        return await self._keyed().list_names(prefix, start_after)

    async def delete(self, name: str) -> None:
        """Sleep ``put_latency_ms``, then delete a named object."""
        self.counters.writes += 1
        if self.put_delay:
            await asyncio.sleep(self.put_delay)
        await self._keyed().delete(name)

    async def __aenter__(self) -> InstrumentedStorage:
        if isinstance(self.inner, AbstractAsyncContextManager):
            await self.inner.__aenter__()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if isinstance(self.inner, AbstractAsyncContextManager):
            await self.inner.__aexit__(exc_type, exc, tb)


# ---------------------------------------------------------------------------
# Backends
# ---------------------------------------------------------------------------


def _free_port() -> int:
    """Return a TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class MotoS3:
    """A moto S3 server in a thread of this process, with one bucket.

    Use as a context manager; ``make_storage`` then returns an ``S3Storage`` on a
    new key each call. Fake credentials are passed explicitly (to boto3 and to an
    ``aioboto3.Session``), so no real AWS credentials are looked up.
    """

    access_key = "bench-access-key"
    secret_key = "bench-secret-key"

    def __init__(self) -> None:
        self.port = _free_port()
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


class Backend:
    """Makes a fresh storage object per scenario run, and cleans up after it.

    Parameters
    ----------
    name : str
        ``memory``, ``file`` or ``s3``.
    directory : Path or None
        For ``file``: where state files go.
    s3 : MotoS3 or None
        For ``s3``: the running server.
    """

    def __init__(
        self, name: str, directory: Path | None = None, s3: MotoS3 | None = None, url: str | None = None
    ) -> None:
        self.name = name
        self.directory = directory
        self.s3 = s3
        self.url = url

    def fresh(self, tag: str) -> ObjectStoragePort:
        """Return a storage for a queue object that does not exist yet."""
        unique = f"{tag}-{uuid.uuid4().hex[:12]}"
        if self.url is not None:
            return storage_from_url(sibling_url(self.url, f"{unique}.json"))
        if self.name == "memory":
            return InMemoryStorage(name=unique)
        if self.name == "file":
            assert self.directory is not None
            return LocalFileSystemStorage(self.directory / f"{unique}.json")
        if self.name == "s3":
            assert self.s3 is not None
            return self.s3.make_storage(f"bench/{unique}.json")
        raise ValueError(f"unknown backend {self.name!r}")

    def discard(self, storage: ObjectStoragePort) -> None:
        """Remove what ``fresh`` created on disk (file backend); S3 keys die with the server."""
        if isinstance(storage, LocalFileSystemStorage):
            for path in (storage.path, storage.path.with_name(storage.path.name + ".lock")):
                path.unlink(missing_ok=True)
            shutil.rmtree(storage.namespace, ignore_errors=True)


def sibling_url(url: str, name: str) -> str:
    """Return ``url`` with the last segment of its path (or its host, for ``memory:``) set to ``name``."""
    parts = urlsplit(url)
    if parts.scheme == "memory":
        return urlunsplit(parts._replace(netloc=name.removesuffix(".json"), path=""))
    folder, _, _ = parts.path.rpartition("/")
    return urlunsplit(parts._replace(path=f"{folder}/{name}"))


# ---------------------------------------------------------------------------
# Scenarios
# ---------------------------------------------------------------------------


@dataclass
class Tally:
    """What the calls of one run did, for the latency figures and the final check.

    Attributes
    ----------
    latencies : list of float
        Seconds per call, successful or not.
    enqueued : list of str
        Ids returned by successful enqueues.
    claimed : list of str
        Ids of the jobs returned by dequeues.
    acked : list of str
        Ids acked successfully.
    empty_dequeues : int
        Dequeues that returned no job.
    errors : int
        Calls that raised.
    error_samples : list of str
        The first few distinct errors.
    """

    latencies: list[float] = field(default_factory=list)
    enqueued: list[str] = field(default_factory=list)
    claimed: list[str] = field(default_factory=list)
    acked: list[str] = field(default_factory=list)
    empty_dequeues: int = 0
    errors: int = 0
    error_samples: list[str] = field(default_factory=list)

    async def _timed(self, call: Awaitable[R]) -> tuple[bool, R | None]:
        start = time.perf_counter()
        try:
            result = await call
        except Exception as exc:
            self.latencies.append(time.perf_counter() - start)
            self.errors += 1
            text = f"{type(exc).__name__}: {exc}"
            if len(self.error_samples) < MAX_ERROR_SAMPLES and text not in self.error_samples:
                self.error_samples.append(text)
            return False, None
        self.latencies.append(time.perf_counter() - start)
        return True, result

    async def enqueue(self, queue: QueueOperations, payload: bytes) -> None:
        """Enqueue one job."""
        ok, job = await self._timed(queue.enqueue(ENTRYPOINT, payload))
        if ok and job is not None:
            self.enqueued.append(job.id)

    async def dequeue(self, queue: QueueOperations) -> list[Job]:
        """Claim at most one job; returns what was claimed."""
        ok, jobs = await self._timed(queue.dequeue(ENTRYPOINT))
        if not ok or jobs is None:
            return []
        if not jobs:
            self.empty_dequeues += 1
        self.claimed.extend(job.id for job in jobs)
        return jobs

    async def ack(self, queue: QueueOperations, job_id: str) -> None:
        """Ack one job."""
        ok, _ = await self._timed(queue.ack(job_id))
        if ok:
            self.acked.append(job_id)


def _split(total: int, parts: int) -> list[int]:
    """Split ``total`` into ``parts`` near-equal shares."""
    base, extra = divmod(total, parts)
    return [base + (1 if i < extra else 0) for i in range(parts)]


async def _enqueue_concurrently(
    queue: QueueOperations, tally: Tally, ops: int, callers: int, payload: bytes
) -> None:
    """Run ``ops`` enqueues split over ``callers`` concurrent tasks (1: sequential)."""

    async def caller(count: int) -> None:
        for _ in range(count):
            await tally.enqueue(queue, payload)

    await asyncio.gather(*(caller(n) for n in _split(ops, callers)))


async def _dequeue_sequentially(queue: QueueOperations, tally: Tally, ops: int) -> None:
    """Run ``ops`` dequeues of one job each, one after another."""
    for _ in range(ops):
        await tally.dequeue(queue)


async def _mixed(queue: QueueOperations, tally: Tally, ops: int, callers: int, payload: bytes) -> None:
    """Run ``callers`` tasks looping enqueue -> dequeue -> ack until ``ops`` calls were made."""
    budget = ops

    def take() -> bool:
        # No await between the test and the decrement: safe within one event loop.
        nonlocal budget
        if budget <= 0:
            return False
        budget -= 1
        return True

    async def caller() -> None:
        while take():
            await tally.enqueue(queue, payload)
            if not take():
                return
            for job in await tally.dequeue(queue):
                if not take():
                    return
                await tally.ack(queue, job.id)

    await asyncio.gather(*(caller() for _ in range(callers)))


async def _prefill(storage: ObjectStoragePort, ops: int, payload: bytes, layout: Layout) -> list[str]:
    """Put ``ops`` jobs into the queue quickly: a broker folds concurrent enqueues into few commits."""
    async with BrokerQueue(storage, max_payload_bytes=None, layout=layout) as broker:
        jobs = await asyncio.gather(*(broker.enqueue(ENTRYPOINT, payload) for _ in range(ops)))
    return [job.id for job in jobs]


@contextlib.asynccontextmanager
async def _open_queue(
    kind: str, storage: ObjectStoragePort, layout: Layout
) -> AsyncIterator[QueueOperations]:
    """Open a ``DirectQueue`` or ``BrokerQueue`` on ``storage`` for the duration of the block."""
    if kind == "direct":
        async with DirectQueue(storage, max_payload_bytes=None, layout=layout) as direct:
            yield direct
    elif kind == "broker":
        async with BrokerQueue(storage, max_payload_bytes=None, layout=layout) as broker:
            yield broker
    else:
        raise ValueError(f"unknown queue {kind!r}")


async def _run_scenario(
    scenario: str, queue: QueueOperations, tally: Tally, ops: int, payload: bytes
) -> None:
    if scenario == "enqueue-seq":
        await _enqueue_concurrently(queue, tally, ops, 1, payload)
    elif scenario == "enqueue-c10":
        await _enqueue_concurrently(queue, tally, ops, 10, payload)
    elif scenario == "enqueue-c50":
        await _enqueue_concurrently(queue, tally, ops, 50, payload)
    elif scenario == "dequeue-seq":
        await _dequeue_sequentially(queue, tally, ops)
    elif scenario == "mixed-c50":
        await _mixed(queue, tally, ops, 50, payload)
    else:
        raise ValueError(f"unknown scenario {scenario!r}")


# ---------------------------------------------------------------------------
# Verification
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Verdict:
    """The result of checking a run's final queue state against its calls.

    Attributes
    ----------
    ok : bool
        Whether everything matched.
    detail : str
        What was checked, or what did not match.
    final_jobs, final_queued, final_in_progress : int
        Job counts in the final state.
    """

    ok: bool
    detail: str
    final_jobs: int
    final_queued: int
    final_in_progress: int


def verify(scenario: str, ops: int, tally: Tally, state: QueueState, prefilled: Sequence[str]) -> Verdict:
    """Check that the calls of a run really happened, from the state read back afterwards.

    Parameters
    ----------
    scenario : str
        Which scenario ran.
    ops : int
        Calls it was asked to make.
    tally : Tally
        What the calls returned.
    state : QueueState
        The queue state read from storage after the run.
    prefilled : sequence of str
        Ids of the jobs put in before the run (``dequeue-seq``).

    Returns
    -------
    Verdict
        ``ok`` is False with the first mismatch in ``detail`` if anything is off.
    """
    queued = {j.id for j in state.jobs if j.status is JobStatus.QUEUED}
    in_progress = {j.id for j in state.jobs if j.status is JobStatus.IN_PROGRESS}
    all_ids = {j.id for j in state.jobs}
    problems: list[str] = []

    def check(condition: bool, message: str) -> None:
        if not condition:
            problems.append(message)

    check(len(tally.latencies) == ops, f"{len(tally.latencies)} calls made, expected {ops}")
    check(tally.errors == 0, f"{tally.errors} calls raised")
    check(len(all_ids) == len(state.jobs), "duplicate job ids in the state")
    check(len(queued) + len(in_progress) == len(state.jobs), "jobs in an unexpected status")
    check(len(set(tally.claimed)) == len(tally.claimed), "a job was claimed twice")
    if scenario.startswith("enqueue-"):
        check(len(tally.enqueued) == ops, f"{len(tally.enqueued)} enqueues succeeded, expected {ops}")
        check(queued == set(tally.enqueued), f"{len(queued)} jobs queued, expected the {ops} enqueued")
        check(not in_progress, f"{len(in_progress)} jobs in progress, expected 0")
        summary = f"{len(queued)} queued"
    elif scenario == "dequeue-seq":
        check(len(prefilled) == ops, f"prefilled {len(prefilled)} jobs, expected {ops}")
        check(tally.empty_dequeues == 0, f"{tally.empty_dequeues} dequeues came back empty")
        check(set(tally.claimed) == set(prefilled), "the claimed jobs are not the prefilled ones")
        check(not queued, f"{len(queued)} jobs still queued, expected 0")
        check(in_progress == set(tally.claimed), f"{len(in_progress)} jobs in progress, expected {ops}")
        summary = f"0 queued, {len(in_progress)} in progress"
    elif scenario == "mixed-c50":
        enqueued, claimed, acked = set(tally.enqueued), set(tally.claimed), set(tally.acked)
        check(claimed <= enqueued, "claimed a job that this run did not enqueue")
        check(acked <= claimed, "acked a job that was not claimed")
        check(all_ids == enqueued - acked, f"{len(all_ids)} jobs left, expected {len(enqueued - acked)}")
        check(queued == enqueued - claimed, f"{len(queued)} queued, expected {len(enqueued - claimed)}")
        check(
            in_progress == claimed - acked, f"{len(in_progress)} in progress, expected {len(claimed - acked)}"
        )
        summary = (
            f"{len(enqueued)} enqueued, {len(tally.claimed)} claimed "
            f"({tally.empty_dequeues} empty dequeues), {len(acked)} acked; "
            f"{len(queued)} queued, {len(in_progress)} in progress"
        )
    else:
        raise ValueError(f"unknown scenario {scenario!r}")
    if problems:
        return Verdict(False, "; ".join(problems), len(state.jobs), len(queued), len(in_progress))
    return Verdict(True, summary, len(state.jobs), len(queued), len(in_progress))


# ---------------------------------------------------------------------------
# Running
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class RunResult:
    """One run of one (backend, queue, scenario).

    Attributes
    ----------
    seconds : float
        Wall time of the timed phase.
    latencies : list of float
        Seconds per call.
    verdict : Verdict
        The final-state check.
    tally : Tally
        What the calls did.
    counters : StorageCounters
        Storage requests made by the benchmarked queue.
    """

    seconds: float
    latencies: list[float]
    verdict: Verdict
    tally: Tally
    counters: StorageCounters

    @property
    def ops_per_s(self) -> float:
        """Calls per second over the timed phase."""
        return len(self.latencies) / self.seconds if self.seconds > 0 else math.inf


async def run_once(settings: Settings, backend: Backend, queue_kind: str, scenario: str) -> RunResult:
    """Run one scenario on a fresh queue object and check the state it leaves."""
    payload = bytes(i % 251 for i in range(settings.payload_bytes))
    base = backend.fresh(f"{queue_kind}-{scenario}")
    try:
        prefilled: list[str] = []
        if scenario == "dequeue-seq":
            prefilled = await _prefill(base, settings.ops, payload, settings.layout)
        storage = InstrumentedStorage(base, settings.get_latency_ms, settings.put_latency_ms)
        tally = Tally()
        async with _open_queue(queue_kind, storage, settings.layout) as queue:
            start = time.perf_counter()
            await _run_scenario(scenario, queue, tally, settings.ops, payload)
            seconds = time.perf_counter() - start
        async with DirectQueue(base, layout=settings.layout) as reader:
            state = await reader.read_state()
    finally:
        backend.discard(base)
    verdict = verify(scenario, settings.ops, tally, state, prefilled)
    return RunResult(seconds, tally.latencies, verdict, tally, storage.counters)


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Return the ``q``-th percentile (0-100) of ascending values, interpolating linearly."""
    if not sorted_values:
        return math.nan
    position = (len(sorted_values) - 1) * q / 100.0
    low = math.floor(position)
    high = min(low + 1, len(sorted_values) - 1)
    return sorted_values[low] + (sorted_values[high] - sorted_values[low]) * (position - low)


@dataclass(frozen=True)
class Row:
    """One line of the results: the median-ops/s run of a (backend, queue, scenario).

    Timing fields are seconds and milliseconds; ``verified`` holds over every repeat,
    the counts (``final_*``, ``enqueued``... ``storage_*``) are of the chosen run.
    """

    backend: str
    queue: str
    scenario: str
    ops: int
    seconds: float
    ops_per_s: float
    p50_ms: float
    p95_ms: float
    p99_ms: float
    verified: bool
    verify_detail: str
    final_jobs: int
    final_queued: int
    final_in_progress: int
    errors: int
    error_samples: list[str]
    enqueued: int
    claimed: int
    acked: int
    empty_dequeues: int
    storage_reads: int
    storage_writes: int
    cas_conflicts: int
    runs_ops_per_s: list[float]


def summarise(backend_label: str, queue_kind: str, scenario: str, runs: Sequence[RunResult]) -> Row:
    """Make the row of the run with the median ops/s (the lower median for an even count)."""
    ranked = sorted(runs, key=lambda run: run.ops_per_s)
    chosen = ranked[(len(ranked) - 1) // 2]
    latencies = sorted(chosen.latencies)
    failed = [run.verdict for run in runs if not run.verdict.ok]
    verdict = failed[0] if failed else chosen.verdict
    return Row(
        backend=backend_label,
        queue=queue_kind,
        scenario=scenario,
        ops=len(chosen.latencies),
        seconds=chosen.seconds,
        ops_per_s=chosen.ops_per_s,
        p50_ms=percentile(latencies, 50) * 1000,
        p95_ms=percentile(latencies, 95) * 1000,
        p99_ms=percentile(latencies, 99) * 1000,
        verified=not failed,
        verify_detail=verdict.detail,
        final_jobs=chosen.verdict.final_jobs,
        final_queued=chosen.verdict.final_queued,
        final_in_progress=chosen.verdict.final_in_progress,
        errors=sum(run.tally.errors for run in runs),
        error_samples=list(dict.fromkeys(s for run in runs for s in run.tally.error_samples)),
        enqueued=len(chosen.tally.enqueued),
        claimed=len(chosen.tally.claimed),
        acked=len(chosen.tally.acked),
        empty_dequeues=chosen.tally.empty_dequeues,
        storage_reads=chosen.counters.reads,
        storage_writes=chosen.counters.writes,
        cas_conflicts=chosen.counters.conflicts,
        runs_ops_per_s=[round(run.ops_per_s, 3) for run in runs],
    )


async def run_all(settings: Settings, backends: Sequence[Backend]) -> list[Row]:
    """Run every selected combination ``settings.repeat`` times; one row per combination."""
    rows: list[Row] = []
    total = len(backends) * len(settings.queues) * len(settings.scenarios)
    index = 0
    for backend in backends:
        label = settings.backend_label(backend.name)
        for queue_kind in settings.queues:
            for scenario in settings.scenarios:
                index += 1
                runs: list[RunResult] = []
                for _ in range(settings.repeat):
                    runs.append(await run_once(settings, backend, queue_kind, scenario))
                row = summarise(label, queue_kind, scenario, runs)
                status = "ok" if row.verified else f"NOT VERIFIED: {row.verify_detail}"
                print(
                    f"[{index}/{total}] {label} {queue_kind} {scenario}: "
                    f"{row.ops_per_s:.1f} ops/s, {row.seconds:.2f}s, {status}",
                    file=sys.stderr,
                    flush=True,
                )
                rows.append(row)
    return rows


# ---------------------------------------------------------------------------
# Output
# ---------------------------------------------------------------------------

COLUMNS = ("backend", "queue", "scenario", "ops", "seconds", "ops/s", "p50 ms", "p95 ms", "p99 ms")


def format_table(rows: Sequence[Row]) -> str:
    """Return the rows as a plain-text table; text columns left-aligned, numbers right-aligned."""
    cells = [
        [
            row.backend,
            row.queue,
            row.scenario,
            str(row.ops),
            f"{row.seconds:.3f}",
            f"{row.ops_per_s:.1f}",
            f"{row.p50_ms:.2f}",
            f"{row.p95_ms:.2f}",
            f"{row.p99_ms:.2f}",
        ]
        for row in rows
    ]
    widths = [max(len(line[i]) for line in [list(COLUMNS), *cells]) for i in range(len(COLUMNS))]

    def render(line: Sequence[str]) -> str:
        parts = [
            value.ljust(width) if i < 3 else value.rjust(width)
            for i, (value, width) in enumerate(zip(line, widths, strict=True))
        ]
        return "  ".join(parts).rstrip()

    rule = "  ".join("-" * width for width in widths)
    return "\n".join([render(COLUMNS), rule, *(render(line) for line in cells)])


def metadata(settings: Settings, argv: Sequence[str], wall_seconds: float) -> dict[str, Any]:
    """Return the run metadata stored next to the rows in the JSON output."""
    return {
        "timestamp": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": shlex.join([sys.executable, *argv]),
        "python_version": platform.python_version(),
        "python_implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpu_count": os.cpu_count(),
        "jqueue_version": jqueue.__version__,
        "wall_seconds": round(wall_seconds, 3),
        "settings": {
            "backends": settings.backends,
            "queues": settings.queues,
            "scenarios": settings.scenarios,
            "ops": settings.ops,
            "payload_bytes": settings.payload_bytes,
            "get_latency_ms": settings.get_latency_ms,
            "put_latency_ms": settings.put_latency_ms,
            "dir": None if settings.directory is None else str(settings.directory),
            "repeat": settings.repeat,
            "layout": settings.layout,
        },
    }


def write_json(path: Path, meta: dict[str, Any], rows: Sequence[Row]) -> None:
    """Write ``{"metadata": ..., "rows": [...]}`` to ``path``, creating its parent directory."""
    path.parent.mkdir(parents=True, exist_ok=True)
    document = {"metadata": meta, "rows": [asdict(row) for row in rows]}
    path.write_text(json.dumps(document, indent=2, allow_nan=False) + "\n", encoding="utf-8")


# ---------------------------------------------------------------------------
# Entry point
# ---------------------------------------------------------------------------


@contextlib.contextmanager
def _file_directory(directory: Path | None) -> Iterator[Path]:
    """Yield ``directory`` (created if needed), or a temporary one removed afterwards."""
    if directory is not None:
        directory.mkdir(parents=True, exist_ok=True)
        yield directory
        return
    with tempfile.TemporaryDirectory(prefix="jqueue-bench-") as tmp:
        yield Path(tmp)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark; returns the process exit status."""
    args = list(sys.argv[1:] if argv is None else argv)
    settings = parse_settings(args)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # moto's server logs every request
    started = time.perf_counter()
    with contextlib.ExitStack() as stack:
        backends: list[Backend] = []
        if settings.url is not None:
            backends.append(Backend(urlsplit(settings.url).scheme, url=settings.url))
        for name in [] if settings.url is not None else settings.backends:
            if name == "memory":
                backends.append(Backend("memory"))
            elif name == "file":
                backends.append(
                    Backend("file", directory=stack.enter_context(_file_directory(settings.directory)))
                )
            elif name == "s3":
                backends.append(Backend("s3", s3=stack.enter_context(MotoS3())))
        rows = asyncio.run(run_all(settings, backends))
    wall = time.perf_counter() - started
    print(format_table(rows))
    if settings.json_path is not None:
        write_json(settings.json_path, metadata(settings, [sys.argv[0], *args], wall), rows)
        print(f"results written to {settings.json_path} (wall time {wall:.1f}s)", file=sys.stderr)
    failed = [row for row in rows if not row.verified]
    for row in failed:
        print(
            f"NOT VERIFIED: {row.backend} {row.queue} {row.scenario}: {row.verify_detail}"
            + (f" (errors: {' | '.join(row.error_samples)})" if row.error_samples else ""),
            file=sys.stderr,
        )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
