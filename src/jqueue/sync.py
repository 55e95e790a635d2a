"""Producing jobs from synchronous code (Django, Flask, scripts): no event loop to manage.

A ``SyncQueue`` runs its own event loop in a daemon thread and its calls block until their
commit is durable. Calls from many threads at once share that loop, so they are folded into
group commits as concurrent async calls are::

    from jqueue import JobStatus, sync

    jobs = sync.open_queue("s3://bucket/jobs.json")       # or sync.connect("http://broker:8080", "jobs")
    job = jobs.enqueue("send_email", b'{"to": "a@example.com"}')
    print(jobs.stats().total(JobStatus.QUEUED))
    print(jobs.result(job, timeout=timedelta(seconds=30)))  # what its handler returned
    jobs.call(lambda queue: queue.pause("send_email"))     # any other call of the queue
    jobs.close()                                            # also at interpreter exit
"""

from __future__ import annotations

import asyncio
import atexit
import threading
import weakref
from collections.abc import Awaitable, Callable, Coroutine, Iterable
from datetime import timedelta
from types import TracebackType
from typing import Any, Generic, Self, TypeVar, Unpack

from jqueue.adapters.service.client.connection import connect as async_connect
from jqueue.adapters.service.client.remote_queue import RemoteQueue
from jqueue.adapters.storage.url import storage_from_url
from jqueue.core.broker import BrokerQueue
from jqueue.domain.errors import QueueClosedError
from jqueue.domain.models import Job
from jqueue.domain.spec import EnqueueOptions, JobSpec
from jqueue.domain.stats import QueueStats
from jqueue.domain.values import span
from jqueue.ports.storage import ObjectStoragePort

T = TypeVar("T")
Q = TypeVar("Q", bound=BrokerQueue | RemoteQueue)
DEFAULT_TIMEOUT = timedelta(seconds=60)
"""How long a call waits for its commit before it raises ``TimeoutError``."""

_open_queues: weakref.WeakSet[SyncQueue[Any]] = weakref.WeakSet()


class SyncQueue(Generic[Q]):
    """A queue whose calls block: ``enqueue``, ``enqueue_many``, ``stats``, ``result``,
    ``cancel``, and any other async call through ``call``.

    Parameters
    ----------
    opener : callable
        Returns, in the queue's own event loop, the async queue to call and a coroutine
        function that closes it.
    timeout : timedelta
        How long a call waits for its answer.
    """

    def __init__(
        self,
        opener: Callable[[], Awaitable[tuple[Q, Callable[[], Awaitable[None]]]]],
        timeout: timedelta = DEFAULT_TIMEOUT,
    ) -> None:
        self.timeout = timeout.total_seconds()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="jqueue-sync", daemon=True)
        self._thread.start()
        self._closed = False
        self._queue: Q
        try:
            self._queue, self._close = self._run(opener())
        except BaseException:
            self._stop_loop()
            raise
        _open_queues.add(self)

    def _run(self, call: Coroutine[Any, Any, T] | Awaitable[T], waits: float = 0.0) -> T:
        async def wrapped() -> T:
            return await call

        future = asyncio.run_coroutine_threadsafe(wrapped(), self._loop)
        try:
            return future.result(self.timeout + waits)
        except TimeoutError:
            if future.done():  # the call's own (``result``'s timeout): it says what it waited for
                raise
            future.cancel()
            raise TimeoutError(self._no_answer(waits)) from None

    def _no_answer(self, waits: float) -> str:
        """Why a call that got no answer within ``timeout`` (after ``waits``) gave up."""
        timeout = f"the queue's timeout, {span(timedelta(seconds=self.timeout))}"
        if not waits:
            return f"no answer within {timeout}"
        return f"no answer within the call's {span(timedelta(seconds=waits))} and {timeout}"

    def _call(self, call: Callable[[], Awaitable[T]], waits: float = 0.0) -> T:
        """Run ``call()`` in the loop; its answer may take ``timeout`` (and ``waits`` more)."""
        if self._closed:
            raise QueueClosedError("this SyncQueue is closed")
        return self._run(call(), waits)

    def enqueue(
        self,
        entrypoint: str,
        payload: bytes,
        priority: int = 0,
        **options: Unpack[EnqueueOptions],
    ) -> Job:
        """Add a job, as the async ``enqueue`` does (with the same options); returns it once it
        is durable."""
        return self._call(lambda: self._queue.enqueue(entrypoint, payload, priority, **options))

    def enqueue_many(
        self, jobs: str | Iterable[JobSpec], payloads: Iterable[bytes] = (), priority: int = 0
    ) -> list[Job]:
        """Add jobs in one commit, as the async ``enqueue_many`` does (``enqueue_many(entrypoint,
        payloads)`` or ``enqueue_many(specs)``)."""
        specs = (
            [JobSpec(jobs, payload, priority) for payload in payloads]
            if isinstance(jobs, str)
            else list(jobs)
        )
        return self._call(lambda: self._queue.enqueue_many(specs))

    def stats(self) -> QueueStats:
        """Return the queue's counts, as the async ``stats`` does.

        Raises
        ------
        TypeError
            For a queue called through a broker (``connect``), whose API has no counts: open
            the queue on its storage (``open_queue``) to read them.
        """
        queue = self._queue
        if not isinstance(queue, BrokerQueue):
            raise TypeError("stats() needs the queue opened on its storage (sync.open_queue), not a broker's")
        return self._call(queue.stats)

    def result(self, job_id: Job | str, timeout: timedelta | None = None) -> bytes | None:
        """Wait until the job is finished (up to ``timeout``; None: do not wait) and return what
        its handler returned, as the async ``result`` does; a typed task's
        ``decode_result`` turns it into the function's typed value.

        Raises
        ------
        JobFailedError
            If the job died (its error and reason attached).
        JobCancelledError
            If it was cancelled.
        TimeoutError
            If it has not finished within ``timeout``.
        """
        plain_id = job_id if isinstance(job_id, str) else job_id.id
        waits = 0.0 if timeout is None else timeout.total_seconds()
        return self._call(lambda: self._queue.result(plain_id, timeout=timeout), waits)

    def cancel(self, job_id: Job | str) -> bool:
        """Cancel a job, as the async ``cancel`` does: True if it left the queue at once, False
        if it is running and its worker is asked to stop it (within seconds)."""
        return self._call(lambda: self._queue.cancel(job_id))

    def call(self, function: Callable[[Q], Awaitable[T]]) -> T:
        """Run ``function(queue)`` on the async queue in this queue's loop and return its answer:
        any call the async queue has. The management calls go this way, on a queue opened on
        its storage: ``jobs.call(lambda q: q.pause("email"))``, ``q.requeue_dead()``,
        ``q.dead_letters()``, ``q.history()``, ``q.purge(...)``, ``q.find(job_id)``."""
        return self._call(lambda: function(self._queue))

    def close(self) -> None:
        """Commit what is pending, close the queue and stop the loop; calls then raise
        ``QueueClosedError``. Called at interpreter exit for queues still open."""
        if self._closed:
            return
        self._closed = True
        _open_queues.discard(self)
        try:
            self._run(self._close())
        finally:
            self._stop_loop()

    def _stop_loop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(self.timeout)
        if not self._thread.is_alive():
            self._loop.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def open_queue(
    storage: ObjectStoragePort | str, *, timeout: timedelta = DEFAULT_TIMEOUT, **options: Any
) -> SyncQueue[BrokerQueue]:
    """Open the queue on ``storage`` (a storage, a storage URL, or a file path) as a
    ``BrokerQueue`` (``options`` go to it) whose calls block."""
    if isinstance(storage, str):
        storage = storage_from_url(storage)
    where = storage

    async def opener() -> tuple[BrokerQueue, Callable[[], Awaitable[None]]]:
        queue = BrokerQueue(where, **options)
        await queue.start()
        return queue, queue.stop

    return SyncQueue(opener, timeout)


def connect(
    target: str, queue: str, *, timeout: timedelta = DEFAULT_TIMEOUT, **options: Any
) -> SyncQueue[BrokerQueue | RemoteQueue]:
    """Open queue ``queue`` through the broker of ``target``, as ``jqueue.connect`` does
    (``options``: ``token``, ``broker``, ``failover_timeout``, ...), with calls that block."""
    connection = async_connect(target, queue, **options)

    async def opener() -> tuple[BrokerQueue | RemoteQueue, Callable[[], Awaitable[None]]]:
        opened = await connection.__aenter__()
        return opened, lambda: connection.__aexit__(None, None, None)

    return SyncQueue(opener, timeout)


@atexit.register
def _close_open_queues() -> None:
    for queue in list(_open_queues):
        queue.close()
