"""Commit strategies: how a queue's operations reach its store, one commit per call or many folded
into one.

An operation is a function of the index that applies its effects and returns the caller's
answer. Every commit first returns expired leases to the queue and, when it writes, drops
history past its retention (``Housekeeping``). ``DirectCommits`` commits each operation on
its own; ``GroupedCommits`` runs one writer task that folds every operation submitted while
a commit is in flight into the next one. Both run on the store that ``StoreOpener`` opens on
first use, in the layout it finds or is asked for (``Layout``), migrating to the log when asked.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, TypeVar

from jqueue.core.formats.entry import decode_marker
from jqueue.core.formats.single import decode_index
from jqueue.core.log.migration import migrate
from jqueue.core.log.store import LogSettings, LogStore
from jqueue.core.loop.retry import RetryPolicy
from jqueue.core.loop.store import (
    CommitStore,
    SingleObjectStore,
    StorageUse,
    check_not_empty,
    describe,
    located,
)
from jqueue.domain.errors import CASConflictError, CorruptStateError, JQueueError, QueueClosedError
from jqueue.domain.index import QueueIndex
from jqueue.domain.policy import QueuePolicy
from jqueue.domain.times import to_micros, utc_now
from jqueue.ports.storage import KeyedStoragePort, ObjectStoragePort

T = TypeVar("T")

SLOW_ROUND = 0.02
"""Seconds: a round at least this long (a remote store) makes the next one gather first."""
GATHER_SHARE, MAX_GATHER = 0.05, 0.005
"""After a slow round, the next waits this share of its length (at most ``MAX_GATHER``
seconds) before it takes the pending calls: the callers that the last round answered (over
HTTP, through ``jqueue serve``) are back by then, and ride in it instead of the one after."""
Operation = Callable[[QueueIndex], T]
_NOT_SENT = "the queue stopped before this call was committed"
logger = logging.getLogger("jqueue")


Layout = Literal["auto", "log", "single"]
LAYOUTS: tuple[Layout, ...] = ("auto", "log", "single")


class StoreOpener:
    """Opens a queue's store on first use, choosing (and if asked, migrating) its layout.

    Parameters
    ----------
    storage : ObjectStoragePort
        The backend.
    retry : RetryPolicy
        Commit retries, for the store.
    layout : {"auto", "log", "single"}
        Which layout to use; see the module documentation.
    settings : LogSettings
        Settings of the log layout.
    """

    def __init__(self, storage: ObjectStoragePort, retry: RetryPolicy, layout: Layout, settings: LogSettings):
        if layout not in LAYOUTS:
            raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
        self.storage = storage
        self.retry = retry
        self.layout = layout
        self.settings = settings
        self._store: CommitStore | None = None
        self._opening = asyncio.Lock()
        self.on_commit: Callable[[], None] | None = None
        """Given to the store, which calls it after each commit that landed."""

    async def store(self) -> CommitStore:
        """Return the store, opening it on the first call."""
        if self._store is None:
            async with self._opening:
                if self._store is None:
                    store = await self._open()
                    if self.on_commit is not None:
                        store.on_commit = self.on_commit
                    self._store = store
        return self._store

    async def close(self) -> None:
        """Let the store finish its background work."""
        if self._store is not None:
            await self._store.close()

    async def _open(self) -> CommitStore:
        storage, location = self.storage, describe(self.storage)
        if not isinstance(storage, KeyedStoragePort):
            if self.layout == "log":
                raise TypeError(f"{location}: the log layout needs get, create, list_names and delete")
            return SingleObjectStore(storage, self.retry)
        for attempt in range(self.retry.max_retries + 1):
            content, etag = await storage.read()
            if etag is None:  # no queue yet: its first commit creates it, reads create nothing
                if self.layout == "single":
                    return SingleObjectStore(storage, self.retry)
                return LogStore(storage, self.retry, self.settings, created=False)
            check_not_empty(content, etag, location)
            is_log, base = decode_marker(content, location)
            if is_log:
                if self.layout == "single":
                    raise CorruptStateError(location, "this queue uses the log layout, not 'single'")
                return LogStore(storage, self.retry, self.settings, base)
            state = decode_index(content, location)
            if self.layout != "log":
                return SingleObjectStore(storage, self.retry)
            migrated_base = await migrate(storage, state, etag)
            if migrated_base is not None:
                return LogStore(storage, self.retry, self.settings, migrated_base)
            await self.retry.wait(attempt + 1)  # another writer changed the queue meanwhile
        raise CASConflictError(f"{location}: the migration to the log layout lost every race")


class Housekeeping:
    """What every commit does around its operations, by a queue's policy.

    Attributes
    ----------
    broker : str or None
        The broker this process commits as, once it took the queue over (``JobQueue.take_over``):
        every commit then first checks that it still owns the queue. None commits as no broker.
    """

    def __init__(self, policy: QueuePolicy) -> None:
        self.policy = policy
        self.broker: str | None = None

    def before(self, index: QueueIndex) -> int:
        """Refuse the commit of a broker that lost the queue (``NotOwnerError``); return to the queue
        (or the dead letters) the claimed jobs whose lease ran out, and discard abandoned bulk
        writes; returns how many leases ran out."""
        if self.broker is not None:
            index.controls.check_owner(self.broker)
        now = utc_now()
        index.discard_abandoned(to_micros(now - self.policy.staged_timeout))
        return len(index.requeue_expired(to_micros(now), self.policy.max_attempts))

    def after(self, index: QueueIndex) -> None:
        """Drop the history past its retention, in a commit that writes anyway."""
        if index.journal.effects:
            now = utc_now()
            index.forget(to_micros(now - self.policy.history_retention), self.policy.history_limit)


class Commits(Protocol):
    """A commit strategy: runs operations on a queue's store and answers each caller."""

    async def run(self, operation: Operation[T]) -> T:
        """Apply ``operation`` to the newest state (after the housekeeping), commit, return its answer."""
        ...

    async def sweep(self) -> int:
        """Commit the housekeeping alone; return how many expired leases it returned."""
        ...

    async def open(self) -> None:
        """Prepare for calls (hold the storage open, start a writer)."""
        ...

    async def close(self) -> None:
        """Finish every call submitted so far and release what ``open`` took."""
        ...


class DirectCommits:
    """Each operation is its own commit; calls of one queue go one at a time, so they never conflict
    with each other. Without ``open``, each call holds the storage open for itself."""

    def __init__(self, opener: StoreOpener, housekeeping: Housekeeping, storage_use: StorageUse) -> None:
        self.opener = opener
        self.housekeeping = housekeeping
        self.storage_use = storage_use
        self._one_at_a_time = asyncio.Lock()

    async def _apply(self, transition: Callable[[QueueIndex], T]) -> T:
        async with self._one_at_a_time, self.storage_use:
            store = await self.opener.store()
            return await store.apply(transition)

    async def run(self, operation: Operation[T]) -> T:
        """Commit ``operation`` with the housekeeping around it."""

        def transition(index: QueueIndex) -> T:
            self.housekeeping.before(index)
            answer = operation(index)
            self.housekeeping.after(index)
            return answer

        return await self._apply(transition)

    async def sweep(self) -> int:
        """Commit the housekeeping alone."""

        def transition(index: QueueIndex) -> int:
            swept = self.housekeeping.before(index)
            self.housekeeping.after(index)
            return swept

        return await self._apply(transition)

    async def open(self) -> None:
        """Hold the storage open until ``close``."""
        await self.storage_use.__aenter__()

    async def close(self) -> None:
        """Let the store finish its background work and release the storage."""
        try:
            await self.opener.close()
        finally:
            await self.storage_use.__aexit__(None, None, None)


@dataclass
class _Pending:
    operation: Operation[Any] | None
    """None asks for the number of expired leases the round's housekeeping returned."""
    future: asyncio.Future[Any] = field(default_factory=lambda: asyncio.get_running_loop().create_future())


RoundAnswer = tuple[bool, Any]
"""An operation's answer (True, value) or failure (False, exception)."""


class _Round:
    """The calls of one commit. It runs as the store's transition; before that, while the commit
    before it is in flight, it applies ahead the calls that arrive (a ``Follower``). One that ``grows``
    takes every call waiting when it applies ahead or runs; one that does not keeps the calls it was given."""

    def __init__(self, commits: GroupedCommits, calls: list[_Pending], location: str, grows: bool) -> None:
        self.commits = commits
        self.calls = calls
        self.location = location
        self.grows = grows
        self.outcomes: list[RoundAnswer] = []
        self._swept = 0
        self._applied_in: tuple[QueueIndex, int] | None = None
        self._failed = False

    @property
    def waiting(self) -> bool:
        """Whether calls wait to be applied ahead."""
        return self.grows and not self._failed and bool(self.commits._pending)

    @property
    def arrived(self) -> asyncio.Event:
        """Set when a call is submitted."""
        return self.commits._wakeup

    def apply_ahead(self, index: QueueIndex) -> None:
        """Apply the waiting calls on top of the commit in flight; should that fail (the
        housekeeping, on a damaged state), undo them and leave the round to run as usual."""
        mark = index.journal.savepoint()
        try:
            self._apply_waiting(index)
        except Exception:
            index.journal.rollback_to(mark)
            self._applied_in, self._failed = None, True

    def run(self, index: QueueIndex) -> list[RoundAnswer]:
        """The transition: apply the calls not applied yet, then finish the round."""
        self._apply_waiting(index)
        self.commits.housekeeping.after(index)
        return self.outcomes

    def _apply_waiting(self, index: QueueIndex) -> None:
        calls: list[_Pending] = []
        if self.grows:
            calls, self.commits._pending = self.commits._pending, []
        self.calls += calls  # first: whatever fails next, these calls are answered with the round
        if self._applied_in != (index, index.journal.transaction):  # first, or undone since
            self._applied_in, self.outcomes = None, []
            self._swept = self.commits.housekeeping.before(index)
            self._applied_in, calls = (index, index.journal.transaction), self.calls
        elif any(pending.operation is None for pending in calls):  # a sweep sees the leases of now
            self._swept += self.commits.housekeeping.before(index)
        for pending in calls:
            self.outcomes.append(self._outcome(pending, index))

    def _outcome(self, pending: _Pending, index: QueueIndex) -> RoundAnswer:
        if pending.operation is None:
            return True, self._swept
        savepoint = index.journal.savepoint()
        try:
            return True, pending.operation(index)
        except Exception as exc:
            index.journal.rollback_to(savepoint)  # a failed call leaves nothing behind
            return False, located(exc, self.location)


class GroupedCommits:
    """One writer task folds every operation submitted while a commit is in flight into the next
    commit (on a layout that can, applying them ahead as they arrive); an operation that fails fails
    only its own caller."""

    def __init__(self, opener: StoreOpener, housekeeping: Housekeeping, storage_use: StorageUse) -> None:
        self.opener = opener
        self.housekeeping = housekeeping
        self.storage_use = storage_use
        self._pending: list[_Pending] = []
        self._wakeup = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._stopping = False
        self._gather = 0.0

    async def open(self) -> None:
        """Start the writer task."""
        if self._task is not None:
            raise RuntimeError("the group-commit loop is already running")
        await self.storage_use.__aenter__()
        self._stopping = False
        self._wakeup = asyncio.Event()
        self._task = asyncio.create_task(self._write_rounds(), name="jqueue-group-commit")

    async def close(self) -> None:
        """Commit every operation submitted so far, then stop the writer task."""
        if self._task is None:
            return
        self._stopping = True
        self._wakeup.set()
        try:
            await self._task
            await self.opener.close()
        finally:
            self._task = None
            await self.storage_use.__aexit__(None, None, None)

    async def run(self, operation: Operation[T]) -> T:
        """Submit ``operation`` to the next round and wait for its answer."""
        result: T = await self._submit(operation)
        return result

    async def sweep(self) -> int:
        """Wait for the next round; return how many expired leases its housekeeping returned."""
        swept: int = await self._submit(None)
        return swept

    async def _submit(self, operation: Operation[Any] | None) -> Any:
        if self._task is None or self._stopping or self._task.done():
            raise QueueClosedError("the queue is not running; use 'async with' or call start() first")
        pending = _Pending(operation)
        self._pending.append(pending)
        self._wakeup.set()
        return await pending.future

    async def _write_rounds(self) -> None:
        try:
            while True:
                await self._wakeup.wait()
                self._wakeup.clear()
                while self._pending:
                    if self._gather and not self._stopping:
                        await asyncio.sleep(self._gather)
                    await self._write_chain()
                if self._stopping:
                    return
        finally:  # stopped, cancelled (a deadline on close()) or broken: no caller waits forever
            self._stopping = True
            unsent, self._pending = self._pending, []
            _fail(unsent, QueueClosedError(_NOT_SENT))

    async def _write_chain(self) -> None:
        """Commit rounds while each finds the next one applied ahead: every call waiting now, and those
        that arrive while a round is in flight."""
        try:
            store = await self.opener.store()
        except Exception as exc:  # the store did not open: every call waiting shares the answer
            unsent, self._pending = self._pending, []
            logger.warning("group commit of %d operations failed: %r", len(unsent), exc)
            _fail(unsent, exc)
            return
        first, self._pending = self._pending, []  # answered with the round, whatever fails
        following: _Round | None = _Round(self, first, store.location, grows=True)
        current: _Round | None = None
        async with store.lock:
            try:
                while following is not None:
                    if self._gather and current is not None and not self._stopping:
                        await asyncio.sleep(self._gather)  # the callers just answered ride in it too
                    current, following = following, _Round(self, [], store.location, grows=True)
                    started = time.monotonic()
                    await self._commit_round(store, current, following)
                    took = time.monotonic() - started
                    self._gather = min(MAX_GATHER, took * GATHER_SHARE) if took >= SLOW_ROUND else 0.0
                    if not following.calls:
                        following = None
            except BaseException:
                if following is not None:
                    _fail(following.calls, QueueClosedError(_NOT_SENT))
                raise
            finally:
                store.drop_ahead()

    async def _commit_round(self, store: CommitStore, current: _Round, following: _Round | None) -> None:
        try:
            outcomes = await store.apply_locked(current.run, following)
        except asyncio.CancelledError:
            closed = "the queue stopped while this call's commit was in flight; it may have landed"
            _fail(current.calls, QueueClosedError(closed))
            raise
        except JQueueError as exc:  # the storage's answer: every call of the round shares it
            logger.warning("group commit of %d operations failed: %r", len(current.calls), exc)
            outcomes = [(False, exc)] * len(current.calls)
        except Exception as exc:
            batch = current.calls
            if len(batch) > 1:  # one call's effects broke the commit (say, a value the encoder refuses)
                logger.warning("a group commit failed, committing its %d calls alone: %r", len(batch), exc)
                for number, pending in enumerate(batch):
                    try:
                        await self._commit_round(store, _Round(self, [pending], store.location, False), None)
                    except BaseException:
                        _fail(batch[number + 1 :], QueueClosedError(_NOT_SENT))
                        raise
                return
            outcomes = [(False, exc)] * len(batch)
        for pending, (ok, value) in zip(current.calls, outcomes, strict=True):
            if pending.future.done():
                continue
            if ok:
                pending.future.set_result(value)
            else:
                pending.future.set_exception(value)


def _fail(calls: list[_Pending], error: Exception) -> None:
    for pending in calls:
        if not pending.future.done():
            pending.future.set_exception(error)
