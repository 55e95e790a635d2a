"""A consistent view of a frozen index, read column by column from a worker thread while commits go on."""

from __future__ import annotations

from operator import attrgetter
from typing import Any

from jqueue.domain.records import ClaimState, Frozen
from jqueue.domain.schema import CHANGING_FIELDS


class IndexSnapshot:
    """The live jobs, history and controls of an index at one version, read lazily
    (see ``QueueIndex.freeze``)."""

    def __init__(self, frozen: Frozen) -> None:
        self.version = frozen.version
        self.history = frozen.history
        self.controls = frozen.controls
        self._records = frozen.records
        self._saved = frozen.saved
        self._searched: set[str] = set()
        self._rows: dict[str, int] = {}

    def column(self, name: str) -> list[Any]:
        """Return one record column (``id``, ``entrypoint``, ... ``order``) as of the snapshot,
        built with a C-level loop: fast, but it holds the GIL to its end, so the event loop
        waits out a whole column (ADR 0015 measures it; stage 1 makes the columns small)."""
        values = list(map(attrgetter(name), self._records))
        if name in CHANGING_FIELDS:
            position = CHANGING_FIELDS.index(name)
            for row, before in self._patches():
                values[row] = before[position]
        return values

    def _patches(self) -> list[tuple[int, ClaimState]]:
        """Return (row, values at the snapshot) of each record changed since; called after a
        column is read, so a change made meanwhile has saved its old values already."""
        saved = dict(self._saved)
        unseen = saved.keys() - self._searched
        if unseen:
            self._searched |= unseen
            for row, record in enumerate(self._records):
                if record.id in unseen:
                    self._rows[record.id] = row
        rows = self._rows
        return [(rows[job_id], before) for job_id, before in saved.items() if job_id in rows]
