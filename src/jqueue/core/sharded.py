"""``ShardedQueue``: one queue made of several logs, so that many processes contend on many.

Shard 0 is the queue as it always was; it records the count (``JobQueue.reshard``), and shard
``k`` lives beside it (``ROOT/NAME.shard-k.json``, made by the caller's ``open_shard``). A job
goes to the shard of its tenant, else of its dedup key, else of its id (``domain.sharding``);
a job with parents goes to its first parent's shard, so that dependencies, fan-in and
per-tenant limits stay inside one log's commit. Claims visit the shards in turn from a start
that moves at each call, so that no shard starves. Priorities and FIFO hold within a shard.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable, Collection, Iterable, Sequence
from datetime import datetime, timedelta
from types import TracebackType
from typing import Any, Protocol, Self, TypeVar

from jqueue.core.insight import QueueInsight
from jqueue.core.queue import EnqueueCalls
from jqueue.domain import errors
from jqueue.domain.insight import LISTED
from jqueue.domain.models import Job, JobStatus, new_job_id
from jqueue.domain.policy import QueuePolicy
from jqueue.domain.records import HistoryRecord
from jqueue.domain.sharding import SHARDS, routing_key, shard_of
from jqueue.domain.spec import JobSpec
from jqueue.domain.stats import EntrypointStats, QueueStats
from jqueue.ports.queue import ChangeSource, Queue, SupportsAckAndDequeue

T = TypeVar("T")

LOCATED_MOST = 100_000
"""The most job ids whose shard a sharded queue remembers (the jobs it claimed or added lately)."""
SHARD_CURSORS = 1 << 48
"""The cursors of one shard's pages (insertion numbers) in ``browse``'s cursors of a sharded queue."""


class Shard(Queue, SupportsAckAndDequeue, Protocol):
    """What a sharded queue asks of each shard: a ``JobQueue`` committing directly, or a
    ``RemoteQueue`` of the shard as ``jqueue serve`` serves it (``shard_name``): the calls of a
    ``Queue``, and these."""

    @property
    def changes(self) -> ChangeSource: ...
    async def __aenter__(self) -> Any: ...
    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None: ...
    async def shards(self) -> int: ...
    async def reshard(self, shards: int) -> int: ...
    async def enqueue_many(self, jobs: Iterable[JobSpec], /) -> list[Job]: ...
    async def heartbeat(
        self, job_id: Job | str, *, progress: float | None = None, note: str | None = None
    ) -> None: ...
    async def cancel_requested(self, job_id: Job | str) -> bool: ...
    async def cancel(self, job_id: Job | str) -> bool: ...
    async def result(self, job_id: str, timeout: timedelta | None = None) -> bytes | None: ...  # noqa: ASYNC109
    async def find(self, job_id: str) -> Job | None: ...
    async def finished(self, job_id: str) -> HistoryRecord | None: ...
    async def stats(self) -> QueueStats: ...
    async def jobs(
        self,
        status: JobStatus | None = None,
        entrypoint: str | None = None,
        older_than: timedelta | None = None,
        limit: int | None = 100,
        part: tuple[int, int] | None = None,
    ) -> list[Job]: ...
    async def count(
        self,
        status: JobStatus | None = None,
        entrypoint: str | None = None,
        older_than: timedelta | None = None,
    ) -> int: ...
    async def history(
        self,
        entrypoint: str | None = None,
        outcome: JobStatus | None = None,
        since: datetime | None = None,
        limit: int | None = None,
    ) -> list[HistoryRecord]: ...
    async def dead_letters(self, entrypoint: str | None = None, limit: int | None = 100) -> list[Job]: ...
    async def requeue_dead(self, ids: Iterable[str] | None = None) -> int: ...
    async def requeue(self, ids: Iterable[str]) -> int: ...
    async def throttle(
        self, limit: int | None, per: timedelta, entrypoint: str | None = None, per_tenant: bool = False
    ) -> None: ...
    async def limit(self, entrypoint: str | None, n: int | None, per_tenant: bool = False) -> None: ...
    async def workflow(self, job_id: str) -> list[Job]: ...
    async def cancel_workflow(self, job_id: str) -> list[Job]: ...
    async def purge(
        self,
        status: JobStatus | None = JobStatus.DEAD,
        entrypoint: str | None = None,
        older_than: timedelta | None = None,
        ids: Iterable[str] | None = None,
    ) -> int: ...
    async def pause(self, entrypoint: str | None = None, *, enqueues: bool = False) -> None: ...
    async def resume(self, entrypoint: str | None = None) -> None: ...
    async def browse(
        self,
        status: JobStatus | None = None,
        entrypoint: str | None = None,
        older_than: timedelta | None = None,
        dedup_key: str | None = None,
        cursor: int = 0,
        limit: int = 50,
    ) -> tuple[list[Job], int | None]: ...


class ShardedQueue(EnqueueCalls):
    """A queue of ``shards`` logs with the calls of one queue (those a ``Worker`` needs, the
    reads an operator uses, and pauses), each on the shard a job lives in.

    Parameters
    ----------
    open_shard : callable
        Makes shard ``k`` (not started): a ``JobQueue``, or a ``RemoteQueue`` of a served shard.
    shards : int or None
        The count the queue should have: more than recorded grows it; None keeps the recorded
        count (1 for a queue never sharded).
    """

    def __init__(self, open_shard: Callable[[int], Shard], shards: int | None = None) -> None:
        if shards is not None:
            SHARDS.check("shards", shards)
        self._open_shard = open_shard
        self._wanted = shards
        self._opened = True
        self.shards: list[Shard] = []
        self._turn = 0
        self._located: dict[str, int] = {}
        self.changes = ShardChanges(self)
        """Wakes idle callers when any shard may have changed (see ``Worker``)."""

    @classmethod
    def over(cls, shards: Sequence[Shard]) -> ShardedQueue:
        """The queue made of ``shards``, open already (shard ``k`` at place ``k``): a view that
        neither starts nor stops them, for the process that holds them open."""

        def refuse(k: int) -> Shard:
            raise RuntimeError("a view over open shards opens none")

        view = cls(refuse)
        view.shards, view._opened = list(shards), False
        return view

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop()

    async def start(self) -> None:
        """Open shard 0, learn (or grow) the count, and open the other shards.

        Raises
        ------
        ValueError
            If ``shards`` is lower than the count recorded (a count is never lowered).
        """
        first = self._open_shard(0)
        await first.__aenter__()
        self.shards = [first]
        try:
            count = await first.shards()
            if self._wanted is not None and self._wanted != count:
                count = await first.reshard(self._wanted)
            for k in range(1, count):
                shard = self._open_shard(k)
                await shard.__aenter__()
                self.shards.append(shard)
        except BaseException:
            await self.stop()
            raise

    async def stop(self) -> None:
        """Commit what was submitted and close every shard (a view made ``over`` open shards
        leaves them open)."""
        shards, self.shards = self.shards, []
        if not self._opened:
            return
        for shard in shards:
            await shard.__aexit__(None, None, None)

    @property
    def visibility_timeout(self) -> timedelta:
        """How long a claim holds a job without a heartbeat (shard 0's)."""
        return self.shards[0].visibility_timeout

    @property
    def policy(self) -> QueuePolicy:
        """The queue's defaults for retries and back-off (shard 0's)."""
        return self.shards[0].policy

    # --- adding ---------------------------------------------------------------------

    async def _enqueue_specs(self, specs: list[JobSpec]) -> list[Job]:
        """Add jobs, each to its shard, one commit per shard, the shards at once; returns them in
        the order given. Atomic per shard, not across shards."""
        specs = [dataclasses.replace(spec, id=new_job_id()) if spec.id is None else spec for spec in specs]
        placed: dict[str, int] = {}
        for spec in specs:
            assert spec.id is not None
            placed[spec.id] = await self._shard_of_spec(spec, placed)
        by_shard: dict[int, list[JobSpec]] = {}
        for spec in specs:
            assert spec.id is not None
            by_shard.setdefault(placed[spec.id], []).append(spec)
        added = await asyncio.gather(*(self.shards[k].enqueue_many(s) for k, s in by_shard.items()))
        answers = {  # by the id asked for: a dedup key's answer is the job that holds it
            spec.id: job
            for shard_specs, shard_jobs in zip(by_shard.values(), added, strict=True)
            for spec, job in zip(shard_specs, shard_jobs, strict=True)
        }
        self._remember({answers[job_id].id: shard for job_id, shard in placed.items()})
        return [answers[spec.id] for spec in specs]

    async def _shard_of_spec(self, spec: JobSpec, placed: dict[str, int]) -> int:
        """A spec's shard: its first parent's (in this batch, or found), else its own key's."""
        if spec.after:
            parent = spec.after[0]
            if parent in placed:
                return placed[parent]
            found = await self._find_shard(parent)
            if found is not None:
                return found
        assert spec.id is not None
        return shard_of(routing_key(spec.tenant, spec.dedup_key, spec.id), len(self.shards))

    # --- claiming and settling ---------------------------------------------------------

    async def dequeue(
        self,
        entrypoint: str | Collection[str] | None = None,
        *,
        batch_size: int = 1,
        visibility_timeout: timedelta | None = None,
    ) -> list[Job]:
        """Claim up to ``batch_size`` jobs, visiting the shards in turn from a start that moves at
        each call; best priority first within a shard."""
        return await self._claim(self._visiting(), [], entrypoint, batch_size, visibility_timeout)

    async def ack_and_dequeue(
        self,
        acks: Sequence[tuple[Job | str, bytes | None]],
        entrypoint: str | Collection[str] | None = None,
        *,
        batch_size: int = 1,
        visibility_timeout: timedelta | None = None,
    ) -> tuple[list[errors.JQueueError | None], list[Job]]:
        """Ack each of ``acks`` in its shard and claim (None or the error per ack): each shard's
        acks in one call, all at once, the first shard to visit claiming in the same call."""
        outcomes: list[errors.JQueueError | None] = [None] * len(acks)
        by_shard: dict[int, list[int]] = {}
        unknown: list[int] = []
        for position, (job, _) in enumerate(acks):
            known = self._known_shard(job)
            if known is None:
                unknown.append(position)
            else:
                by_shard.setdefault(known, []).append(position)
        visiting = self._visiting()
        wanted = {visiting[0]: batch_size}
        called = sorted(by_shard.keys() | wanted.keys())
        calls = [
            self.shards[k].ack_and_dequeue(
                [acks[position] for position in by_shard.get(k, [])],
                entrypoint,
                batch_size=wanted.get(k, 0),
                visibility_timeout=visibility_timeout,
            )
            for k in called
        ]
        claimed: list[Job] = []
        for k, (shard_outcomes, got) in zip(called, await asyncio.gather(*calls), strict=True):
            for position, outcome in zip(by_shard.get(k, []), shard_outcomes, strict=True):
                acked = _id(acks[position][0])
                missed = isinstance(outcome, errors.JobNotFoundError | errors.LeaseLostError)
                if missed and acked not in self._located:
                    unknown.append(position)  # its key's shard was a guess: looked for below
                outcomes[position] = outcome
                if outcome is None:
                    self._located.pop(acked, None)
            self._remember({job.id: k for job in got})
            claimed += got
        for position in unknown:
            outcomes[position] = await self._ack_found(*acks[position])
        return outcomes, await self._claim(visiting[1:], claimed, entrypoint, batch_size, visibility_timeout)

    async def _ack_found(self, job_id: Job | str, result: bytes | None) -> errors.JQueueError | None:
        """Ack a job in the shard found to hold it (none was known, or the guessed one did not
        hold it: it is not asked again): None, or the error."""
        found = await self._find_shard(_id(job_id))
        if found is None:
            return errors.JobNotFoundError(_id(job_id))
        try:
            await self.shards[found].ack(job_id, result=result)
        except errors.JQueueError as exc:
            return exc
        return None

    async def _claim(
        self,
        visiting: list[int],
        claimed: list[Job],
        entrypoint: str | Collection[str] | None,
        batch_size: int,
        visibility_timeout: timedelta | None,
    ) -> list[Job]:
        """Add to ``claimed`` jobs of the shards ``visiting``, in turn, up to ``batch_size``."""
        for k in visiting:
            if len(claimed) >= batch_size:
                break
            got = await self.shards[k].dequeue(
                entrypoint, batch_size=batch_size - len(claimed), visibility_timeout=visibility_timeout
            )
            self._remember({job.id: k for job in got})
            claimed += got
        return claimed

    async def peek(self, entrypoint: str | Collection[str] | None = None, limit: int = 1) -> list[Job]:
        """The jobs ``dequeue`` would claim now from the shards in turn, claiming none."""
        found: list[Job] = []
        for shard in self.shards:
            found += await shard.peek(entrypoint, limit)
        return sorted(found, key=lambda job: (-job.priority, job.created_at))[:limit]

    async def ack(self, job_id: Job | str, *, result: bytes | None = None) -> None:
        """Ack a job in its shard (see ``JobQueue.ack``)."""
        await self._on_shard(job_id, lambda shard: shard.ack(job_id, result=result))
        self._located.pop(_id(job_id), None)

    async def nack(
        self,
        job_id: Job | str,
        delay: timedelta | None = None,
        error: str | None = None,
        *,
        max_attempts: int | None = None,
        dead: bool = False,
    ) -> None:
        """Nack a job in its shard (see ``JobQueue.nack``)."""
        await self._on_shard(
            job_id, lambda shard: shard.nack(job_id, delay, error, max_attempts=max_attempts, dead=dead)
        )

    async def release(self, job_id: Job | str) -> None:
        """Release a job in its shard (see ``JobQueue.release``)."""
        await self._on_shard(job_id, lambda shard: shard.release(job_id))

    async def heartbeat(
        self, job_id: Job | str, *, progress: float | None = None, note: str | None = None
    ) -> None:
        """Heartbeat a job in its shard, with its progress (see ``JobQueue.heartbeat``)."""
        await self._on_shard(job_id, lambda shard: shard.heartbeat(job_id, progress=progress, note=note))

    async def cancel_requested(self, job_id: Job | str) -> bool:
        """Whether a job's cancel was asked for, in its shard."""
        return await self._on_shard(job_id, lambda shard: shard.cancel_requested(job_id))

    async def cancel(self, job_id: Job | str) -> bool:
        """Cancel a job in its shard (see ``JobQueue.cancel``)."""
        return await self._on_shard(job_id, lambda shard: shard.cancel(job_id))

    async def result(self, job_id: str, timeout: timedelta | None = None) -> bytes | None:  # noqa: ASYNC109
        """Wait for a job's result in its shard (see ``JobQueue.result``)."""
        return await self._on_shard(job_id, lambda shard: shard.result(job_id, timeout))

    # --- reading and steering ------------------------------------------------------------

    async def find(self, job_id: str) -> Job | None:
        """One job as it is now, from whichever shard holds it (None if none does)."""
        shard = await self._find_shard(job_id)
        return None if shard is None else await self.shards[shard].find(job_id)

    async def stats(self) -> QueueStats:
        """The shards' figures added up (``version``: the sum of the shards' versions; pauses,
        throttles and limits: shard 0's, which ``pause`` sets on every shard alike)."""
        each = await asyncio.gather(*(shard.stats() for shard in self.shards))
        total = dataclasses.replace(each[0], version=sum(s.version for s in each), entrypoints={})
        total.history_records = sum(s.history_records for s in each)
        for stats in each:
            for name, figures in stats.entrypoints.items():
                total.entrypoints[name] = _added(total.entrypoints.get(name), figures)
        total.entrypoints = dict(sorted(total.entrypoints.items()))  # by name, as one queue's
        return total

    async def jobs(
        self,
        status: JobStatus | None = None,
        entrypoint: str | None = None,
        older_than: timedelta | None = None,
        limit: int | None = 100,
    ) -> list[Job]:
        """Jobs without claiming them, oldest enqueue first across the shards, at most ``limit``
        (see ``JobQueue.jobs``)."""
        each = await asyncio.gather(*(s.jobs(status, entrypoint, older_than, limit) for s in self.shards))
        merged = sorted((job for jobs in each for job in jobs), key=lambda job: job.created_at)
        return merged if limit is None else merged[:limit]

    async def browse(
        self,
        status: JobStatus | None = None,
        entrypoint: str | None = None,
        older_than: timedelta | None = None,
        dedup_key: str | None = None,
        cursor: int = 0,
        limit: int = 50,
    ) -> tuple[list[Job], int | None]:
        """One page of jobs from ``cursor`` and the cursor of the next (None at the end), as
        ``JobQueue.browse`` pages one shard: shard by shard, each in insertion order. A cursor
        is the shard's number times ``SHARD_CURSORS`` plus the cursor within it."""
        LISTED.check("limit", limit)
        shard, within = divmod(cursor, SHARD_CURSORS)
        found: list[Job] = []
        while shard < len(self.shards) and len(found) < limit:
            page, after = await self.shards[shard].browse(
                status, entrypoint, older_than, dedup_key, within, limit - len(found)
            )
            found += page
            if after is not None:
                return found, shard * SHARD_CURSORS + after
            shard, within = shard + 1, 0
        return found, shard * SHARD_CURSORS + within if shard < len(self.shards) else None

    @property
    def insight(self) -> QueueInsight:
        """The figures of every shard added up (``QueueInsight``), for shards that commit
        directly.

        Raises
        ------
        TypeError
            If a shard is served by ``jqueue serve`` (its broker has the figures).
        """
        insights = [getattr(shard, "insight", None) for shard in self.shards]
        if not all(isinstance(insight, QueueInsight) for insight in insights):
            raise TypeError("the figures of a served queue are its broker's (its dashboard and /metrics)")
        return QueueInsight.joined(insight for insight in insights if isinstance(insight, QueueInsight))

    async def count(
        self,
        status: JobStatus | None = None,
        entrypoint: str | None = None,
        older_than: timedelta | None = None,
    ) -> int:
        """How many jobs ``jobs`` would list without a limit, over every shard."""
        return sum(await asyncio.gather(*(s.count(status, entrypoint, older_than) for s in self.shards)))

    async def dead_letters(self, entrypoint: str | None = None, limit: int | None = 100) -> list[Job]:
        """Dead jobs of every shard, oldest enqueue first (see ``JobQueue.dead_letters``)."""
        return await self.jobs(JobStatus.DEAD, entrypoint, limit=limit)

    async def history(
        self,
        entrypoint: str | None = None,
        outcome: JobStatus | None = None,
        since: datetime | None = None,
        limit: int | None = None,
    ) -> list[HistoryRecord]:
        """Finished jobs of every shard, oldest finish first; the newest ``limit`` if given (see
        ``JobQueue.history``)."""
        each = await asyncio.gather(*(s.history(entrypoint, outcome, since, limit) for s in self.shards))
        merged = sorted((record for records in each for record in records), key=lambda r: r.finished)
        return merged if limit is None else merged[len(merged) - limit :]

    async def finished(self, job_id: str) -> HistoryRecord | None:
        """The newest history record of job ``job_id``, in whichever shard holds one."""
        found = await asyncio.gather(*(shard.finished(job_id) for shard in self.shards))
        return max((record for record in found if record is not None), key=lambda r: r.finished, default=None)

    async def requeue_dead(self, ids: Iterable[str] | None = None) -> int:
        """Return dead jobs (those of ``ids``, or all) to their shards' queues; returns how many.

        Raises
        ------
        JobNotFoundError
            If one of ``ids`` is in no shard; then nothing changes.
        """
        if ids is None:
            return sum(await asyncio.gather(*(shard.requeue_dead() for shard in self.shards)))
        by_shard = await self._by_shard(ids)
        return sum(await asyncio.gather(*(self.shards[k].requeue_dead(i) for k, i in by_shard.items())))

    async def requeue(self, ids: Iterable[str]) -> int:
        """Make jobs claimable at once in their shards (see ``JobQueue.requeue``); returns how
        many changed.

        Raises
        ------
        JobNotFoundError
            If one of ``ids`` is in no shard; then nothing changes.
        """
        by_shard = await self._by_shard(ids)
        return sum(await asyncio.gather(*(self.shards[k].requeue(i) for k, i in by_shard.items())))

    async def _by_shard(self, ids: Iterable[str]) -> dict[int, list[str]]:
        """Jobs ``ids`` by the shard that holds each (``JobNotFoundError`` for one none holds)."""
        by_shard: dict[int, list[str]] = {}
        for job_id in dict.fromkeys(ids):
            shard = self._located.get(job_id)
            if shard is None:
                shard = await self._find_shard(job_id)
            if shard is None:
                raise errors.JobNotFoundError(job_id)
            by_shard.setdefault(shard, []).append(job_id)
        return by_shard

    async def throttle(
        self, limit: int | None, per: timedelta, entrypoint: str | None = None, per_tenant: bool = False
    ) -> None:
        """Set the throttle on every shard (see ``JobQueue.throttle``). A tenant's jobs live in one
        shard, so a throttle ``per_tenant`` holds exactly; any other holds in each shard apart: a
        queue of N shards claims up to N times ``limit`` a window."""
        await asyncio.gather(*(s.throttle(limit, per, entrypoint, per_tenant) for s in self.shards))

    async def limit(self, entrypoint: str | None, n: int | None, per_tenant: bool = False) -> None:
        """Set the limit on every shard (see ``JobQueue.limit``). A tenant's jobs live in one
        shard, so a limit ``per_tenant`` holds exactly; any other holds in each shard apart: a
        queue of N shards runs up to N times ``n`` at once."""
        await asyncio.gather(*(shard.limit(entrypoint, n, per_tenant) for shard in self.shards))

    async def workflow(self, job_id: str) -> list[Job]:
        """The jobs of ``job_id``'s workflow, from its shard: a workflow lives in its first
        parent's (see ``JobQueue.workflow``)."""
        return await self._on_shard(job_id, lambda shard: shard.workflow(job_id))

    async def cancel_workflow(self, job_id: str) -> list[Job]:
        """Cancel ``job_id``'s workflow in its shard (see ``JobQueue.cancel_workflow``)."""
        return await self._on_shard(job_id, lambda shard: shard.cancel_workflow(job_id))

    async def purge(
        self,
        status: JobStatus | None = JobStatus.DEAD,
        entrypoint: str | None = None,
        older_than: timedelta | None = None,
        ids: Iterable[str] | None = None,
    ) -> int:
        """Delete jobs in every shard (see ``JobQueue.purge``); returns how many."""
        chosen = None if ids is None else list(ids)
        purged = await asyncio.gather(
            *(shard.purge(status, entrypoint, older_than, chosen) for shard in self.shards)
        )
        return sum(purged)

    async def pause(self, entrypoint: str | None = None, *, enqueues: bool = False) -> None:
        """Pause claims (and ``enqueues``) of ``entrypoint`` on every shard."""
        await asyncio.gather(*(shard.pause(entrypoint, enqueues=enqueues) for shard in self.shards))

    async def resume(self, entrypoint: str | None = None) -> None:
        """Resume ``entrypoint`` on every shard."""
        await asyncio.gather(*(shard.resume(entrypoint) for shard in self.shards))

    # --- where a job is ------------------------------------------------------------------

    def _visiting(self) -> list[int]:
        count = len(self.shards)
        start, self._turn = self._turn, (self._turn + 1) % count
        return [(start + step) % count for step in range(count)]

    def _remember(self, located: dict[str, int]) -> None:
        self._located.update(located)
        while len(self._located) > LOCATED_MOST:
            del self._located[next(iter(self._located))]

    def _known_shard(self, job_id: Job | str) -> int | None:
        """A job's shard without a read: remembered, else its key's (a ``Job`` without parents:
        a guess, wrong for a job added under another count of shards, or by a bulk write)."""
        plain = _id(job_id)
        if plain in self._located:
            return self._located[plain]
        if isinstance(job_id, Job) and not job_id.after:
            return shard_of(routing_key(job_id.tenant, job_id.dedup_key, job_id.id), len(self.shards))
        return None

    async def _on_shard(self, job_id: Job | str, call: Callable[[Shard], Awaitable[T]]) -> T:
        """``call`` on the shard of a job: the known one (``_known_shard``), else, or when a guess
        does not hold the job, the one found.

        Raises
        ------
        JobNotFoundError
            If no shard holds the job (live or finished).
        LeaseLostError
            If the shard that holds it says so (or a guessed one, when none holds it).
        """
        plain = _id(job_id)
        known = self._known_shard(job_id)
        missed: errors.JQueueError = errors.JobNotFoundError(plain)
        if known is not None:
            try:
                return await call(self.shards[known])
            except (
                errors.JobNotFoundError,
                errors.LeaseLostError,
            ) as exc:  # a claimed job elsewhere: no lease here
                if plain in self._located:
                    raise
                missed = exc
        found = await self._find_shard(plain)
        if found is None or found == known:
            raise missed
        return await call(self.shards[found])

    async def _find_shard(self, job_id: str) -> int | None:
        """The shard that holds job ``job_id``, live or in its history (None if none does)."""
        for k, shard in enumerate(self.shards):
            if await shard.find(job_id) is not None or await shard.finished(job_id) is not None:
                self._remember({job_id: k})
                return k
        return None


class ShardChanges:
    """The changes of every shard of a queue as one feed: its generation counts them all."""

    def __init__(self, queue: ShardedQueue) -> None:
        self._queue = queue

    @property
    def generation(self) -> int:
        """A number that grows at each change of any shard."""
        return sum(shard.changes.generation for shard in self._queue.shards)

    async def wait(self, seen: int, seconds: float) -> int:
        """Return the generation once it is past ``seen``, or after ``seconds``."""
        if self.generation != seen:
            return self.generation
        feeds = [shard.changes for shard in self._queue.shards]
        waits = [asyncio.ensure_future(feed.wait(feed.generation, seconds)) for feed in feeds]
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for wait in waits:
                wait.cancel()
        return self.generation


def _id(job_id: Job | str) -> str:
    return job_id.id if isinstance(job_id, Job) else job_id


def _added(total: EntrypointStats | None, more: EntrypointStats) -> EntrypointStats:
    """Two shards' figures of one entrypoint added up (the oldest queued job: the older)."""
    if total is None:
        return more
    oldest = [at for at in (total.oldest_queued_at, more.oldest_queued_at) if at is not None]
    summed = {
        field.name: getattr(total, field.name) + getattr(more, field.name)
        for field in dataclasses.fields(more)
        if isinstance(getattr(more, field.name), int)
    }
    first: datetime | None = min(oldest) if oldest else None
    return dataclasses.replace(more, **summed, oldest_queued_at=first)
