"""How a ``Worker`` is told what to run (handlers, typed tasks, periodic jobs and hooks), the
limits it applies to a job, and the signals it stops on."""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Callable, Iterator
from datetime import timedelta, tzinfo
from typing import Any, ParamSpec, TypeVar, overload

from jqueue.core.runtime.cron import Schedule, time_zone
from jqueue.core.runtime.handlers import Handler, HandlerSpec
from jqueue.core.runtime.hooks import Hook
from jqueue.core.runtime.tasks import Task
from jqueue.domain.models import Job
from jqueue.domain.policy import Backoff
from jqueue.domain.values import span
from jqueue.ports.queue import Queue

P = ParamSpec("P")
R = TypeVar("R")


class WorkerSetup:
    """The configuration calls of ``Worker`` (which sets these attributes)."""

    queues: list[Queue]
    timeout: timedelta | None
    handlers: dict[str, HandlerSpec]
    hooks: dict[str, list[Hook]]
    schedules: list[tuple[Queue, Schedule]]
    max_attempts: int | None
    backoff: Backoff | None
    concurrency: int
    visibility_timeout: timedelta | None

    def description(self) -> str:
        """One line on what this worker runs and how: its queues, handlers, concurrency,
        visibility timeout and attempts (logged when it starts)."""
        first = self.queues[0]
        places = ", ".join(getattr(q, "location", type(q).__name__) for q in self.queues)
        handlers = ", ".join(f"{name} ({spec.label})" for name, spec in self.handlers.items())
        visibility = self.visibility_timeout or first.visibility_timeout
        attempts = first.policy.max_attempts or self.max_attempts
        return (
            f"{places}; handlers {handlers}; concurrency {self.concurrency}; visibility timeout"
            f" {span(visibility)}; max attempts {attempts or 'unlimited'}"
        )

    def _attempts_limit(self, queue: Queue, job: Job) -> int | None:
        """The job's own limit, else the queue policy's, else this worker's."""
        for limit in (job.max_attempts, queue.policy.max_attempts):
            if limit is not None:
                return limit
        return self.max_attempts

    def _retry_delay(self, queue: Queue, attempts: int) -> timedelta | None:
        """The queue policy's back-off, else this worker's."""
        if queue.policy.backoff is not None:
            return queue.policy.retry_delay(attempts)
        return None if self.backoff is None else self.backoff.delay(attempts)

    def register(
        self,
        entrypoint: str,
        function: Handler,
        *,
        timeout: timedelta | None = None,
        in_process: bool = False,
    ) -> None:
        """Run ``function`` for jobs of ``entrypoint``, with its own time limit if given; a sync
        function runs in a thread, or in a process with ``in_process``."""
        limit = self.timeout if timeout is None else timeout
        self.handlers[entrypoint] = HandlerSpec.of(function, limit, in_process)

    def cron(
        self,
        schedule: str | None,
        entrypoint: str,
        payload: bytes = b"",
        *,
        every: timedelta | None = None,
        tz: str | tzinfo = "UTC",
        priority: int = 0,
        queue: Queue | None = None,
    ) -> None:
        """Enqueue a job of ``entrypoint`` at each tick of ``schedule`` (a cron expression such
        as ``"*/5 * * * *"``, read in time zone ``tz``) or ``every`` so long, while ``run``
        runs (not in a burst): one job per tick however many workers have the schedule, and
        the latest tick that passed is enqueued when a worker starts. Into ``queue``, by
        default the worker's first. A cron expression needs the ``cron`` extra (croniter).
        """
        target = self.queues[0] if queue is None else queue
        if not callable(getattr(target, "enqueue_many", None)):
            raise TypeError("a periodic job needs a queue that can enqueue (enqueue_many)")
        self.schedules.append(
            (target, Schedule(entrypoint, payload, schedule, every, time_zone(tz), priority))
        )

    def handler(
        self, entrypoint: str, *, timeout: timedelta | None = None, in_process: bool = False
    ) -> Callable[[Handler], Handler]:
        """Decorator form of ``register``."""

        def decorate(function: Handler) -> Handler:
            self.register(entrypoint, function, timeout=timeout, in_process=in_process)
            return function

        return decorate

    def on(self, event: str) -> Callable[[Hook], Hook]:
        """Decorator adding a hook: ``start(worker)``, ``stop(worker, stats)``,
        ``before_job(job)`` or ``after_job(result)``; sync or async."""
        if event not in self.hooks:
            raise ValueError(f"unknown hook {event!r}; one of {sorted(self.hooks)}")

        def decorate(hook: Hook) -> Hook:
            self.hooks[event].append(hook)
            return hook

        return decorate

    @overload
    def task(self, function: Callable[P, R], /) -> Task[P, R]: ...

    @overload
    def task(
        self, function: None = None, /, *, entrypoint: str | None = None, timeout: timedelta | None = None,
        priority: int = 0,
    ) -> Callable[[Callable[P, R]], Task[P, R]]: ...  # fmt: skip

    def task(
        self,
        function: Callable[..., Any] | None = None,
        /,
        *,
        entrypoint: str | None = None,
        timeout: timedelta | None = None,
        priority: int = 0,
    ) -> Any:
        """Decorator making a function with annotated parameters a typed task of this worker:
        its jobs' entrypoint is the function's name (or ``entrypoint``), its payload the
        arguments as JSON, validated when deferred and again when run (a payload that does
        not fit dies at once, as with ``Fail``). Returns the ``Task``, whose ``defer(queue,
        ...)`` enqueues a call."""

        def decorate(chosen: Callable[..., Any]) -> Task[..., Any]:
            made: Task[..., Any] = Task(chosen, entrypoint or chosen.__name__, priority)
            self.register(made.entrypoint, made.handler(), timeout=timeout)
            return made

        return decorate if function is None else decorate(function)


@contextlib.contextmanager
def handled_signals(handler: Callable[[], None], install: bool) -> Iterator[None]:
    """Call ``handler`` on SIGTERM and SIGINT while the block runs (if ``install``, and where the
    running loop can take signal handlers)."""
    loop = asyncio.get_running_loop()
    installed: list[signal.Signals] = []
    if install:
        for sig in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(ValueError, RuntimeError, NotImplementedError):
                loop.add_signal_handler(sig, handler)
                installed.append(sig)
    try:
        yield
    finally:
        for sig in installed:
            loop.remove_signal_handler(sig)
