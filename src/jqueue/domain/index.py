"""``QueueIndex``: the decisions of each queue operation, on top of the index's state.

An operation decides its effects against the current state (which jobs a claim takes, which
nack kills a job): each decision below applies the effects it made and returns them, so the
commit records exactly what was decided and any reader replays it (``IndexState.apply``).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Collection, Iterable, Iterator

from jqueue.domain import effects as fx
from jqueue.domain.dependencies import ENDINGS, PURGED, parent_failure
from jqueue.domain.errors import JobCancelledError
from jqueue.domain.index_state import E, IndexState
from jqueue.domain.models import LEASE_EXPIRED, JobStatus, ParentFailure
from jqueue.domain.records import HistoryRecord, JobRecord
from jqueue.domain.tally import DEAD, IN_PROGRESS


class QueueIndex(IndexState):
    """The live queue and the decisions of the operations on it (see ``IndexState``)."""

    def running(self, scope: str | None) -> int:
        """How many jobs of ``scope`` (an entrypoint, or None for all) are in progress."""
        if scope is None:
            return self.tally.total(IN_PROGRESS)
        counts = self.tally.counts.get(scope)
        return 0 if counts is None else counts[IN_PROGRESS]

    def running_of(self, scope: str | None, tenant: str | None) -> int:
        """How many jobs of ``tenant`` of ``scope`` (an entrypoint, or None for all) are in progress."""
        return self.tally.running.get((scope, tenant), 0)

    def heap_entries(self) -> int:
        """How many entries the heaps hold, live or outdated (outdated ones are skipped lazily)."""
        return self.order.entries()

    def select(
        self,
        statuses: Collection[JobStatus] | None = None,
        entrypoints: Collection[str] | None = None,
        created_before: int | None = None,
        start: int = 0,
    ) -> Iterator[JobRecord]:
        """Yield the records with one of ``statuses``, of one of ``entrypoints``, created before
        ``created_before`` (each filter only when given), from insertion number ``start`` on, in
        insertion order; at depth, the first ones cost a few of the slabs' blocks."""
        for record in self.ordered(statuses, entrypoints, start):
            if created_before is None or record.created < created_before:
                yield record

    def known(self, job_id: str) -> JobRecord | HistoryRecord | None:
        """Return the live job ``job_id``, else its newest history record, if either exists."""
        record = self.job(job_id)
        return record if record is not None else self.history.finished(job_id)

    def with_dedup_key(self, key: str) -> JobRecord | None:
        """Return the live job enqueued with dedup key ``key``, if any."""
        job_id = self._dedup.get(key)
        return None if job_id is None else self.records[job_id]  # a job with a dedup key is never cold

    def dedup_match(self, key: str, acked_since: int) -> JobRecord | HistoryRecord | None:
        """Return the live job enqueued with ``key``, else the newest one acked at or after
        ``acked_since`` that history still holds."""
        live = self.with_dedup_key(key)
        return live if live is not None else self.history.acked(key, acked_since)

    def claim(
        self,
        entrypoints: Collection[str] | None,
        batch_size: int,
        now: int,
        expires: int | None = None,
        leases: Callable[[], str] | None = None,
    ) -> list[fx.Claimed]:
        """Claim up to ``batch_size`` claimable jobs in priority order (of ``entrypoints`` if
        given), each under a new lease from ``leases`` that runs out at ``expires``.

        Jobs not yet due wait; paused entrypoints, throttles that are used up and limits
        on the jobs in progress that are reached hand out nothing; a job past its deadline
        dies (``ttl``) instead of being claimed.
        """
        self.order.release_due(now)
        claimed: list[fx.Claimed] = []
        while len(claimed) < batch_size:
            found = self.order.next_claimable(entrypoints, self.controls, now, self.running, self.running_of)
            if found is None:
                break
            job_id, give_back_turn = found
            record = self.records[job_id]
            if record.not_before is not None and record.not_before > now:  # released by a clock ahead of now
                give_back_turn()
                self.order.reschedule(record)
                continue
            if record.deadline is not None and record.deadline <= now:
                give_back_turn()  # a turn is a claim's
                self._applied(fx.Died(record.id, now, "ttl", record.last_error))
                continue
            self._record_undo(give_back_turn)
            claimed.append(self._applied(fx.Claimed(record.id, now, leases() if leases else None, expires)))
        return claimed

    def peek(self, entrypoints: Collection[str] | None, limit: int, now: int) -> list[JobRecord]:
        """Return the (up to ``limit``) jobs ``claim`` would take now, in order, taking none:
        the claim is made and undone."""
        opened = self._journal is None
        if opened:
            self.begin()
        mark = self.savepoint()
        try:
            return [self.records[claim.job_id] for claim in self.claim(entrypoints, limit, now)]
        finally:
            self.rollback_to(mark)
            if opened:
                self.rollback()

    def remove(
        self,
        job_id: str,
        lease: str | None = None,
        at: int | None = None,
        result: bytes | None = None,
        *,
        now: int | None = None,
    ) -> fx.Removed:
        """Remove a job: an ack at ``at`` (fenced by ``lease`` if given) that keeps ``result``
        in its history record, or with ``at`` None a purge at ``now`` that leaves no history
        (its waiting children fail with it)."""
        self._holding(job_id, lease)
        return self._applied(fx.Removed(job_id, at, result), now)

    def nack(
        self,
        job_id: str,
        lease: str | None,
        now: int,
        retry_at: int | None = None,
        error: str | None = None,
        max_attempts: int | None = None,
        dead: bool = False,
    ) -> fx.Requeued | fx.Died | fx.Cancelled:
        """Return a job to the queue, claimable from ``retry_at`` (fenced by ``lease`` if given);
        a claimed job that used its last attempt dies instead, and with ``dead`` a claimed job
        dies at once (reason ``failed``). A claimed job whose cancel was asked for is cancelled.

        ``max_attempts`` is the queue's default for jobs that have none of their own.
        """
        record = self._holding(job_id, lease)
        if record.status is JobStatus.WAITING:
            raise ValueError(f"job {job_id!r} waits for its parents; cancel it instead")
        if record.status is JobStatus.IN_PROGRESS and record.cancel_requested is not None:
            return self._applied(fx.Cancelled(job_id, now, error))
        if record.status is JobStatus.IN_PROGRESS and dead:
            return self._applied(fx.Died(job_id, now, "failed", error))
        limit = record.max_attempts if record.max_attempts is not None else max_attempts
        if record.status is JobStatus.IN_PROGRESS and limit is not None and record.attempts >= limit:
            return self._applied(fx.Died(job_id, now, "max_attempts", error))
        return self._applied(fx.Requeued(job_id, retry_at, error))

    def release(self, job_id: str, lease: str | None, now: int) -> list[fx.Requeued | fx.Cancelled]:
        """Return a claimed job to the queue at once, not as a failure (fenced by ``lease`` if
        given), or cancel it at ``now`` if its cancel was asked for; unfenced, nothing for a job
        in another status."""
        record = self._holding(job_id, lease)
        if record.status is not JobStatus.IN_PROGRESS:
            return []
        if record.cancel_requested is not None:
            return [self._applied(fx.Cancelled(job_id, now))]
        return [self._applied(fx.Requeued(job_id))]

    def cancel(
        self, job_id: str, lease: str | None, now: int, reason: str | None = None
    ) -> list[fx.CancelAsked | fx.Cancelled]:
        """Cancel a job at ``now``: one that is not running, or (fenced by ``lease``) the claimed
        job of the worker that stopped it, leaves the queue with a history record (whose error
        is ``reason``, if given); a running job, unfenced, is marked for its worker to stop (once).

        Raises
        ------
        JobNotFoundError
            If the job is not in the queue.
        LeaseLostError
            Fenced, if ``lease`` no longer holds the job.
        ValueError
            If the job is staged (discard its bulk write instead).
        """
        record = self._holding(job_id, lease)
        if record.status is JobStatus.STAGED:
            raise ValueError(f"job {job_id!r} is staged by a bulk write not yet published; discard the write")
        if lease is None and record.status is JobStatus.IN_PROGRESS:
            return [] if record.cancel_requested is not None else [self._applied(fx.CancelAsked(job_id, now))]
        return [self._applied(fx.Cancelled(job_id, now, reason))]

    def cancel_added(self, job_id: str, now: int, failure: str) -> fx.Cancelled:
        """Cancel a job added in this commit whose parent had failed already (``failure`` says
        which, and how), with its own waiting children."""
        return self._applied(fx.Cancelled(job_id, now, failure))

    def requeue(self, job_ids: Iterable[str]) -> list[fx.Requeued]:
        """Make jobs claimable at once whatever their state: a dead one with its attempts reset,
        a claimed one released, a delayed one due now; a job already claimable, or waiting for
        its parents, is left alone.

        Raises
        ------
        JobNotFoundError
            If one of ``job_ids`` is not in the queue.
        """
        done: list[fx.Requeued] = []
        for job_id in dict.fromkeys(job_ids):
            record = self._require(job_id)
            if record.status is JobStatus.WAITING or (
                record.status is JobStatus.QUEUED and record.not_before is None
            ):
                continue
            done.append(self._applied(fx.Requeued(job_id, reset=record.status is JobStatus.DEAD)))
        return done

    def requeue_dead(self, job_ids: Iterable[str] | None = None) -> list[fx.Requeued]:
        """Requeue dead jobs (those of ``job_ids``, or all) with their attempts reset.

        Raises
        ------
        JobNotFoundError
            If one of ``job_ids`` is not in the queue.
        """
        if job_ids is None:
            dead = sorted(self.tally.ids(DEAD), key=lambda job_id: self.records[job_id].order)
        else:
            dead = [job_id for job_id in job_ids if self._require(job_id).status is JobStatus.DEAD]
        return [self._applied(fx.Requeued(job_id, reset=True)) for job_id in dict.fromkeys(dead)]

    def heartbeat(
        self,
        job_id: str,
        now: int,
        lease: str | None = None,
        expires: int | None = None,
        progress: float | None = None,
        note: str | None = None,
        new_lease: str | None = None,
    ) -> list[fx.Beat]:
        """Move a claimed job's heartbeat to ``now`` and extend its lease (to ``expires`` when
        given), recording its ``progress`` and ``note`` when given, and with ``new_lease``
        holding the claim under that lease from now on; unfenced, nothing for a job in another
        status.

        Raises
        ------
        JobCancelledError
            If the job's cancel was asked for: its worker is to stop it (nothing changes);
            also once it ended cancelled (its lease ran out after the cancel was asked for).
        """
        finished = None if self.job(job_id) is not None else self.history.finished(job_id)
        if finished is not None and finished.outcome is JobStatus.CANCELLED:
            raise JobCancelledError(job_id)
        record = self._holding(job_id, lease)
        if record.status is not JobStatus.IN_PROGRESS:
            return []
        if record.cancel_requested is not None:
            raise JobCancelledError(job_id)
        return [self._applied(fx.Beat(job_id, now, expires, progress, note, new_lease))]

    def requeue_expired(
        self, now: int, max_attempts: int | None = None
    ) -> list[fx.Requeued | fx.Died | fx.Cancelled]:
        """Return the claimed jobs whose lease ran out before ``now`` to the queue; one that used
        its last attempt (its own ``max_attempts``, else the one given) dies instead, and one
        whose cancel was asked for is cancelled."""
        expired = self.order.expired(now)
        return [self.nack(job_id, None, now, None, LEASE_EXPIRED, max_attempts) for job_id in expired]

    def requeue_stale(self, cutoff: int, now: int) -> list[fx.Requeued | fx.Cancelled]:
        """Requeue the claimed jobs whose heartbeat is older than ``cutoff`` (or missing); one
        whose cancel was asked for is cancelled at ``now``."""
        return [effect for job_id in self.order.stale(cutoff) for effect in self.release(job_id, None, now)]

    def staged_batches(self) -> dict[str, int]:
        """Return the bulk writes not yet published, with their job counts."""
        return {batch: len(ids) for batch, ids in self._staged.items()}

    def publish(self, batch: str) -> list[fx.Published]:
        """Make the staged jobs of ``batch`` claimable; nothing if it has none (published already)."""
        return [self._applied(fx.Published(batch))] if batch in self._staged else []

    def discard(self, batch: str) -> list[fx.Discarded]:
        """Drop the staged jobs of ``batch``; nothing if it has none."""
        return [self._applied(fx.Discarded(batch))] if batch in self._staged else []

    def discard_abandoned(self, staged_before: int) -> list[fx.Discarded]:
        """Drop each bulk write whose staged jobs were created before ``staged_before`` (one of
        them is looked at: a writer stages a batch in minutes, and the limit is far longer)."""
        records = self.records
        abandoned = [
            batch for batch, ids in self._staged.items() if records[next(iter(ids))].created < staged_before
        ]
        return [self._applied(fx.Discarded(batch)) for batch in abandoned]

    def forget(self, finished_before: int, keep: int) -> list[fx.Forgotten]:
        """Drop the oldest history records: those finished before ``finished_before`` and any
        beyond the newest ``keep``."""
        count = self.history.expired(finished_before, keep)
        return [self._applied(fx.Forgotten(count))] if count else []

    def _applied(self, effect: E, now: int | None = None) -> E:
        """Apply a decision's effect; one that ends a job settles its waiting children in the
        same commit (a purge's at ``now``)."""
        self.apply(effect)
        if self._children and isinstance(effect, fx.Removed | fx.Died | fx.Cancelled):
            self._settle_children(effect, now)
        return effect

    def _settle_children(self, ended: fx.Removed | fx.Died | fx.Cancelled, now: int | None) -> None:
        """Settle the children of ``ended``'s job, and theirs in turn when a failure cancels them:
        an ack passes on its result; a failure cancels each child, or settles it without a
        result when its policy is to run anyway."""
        todo: deque[fx.Removed | fx.Died | fx.Cancelled] = deque([ended])
        while todo:
            effect = todo.popleft()
            children = self.children_of(effect.job_id)
            if not children:
                continue
            result, failure, at = _outcome(effect, now)
            for child in children:
                if failure is None or child.on_parent_failure == ParentFailure.RUN:
                    self.apply(fx.ParentSettled(child.id, effect.job_id, result, at))
                    continue
                if at is None:
                    raise ValueError(f"purging job {effect.job_id!r}, which jobs wait for, needs a time")
                cancelled = fx.Cancelled(child.id, at, parent_failure(effect.job_id, failure))
                self.apply(cancelled)
                todo.append(cancelled)


def _outcome(
    effect: fx.Removed | fx.Died | fx.Cancelled, now: int | None
) -> tuple[bytes | None, str | None, int | None]:
    """The result, the failure (None for an ack) and the time of a job's end."""
    if isinstance(effect, fx.Removed):
        return (effect.result, None, effect.at) if effect.at is not None else (None, PURGED, now)
    return None, ENDINGS[JobStatus.DEAD if isinstance(effect, fx.Died) else JobStatus.CANCELLED], effect.at
