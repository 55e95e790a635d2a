"""``adding``: the operation every enqueue commits, answering each job with itself or the job
that holds its id or dedup key already."""

from __future__ import annotations

from collections.abc import Container
from datetime import timedelta

from jqueue.core.commits import Operation
from jqueue.domain.effects import Added
from jqueue.domain.errors import QueuePausedError
from jqueue.domain.index import QueueIndex
from jqueue.domain.records import HistoryRecord, JobRecord
from jqueue.domain.times import to_micros, utc_now

Found = Added | HistoryRecord
"""What an add is answered with: the job it added, or the one that held its id or dedup key."""


def adding(
    new: list[Added], retention: timedelta, fresh: Container[str] = frozenset()
) -> Operation[list[Found]]:
    """Return the operation that adds ``new`` jobs: each is answered with the job it adds, or
    with the job that holds its id or its dedup key already (live, or acked within ``retention``).
    The ids in ``fresh`` were made for this call (``new_job_id``): no job holds them."""

    def operation(index: QueueIndex) -> list[Found]:
        acked_since = to_micros(utc_now() - retention)
        found: list[Found] = []
        keyed: dict[str, Added] = {}
        ids: dict[str, Added] = {}
        accepted: list[Added] = []
        for job in new:
            if index.controls.enqueues_paused(job.entrypoint):
                raise QueuePausedError(job.entrypoint)
            key = job.dedup_key
            match = None if job.id in fresh else ids.get(job.id) or index.known(job.id)
            if match is None and key is not None:
                match = keyed.get(key) or index.dedup_match(key, acked_since)
            if isinstance(match, JobRecord):
                found.append(match.as_added())
            elif match is not None:
                found.append(match)
            else:
                accepted.append(job)
                keyed.update({} if key is None else {key: job})
                ids[job.id] = job
                found.append(job)
        index.apply_all(accepted, ids_looked_up=True)
        return found

    return operation
