"""``ColdRows``: the jobs an index knows only as rows kept elsewhere (ADR 0015, stage 2).

At depth most jobs wait, claimable and untouched, in the slabs of the last checkpoint. An
index keeps as ``JobRecord`` objects only the others (claimed, waiting for a time, dead,
staged, carrying a dedup key, changed since) and the cold rows it has looked at; it reaches
the rest through this protocol: by id, and per line (entrypoint and tenant, ``lines.py``) in
claim order, one row at a time.
A row handed out as a record (``take``, ``take_head``) is the index's from then on, and
never handed out again.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Iterator, Mapping
from typing import Protocol

from jqueue.domain.lines import Line
from jqueue.domain.records import JobRecord

ClaimKey = tuple[int, int, int]
"""(priority, created, insertion order): where a claimable job stands in its line."""


class ColdRows(Protocol):
    """Claimable jobs not yet in an index, in claim order per line."""

    def __len__(self) -> int:
        """How many rows are not yet taken."""
        ...

    def counts(self) -> Mapping[str, int]:
        """How many rows of each entrypoint are not yet taken."""
        ...

    def take(self, job_id: str) -> JobRecord | None:
        """Return the record of job ``job_id`` if a row not yet taken holds it, taking it."""
        ...

    def head(self, line: Line) -> ClaimKey | None:
        """Return where the first row of ``line`` not yet taken stands, or None."""
        ...

    def take_head(self, line: Line) -> JobRecord:
        """Return the record of the row ``head`` names, taking it."""
        ...

    def lines(self) -> Iterable[Line]:
        """Return the lines that have rows not yet taken."""
        ...

    def ordered(self, entrypoints: Collection[str] | None = None, start: int = 0) -> Iterator[JobRecord]:
        """Yield a record of each row not yet taken (of ``entrypoints`` if given) whose insertion
        number is ``start`` or more, in insertion order, taking none (records not to be changed)."""
        ...
