"""A worker's jobs and the acks it carries: a finished job's ack goes with the next claim
(``ack_and_dequeue``), one request and one commit for both, and that claim takes the job's
place: it claims as many more jobs as it acks."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from datetime import timedelta

from jqueue.domain.errors import JQueueError
from jqueue.domain.models import Job


class Slots:
    """The tasks of the jobs a worker holds, from its claim until its outcome is settled, and what
    wakes the claim loop."""

    def __init__(self) -> None:
        self.running: set[asyncio.Task[None]] = set()
        self.wake = asyncio.Event()
        """Set when the claim loop has something to do: a job's task ended, or an ack waits to be
        carried."""

    def hold(self, task: asyncio.Task[None]) -> None:
        """Count ``task``, a job's, until it ends."""
        self.running.add(task)
        task.add_done_callback(self._ended)

    async def drain(self, grace: timedelta, abort: asyncio.Event) -> bool:
        """Let the jobs held finish within ``grace`` (unless ``abort`` is set), then cancel the rest
        (a job's task releases its job); True if every job finished on its own."""
        running = self.running
        if not running:
            return True
        if not abort.is_set():
            aborted = asyncio.create_task(abort.wait())
            deadline = time.monotonic() + grace.total_seconds()
            while running and not abort.is_set() and time.monotonic() < deadline:
                await asyncio.wait(
                    {aborted, *running}, timeout=deadline - time.monotonic(), return_when="FIRST_COMPLETED"
                )
            aborted.cancel()
        pending = list(running)
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        return not pending

    def _ended(self, task: asyncio.Task[None]) -> None:
        self.running.discard(task)
        self.wake.set()


CarriedAck = tuple[Job, bytes | None, "asyncio.Future[bool]"]

CARRIED_RESULT_BYTES = 1 << 20
"""The most result bytes the acks waiting for one claim carry; a result past it is acked on
its own, so that a claim's request stays small."""


class CarriedAcks:
    """The acks of jobs whose handler returned, waiting for the worker's next claim to carry them
    (``wake`` tells the claim loop that one waits).

    A job's ``carry`` answers True once its ack landed with a claim, raises the error that kept
    it from landing, or answers False when no claim will carry it (the worker stopped
    claiming, or its queue cannot, or its result would pass ``CARRIED_RESULT_BYTES``): the
    job is then acked on its own.
    """

    def __init__(self, wake: asyncio.Event) -> None:
        self._wake = wake
        self._waiting: list[CarriedAck] = []
        self._result_bytes = 0
        self.open = False
        """Whether claims carry acks: only while the claim loop runs, on a queue that can."""

    def __len__(self) -> int:
        return len(self._waiting)

    async def carry(self, job: Job, result: bytes | None) -> bool:
        """Wait for the next claim to ack ``job`` (see the class)."""
        size = len(result or b"")
        if not self.open or self._result_bytes + size > CARRIED_RESULT_BYTES:
            return False
        future: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._waiting.append((job, result, future))
        self._result_bytes += size
        self._wake.set()
        return await future

    def take(self) -> list[CarriedAck]:
        """The acks waiting, for the claim about to be sent."""
        taken, self._waiting, self._result_bytes = self._waiting, [], 0
        return taken

    @staticmethod
    def answer(taken: Sequence[CarriedAck], outcomes: Sequence[JQueueError | None] | BaseException) -> None:
        """Answer the acks a claim carried: with their outcomes, or all with the claim's error. An
        error that is not the queue's (a claim cut short, a bug) answers False: each job is then
        acked on its own."""
        for index, (_, _, future) in enumerate(taken):
            if future.done():
                continue
            outcome = outcomes if isinstance(outcomes, BaseException) else outcomes[index]
            if outcome is not None and not isinstance(outcome, JQueueError):
                future.set_result(False)
            elif outcome is None:
                future.set_result(True)
            else:
                future.set_exception(outcome)

    def close(self) -> None:
        """Stop carrying acks; those waiting are acked on their own."""
        self.open = False
        for _, _, future in self.take():
            if not future.done():
                future.set_result(False)
