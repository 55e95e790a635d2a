"""``SettleCalls``: how a worker ends or holds a claimed job: ``ack``, ``nack``, ``release``
and ``heartbeat``, one job or many in a commit."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from datetime import timedelta

from jqueue.core.management import ManagementCalls, fence
from jqueue.domain.awaiting import results_size
from jqueue.domain.errors import JQueueError, PayloadTooLargeError
from jqueue.domain.index import QueueIndex
from jqueue.domain.models import Job
from jqueue.domain.policy import QueuePolicy
from jqueue.domain.spec import LONGEST_SPAN, checked_span
from jqueue.domain.times import to_micros, utc_now
from jqueue.domain.values import checked_int64, checked_progress, span, storable_text

CheckedAck = tuple[str, str | None, bytes | None] | JQueueError
"""An ack ready for its commit (the job's id, the lease that fences it, the result), or the error
that kept it out."""


def acking(
    checked: list[CheckedAck], limit: int | None = None
) -> Callable[[QueueIndex], list[JQueueError | None]]:
    """The operation that acks each of ``checked``, each under a savepoint of its own, and answers
    None or the error, per ack. An ack whose result would take a waiting child's parent results
    past ``limit`` bytes, summed, fails with ``PayloadTooLargeError`` naming the child."""

    def operation(index: QueueIndex) -> list[JQueueError | None]:
        now = to_micros(utc_now())
        outcomes: list[JQueueError | None] = []
        for item in checked:
            if isinstance(item, JQueueError):
                outcomes.append(item)
                continue
            job_id, lease, result = item
            savepoint = index.savepoint()
            try:
                children = index.children_of(job_id) if limit is not None and result else ()
                index.remove(job_id, lease, now, result)
                for child in children:
                    _check_inputs(index, child.id, limit)
                outcomes.append(None)
            except JQueueError as exc:
                index.rollback_to(savepoint)  # a failed ack leaves nothing behind
                outcomes.append(exc)
        return outcomes

    return operation


def _check_inputs(index: QueueIndex, child_id: str, limit: int | None) -> None:
    """Raise ``PayloadTooLargeError`` if the parent results ``child_id`` keeps, summed, are over
    ``limit`` bytes."""
    child = index.job(child_id)  # None: the ack's cascade ended it
    if child is None or limit is None:
        return
    size = results_size(child.parent_results)
    if size > limit:
        raise PayloadTooLargeError(size, limit, child_id)


class SettleCalls(ManagementCalls):
    """The calls of ``JobQueue`` that settle or hold claimed jobs, on the same commit strategy."""

    policy: QueuePolicy
    max_payload_bytes: int | None

    def _checked(self, payload: bytes) -> bytes:
        limit = self.max_payload_bytes
        if limit is not None and len(payload) > limit:
            raise PayloadTooLargeError(len(payload), limit)
        return payload

    async def ack(self, job_id: Job | str, *, result: bytes | None = None) -> None:
        """Remove a finished job, leaving a history record (that keeps ``result``, what its
        handler returned, for ``result()`` to read while the history holds it).

        Pass the claimed ``Job`` to fence the call with its lease, or a job id to
        remove the job whatever its state (as the documented jqueue does).

        Raises
        ------
        PayloadTooLargeError
            If ``result`` is over ``max_payload_bytes``; nothing changes.
        LeaseLostError
            Fenced, if the lease no longer holds the job (it expired and the job was
            claimed again, or someone else acked or requeued it); nothing changes.
        JobNotFoundError
            Unfenced, if the job is not in the queue (for example, acked already).
        """
        [error] = await self.ack_each([(job_id, result)])
        if error is not None:
            raise error

    async def ack_many(self, jobs: Iterable[Job | str]) -> None:
        """Remove finished jobs, all in one commit, each fenced as in ``ack``.

        If one of them cannot be acked (``LeaseLostError``, ``JobNotFoundError``), the
        error is raised and none is removed.
        """
        fences = [fence(job) for job in jobs]

        def operation(index: QueueIndex) -> None:
            now = to_micros(utc_now())
            for job_id, lease in fences:
                index.remove(job_id, lease, now, None)

        await self._commits.run(operation)

    async def ack_each(self, acks: Sequence[tuple[Job | str, bytes | None]]) -> list[JQueueError | None]:
        """Ack each job with its result (``ack`` with ``result``), all in one commit; returns, per
        job, None or the error that kept it from being acked, as ``ack`` raises it. One job's
        error leaves the others acked (``ack_many`` instead acks all or none)."""
        checked = self._checked_acks(acks)
        if all(isinstance(item, JQueueError) for item in checked):  # nothing to commit
            return [item for item in checked if isinstance(item, JQueueError)]
        return await self._commits.run(acking(checked, self.max_payload_bytes))

    def _checked_acks(self, acks: Sequence[tuple[Job | str, bytes | None]]) -> list[CheckedAck]:
        """Each ack's fence and result, or the error that keeps it from the commit."""
        checked: list[CheckedAck] = []
        for job, result in acks:
            try:
                checked.append((*fence(job), None if result is None else self._checked(bytes(result))))
            except JQueueError as exc:
                checked.append(exc)
        return checked

    async def nack(
        self,
        job_id: Job | str,
        delay: timedelta | None = None,
        error: str | None = None,
        *,
        max_attempts: int | None = None,
        dead: bool = False,
    ) -> None:
        """Return a claimed job to the queue after a wait: ``delay``, else the queue's back-off
        (none by default); a job that used its last attempt dies instead.

        ``error`` is recorded as the job's last error (what UTF-8 cannot store is escaped).
        ``max_attempts`` is the limit for a job without one of its own (by default the
        queue policy's). With ``dead``, the claimed job goes to the dead letters at once
        (``dead_reason`` ``failed``), whatever attempts it has left. Fenced when given the
        claimed ``Job``, as in ``ack``.
        """
        await self.nack_many([job_id], delay, error, max_attempts=max_attempts, dead=dead)

    async def nack_many(
        self,
        jobs: Iterable[Job | str],
        delay: timedelta | None = None,
        error: str | None = None,
        *,
        max_attempts: int | None = None,
        dead: bool = False,
    ) -> None:
        """Return claimed jobs to the queue as ``nack`` does, all in one commit.

        If one of them cannot be, the error is raised and none is.
        """
        if delay is not None and not timedelta(0) <= delay <= LONGEST_SPAN:
            raise ValueError(f"delay must be between 0 and {LONGEST_SPAN.days} days, got {span(delay)}")
        if max_attempts is not None and checked_int64("max_attempts", max_attempts) < 1:
            raise ValueError(f"max_attempts must be at least 1, got {max_attempts}")
        fences = [fence(job) for job in jobs]
        policy = self.policy
        limit = policy.max_attempts if max_attempts is None else max_attempts
        text = None if error is None else storable_text(str(error))

        def operation(index: QueueIndex) -> None:
            now = utc_now()
            for job_id, lease in fences:
                record = index.records.get(job_id)  # a claimed job is never cold
                wait = delay if delay is not None else policy.retry_delay(record.attempts if record else 1)
                retry_at = None if not wait else to_micros(now + wait)
                index.nack(job_id, lease, to_micros(now), retry_at, text, limit, dead)

        await self._commits.run(operation)

    async def release(self, job_id: Job | str) -> None:
        """Return a claimed job to the queue at once, not as a failure (a worker shutting down);
        fenced when given the claimed ``Job``."""
        plain_id, lease = fence(job_id)
        await self._commits.run(lambda index: index.release(plain_id, lease, to_micros(utc_now())))

    async def heartbeat(
        self,
        job_id: Job | str,
        *,
        visibility_timeout: timedelta | None = None,
        progress: float | None = None,
        note: str | None = None,
    ) -> None:
        """Record that the worker on a job is alive, extending its lease by its visibility timeout
        (or to ``visibility_timeout`` from now, when given), and with ``progress`` (0 to 1)
        and ``note``, how far the job got.

        Fenced when given the claimed ``Job``: a lost lease raises ``LeaseLostError``. A job
        whose cancel was asked for raises ``JobCancelledError``: its worker is to stop it.
        """
        plain_id, lease = fence(job_id)
        reported = (None, None) if progress is None else checked_progress(progress, note)
        if visibility_timeout is not None:
            checked_span("visibility_timeout", visibility_timeout)

        def operation(index: QueueIndex) -> None:
            now = utc_now()
            expires = None if visibility_timeout is None else to_micros(now + visibility_timeout)
            index.heartbeat(plain_id, to_micros(now), lease, expires, *reported)

        await self._commits.run(operation)
