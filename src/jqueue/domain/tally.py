"""``Tally``: counts of an index's jobs per entrypoint and status, kept as the jobs change.

The index tells the tally of every record it inserts, deletes or changes (undoes included), so
the counts are exact at any moment and reading them costs nothing per job. The ids of delayed
and dead jobs are also kept (ordered sets), so that they are found without looking at the others.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from jqueue.domain.lines import Tenant
from jqueue.domain.models import JobStatus
from jqueue.domain.records import JobRecord

SLOTS = 6
QUEUED, DELAYED, IN_PROGRESS, DEAD, STAGED, WAITING = range(SLOTS)
"""The slots of a tally: a queued job with no ``not_before`` (ready), one with a ``not_before``
(due later, or due now but not claimed yet), claimed, dead, staged, waiting for its parents."""

_SLOTS = {
    JobStatus.IN_PROGRESS: IN_PROGRESS,
    JobStatus.DEAD: DEAD,
    JobStatus.STAGED: STAGED,
    JobStatus.WAITING: WAITING,
}


def slot_of(record: JobRecord) -> int:
    """Return the slot that counts ``record``.

    Raises
    ------
    ValueError
        If its status is one of a finished job (a state that does not replay).
    """
    if record.status is JobStatus.QUEUED:
        return QUEUED if record.not_before is None else DELAYED
    slot = _SLOTS.get(record.status)
    if slot is None:
        raise ValueError(f"job {record.id} is in the queue as {record.status}, a finished job's status")
    return slot


class Tally:
    """Jobs per entrypoint and slot, jobs in progress per tenant (of each entrypoint, and of
    the whole queue), and the ids of delayed and of dead jobs."""

    def __init__(self) -> None:
        self.counts: dict[str, list[int]] = {}
        self.running: dict[tuple[str | None, Tenant], int] = {}
        """Jobs in progress per (entrypoint, tenant) and per (None, tenant)."""
        self._ids: dict[int, dict[str, None]] = {DELAYED: {}, DEAD: {}}

    def rebuild(self, records: Iterable[JobRecord]) -> None:
        """Count ``records`` afresh."""
        self.counts, self.running, self._ids = {}, {}, {DELAYED: {}, DEAD: {}}
        for record in records:
            self.add(record)

    def add(self, record: JobRecord) -> None:
        """Count a record that enters the index (or whose new state was just set)."""
        slot = slot_of(record)
        counts = self.counts.get(record.entrypoint)
        if counts is None:
            counts = self.counts[record.entrypoint] = [0] * SLOTS
        counts[slot] += 1
        if slot == IN_PROGRESS:
            running, tenant = self.running, record.tenant
            for key in ((record.entrypoint, tenant), (None, tenant)):
                running[key] = running.get(key, 0) + 1
        ids = self._ids.get(slot)
        if ids is not None:
            ids[record.id] = None

    def count_ready(self, entrypoint: str, count: int) -> None:
        """Count ``count`` more claimable jobs of ``entrypoint`` that are not records (cold rows)."""
        if count == 0:  # an entrypoint is counted while it has a job
            return
        counts = self.counts.get(entrypoint)
        if counts is None:
            counts = self.counts[entrypoint] = [0] * SLOTS
        counts[QUEUED] += count

    def discard(self, record: JobRecord) -> None:
        """Stop counting a record that leaves the index (or whose state is about to change)."""
        slot = slot_of(record)
        counts = self.counts[record.entrypoint]
        counts[slot] -= 1
        if not any(counts):
            del self.counts[record.entrypoint]
        if slot == IN_PROGRESS:
            running, tenant = self.running, record.tenant
            for key in ((record.entrypoint, tenant), (None, tenant)):
                if running[key] == 1:
                    del running[key]
                else:
                    running[key] -= 1
        ids = self._ids.get(slot)
        if ids is not None:
            del ids[record.id]

    def ids(self, slot: int) -> Iterator[str]:
        """Yield the ids of the jobs in ``slot`` (``DELAYED`` or ``DEAD``), in the order they
        entered it (or were loaded)."""
        return iter(self._ids[slot])

    def jobs(self, status: JobStatus | None, entrypoints: Iterable[str] | None) -> int:
        """Return how many jobs have ``status`` (any, if None), of ``entrypoints`` (all, if None)."""
        if status is None:
            slots: Iterable[int] = range(SLOTS)
        elif status is JobStatus.QUEUED:
            slots = (QUEUED, DELAYED)
        elif status in _SLOTS:
            slots = (_SLOTS[status],)
        else:
            return 0  # a finished job's status: no live job has it
        counts = self.counts
        names = counts.keys() if entrypoints is None else set(entrypoints) & counts.keys()
        chosen = [counts[name] for name in names]
        return sum(row[slot] for row in chosen for slot in slots)

    def total(self, slot: int) -> int:
        """Return how many jobs of every entrypoint are in ``slot``."""
        return sum(counts[slot] for counts in self.counts.values())
