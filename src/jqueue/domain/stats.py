"""Counts of a queue's jobs, computed from its index without touching anything."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from jqueue.domain.index import QueueIndex
from jqueue.domain.models import JobStatus
from jqueue.domain.tally import DEAD, DELAYED, IN_PROGRESS, QUEUED, STAGED, WAITING
from jqueue.domain.times import from_micros


@dataclass
class EntrypointStats:
    """The jobs of one entrypoint.

    Attributes
    ----------
    queued, scheduled, in_progress, dead, staged : int
        Jobs claimable now, queued but not due yet, claimed, dead letters, and staged by
        a bulk write not yet published.
    oldest_queued_at : datetime or None
        Enqueue time of the claimable job next in line: the oldest one waiting, unless
        priorities put a younger one first.
    waiting : int
        Jobs waiting for their parents (``after``).
    """

    queued: int = 0
    scheduled: int = 0
    in_progress: int = 0
    dead: int = 0
    staged: int = 0
    oldest_queued_at: datetime | None = None
    waiting: int = 0


COUNTS = ("queued", "scheduled", "in_progress", "dead", "staged", "waiting")
"""The counts of ``EntrypointStats``, by attribute name (metrics and totals read them by name)."""


@dataclass
class QueueStats:
    """A queue at one version: jobs per entrypoint, pauses, throttles and history size.

    Attributes
    ----------
    version : int
        The commit the figures describe.
    entrypoints : dict of str to EntrypointStats
        Per entrypoint.
    paused_claims, paused_enqueues : list of str or None
        Paused scopes (None: the whole queue).
    throttles : dict of (str or None) to (int, float)
        Claims allowed per window of so many seconds, per scope.
    limits : dict of (str or None) to int
        Jobs allowed in progress at once, per scope.
    history_records : int
        Finished jobs remembered.
    tenant_throttles, tenant_limits : dict
        As ``throttles`` and ``limits``, for each tenant's jobs of the scope apart.
    """

    version: int
    entrypoints: dict[str, EntrypointStats] = field(default_factory=dict)
    paused_claims: list[str | None] = field(default_factory=list)
    paused_enqueues: list[str | None] = field(default_factory=list)
    throttles: dict[str | None, tuple[int, float]] = field(default_factory=dict)
    limits: dict[str | None, int] = field(default_factory=dict)
    history_records: int = 0
    tenant_throttles: dict[str | None, tuple[int, float]] = field(default_factory=dict)
    tenant_limits: dict[str | None, int] = field(default_factory=dict)

    def total(self, status: JobStatus) -> int:
        """Return how many jobs have ``status`` (``QUEUED`` counts scheduled jobs too)."""
        counts = self.entrypoints.values()
        if status is JobStatus.QUEUED:
            return sum(s.queued + s.scheduled for s in counts)
        if status is JobStatus.IN_PROGRESS:
            return sum(s.in_progress for s in counts)
        if status is JobStatus.DEAD:
            return sum(s.dead for s in counts)
        if status is JobStatus.STAGED:
            return sum(s.staged for s in counts)
        if status is JobStatus.WAITING:
            return sum(s.waiting for s in counts)
        return 0


def stats_of(index: QueueIndex, now: int) -> QueueStats:
    """Return the statistics of ``index`` at ``now`` (epoch microseconds), from the counts the
    index keeps: O(entrypoints + delayed jobs), whatever the number of jobs."""
    not_due: dict[str, int] = {}
    for job_id in index.tally.ids(DELAYED):
        record = index.records[job_id]  # a delayed job is never cold
        if record.not_before is not None and record.not_before > now:
            not_due[record.entrypoint] = not_due.get(record.entrypoint, 0) + 1
    per: dict[str, EntrypointStats] = {}
    for name, counts in sorted(index.tally.counts.items()):
        scheduled = not_due.get(name, 0)
        head = index.order.next_created(name, now)
        per[name] = EntrypointStats(
            queued=counts[QUEUED] + counts[DELAYED] - scheduled,
            scheduled=scheduled,
            in_progress=counts[IN_PROGRESS],
            dead=counts[DEAD],
            staged=counts[STAGED],
            oldest_queued_at=None if head is None else from_micros(head),
            waiting=counts[WAITING],
        )
    controls = index.controls
    return QueueStats(
        version=index.version,
        entrypoints=per,
        paused_claims=sorted(controls.paused_claims, key=str),
        paused_enqueues=sorted(controls.paused_enqueues, key=str),
        throttles={scope: (limit, window / 1e6) for scope, (limit, window) in controls.throttles.items()},
        limits=dict(controls.limits),
        history_records=len(index.history),
        tenant_throttles={s: (n, window / 1e6) for s, (n, window) in controls.tenant_throttles.items()},
        tenant_limits=dict(controls.tenant_limits),
    )
