"""How a worker calls a handler: on the event loop, in a thread or in a process, with a time limit."""

from __future__ import annotations

import asyncio
import inspect
import multiprocessing
from collections.abc import Awaitable, Callable
from concurrent.futures import Executor, ProcessPoolExecutor, ThreadPoolExecutor
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Literal

from jqueue.domain.models import Job

Handler = Callable[[Job], Awaitable[object]] | Callable[[Job], object]
"""A job handler: ``async def handle(job)`` runs on the event loop, ``def handle(job)`` in a
pool; whatever it returns is ignored, an exception is a failure."""

RunIn = Literal["loop", "thread", "process"]


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
    """

    function: Handler
    timeout: timedelta | None
    run_in: RunIn

    @classmethod
    def of(cls, function: Handler, timeout: timedelta | None, in_process: bool) -> HandlerSpec:
        """Return the spec of ``function``: where it runs follows from what it is."""
        if timeout is not None and timeout <= timedelta(0):
            raise ValueError(f"timeout must be positive, got {timeout}")
        if inspect.iscoroutinefunction(function):
            if in_process:
                raise ValueError("an async handler runs on the event loop, not in a process")
            return cls(function, timeout, "loop")
        return cls(function, timeout, "process" if in_process else "thread")


class HandlerPools:
    """The thread and process pools of one worker run, created on first use."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._threads: ThreadPoolExecutor | None = None
        self._processes: ProcessPoolExecutor | None = None

    def _pool(self, run_in: RunIn) -> Executor:
        if run_in == "thread":
            if self._threads is None:
                self._threads = ThreadPoolExecutor(self.size, thread_name_prefix="jqueue-handler")
            return self._threads
        if self._processes is None:
            context = multiprocessing.get_context("spawn")  # no fork of a process running threads
            self._processes = ProcessPoolExecutor(self.size, mp_context=context)
        return self._processes

    async def call(self, spec: HandlerSpec, job: Job) -> None:
        """Run the handler on ``job`` within its time limit.

        Raises
        ------
        HandlerTimeoutError
            If it ran past its time limit (an async handler is cancelled; a thread or a
            process cannot be, so its result is dropped).
        """
        seconds = None if spec.timeout is None else spec.timeout.total_seconds()
        async with asyncio.timeout(seconds) as limit:
            try:
                if spec.run_in == "loop":
                    result: Any = spec.function(job)
                    await result
                else:
                    loop = asyncio.get_running_loop()
                    await loop.run_in_executor(self._pool(spec.run_in), spec.function, job)
            except asyncio.CancelledError:
                if limit.expired():
                    raise HandlerTimeoutError(f"timed out after {seconds:g} s") from None
                raise

    def close(self, wait: bool) -> None:
        """Shut the pools down, waiting for running handlers if ``wait``."""
        for pool in (self._threads, self._processes):
            if pool is not None:
                pool.shutdown(wait=wait, cancel_futures=True)
        self._threads = self._processes = None
