"""The records of finished jobs that a queue keeps, oldest first, with the ids they hold and the
dedup keys of acked ones."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator

from jqueue.domain.models import JobStatus
from jqueue.domain.records import HistoryRecord


def _acked_key(record: HistoryRecord) -> str | None:
    return record.dedup_key if record.outcome is JobStatus.ACKED else None


class History:
    """Finished jobs in finish order; each change returns its undo (for an index's journal)."""

    def __init__(self) -> None:
        self._records: deque[HistoryRecord] = deque()
        # Plain dicts of str to int, which the cyclic collector stops visiting; a key goes
        # when its count does, so they hold only what the records do.
        self._acked_keys: dict[str, int] = {}
        self._ids: dict[str, int] = {}

    def __len__(self) -> int:
        return len(self._records)

    def __iter__(self) -> Iterator[HistoryRecord]:
        return iter(self._records)

    def newest_first(self) -> Iterator[HistoryRecord]:
        """Iterate from the newest record to the oldest."""
        return reversed(self._records)

    def add(self, record: HistoryRecord) -> Callable[[], None]:
        """Append a finished job; returns the undo."""
        self._records.append(record)
        self._count_keys([record], 1)

        def undo() -> None:
            self._records.pop()
            self._count_keys([record], -1)

        return undo

    def drop_oldest(self, count: int) -> Callable[[], None]:
        """Drop the ``count`` oldest records; returns the undo.

        Raises
        ------
        ValueError
            If there are not that many (a log that does not replay).
        """
        if not 0 < count <= len(self._records):
            raise ValueError(f"cannot forget {count} of {len(self._records)} history records")
        dropped = [self._records.popleft() for _ in range(count)]
        self._count_keys(dropped, -1)

        def undo() -> None:
            self._records.extendleft(reversed(dropped))
            self._count_keys(dropped, 1)

        return undo

    def _count_keys(self, records: list[HistoryRecord], step: int) -> None:
        for record in records:
            _counted(self._ids, record.job_id, step)
            key = _acked_key(record)
            if key is not None:
                _counted(self._acked_keys, key, step)

    def expired(self, finished_before: int, keep: int) -> int:
        """How many of the oldest records to drop: those finished before ``finished_before`` and
        any beyond the newest ``keep``."""
        records = self._records
        count = max(0, len(records) - keep)
        while count < len(records) and records[count].finished < finished_before:
            count += 1
        return count

    def finished(self, job_id: str) -> HistoryRecord | None:
        """Return the newest record of job ``job_id``, if history holds one."""
        if self._ids.get(job_id, 0) <= 0:
            return None
        return next(r for r in reversed(self._records) if r.job_id == job_id)

    def acked(self, key: str, since: int) -> HistoryRecord | None:
        """Return the newest job acked with dedup key ``key`` at or after ``since``, if any."""
        if self._acked_keys.get(key, 0) <= 0:
            return None
        newest = next(r for r in reversed(self._records) if _acked_key(r) == key)
        return newest if newest.finished >= since else None


def _counted(counts: dict[str, int], key: str, step: int) -> None:
    """Add ``step`` to the count of ``key``, dropping a count that reaches zero."""
    count = counts.get(key, 0) + step
    if count:
        counts[key] = count
    else:
        del counts[key]
