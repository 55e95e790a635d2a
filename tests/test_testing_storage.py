"""jqueue.testing: the instrumented, fault-injecting storage wrapper, on memory and file storage."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections import Counter
from datetime import timedelta
from pathlib import Path
from types import TracebackType

import pytest

import jqueue
import reference_model as codec
from jqueue import (
    CASConflictError,
    DirectQueue,
    InMemoryStorage,
    KeyedStoragePort,
    LocalFileSystemStorage,
    ObjectStoragePort,
    StorageError,
)
from jqueue.core.formats.entry import ENTRY_PREFIX, checkpoint_name, decode_marker, entry_name
from jqueue.testing import (
    READ_KINDS,
    WRITE_KINDS,
    CallKind,
    Faults,
    InstrumentedKeyedStorage,
    InstrumentedStorage,
    instrumented,
)

LONG = timedelta(seconds=30)  # a fault that would make the test time out if it applied
DEADLINE = 10  # seconds: a broken wrapper fails these tests instead of hanging them


Inner = InMemoryStorage | LocalFileSystemStorage


@pytest.fixture(params=["memory", "file"])
def inner(request: pytest.FixtureRequest, tmp_path: Path) -> Inner:
    """A fresh real storage: in memory, or a local file."""
    if request.param == "memory":
        return InMemoryStorage(name="wrapped")
    return LocalFileSystemStorage(tmp_path / "wrapped.json")


class TwoMethods:
    """A storage with only ``read`` and ``write`` (and no ``url``), over an in-memory one."""

    def __init__(self) -> None:
        self.inner = InMemoryStorage()

    async def read(self) -> tuple[bytes, str | None]:
        return await self.inner.read()

    async def write(self, content: bytes, if_match: str | None = None) -> str:
        return await self.inner.write(content, if_match)


class Managed(InMemoryStorage):
    """An in-memory storage that is an async context manager and records its opening and closing."""

    def __init__(self) -> None:
        super().__init__(name="managed")
        self.events: list[str] = []

    async def __aenter__(self) -> Managed:
        self.events.append("enter")
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.events.append(f"exit {exc_type.__name__ if exc_type else None}")


async def _every_call(storage: InstrumentedKeyedStorage) -> None:
    """One call of each kind (the write creates the main object)."""
    await storage.read()
    await storage.write(b"main")
    await storage.get(entry_name(1))
    await storage.create(entry_name(1), b"entry")
    await storage.list_names(ENTRY_PREFIX)
    await storage.delete(entry_name(1))


def test_keyed_calls_only_when_the_inner_storage_has_them(inner: Inner) -> None:
    keyed = instrumented(inner)
    assert isinstance(keyed, InstrumentedKeyedStorage)
    assert isinstance(keyed, KeyedStoragePort)
    hidden = instrumented(inner, keyed=False)
    assert not isinstance(hidden, KeyedStoragePort)
    assert isinstance(hidden, ObjectStoragePort)
    assert isinstance(instrumented(inner, keyed=True), InstrumentedKeyedStorage)
    plain = instrumented(TwoMethods())
    assert type(plain) is InstrumentedStorage
    assert not isinstance(plain, KeyedStoragePort)
    with pytest.raises(TypeError, match="no keyed calls"):
        instrumented(TwoMethods(), keyed=True)


async def test_a_queue_picks_its_layout_through_the_wrapper(inner: Inner) -> None:
    async with DirectQueue(instrumented(inner)) as q:
        await q.enqueue("work", b"x")
    assert decode_marker((await inner.read())[0]) == (True, None)
    single = instrumented(InMemoryStorage(name="single"), keyed=False)
    async with DirectQueue(single) as q:
        await q.enqueue("work", b"x")
    assert len(codec.decode((await single.read())[0]).jobs) == 1


async def test_url_is_the_inner_storages(inner: Inner) -> None:
    assert instrumented(inner).url == inner.url
    bare = TwoMethods()
    assert instrumented(bare).url == repr(bare)


async def test_every_call_is_counted_by_kind(inner: Inner) -> None:
    storage = instrumented(inner)
    await _every_call(storage)
    await storage.create(checkpoint_name(1, 0), b"checkpoint")
    await storage.read()
    assert storage.calls == Counter(read=2, write=1, get=1, create=2, list=1, delete=1)
    assert (storage.reads, storage.writes) == (4, 4)
    assert storage.commits == 2  # the write and the log entry, not the checkpoint
    assert (storage.conflicts, storage.failures) == (0, 0)
    assert set(storage.calls) == READ_KINDS | WRITE_KINDS
    storage.reset()
    assert (storage.calls, storage.reads, storage.writes, storage.commits) == (Counter(), 0, 0, 0)


async def test_the_queue_commits_a_batch_once(inner: Inner) -> None:
    storage = instrumented(inner)
    async with DirectQueue(storage) as queue:
        await queue.enqueue("setup", b"")
        storage.reset()
        await queue.enqueue_many("work", [b"a", b"b", b"c"])
    assert storage.commits == 1
    assert storage.calls == Counter(create=1)


async def test_real_conflicts_are_counted(inner: Inner) -> None:
    storage = instrumented(inner)
    etag = await storage.write(b"first")
    with pytest.raises(CASConflictError):
        await storage.write(b"second", None)
    await storage.create(entry_name(1), b"entry")
    with pytest.raises(CASConflictError):
        await storage.create(entry_name(1), b"again")
    assert storage.conflicts == 2
    assert await storage.read() == (b"first", etag)


async def test_injected_conflicts_store_nothing(inner: Inner) -> None:
    storage = instrumented(inner, Faults(conflict=True))
    with pytest.raises(CASConflictError):
        await storage.write(b"lost")
    with pytest.raises(CASConflictError):
        await storage.create(entry_name(1), b"lost")
    assert await storage.read() == (b"", None)
    assert await storage.get(entry_name(1)) is None
    await storage.delete(entry_name(1))  # only writes and creates conflict
    assert storage.conflicts == 2
    assert storage.calls == Counter(write=1, create=1, read=1, get=1, delete=1)
    storage.faults = Faults()  # faults can be changed between calls
    await storage.write(b"kept")
    assert (await inner.read())[0] == b"kept"


async def test_injected_failures_raise_storage_errors_and_store_nothing(inner: Inner) -> None:
    storage = instrumented(inner, Faults(fail_rate=1.0))
    for call in (
        storage.read(),
        storage.write(b"lost"),
        storage.get("x"),
        storage.create("x", b"lost"),
        storage.list_names(""),
        storage.delete("x"),
    ):
        with pytest.raises(StorageError, match="injected failure"):
            await call
    assert storage.failures == 6
    assert await inner.read() == (b"", None)
    assert await instrumented(inner).list_names("") == []


async def test_a_seeded_share_of_calls_fails(inner: Inner) -> None:
    async def pattern(seed: int) -> list[bool]:
        storage = instrumented(inner, Faults(fail_rate=0.3), seed=seed)
        failed = []
        for _ in range(200):
            try:
                await storage.read()
                failed.append(False)
            except StorageError:
                failed.append(True)
        assert storage.failures == sum(failed)
        return failed

    first = await pattern(seed=3)
    assert first == await pattern(seed=3)
    assert first != await pattern(seed=4)
    assert 30 <= sum(first) <= 90  # about 60 of 200


async def test_faults_apply_only_to_the_calls_selected(inner: Inner) -> None:
    seen: list[tuple[CallKind, str]] = []

    def only_entries(kind: CallKind, name: str) -> bool:
        seen.append((kind, name))
        return name.startswith(ENTRY_PREFIX)

    storage = instrumented(inner, Faults(fail_rate=1.0, affects=only_entries))
    await storage.write(b"main")
    await storage.create("other", b"fine")
    with pytest.raises(StorageError):
        await storage.create(entry_name(1), b"lost")
    with pytest.raises(StorageError):
        await storage.list_names(ENTRY_PREFIX)
    assert await storage.list_names("") == ["other"]
    assert seen == [
        ("write", ""),
        ("create", "other"),
        ("create", entry_name(1)),
        ("list", ENTRY_PREFIX),
        ("list", ""),
    ]
    assert storage.failures == 2


async def test_latency_is_added_per_kind(inner: Inner) -> None:
    async with asyncio.timeout(DEADLINE):
        reads_slow = instrumented(inner, Faults(read_latency=timedelta(seconds=0.2), write_latency=LONG))
        loop = asyncio.get_running_loop()
        start = loop.time()
        await reads_slow.read()
        assert loop.time() - start >= 0.2
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.3):
                await reads_slow.write(b"late")
        writes_slow = instrumented(inner, Faults(read_latency=LONG, write_latency=timedelta(seconds=0.2)))
        start = loop.time()
        await writes_slow.create(entry_name(1), b"x")
        await writes_slow.delete(entry_name(1))
        assert loop.time() - start >= 0.4
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.3):
                await writes_slow.get(entry_name(1))


async def test_a_hanging_call_never_answers_and_can_be_cancelled(inner: Inner) -> None:
    async with asyncio.timeout(DEADLINE):
        storage = instrumented(inner, Faults(hang=True, affects=lambda kind, name: kind == "write"))
        await storage.read()  # not selected: answers
        task = asyncio.create_task(storage.write(b"never"))
        done, _ = await asyncio.wait([task], timeout=0.3)
        assert not done
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(task, 5)
        assert storage.calls == Counter(read=1, write=1)
        assert await inner.read() == (b"", None)


async def test_a_gate_holds_calls_until_it_opens(inner: Inner) -> None:
    async with asyncio.timeout(DEADLINE):
        gate = asyncio.Event()
        storage = instrumented(inner, Faults(gate=gate, affects=lambda kind, name: kind in WRITE_KINDS))
        held = asyncio.create_task(storage.write(b"held"))
        await asyncio.sleep(0.2)
        assert not held.done()
        assert storage.calls["write"] == 1  # counted when made, not when it lands
        assert await storage.read() == (b"", None)  # reads pass the closed gate
        gate.set()
        etag = await asyncio.wait_for(held, 5)
        assert await storage.read() == (b"held", etag)


async def test_async_with_reaches_the_inner_storage() -> None:
    managed = Managed()
    storage = instrumented(managed)
    async with storage as entered:
        assert entered is storage
        assert managed.events == ["enter"]
    with pytest.raises(RuntimeError):
        async with storage:
            raise RuntimeError("inside")
    assert managed.events == ["enter", "exit None", "enter", "exit RuntimeError"]
    bare, wrapped = Managed(), Managed()
    for opened in (bare, instrumented(wrapped)):  # a queue opens and closes it through the wrapper
        async with DirectQueue(opened) as q:
            await q.enqueue("work", b"x")
    assert wrapped.events == bare.events
    assert bare.events[0] == "enter"
    async with instrumented(TwoMethods()):  # an inner storage that is no context manager
        pass


def test_faults_are_checked() -> None:
    with pytest.raises(ValueError, match="fail_rate"):
        Faults(fail_rate=1.5)
    with pytest.raises(ValueError, match="read_latency"):
        Faults(read_latency=timedelta(seconds=-1))
    with pytest.raises(ValueError, match="write_latency"):
        Faults(write_latency=timedelta(seconds=-1))


def test_this_module_and_the_benchmark_need_no_dev_dependency(tmp_path: Path) -> None:
    for module in ("pytest", "hypothesis", "moto", "boto3", "aioboto3", "typer"):
        (tmp_path / f"{module}.py").write_text(f"raise ImportError('{module} is not installed')\n")
    program = (
        "import jqueue.testing\n"
        "from jqueue.bench import Settings, run\n"
        "raise SystemExit(run(Settings(url='memory://nodev', ops=5, scenarios=['mixed-c50'])))\n"
    )
    source = Path(jqueue.__file__).resolve().parents[1]
    env = {"PYTHONPATH": f"{tmp_path}:{source}", "PATH": ""}
    done = subprocess.run(
        [sys.executable, "-c", program], env=env, capture_output=True, text=True, check=False, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert "mixed-c50" in done.stdout
