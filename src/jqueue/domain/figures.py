"""Figures of finished jobs, one definition for the dashboard and the report: jobs finished per
time bucket (``Throughput``), and per entrypoint the outcomes and the wait and run time
percentiles (``Timings``). ``report_of`` computes a whole report from history records in
Python; ``jqueue.adapters.spark.report`` computes the same figures with Spark for a history
too large for one process. ``readable_span`` is how every duration is shown to people.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from jqueue.domain.models import JobStatus
from jqueue.domain.records import HistoryRecord

PERCENTILES = (0.5, 0.95, 0.99)


def readable_span(seconds: float) -> str:
    """Return a duration as people read it: ``12 ms``, ``4.2 s``, ``3 m 5 s``, ``1 h 6 m``,
    ``2 d 3 h`` (two units at most, each unit chosen after rounding, so ``0.9996`` is
    ``1.0 s``); a negative one with a minus sign, one that is not a number as ``?``."""
    if not math.isfinite(seconds):
        return "?"
    if seconds < 0:
        return "-" + readable_span(-seconds)
    if round(seconds * 1_000_000) < 1000:
        return f"{round(seconds * 1_000_000)} µs"
    if round(seconds * 1000) < 1000:
        return f"{round(seconds * 1000)} ms"
    if round(seconds * 10) < 600:
        return f"{round(seconds * 10) / 10:.1f} s"
    minutes, secs = divmod(round(seconds), 60)
    if minutes < 60:
        return f"{minutes} m {secs} s"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours} h {minutes} m"
    return f"{hours // 24} d {hours % 24} h"


MINUTE = 60_000_000
REPORT_BUCKETS = 1_440
"""A report's chart has at most this many buckets: one a minute, or longer for a longer history."""
REPORT_MINUTES = 30
"""A report's chart covers at least this many minutes, up to the last job's."""


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
        True when not every finished job in the window was counted (a budget ran out).
    """

    start: int
    bucket: int
    acked: list[int]
    dead: list[int]
    per_entrypoint: dict[str, list[int]] = field(default_factory=dict)
    truncated: bool = False

    def count(self, record: HistoryRecord) -> None:
        """Count a finished job in its bucket (the last one if it finished after the window)."""
        slot = min(len(self.acked) - 1, (record.finished - self.start) // self.bucket)
        if record.outcome is JobStatus.ACKED:
            self.acked[slot] += 1
        elif record.outcome is JobStatus.DEAD:  # a cancelled job is neither
            self.dead[slot] += 1
        per = self.per_entrypoint.get(record.entrypoint)
        if per is None:
            per = self.per_entrypoint[record.entrypoint] = [0] * len(self.acked)
        per[slot] += 1

    def add(self, other: Throughput) -> None:
        """Count the jobs ``other`` counted in the same buckets too (of another shard)."""
        if (other.start, other.bucket, len(other.acked)) != (self.start, self.bucket, len(self.acked)):
            raise ValueError("throughputs of different buckets cannot be added")
        self.acked = [mine + theirs for mine, theirs in zip(self.acked, other.acked, strict=True)]
        self.dead = [mine + theirs for mine, theirs in zip(self.dead, other.dead, strict=True)]
        for name, counts in other.per_entrypoint.items():
            mine = self.per_entrypoint.get(name, [0] * len(counts))
            self.per_entrypoint[name] = [a + b for a, b in zip(mine, counts, strict=True)]
        self.truncated = self.truncated or other.truncated


def empty_throughput(start: int, bucket: int, buckets: int) -> Throughput:
    """Return ``buckets`` empty buckets of ``bucket`` microseconds from ``start``."""
    return Throughput(start, bucket, [0] * buckets, [0] * buckets)


def report_window(first: int, last: int) -> tuple[int, int, int]:
    """Return the ``(start, bucket, buckets)`` of a report of jobs finished from ``first`` to
    ``last`` (epoch microseconds): whole minutes, at least ``REPORT_MINUTES`` of them, in at
    most ``REPORT_BUCKETS`` buckets."""
    start = min(first, last - (REPORT_MINUTES - 1) * MINUTE) // MINUTE * MINUTE
    minutes = (last - start) // MINUTE + 1
    bucket = MINUTE * -(-minutes // REPORT_BUCKETS)
    return start, bucket, (last - start) // bucket + 1


@dataclass
class Timings:
    """How the finished jobs of one entrypoint went.

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

    @property
    def retry_rate(self) -> float:
        """The share of finished jobs that took more than one attempt."""
        return self.retried / self.finished if self.finished else 0.0


def percentiles(values: Sequence[float], points: Iterable[float] = PERCENTILES) -> tuple[float, ...]:
    """Return the percentiles of ``values``, interpolated linearly between the nearest ranks
    (as Spark's ``percentile`` and numpy's default); empty for no values."""
    if not values:
        return ()
    ordered = sorted(values)
    last = len(ordered) - 1
    found = []
    for point in points:
        position = point * last
        below = math.floor(position)
        above = min(last, below + 1)
        found.append(ordered[below] + (ordered[above] - ordered[below]) * (position - below))
    return tuple(found)


def timings_of(records: Iterable[HistoryRecord], sample: int | None = None) -> dict[str, Timings]:
    """Return the timings of each entrypoint's records (its first ``sample`` of them, if given),
    by entrypoint name."""
    waits: dict[str, list[float]] = {}
    runs: dict[str, list[float]] = {}
    found: dict[str, Timings] = {}
    for record in records:
        stats = found.setdefault(record.entrypoint, Timings())
        if sample is not None and stats.finished >= sample:
            continue
        stats.finished += 1
        stats.acked += record.outcome is JobStatus.ACKED
        stats.dead += record.outcome is JobStatus.DEAD
        stats.retried += record.attempts > 1
        wait, run = record.wait_seconds, record.run_seconds
        if wait is not None and run is not None:
            waits.setdefault(record.entrypoint, []).append(wait)
            runs.setdefault(record.entrypoint, []).append(run)
    for name, stats in found.items():
        stats.wait = percentiles(waits.get(name, []))
        stats.run = percentiles(runs.get(name, []))
    return dict(sorted(found.items()))


@dataclass
class Report:
    """A history's figures: jobs finished per bucket, and timings per entrypoint."""

    throughput: Throughput
    timings: dict[str, Timings]


def report_of(records: Sequence[HistoryRecord]) -> Report:
    """Return the report of ``records`` (every one of them)."""
    if not records:
        return Report(empty_throughput(0, MINUTE, 0), {})
    finished = [record.finished for record in records]
    found = empty_throughput(*report_window(min(finished), max(finished)))
    for record in records:
        found.count(record)
    return Report(found, timings_of(records))
