"""How a worker calls a handler: on the event loop, in a thread or in a process, with a time limit."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import inspect
import multiprocessing
import os
import pickle
import signal
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor, ThreadPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from datetime import timedelta
from multiprocessing.process import BaseProcess
from typing import Any, Literal

from jqueue.core.spawn_guard import GUARD_HINT, refuse_while_spawning
from jqueue.domain.models import Job
from jqueue.domain.spec import POSITIVE_SPAN

Handler = Callable[[Job], Awaitable[object]] | Callable[[Job], object]
"""A job handler: ``async def handle(job)`` runs on the event loop, ``def handle(job)`` in a
pool; what it returns is kept as the job's result (a value that cannot be kept fails the job),
an exception is a failure."""

RunIn = Literal["loop", "thread", "process"]

# What a terminal or a service manager sends to all of a worker's processes: the worker
# alone acts on them, and stops its handler processes itself.
_GROUP_SIGNALS = {signal.SIGINT, signal.SIGTERM}
_KILL_WAIT = 5.0  # seconds for killed handler processes to exit


class HandlerTimeoutError(Exception):
    """A handler ran past its time limit (the job counts as failed)."""


@dataclass(frozen=True)
class HandlerSpec:
    """A registered handler and how to run it.

    Attributes
    ----------
    function : Handler
        The handler.
    timeout : timedelta or None
        Its time limit per job; None for none.
    run_in : {"loop", "thread", "process"}
        Where it runs: async handlers on the loop; sync ones in a thread pool, or in a
        process pool (the function and the job must pickle: a module-level function).
    label : str
        What it runs, for the worker's start line: the function's qualified name, or what
        replaced it (``jqueue exec``: the command).
    """

    function: Handler
    timeout: timedelta | None
    run_in: RunIn
    label: str = ""

    @classmethod
    def of(cls, function: Handler, timeout: timedelta | None, in_process: bool) -> HandlerSpec:
        """Return the spec of ``function``: where it runs follows from what it is."""
        if timeout is not None:
            POSITIVE_SPAN.check("timeout", timeout)
        label = getattr(function, "__qualname__", type(function).__name__)
        if inspect.iscoroutinefunction(function):
            if in_process:
                raise ValueError("an async handler runs on the event loop, not in a process")
            return cls(function, timeout, "loop", label)
        if in_process:
            try:
                pickle.dumps(function)
            except (pickle.PicklingError, AttributeError, TypeError) as exc:
                raise ValueError(
                    f"an in_process handler must be a module-level function its process can import "
                    f"by name; {label!r} cannot be sent to a process ({exc})"
                ) from None
        return cls(function, timeout, "process" if in_process else "thread", label)


def _ignore_group_signals() -> None:
    """Initialize a handler process: ignore the signals meant for its worker.

    The process starts with them blocked (see ``_group_signals_blocked``); once ignored,
    a signal that came meanwhile is dropped.
    """
    for sig in _GROUP_SIGNALS:
        signal.signal(sig, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, _GROUP_SIGNALS)


@contextlib.contextmanager
def _group_signals_blocked() -> Iterator[None]:
    """Block the group's signals in this thread while it starts a handler process, which
    inherits the mask: a signal before the process's initializer runs cannot kill it."""
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, _GROUP_SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def _started(_: object) -> int:
    """What a new handler process runs first, to show that it started."""
    return os.getpid()


def _join(processes: list[BaseProcess], seconds: float) -> None:
    deadline = time.monotonic() + seconds
    for process in processes:
        process.join(max(0.0, deadline - time.monotonic()))


class _HandlerProcess:
    """A pool of one spawned process, so that one handler can be killed without the others."""

    def __init__(self) -> None:
        context = multiprocessing.get_context("spawn")  # no fork of a process running threads
        self.pool = ProcessPoolExecutor(1, mp_context=context, initializer=_ignore_group_signals)

    def submit(self, function: Callable[[Any], object], job: Job | None) -> Future[object]:
        """Run ``function(job)`` in the process (started by the first call)."""
        with _group_signals_blocked():
            return self.pool.submit(function, job)

    def shut_down(self, kill: bool) -> list[BaseProcess]:
        """Shut the pool down, waiting for its handler unless ``kill``: then kill its process
        (it ignores SIGTERM) and return it, to be joined."""
        processes: list[BaseProcess] = list((self.pool._processes or {}).values())  # no public way
        if not kill:
            self.pool.shutdown(wait=True, cancel_futures=True)
            return []
        for process in processes:
            process.kill()
        self.pool.shutdown(wait=False, cancel_futures=True)
        return processes


class HandlerPools:
    """The thread pool and the handler processes of one worker run, created on first use.

    Each process runs one handler at a time (at most ``size`` at once), so a handler past
    its time limit, or one its worker stopped waiting for, is killed alone. The processes
    ignore SIGINT and SIGTERM: a terminal's Ctrl-C, or a service manager's SIGTERM to all
    of the worker's processes, leaves them to their worker.
    """

    def __init__(self, size: int) -> None:
        self.size = size
        self._threads: ThreadPoolExecutor | None = None
        self._process_slots = asyncio.Semaphore(size)
        self._idle: list[_HandlerProcess] = []
        self._busy: set[_HandlerProcess] = set()

    async def start(self, specs: Iterable[HandlerSpec]) -> None:
        """Get ready to run ``specs``: where one runs in a process, start a process and wait
        until it runs a call, so that a script that starts its worker unguarded fails here, at
        start, and not on each job.

        Raises
        ------
        RuntimeError
            In a handler process that is importing its worker's script (it would start a
            second worker, claiming jobs), or if the first handler process cannot start.
        """
        refuse_while_spawning("a Worker was started")
        if not any(spec.run_in == "process" for spec in specs):
            return
        handler = _HandlerProcess()
        try:
            await asyncio.wrap_future(handler.submit(_started, None))
        except BrokenProcessPool:
            await asyncio.to_thread(_join, handler.shut_down(kill=True), _KILL_WAIT)
            raise RuntimeError(f"a handler process did not start (see its error); {GUARD_HINT}") from None
        self._idle.append(handler)

    def _thread_pool(self) -> ThreadPoolExecutor:
        if self._threads is None:
            self._threads = ThreadPoolExecutor(self.size, thread_name_prefix="jqueue-handler")
        return self._threads

    async def call(self, spec: HandlerSpec, job: Job) -> object:
        """Run the handler on ``job`` within its time limit (the job's ``timeout``, else the
        handler's); return what it returned.

        Raises
        ------
        HandlerTimeoutError
            If it ran past its time limit: an async handler is cancelled and a process
            killed; a thread cannot be stopped, so its result is dropped.
        """
        limit_of_job = job.timeout if job.timeout is not None else spec.timeout
        seconds = None if limit_of_job is None else limit_of_job.total_seconds()
        async with asyncio.timeout(seconds) as limit:
            try:
                if spec.run_in == "loop":
                    result: Any = spec.function(job)
                    return await result
                if spec.run_in == "thread":
                    loop = asyncio.get_running_loop()
                    run = contextvars.copy_context().run  # current_job() in the thread too
                    return await loop.run_in_executor(self._thread_pool(), run, spec.function, job)
                return await self._in_process(spec.function, job)
            except asyncio.CancelledError:
                if limit.expired():
                    raise HandlerTimeoutError(f"timed out after {seconds:g} s") from None
                raise

    async def _in_process(self, function: Callable[[Job], object], job: Job) -> object:
        async with self._process_slots:
            handler = self._idle.pop() if self._idle else _HandlerProcess()
            self._busy.add(handler)
            try:
                returned = await asyncio.wrap_future(handler.submit(function, job))
            except BaseException as exc:
                # Cancelled (time limit, worker stopping) or broken: the process goes.
                reusable = isinstance(exc, Exception) and not isinstance(exc, BrokenProcessPool)
                await self._put_back(handler, reusable)
                raise
            await self._put_back(handler, reusable=True)
            return returned

    async def _put_back(self, handler: _HandlerProcess, reusable: bool) -> None:
        if handler not in self._busy:
            return  # closed meanwhile
        self._busy.discard(handler)
        if reusable:
            self._idle.append(handler)
        else:
            await asyncio.to_thread(_join, handler.shut_down(kill=True), _KILL_WAIT)

    def close(self, wait: bool) -> None:
        """Shut the pools down: wait for running handlers if ``wait``, else leave the threads
        to finish alone and kill the processes."""
        if self._threads is not None:
            self._threads.shutdown(wait=wait, cancel_futures=True)
        handlers = [*self._idle, *self._busy]
        self._threads, self._idle, self._busy = None, [], set()
        _join([process for handler in handlers for process in handler.shut_down(kill=not wait)], _KILL_WAIT)
