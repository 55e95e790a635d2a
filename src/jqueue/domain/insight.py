"""What an operator looks at, read from an index at a bounded cost: throughput and timings from
the newest history (``figures``), pages of jobs, dead letters grouped by error.

Every function here costs O(what it returns) plus at most a fixed budget of records looked
at, never O(every job) on a large queue: counts come from the index's ``Tally``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from itertools import islice

from jqueue.domain.errors import headline
from jqueue.domain.figures import Throughput, empty_throughput
from jqueue.domain.index import QueueIndex, insertion
from jqueue.domain.models import JobStatus
from jqueue.domain.records import HistoryRecord, JobRecord
from jqueue.domain.tally import DEAD
from jqueue.domain.values import Bounds

LISTED = Bounds(ge=0)
"""The bounds of a listing's ``limit``: how many jobs or records it returns at most (0: none)."""

HISTORY_BUDGET = 100_000
"""The most history records one call looks at, newest first."""
SCAN_BUDGET = 200_000
"""The most jobs one page of ``browse`` looks at before it answers with what it found."""
GROUP_BUDGET = 10_000
"""The most dead jobs ``dead_groups`` looks at."""
ERROR_KEY_CHARS = 200


def throughput(index: QueueIndex, now: int, window: int, bucket: int) -> Throughput:
    """Return the jobs finished in each ``bucket`` of the ``window`` before ``now`` (microseconds).
    Buckets fall on whole multiples of ``bucket`` since the epoch (a minute's bucket is a clock
    minute), the last being the one ``now`` is in."""
    buckets = max(1, -(-window // bucket))
    end = (now // bucket + 1) * bucket
    found = empty_throughput(end - buckets * bucket, bucket, buckets)
    for seen, record in enumerate(index.history.newest_first()):
        if record.finished < found.start:
            break
        if seen == HISTORY_BUDGET:
            found.truncated = True
            break
        found.count(record)
    return found


@dataclass
class JobPage:
    """One page of ``browse``: the ``records`` found, in insertion order, and the cursor where
    the next page starts (the insertion number after the last job looked at; None at the end)."""

    records: list[JobRecord]
    next_cursor: int | None


def browse(
    index: QueueIndex,
    status: JobStatus | None = None,
    entrypoint: str | None = None,
    created_before: int | None = None,
    dedup_key: str | None = None,
    cursor: int = 0,
    limit: int = 50,
) -> JobPage:
    """Return up to ``limit`` jobs with ``status``, of ``entrypoint``, created before
    ``created_before``, with ``dedup_key`` (each filter when given), from insertion number
    ``cursor`` on.

    A page looks at no more than ``SCAN_BUDGET`` jobs; a rare match on a large queue may
    take several pages, each saying where the next one starts.
    """
    if limit == 0:  # a page of none: it looks at nothing, and the next starts where it would have
        return JobPage([], cursor)
    if dedup_key is not None:
        record = index.with_dedup_key(dedup_key)
        pool: Iterator[JobRecord] = iter([record] if record is not None and record.order >= cursor else [])
    elif status is JobStatus.DEAD:
        dead = (index.records[job_id] for job_id in index.tally.ids(DEAD))
        pool = iter(sorted((record for record in dead if record.order >= cursor), key=insertion))
    else:
        entrypoints = None if entrypoint is None else {entrypoint}
        pool = index.ordered(None if status is None else {status}, entrypoints, cursor)
    found: list[JobRecord] = []
    for looked, record in enumerate(pool, 1):
        if matches(record, status, entrypoint, created_before):
            found.append(record)
            if len(found) == limit:
                break
        if looked == SCAN_BUDGET:
            break
    else:
        return JobPage(found, None)
    return JobPage(found, record.order + 1)


def matches(record: JobRecord, status: JobStatus | None, entrypoint: str | None, before: int | None) -> bool:
    """Whether ``record`` has ``status``, is of ``entrypoint`` and was created before ``before``
    (each filter when given)."""
    return (
        (status is None or record.status is status)
        and (entrypoint is None or record.entrypoint == entrypoint)
        and (before is None or record.created < before)
    )


@dataclass
class DeadGroup:
    """Dead jobs that failed with the same error.

    Attributes
    ----------
    error : str
        The first line of their last error (at most ``ERROR_KEY_CHARS`` characters), or
        their death's reason when they have no error.
    ids : list of str
        The jobs, in the order they died.
    entrypoints : dict of str to int
        How many of them each entrypoint has.
    """

    error: str
    ids: list[str] = field(default_factory=list)
    entrypoints: dict[str, int] = field(default_factory=dict)


def error_key(record: JobRecord | HistoryRecord) -> str:
    """Return the error a dead job is grouped by."""
    error = record.last_error if isinstance(record, JobRecord) else record.error
    reason = record.dead_reason if isinstance(record, JobRecord) else record.reason
    if not error:
        return f"({reason or 'no error'})"
    return headline(error)[:ERROR_KEY_CHARS] or "(blank error)"


def dead_groups(index: QueueIndex, entrypoint: str | None = None) -> list[DeadGroup]:
    """Return the dead jobs (of ``entrypoint`` if given) grouped by error, largest group first;
    at most ``GROUP_BUDGET`` jobs are looked at."""
    groups: dict[str, DeadGroup] = {}
    for job_id in islice(index.tally.ids(DEAD), GROUP_BUDGET):
        record = index.records[job_id]
        if entrypoint is not None and record.entrypoint != entrypoint:
            continue
        key = error_key(record)
        group = groups.get(key)
        if group is None:
            group = groups[key] = DeadGroup(key)
        group.ids.append(job_id)
        group.entrypoints[record.entrypoint] = group.entrypoints.get(record.entrypoint, 0) + 1
    return _largest_first(groups)


def joined_groups(each: Iterable[list[DeadGroup]]) -> list[DeadGroup]:
    """Return the dead groups of several shards as one list, a group per error."""
    groups: dict[str, DeadGroup] = {}
    for found in each:
        for group in found:
            into = groups.setdefault(group.error, DeadGroup(group.error))
            into.ids += group.ids
            for name, count in group.entrypoints.items():
                into.entrypoints[name] = into.entrypoints.get(name, 0) + count
    return _largest_first(groups)


def _largest_first(groups: dict[str, DeadGroup]) -> list[DeadGroup]:
    return sorted(groups.values(), key=lambda g: (-len(g.ids), g.error))
