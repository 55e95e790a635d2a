"""``adding``: the operation every enqueue commits, answering each job with itself or the job
that holds its id or dedup key already, and settling what a new job's parents already decided."""

from __future__ import annotations

import dataclasses
from collections.abc import Container, Mapping
from datetime import timedelta

from jqueue.core.commits import Operation
from jqueue.domain.dependencies import ENDINGS, parent_failure
from jqueue.domain.effects import Added
from jqueue.domain.errors import JobNotFoundError, PayloadTooLargeError, QueuePausedError
from jqueue.domain.index import QueueIndex
from jqueue.domain.models import JobStatus, ParentFailure
from jqueue.domain.records import HistoryRecord, JobRecord
from jqueue.domain.times import to_micros, utc_now

Found = Added | HistoryRecord
"""What an add is answered with: the job it added, or the one that held its id or dedup key."""


def adding(
    new: list[Added],
    retention: timedelta,
    fresh: Container[str] = frozenset(),
    limit: int | None = None,
    accepted: list[Added] | None = None,
) -> Operation[list[Found]]:
    """Return the operation that adds ``new`` jobs: each is answered with the job it adds, or
    with the job that holds its id or its dedup key already (live, or acked within ``retention``).
    The ids in ``fresh`` were made for this call (``new_job_id``): no job holds them.

    A job with parents (``after``) waits for those not settled yet; those settled already give
    their results (at most ``limit`` bytes, summed, else ``PayloadTooLargeError``), and one that
    failed cancels the job in the same commit (unless its policy is to run anyway). A parent
    may be a job earlier in the same call. ``accepted``, if given, is set to the jobs added
    (the last run's, as a commit may run the operation again).
    """

    def operation(index: QueueIndex) -> list[Found]:
        clock = utc_now()
        now, acked_since = to_micros(clock), to_micros(clock - retention)
        found: list[Found] = []
        keyed: dict[str, Added] = {}
        ids: dict[str, Added] = {}
        answered: dict[str, str] = {}
        added: list[Added] = []
        doomed: list[tuple[str, str]] = []
        waiting: list[int] = []  # the answers of jobs with parents, made again once all is applied
        for job in new:
            if index.controls.enqueues_paused(job.entrypoint):
                raise QueuePausedError(job.entrypoint)
            key = job.dedup_key
            match = None if job.id in fresh else ids.get(job.id) or index.known(job.id)
            if match is None and key is not None:
                match = keyed.get(key) or index.dedup_match(key, acked_since)
            if isinstance(match, JobRecord):
                found.append(match.as_added())
                answered[job.id] = match.id
            elif match is not None:
                found.append(match)
                answered[job.id] = match.job_id if isinstance(match, HistoryRecord) else match.id
            else:
                if job.after:
                    job, failure = _with_parents(index, job, ids, answered, limit)
                    if failure is not None:
                        doomed.append((job.id, failure))
                    waiting.append(len(found))
                added.append(job)
                keyed.update({} if key is None else {key: job})
                ids[job.id] = job
                found.append(job)
        index.apply_all(added, ids_looked_up=True)
        for job_id, failure in doomed:
            if index.job(job_id) is not None:  # else an earlier cancel here took it with its parent
                index.cancel_added(job_id, now, failure)
        for position in waiting:  # a later job of the call may have settled or ended it
            job_id = found[position].job_id
            record = index.job(job_id)
            found[position] = (
                record.as_added() if record is not None else index.history.finished(job_id) or found[position]
            )
        if accepted is not None:
            accepted[:] = added
        return found

    return operation


def _with_parents(
    index: QueueIndex,
    job: Added,
    earlier: Mapping[str, Added],
    answered: Mapping[str, str],
    limit: int | None,
) -> tuple[Added, str | None]:
    """Return ``job`` with the parents it still awaits and the results of those acked, and the
    failure that cancels it (None if none does).

    Raises
    ------
    JobNotFoundError
        If a parent is neither in the queue, nor in its history, nor earlier in the call.
    PayloadTooLargeError
        If the results of the parents acked already are over ``limit`` bytes, summed.
    ValueError
        If a parent is staged by a bulk write not yet published (its discard would leave the
        job waiting for nothing), or the job itself is staged (a failed parent would cancel one
        job of a write that is to become visible whole).
    """
    if job.status is JobStatus.STAGED:
        raise ValueError(f"job {job.id!r} is staged by a bulk write: a staged job cannot have parents yet")
    after = tuple(dict.fromkeys(answered.get(parent, parent) for parent in job.after))
    results: list[bytes | None] = [None] * len(after)
    awaiting: list[str] = []
    failure = None
    runs_anyway = job.on_parent_failure == ParentFailure.RUN
    for position, parent in enumerate(after):
        if parent in earlier:
            awaiting.append(parent)
            continue
        live = index.job(parent)
        if live is not None:
            if live.status is JobStatus.STAGED:
                raise ValueError(
                    f"job {parent!r} is staged by a bulk write not yet published; it cannot be a parent"
                )
            if live.status is not JobStatus.DEAD:
                awaiting.append(parent)
                continue
            outcome: JobStatus = JobStatus.DEAD
            result = None
        else:
            finished = index.history.finished(parent)
            if finished is None:
                raise JobNotFoundError(parent)
            outcome, result = finished.outcome, finished.result
        if outcome is JobStatus.ACKED:
            results[position] = result
        elif failure is None and not runs_anyway:
            failure = parent_failure(parent, ENDINGS[outcome])
    size = sum(len(result) for result in results if result is not None)
    if limit is not None and size > limit:
        raise PayloadTooLargeError(size, limit, job.id)
    settled = len(awaiting) < len(after)
    status = JobStatus.WAITING if awaiting else JobStatus.QUEUED
    changed = dataclasses.replace(
        job,
        after=after,
        awaiting=tuple(awaiting),
        parent_results=tuple(results) if settled else (),
        status=status,
    )
    return changed, failure
