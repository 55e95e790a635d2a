"""``JobContext``: what a running handler can tell its worker (progress) and learn from it
(a cancel), reached with ``current_job()``."""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Iterator
from contextlib import contextmanager

from jqueue.domain.models import Job
from jqueue.domain.values import checked_progress

_CURRENT: contextvars.ContextVar[JobContext] = contextvars.ContextVar("jqueue_job")


class JobContext:
    """The job a handler runs, as its worker gives it.

    Attributes
    ----------
    job : Job
        The claimed job.
    """

    def __init__(self, job: Job, task: asyncio.Task[object] | None = None) -> None:
        self.job = job
        self._task = task
        self._report: tuple[float, str | None] | None = None
        self._cancel_seen = False
        self._handler_done = False
        self.interrupted = False
        """Whether ``cancel`` cancelled the handler's task."""

    @property
    def attempts(self) -> int:
        """This run's attempt: 1 on the first run, 2 on the first retry, and so on (the
        job's ``attempts``, counted when it was claimed)."""
        return self.job.attempts

    @property
    def cancelled(self) -> bool:
        """Whether the job's cancel was asked for (seen at a heartbeat): a handler in a thread,
        which cannot be interrupted, can look at this and return early."""
        return self._cancel_seen

    def progress(self, fraction: float, note: str | None = None) -> None:
        """Report how far the job got, from 0 to 1, with an optional ``note`` (cut to 1,000
        characters); the newest report is stored within seconds (``PROMPT_EVERY``), one
        heartbeat for all the reports made meanwhile, not one commit per call.

        Raises
        ------
        ValueError
            If ``fraction`` is not a number from 0 to 1 or ``note`` is not text.
        """
        self._report = checked_progress(fraction, note)

    def take_report(self) -> tuple[float, str | None] | None:
        """Return the progress reported since the last call, if any (for the heartbeat)."""
        report, self._report = self._report, None
        return report

    def put_back(self, report: tuple[float, str | None]) -> None:
        """Keep a report a heartbeat failed to store, unless a newer one came meanwhile."""
        if self._report is None:
            self._report = report

    def cancel(self) -> None:
        """Note that the job's cancel was asked for and interrupt its handler, if it still runs."""
        self._cancel_seen = True
        if self._task is not None and not self._handler_done and not self.interrupted:
            self.interrupted = True
            self._task.cancel()

    def handler_done(self) -> None:
        """Note that the handler returned or raised: a cancel no longer interrupts anything."""
        self._handler_done = True

    @contextmanager
    def current(self) -> Iterator[JobContext]:
        """Make this the context ``current_job()`` returns inside the block."""
        token = _CURRENT.set(self)
        try:
            yield self
        finally:
            _CURRENT.reset(token)


def current_job() -> JobContext:
    """Return the context of the job whose handler is running (on the event loop or in a
    worker's thread), e.g. ``current_job().progress(0.4, note="resized")``.

    Raises
    ------
    LookupError
        Outside a handler run by a ``Worker`` (in a handler process too: there, report no
        progress).
    """
    try:
        return _CURRENT.get()
    except LookupError:
        raise LookupError("current_job() is called outside a handler that a Worker runs") from None
