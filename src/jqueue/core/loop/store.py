"""The commit seam: how a queue applies operations to the newest state and commits them.

``CommitStore`` holds the queue as a ``QueueIndex`` and runs the one commit loop
every layout shares: apply a transition inside an index transaction, commit its
effects, and on a lost race roll back, catch up with storage and try again. It
catches up only when a write conflicts, or when a transition failed or changed
nothing on a state this call has not verified (an unknown job, an empty dequeue),
since a stale state could make that answer wrong. A layout supplies ``refresh``,
``_commit`` and ``payloads``; nothing above this module knows which layout is used.

While a commit is in flight, the next one's calls may be applied ahead, on top of it (a ``Follower``,
ADR 0017): applied in the same transaction after a mark, committed once it has landed, and
undone with it if it does not. Writes stay one at a time, each on a state known to be durable.

Every storage call the loop makes is bounded in time (``TimedStorage``, ``timed``), and the
storage's client is held open while a queue is open (``StorageUse``).
"""

from __future__ import annotations

import asyncio
import bisect
import logging
import time
import uuid
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from datetime import timedelta
from types import TracebackType
from typing import Protocol, TypeVar, cast

from jqueue.core.formats.single import decode_index, encode_index
from jqueue.core.loop.retry import RetryPolicy
from jqueue.domain.effects import Added, Died, Effect, Requeued
from jqueue.domain.errors import CASConflictError, CorruptStateError, StorageError
from jqueue.domain.index import QueueIndex
from jqueue.domain.models import LEASE_EXPIRED, Job, QueueState
from jqueue.domain.schema import PUBLIC_FORM, JobFields, JobForm, Payload
from jqueue.domain.spec import POSITIVE_SPAN
from jqueue.domain.times import TimeRangeError
from jqueue.ports.storage import KeyedStoragePort, MappedStoragePort, ObjectStoragePort

T = TypeVar("T")
logger = logging.getLogger("jqueue")


def describe(storage: ObjectStoragePort) -> str:
    """Return where ``storage`` keeps its object, for error messages."""
    url = getattr(storage, "url", None)
    return url if isinstance(url, str) else repr(storage)


def describe_named(storage: ObjectStoragePort, name: str) -> str:
    """Return where ``storage`` keeps its named object ``name`` (with "" the directory or prefix of
    them all), for error messages: its ``named_url(name)`` if it has one, else ``<url>.d/<name>``."""
    named_url = getattr(storage, "named_url", None)
    return str(named_url(name)) if callable(named_url) else f"{describe(storage)}.d/{name}"


def located(exc: Exception, location: str) -> Exception:
    """Return what an operation raised as its caller sees it: a time reckoned out of range from
    stored times (``TimeRangeError``) is damaged state, a ``CorruptStateError`` at ``location``."""
    if isinstance(exc, TimeRangeError):
        corrupt = CorruptStateError(location, str(exc))
        corrupt.__cause__ = exc
        return corrupt
    return exc


def check_not_empty(content: bytes, etag: str | None, location: str) -> None:
    """Raise ``CorruptStateError`` for an object that exists but holds no byte: a queue's main
    object is never empty, and reading one as a new queue would lose every job."""
    if etag is not None and not content:
        raise CorruptStateError(location, "the object is empty (0 bytes)")


DEFAULT_STORAGE_TIMEOUT = timedelta(seconds=60)


class TimedStorage:
    """A storage whose calls fail with ``StorageError`` (cause ``TimeoutError``) past ``timeout``.

    A write that timed out may still land; the queue treats it like any failed write
    (a later read shows whether it did).
    """

    def __init__(self, inner: ObjectStoragePort, timeout: timedelta) -> None:
        POSITIVE_SPAN.check("storage_timeout", timeout)
        self.inner = inner
        self.url = describe(inner)
        self.seconds = timeout.total_seconds()

    async def _within(self, what: str, call: Awaitable[T]) -> T:
        try:
            async with asyncio.timeout(self.seconds):
                return await call
        except TimeoutError:
            late = TimeoutError(f"no answer within {self.seconds:g} s")
            raise StorageError(f"{what} {self.url} failed", late) from None

    async def read(self) -> tuple[bytes, str | None]:
        """Read the main object within the time limit."""
        return await self._within("reading", self.inner.read())

    async def write(self, content: bytes, if_match: str | None = None) -> str:
        """Write the main object within the time limit."""
        return await self._within("writing", self.inner.write(content, if_match))


class TimedKeyedStorage(TimedStorage):
    """``TimedStorage`` for a backend with named objects too."""

    def __init__(self, inner: KeyedStoragePort, timeout: timedelta) -> None:
        super().__init__(inner, timeout)
        self.keyed = inner

    def named_url(self, name: str) -> str:
        """Where the wrapped storage keeps ``name``, for messages."""
        return describe_named(self.keyed, name)

    async def get(self, name: str) -> bytes | None:
        """Read a named object within the time limit."""
        return await self._within(f"reading {name} of", self.keyed.get(name))

    async def create(self, name: str, content: bytes) -> None:
        """Create a named object within the time limit."""
        await self._within(f"creating {name} of", self.keyed.create(name, content))

    async def list_names(self, prefix: str, start_after: str = "") -> list[str]:
        """List named objects within the time limit."""
        return await self._within(f"listing {prefix} of", self.keyed.list_names(prefix, start_after))

    async def delete(self, name: str) -> None:
        """Delete a named object within the time limit."""
        await self._within(f"deleting {name} of", self.keyed.delete(name))


class TimedMappedStorage(TimedKeyedStorage):
    """``TimedKeyedStorage`` for a backend that maps its named objects too."""

    async def mapped(self, name: str) -> memoryview | None:
        """Map a named object within the time limit."""
        assert isinstance(self.keyed, MappedStoragePort)
        return await self._within(f"mapping {name} of", self.keyed.mapped(name))


def timed(storage: ObjectStoragePort, timeout: timedelta | None) -> ObjectStoragePort:
    """Return ``storage`` with a time limit on each call (itself when ``timeout`` is None)."""
    if timeout is None:
        return storage
    if isinstance(storage, KeyedStoragePort) and isinstance(storage, MappedStoragePort):
        return TimedMappedStorage(storage, timeout)
    if isinstance(storage, KeyedStoragePort):
        return TimedKeyedStorage(storage, timeout)
    return TimedStorage(storage, timeout)


LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
"""Upper bounds (seconds) of the commit-latency histogram; one more bucket holds the rest."""


@dataclass
class CommitStats:
    """Counts of the commits that landed: how long each took (from the call taking the store's lock to its
    landing, retries included), the conflicts lost on the way, and the jobs they killed or
    whose leases they found expired."""

    commits: int = 0
    conflicts: int = 0
    seconds: float = 0.0
    buckets: list[int] = field(default_factory=lambda: [0] * (len(LATENCY_BUCKETS) + 1))
    conflict_counts: dict[int, int] = field(default_factory=dict)
    died: int = 0
    expired_leases: int = 0

    def landed(self, seconds: float, conflicts: int, effects: Sequence[Effect]) -> None:
        """Count one commit that landed after ``conflicts`` lost races."""
        self.commits += 1
        self.conflicts += conflicts
        self.seconds += seconds
        self.buckets[bisect.bisect_left(LATENCY_BUCKETS, seconds)] += 1
        self.conflict_counts[conflicts] = self.conflict_counts.get(conflicts, 0) + 1
        for effect in effects:
            if isinstance(effect, Died):
                self.died += 1
                self.expired_leases += effect.error == LEASE_EXPIRED
            elif isinstance(effect, Requeued) and effect.error == LEASE_EXPIRED:
                self.expired_leases += 1

    def failed(self, conflicts: int) -> None:
        """Count the lost races of a commit that gave up."""
        self.conflicts += conflicts

    def add(self, other: CommitStats) -> None:
        """Count the commits ``other`` counted too (of another shard of one queue)."""
        self.commits += other.commits
        self.conflicts += other.conflicts
        self.seconds += other.seconds
        self.buckets = [mine + theirs for mine, theirs in zip(self.buckets, other.buckets, strict=True)]
        for conflicts, count in other.conflict_counts.items():
            self.conflict_counts[conflicts] = self.conflict_counts.get(conflicts, 0) + count
        self.died += other.died
        self.expired_leases += other.expired_leases


class StorageUse:
    """Holds a storage open (its client, its connections) while a queue is open.

    A storage that is an async context manager is entered when the queue opens
    and exited when it closes; any other storage needs nothing.
    """

    def __init__(self, storage: ObjectStoragePort) -> None:
        self._storage = storage if isinstance(storage, AbstractAsyncContextManager) else None

    async def __aenter__(self) -> None:
        if self._storage is not None:
            await self._storage.__aenter__()

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._storage is not None:
            await self._storage.__aexit__(exc_type, exc, tb)


class StoreLock:
    """The right to use a store's state: a lock that knows how many wait for it (a writer that
    keeps it across commits lets them in between)."""

    def __init__(self) -> None:
        self._lock = asyncio.Lock()
        self.waiting = 0

    def locked(self) -> bool:
        """Whether someone holds the lock."""
        return self._lock.locked()

    async def __aenter__(self) -> None:
        self.waiting += 1
        try:
            await self._lock.acquire()
        finally:
            self.waiting -= 1

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._lock.release()


class Follower(Protocol):
    """The next commit's calls, applied ahead while the commit before them is in flight."""

    @property
    def waiting(self) -> bool:
        """Whether calls wait to be applied ahead."""
        ...

    @property
    def arrived(self) -> asyncio.Event:
        """Set when calls may wait to be applied ahead (and by the store when its write ends)."""
        ...

    def apply_ahead(self, index: QueueIndex) -> None:
        """Apply the waiting calls to ``index`` (in its open transaction); it must not raise."""
        ...


class CommitStore(ABC):
    """A queue's state in memory and the commit loop that keeps it in step with storage.

    Attributes
    ----------
    conflict_delay : float or None
        The cap of the wait after a lost race, if shorter than the retry policy's (see
        ``LogStore``).
    applies_ahead : bool
        Whether a follower may be applied ahead while a commit is in flight: the layout's ``_commit``
        encodes the effects it is given, not the index (which the follower changes).

    Parameters
    ----------
    storage : ObjectStoragePort
        The backend.
    retry : RetryPolicy
        How often and how patiently to retry a conflicting commit.
    """

    conflict_delay: float | None = None
    applies_ahead = False

    def __init__(self, storage: ObjectStoragePort, retry: RetryPolicy) -> None:
        self.storage = storage
        self.retry = retry
        self.location = describe(storage)
        self.index = QueueIndex()
        self._loaded = False
        self.lock = StoreLock()  # a refresh must never run inside another call's transaction
        self.on_commit: Callable[[], None] = _nothing
        """Called after each commit that landed (the queue wakes its idle callers)."""
        self.stats = CommitStats()
        self.writer = ""
        """Who commits, named in each commit's id (``WRITER/...``): the broker that took the queue
        over (``JobQueue.take_over``), so that a log shows which owner wrote each entry."""

    def new_commit_id(self) -> str:
        """A fresh commit id: random, after the ``writer``'s name when it has one."""
        random = uuid.uuid4().hex
        return f"{self.writer}/{random}" if self.writer else random

    @abstractmethod
    async def refresh(self) -> None:
        """Bring ``index`` up to date with storage."""

    @abstractmethod
    async def _commit(self, effects: Sequence[Effect]) -> None:
        """Durably commit ``effects``, already applied to ``index`` on top of its version.

        Raises ``CASConflictError`` when another writer committed first. Once the commit
        has landed it must not raise: what follows belongs in ``_landed``.
        """

    def _landed(self, effects: Sequence[Effect]) -> None:  # noqa: B027  (most layouts have none)
        """Bookkeeping after a commit landed (the default has none); it must not raise."""

    def needs_refresh(self) -> bool:
        """Whether the state in memory must be refreshed before the next commit."""
        return not self._loaded

    def wants_quiet_landing(self) -> bool:
        """Whether the next commit should land with nothing applied ahead on it (the default: never)."""
        return False

    @abstractmethod
    async def payloads(self, payloads: Sequence[Payload]) -> list[bytes]:
        """Return the bytes of each payload, fetching those kept in storage."""

    async def close(self) -> None:  # noqa: B027  (most layouts have nothing to close)
        """Finish background work; the default has none."""

    async def view(self, look: Callable[[QueueIndex], T]) -> T:
        """Catch up with storage and return what ``look`` finds in the state (it must not change it)."""
        async with self.lock:
            await self.refresh()
            self._loaded = True
            return look(self.index)

    async def jobs(self, snapshots: Sequence[JobFields]) -> list[Job]:
        """Return the public jobs of record snapshots, with their payloads."""
        return await self.jobs_as(PUBLIC_FORM, snapshots)

    async def jobs_as(self, form: JobForm[T], snapshots: Sequence[JobFields]) -> list[T]:
        """Return the answers in ``form`` of record snapshots, with their payloads: asked of the
        store unless every snapshot holds its bytes already (an add's answer does)."""
        kept = [snapshot.payload for snapshot in snapshots]
        in_memory = all(isinstance(payload, bytes) for payload in kept)
        payloads = cast(list[bytes], kept) if in_memory else await self.payloads(kept)
        of_record = form.of_record
        return [of_record(snapshot, payload) for snapshot, payload in zip(snapshots, payloads, strict=True)]

    async def read_state(self) -> QueueState:
        """Catch up with storage and return the whole state."""

        def snapshot(index: QueueIndex) -> tuple[int, list[Added]]:
            return index.version, [record.as_added() for record in index.in_order()]

        version, snapshots = await self.view(snapshot)
        return QueueState(jobs=tuple(await self.jobs(snapshots)), version=version)

    async def checkpoint(self) -> bool:
        """Write a checkpoint of the newest state if the layout has them; whether it does."""
        return False

    async def apply(self, transition: Callable[[QueueIndex], T]) -> T:
        """Apply ``transition`` to the newest state and commit its effects, retrying on conflict;
        return what the run that committed returned.

        ``transition`` may run several times, each time on a fresh transaction. An exception
        it raises on a verified state propagates, with nothing changed.

        Raises
        ------
        CASConflictError
            When every retry lost its race.
        """
        async with self.lock:
            return await self._apply(transition, None)

    async def apply_locked(self, transition: Callable[[QueueIndex], T], follower: Follower | None) -> T:
        """``apply``, for a caller that holds ``lock``, applying ``follower`` ahead while the commit is
        in flight (if the layout can). What it applied ahead is left open when the commit lands: the
        caller's next ``apply_locked`` continues it, or ``drop_ahead`` undoes it."""
        if not self.lock.locked():
            raise RuntimeError("apply_locked needs the store's lock")
        return await self._apply(transition, follower)

    def drop_ahead(self) -> None:
        """Undo what a follower applied ahead, if it was left open."""
        if self.index.journal.open:
            self.index.journal.rollback()

    async def _apply(self, transition: Callable[[QueueIndex], T], follower: Follower | None) -> T:
        started = time.monotonic()
        # Calls applied ahead on a commit that landed ran on a durable state: as good as a refresh.
        verified = self.index.journal.open
        if not verified and self.needs_refresh():
            await self.refresh()
            self._loaded = verified = True
        retries = 0
        while True:
            index = self.index  # a refresh may replace it
            if not index.journal.open:
                index.journal.begin()
            try:
                answer = transition(index)
            except Exception as exc:
                index.journal.rollback()
                if verified:
                    error = located(exc, self.location)
                    if error is exc:
                        raise
                    raise error from exc
                await self.refresh()
                verified = True
                continue
            effects = index.journal.effects
            if not effects:
                index.journal.commit()
                if verified:
                    return answer
                await self.refresh()
                verified = True
                continue
            try:
                await self._commit_following(index, follower, started, retries)
            except CASConflictError:
                index.journal.rollback()
                retries += 1
                if retries > self.retry.max_retries:
                    self.stats.failed(retries)
                    raise
                await self.retry.wait(retries, self.conflict_delay)
                await self.refresh()
                verified = True
                continue
            except BaseException:
                index.journal.rollback()  # what it wrote is kept by then: this undoes what came after
                raise
            return answer

    async def _commit_following(
        self, index: QueueIndex, follower: Follower | None, started: float, retries: int
    ) -> None:
        """Commit the open transaction's effects and keep them, applying ``follower`` ahead on
        top of them meanwhile (its changes stay open)."""
        kept = index.journal.savepoint()
        if follower is None or not self.applies_ahead:
            await self._commit(index.journal.effects)
            self._keep(index, kept, started, retries)
            return
        arrived = follower.arrived

        async def write(effects: list[Effect]) -> None:
            await self._commit(effects)
            self._keep(index, kept, started, retries)  # at once: a cancel cannot come between

        def written(task: asyncio.Task[None]) -> None:
            arrived.set()
            if not task.cancelled():
                task.exception()  # retrieved here: the caller may be gone (cancelled) by now

        writing = asyncio.ensure_future(write(index.journal.effects[:]))
        writing.add_done_callback(written)
        try:
            while not writing.done():  # once it is, the transaction may have ended with it
                if follower.waiting and not self.lock.waiting and not self.wants_quiet_landing():
                    follower.apply_ahead(index)
                await arrived.wait()
                arrived.clear()
        except BaseException:
            writing.cancel()
            raise
        writing.result()

    def _keep(self, index: QueueIndex, kept: tuple[int, int], started: float, retries: int) -> None:
        """A commit of the changes before ``kept`` landed: keep them and do the bookkeeping."""
        effects = index.journal.effects[: kept[1]]
        index.journal.commit_through(kept)
        self.stats.landed(time.monotonic() - started, retries, effects)
        try:
            self._landed(effects)
        except Exception:  # a landed commit is never undone; bookkeeping may be retried later
            logger.exception("after a commit to %s", self.location)
        self.on_commit()


class SingleObjectStore(CommitStore):
    """The documented layout: the whole state in one object, replaced with compare-and-swap."""

    def __init__(self, storage: ObjectStoragePort, retry: RetryPolicy) -> None:
        super().__init__(storage, retry)
        self._etag: str | None = None
        self._read_back: tuple[bytes, str | None] | None = None

    async def refresh(self) -> None:
        """Read and decode the whole object (or use the copy a lost write just read back)."""
        content, etag = self._read_back or await self.storage.read()
        self._read_back = None
        check_not_empty(content, etag, self.location)
        self.index = decode_index(content, self.location)
        self._etag = etag

    async def _commit(self, effects: Sequence[Effect]) -> None:
        version = self.index.version + 1
        content = encode_index(self.index, version, commit_id=self.new_commit_id())
        try:
            etag = await self.storage.write(content, if_match=self._etag)
        except CASConflictError:
            current, current_etag = await self.storage.read()
            if current != content or current_etag is None:
                self._read_back = (current, current_etag)
                raise
            # The object holds this very commit (its id is unique): a retried request
            # whose first attempt had landed. The write succeeded.
            etag = current_etag
        self.index.version = version
        self._etag = etag

    async def payloads(self, payloads: Sequence[Payload]) -> list[bytes]:
        """Every payload of this layout is in memory."""
        if not all(isinstance(p, bytes) for p in payloads):
            raise ValueError("the single-object layout keeps every payload in memory")
        return [p for p in payloads if isinstance(p, bytes)]


def _nothing() -> None:
    """The default ``on_commit``."""
