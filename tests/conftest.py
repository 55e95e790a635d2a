"""Shared fixtures: real storage servers (started once per session) and storage factories."""

from __future__ import annotations

import functools
import os
import sys
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, cast

import aioboto3
import pytest
import pytest_asyncio
from hypothesis import settings

from jqueue import (
    GCSStorage,
    InMemoryStorage,
    KeyedStoragePort,
    Layout,
    LocalFileSystemStorage,
    ObjectStoragePort,
    S3Storage,
)
from jqueue.core.queue import JobQueue
from servers import GCSEndpoint, S3Endpoint, fake_gcs_server, moto_server, seaweedfs_server

settings.register_profile("suite", derandomize=True)
"""The suite draws the same examples every run, so that it passes or fails on its code alone;
exploring draws new ones: ``HYPOTHESIS_PROFILE=explore`` (with more examples, to hunt)."""
settings.register_profile("explore", derandomize=False)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "suite"))

BACKENDS = ["memory", "file", "s3-moto", "s3-seaweedfs", "gcs"]
BUCKET = "jqueue-tests"


@pytest.fixture(scope="session")
def moto() -> Iterator[S3Endpoint]:
    with moto_server() as endpoint:
        endpoint.create_bucket(BUCKET)
        yield endpoint


@pytest.fixture(scope="session")
def seaweedfs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Endpoint]:
    with seaweedfs_server(tmp_path_factory.mktemp("seaweedfs")) as endpoint:
        endpoint.create_bucket(BUCKET)
        yield endpoint


@pytest.fixture(scope="session")
def fake_gcs() -> Iterator[GCSEndpoint]:
    with fake_gcs_server() as endpoint:
        endpoint.create_bucket(BUCKET)
        yield endpoint


@functools.cache
def s3_session(endpoint: S3Endpoint) -> Any:
    """The aioboto3 session with the endpoint's credentials, one for the whole test process (a
    new session loads the S3 model on its first client: about 0.2 s)."""
    return aioboto3.Session(
        aws_access_key_id=endpoint.access_key,
        aws_secret_access_key=endpoint.secret_key,
        region_name=endpoint.region,
    )


def s3_env(endpoint: S3Endpoint) -> dict[str, str]:
    """Environment variables that let a child process reach the endpoint."""
    return {
        **os.environ,
        "AWS_ACCESS_KEY_ID": endpoint.access_key,
        "AWS_SECRET_ACCESS_KEY": endpoint.secret_key,
        "AWS_DEFAULT_REGION": endpoint.region,
    }


@dataclass
class Backend:
    """Makes storage handles for one backend; ``handle(name)`` opens the same object again."""

    name: str
    open: Callable[[str], ObjectStoragePort]
    opened: list[ObjectStoragePort] = field(default_factory=list)

    def handle(self, object_name: str) -> ObjectStoragePort:
        storage = self.open(object_name)
        self.opened.append(storage)
        return storage

    def new(self) -> tuple[ObjectStoragePort, str]:
        """A handle on a fresh object, and the object's name."""
        object_name = f"queue-{uuid.uuid4().hex}.json"
        return self.handle(object_name), object_name

    def new_keyed(self) -> tuple[KeyedStoragePort, str]:
        """Like ``new``, for the keyed operations every built-in backend has."""
        storage, object_name = self.new()
        assert isinstance(storage, KeyedStoragePort)
        return storage, object_name

    async def close(self) -> None:
        for storage in self.opened:
            close = getattr(storage, "aclose", None)
            if close is not None:
                await close()


def make_backend(name: str, request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    """Build the named backend, starting its server if this session has not yet."""
    if name == "memory":
        shared: dict[str, InMemoryStorage] = {}
        return Backend(name, lambda key: shared.setdefault(key, InMemoryStorage(name=key)))
    if name == "file":
        return Backend(name, lambda key: LocalFileSystemStorage(tmp_path / key))
    if name in ("s3-moto", "s3-seaweedfs"):
        endpoint: S3Endpoint = request.getfixturevalue(name.removeprefix("s3-"))
        return Backend(
            name,
            lambda key: S3Storage(
                BUCKET,
                key,
                endpoint_url=endpoint.url,
                region_name=endpoint.region,
                session=s3_session(endpoint),
            ),
        )
    if name == "gcs":
        gcs_endpoint: GCSEndpoint = request.getfixturevalue("fake_gcs")
        client = gcs_endpoint.client()
        return Backend(name, lambda key: GCSStorage(BUCKET, key, client=client))
    raise ValueError(name)


@pytest_asyncio.fixture(params=BACKENDS)
async def backend(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Backend]:
    """Every storage backend in turn, each on real servers."""
    made = make_backend(request.param, request, tmp_path)
    yield made
    await made.close()


QUEUE_KINDS = ["direct", "broker"]
LAYOUTS = ["single", "log"]


@pytest.fixture(params=QUEUE_KINDS)
def queue_kind(request: pytest.FixtureRequest) -> str:
    """Each queue implementation in turn."""
    return str(request.param)


@pytest.fixture(params=LAYOUTS)
def layout(request: pytest.FixtureRequest) -> Layout:
    """Each storage layout in turn."""
    return cast(Layout, request.param)


@pytest_asyncio.fixture(params=["file", "s3-moto"])
async def file_or_s3(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Backend]:
    """The file backend and S3 on moto's server (for features checked on those two)."""
    made = make_backend(request.param, request, tmp_path)
    yield made
    await made.close()


@pytest.fixture(params=["file", "s3"])
def served_root(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[tuple[str, dict[str, str] | None]]:
    """A storage root for a ``jqueue serve`` subprocess (a directory, or a prefix on S3 in moto),
    and the environment it needs (None: this process's)."""
    if request.param == "file":
        path = tmp_path / "root"
        path.mkdir()
        yield str(path), None
        return
    moto: S3Endpoint = request.getfixturevalue("moto")
    prefix = f"root-{uuid.uuid4().hex}"
    yield f"s3://{BUCKET}/{prefix}?endpoint_url={moto.url}&region={moto.region}", s3_env(moto)


class Clock:
    """The time the queues' operations see (claims, heartbeats, sweeps), moved only by the test."""

    def __init__(self) -> None:
        self.now = datetime.now(UTC)

    def __call__(self) -> datetime:
        return self.now

    def advance(self, delta: timedelta) -> None:
        self.now += delta


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    """An injected clock for lease tests, so that a loaded machine cannot expire a lease early."""
    fake = Clock()
    for module in _QUEUE_CALL_MODULES:
        monkeypatch.setattr(module, "utc_now", fake)
    return fake


_QUEUE_CALL_MODULES = [
    module
    for module in map(
        sys.modules.__getitem__,
        {base.__module__ for base in JobQueue.__mro__} | {"jqueue.core.commits", "jqueue.core.insight"},
    )
    if module.__name__.startswith("jqueue.core.") and hasattr(module, "utc_now")
]
"""The modules whose calls read the time for a queue's operations: those of ``JobQueue`` and its
bases (derived, so that a call moved to another base stays on the test's clock), the commit
strategies' housekeeping and the insight calls."""


# Fixtures of the tests that run the original jqueue documentation (test_documented_*.py).


@pytest.fixture(params=["memory", "file"])
def new_storage(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Callable[[], InMemoryStorage | LocalFileSystemStorage]:
    """Makes the storage under test (call it inside the event loop that uses it)."""
    if request.param == "memory":
        return InMemoryStorage
    return lambda: LocalFileSystemStorage(tmp_path / "queue.json")


@pytest.fixture(params=["broker", "direct"])
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def gcs_emulator(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", "http://127.0.0.1:9")  # never contacted


@pytest.fixture(scope="session")
def spark(moto: S3Endpoint) -> Iterator[Any]:
    """A local session with two cores that retries a failed task up to three times, shared by
    the Spark tests; the executors import the test modules' functions by name."""
    from pyspark.sql import SparkSession

    from jqueue.spark import register

    os.environ["PYSPARK_PYTHON"] = sys.executable
    here = str(Path(__file__).parent)
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [here, os.environ.get("PYTHONPATH")]))
    os.environ.update({k: v for k, v in s3_env(moto).items() if k.startswith("AWS_")})
    session = (
        SparkSession.builder.master("local[2,4]")
        .appName("jqueue-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .getOrCreate()
    )
    register(session)
    yield session
    session.stop()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Hand the slow tests out first (``scripts/test`` deals the tests out in collection order as
    its processes ask for them, ``--dist load``), so that no long test is left for the end
    while the other process idles."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)
