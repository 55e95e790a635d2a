"""What an operator looks at, read from an index at a bounded cost: throughput and timings from
the history, pages of jobs, dead letters grouped by error.

Every function here costs O(what it returns) plus at most a fixed budget of records looked
at, never O(every job) on a large queue: counts come from the index's ``Tally``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from itertools import islice

from jqueue.domain.index import QueueIndex
from jqueue.domain.models import JobStatus
from jqueue.domain.records import HistoryRecord, JobRecord
from jqueue.domain.tally import DEAD

HISTORY_BUDGET = 100_000
"""The most history records one call looks at, newest first."""
SCAN_BUDGET = 200_000
"""The most jobs one page of ``browse`` looks at before it answers with what it found."""
GROUP_BUDGET = 10_000
"""The most dead jobs ``dead_groups`` looks at."""
ERROR_KEY_CHARS = 200


@dataclass
class Throughput:
    """Finished jobs per time bucket, oldest bucket first.

    Attributes
    ----------
    start, bucket : int
        The first bucket's start and each bucket's length, in epoch microseconds.
    acked, dead : list of int
        Jobs acked, and jobs that died, in each bucket (of every entrypoint).
    per_entrypoint : dict of str to list of int
        Jobs finished (acked, dead or cancelled) in each bucket, per entrypoint.
    truncated : bool
        True when more than ``HISTORY_BUDGET`` jobs finished in the window (the oldest of
        them are not counted).
    """

    start: int
    bucket: int
    acked: list[int]
    dead: list[int]
    per_entrypoint: dict[str, list[int]] = field(default_factory=dict)
    truncated: bool = False


def throughput(index: QueueIndex, now: int, window: int, bucket: int) -> Throughput:
    """Return the jobs finished in each ``bucket`` of the ``window`` before ``now`` (microseconds)."""
    buckets = max(1, -(-window // bucket))
    start = now - buckets * bucket
    found = Throughput(start, bucket, [0] * buckets, [0] * buckets)
    for seen, record in enumerate(index.history.newest_first()):
        if record.finished < start:
            break
        if seen == HISTORY_BUDGET:
            found.truncated = True
            break
        slot = min(buckets - 1, (record.finished - start) // bucket)
        if record.outcome is JobStatus.ACKED:
            found.acked[slot] += 1
        elif record.outcome is JobStatus.DEAD:  # a cancelled job is neither
            found.dead[slot] += 1
        per = found.per_entrypoint.get(record.entrypoint)
        if per is None:
            per = found.per_entrypoint[record.entrypoint] = [0] * buckets
        per[slot] += 1
    return found


@dataclass
class Timings:
    """How the newest finished jobs of one entrypoint went.

    Attributes
    ----------
    finished, acked, dead, retried : int
        Jobs looked at; of them acked, dead, and finished after more than one attempt.
    wait, run : tuple of float
        p50, p95 and p99 in seconds of the wait (enqueue to first claim) and of the run
        (last claim to finish); empty when no job was claimed.
    """

    finished: int = 0
    acked: int = 0
    dead: int = 0
    retried: int = 0
    wait: tuple[float, ...] = ()
    run: tuple[float, ...] = ()

    @property
    def dead_rate(self) -> float:
        """The share of finished jobs that died."""
        return self.dead / self.finished if self.finished else 0.0


def percentiles(values: list[int], points: Iterable[float] = (0.5, 0.95, 0.99)) -> tuple[float, ...]:
    """Return the nearest-rank percentiles of microsecond ``values``, in seconds."""
    if not values:
        return ()
    ordered = sorted(values)
    last = len(ordered) - 1
    return tuple(ordered[min(last, max(0, math.ceil(p * len(ordered)) - 1))] / 1e6 for p in points)


def timings(index: QueueIndex, sample: int = 1_000) -> dict[str, Timings]:
    """Return the timings of the newest ``sample`` finished jobs of each entrypoint."""
    waits: dict[str, list[int]] = {}
    runs: dict[str, list[int]] = {}
    found: dict[str, Timings] = {}
    for record in islice(index.history.newest_first(), HISTORY_BUDGET):
        stats = found.setdefault(record.entrypoint, Timings())
        if stats.finished >= sample:
            continue
        stats.finished += 1
        stats.acked += record.outcome is JobStatus.ACKED
        stats.dead += record.outcome is JobStatus.DEAD
        stats.retried += record.attempts > 1
        if record.claims:
            waits.setdefault(record.entrypoint, []).append(record.claims[0] - record.created)
            runs.setdefault(record.entrypoint, []).append(record.finished - record.claims[-1])
    for name, stats in found.items():
        stats.wait = percentiles(waits.get(name, []))
        stats.run = percentiles(runs.get(name, []))
    return dict(sorted(found.items()))


@dataclass
class JobPage:
    """One page of ``browse``.

    Attributes
    ----------
    records : list of JobRecord
        The jobs found, in insertion order.
    next_cursor : int or None
        Where the next page starts; None at the end.
    """

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
    ``created_before``, with ``dedup_key`` (each filter when given), from ``cursor`` on.

    A page looks at no more than ``SCAN_BUDGET`` jobs; a rare match on a large queue may
    take several pages, each saying where the next one starts.
    """
    if dedup_key is not None:
        record = index.with_dedup_key(dedup_key)
        records = [] if record is None or cursor else [record]
        pool: Iterator[JobRecord] = iter(records)
    elif status is JobStatus.DEAD:
        pool = (index.records[job_id] for job_id in index.tally.ids(DEAD))
    else:
        pool = iter(index.records.values())
    found: list[JobRecord] = []
    looked = 0
    for record in islice(pool, cursor, None):
        looked += 1
        if matches(record, status, entrypoint, created_before):
            found.append(record)
            if len(found) == limit:
                break
        if looked == SCAN_BUDGET:
            break
    else:
        return JobPage(found, None)
    return JobPage(found, cursor + looked)


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
    return error.strip().splitlines()[0][:ERROR_KEY_CHARS] if error.strip() else "(blank error)"


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
    return sorted(groups.values(), key=lambda g: (-len(g.ids), g.error))
