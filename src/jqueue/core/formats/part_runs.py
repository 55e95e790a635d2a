"""A log entry's ``add_part``: the jobs a commit adds from one part (``core/log/parts.py``), as columns.

A bulk write's commit adds many jobs whose payloads stay in a part, all with the same
entrypoint, time and status, and ids that differ only in the row number. An entry keeps
such a run as one ``add_part`` array (the fields common to all, the part's rows as
``[start, end)`` ranges, and a column for each field that varies, left out when every
row has its default) instead of one ``add`` a job, and decoding makes the same ``Added``
effects again.
"""

from __future__ import annotations

from operator import attrgetter

import msgspec

from jqueue.core.formats.payload_refs import POSITIONS_PER_SEGMENT, payload_place, payload_ref
from jqueue.core.formats.wire import Count, Int64, Micros
from jqueue.domain.effects import Added
from jqueue.domain.models import JobStatus
from jqueue.domain.schema import STORED_FIELDS

PART_ROWS = 100_000
"""The most jobs in one part (so in one ``add_part`` run)."""
ID_HEAD = 28
"""A part job's id is the first 28 characters of its part's seed (a UUID), then its row in 8 hex digits."""
_VARYING = ("id", "priority", "payload", "not_before", "dedup_key", "tenant")
_COMMON = ("entrypoint", "created", "status", "batch")
_DEFAULT_NAMES = tuple(f.name for f in STORED_FIELDS if f.name not in _VARYING + _COMMON)
_defaults_of = attrgetter(*_DEFAULT_NAMES)
_DEFAULTS = tuple(f.default for f in STORED_FIELDS if f.name in _DEFAULT_NAMES)


def part_job_id(head: str, row: int) -> str:
    """Return the id of row ``row`` of a part whose ids start with ``head``."""
    return f"{head}{row:08x}"


class AddPart(msgspec.Struct, tag="add_part", array_like=True, omit_defaults=True):
    """Jobs added from one part, on the wire."""

    segment: Count
    id_head: str
    entrypoint: str
    created: Micros
    status: JobStatus
    rows: list[tuple[Count, Count]]
    batch: str | None = None
    priorities: list[Int64] | None = None
    dedup_keys: list[str | None] | None = None
    not_befores: list[Micros | None] | None = None
    tenants: list[str | None] | None = None

    def effects(self) -> list[Added]:
        """Return the ``Added`` effects of this run, payloads as references into the part.

        Raises
        ------
        ValueError
            If the rows are not ascending ranges of a part's positions, or a column's length
            is not the number of rows.
        """
        previous = 0
        for start, end in self.rows:
            if not previous <= start < end <= POSITIONS_PER_SEGMENT:
                raise ValueError(f"an add_part's rows {start} to {end} are out of order or range")
            previous = end
        if sum(end - start for start, end in self.rows) > PART_ROWS:
            raise ValueError(f"an add_part holds more than a part's {PART_ROWS} rows")
        rows = [row for start, end in self.rows for row in range(start, end)]
        count = len(rows)
        priorities = self.priorities or [0] * count
        keys = self.dedup_keys or [None] * count
        not_befores = self.not_befores or [None] * count
        tenants = self.tenants or [None] * count
        if not len(priorities) == len(keys) == len(not_befores) == len(tenants) == count:
            raise ValueError("an add_part's columns differ in length")
        head, entrypoint, created, status, batch = (
            self.id_head,
            self.entrypoint,
            self.created,
            self.status,
            self.batch,
        )
        return [
            Added(
                part_job_id(head, row),
                entrypoint,
                priorities[i],
                created,
                status,
                None,
                payload_ref(self.segment, row),
                not_before=not_befores[i],
                dedup_key=keys[i],
                batch=batch,
                tenant=tenants[i],
            )
            for i, row in enumerate(rows)
        ]


class PartRun:
    """Collects consecutive part jobs of one part into an ``AddPart``."""

    def __init__(self, first: Added) -> None:
        self.segment = payload_place(first.payload)[0] if isinstance(first.payload, int) else -1
        self.common = (first.entrypoint, first.created, first.status, first.batch)
        self.head = first.id[:ID_HEAD]
        self.rows: list[list[int]] = []
        self.priorities: list[int] = []
        self.keys: list[str | None] = []
        self.not_befores: list[int | None] = []
        self.tenants: list[str | None] = []

    def takes(self, added: Added) -> bool:
        """Whether ``added`` continues this run."""
        if not isinstance(added.payload, int) or payload_place(added.payload)[0] != self.segment:
            return False
        return (added.entrypoint, added.created, added.status, added.batch) == self.common and added.id[
            :ID_HEAD
        ] == self.head

    def add(self, added: Added) -> None:
        """Append a job that ``takes`` accepted."""
        assert isinstance(added.payload, int)
        row = payload_place(added.payload)[1]
        if added.id != part_job_id(self.head, row) or _defaults_of(added) != _DEFAULTS:
            raise ValueError(f"job {added.id} refers to a part but is not one of its jobs as added")
        if self.rows and self.rows[-1][1] == row:
            self.rows[-1][1] = row + 1
        else:
            self.rows.append([row, row + 1])
        self.priorities.append(added.priority)
        self.keys.append(added.dedup_key)
        self.not_befores.append(added.not_before)
        self.tenants.append(added.tenant)

    def wire(self) -> AddPart:
        """Return the run on the wire."""
        entrypoint, created, status, batch = self.common
        return AddPart(
            self.segment,
            self.head,
            entrypoint,
            created,
            status,
            [(start, end) for start, end in self.rows],
            batch,
            self.priorities if any(self.priorities) else None,
            None if self.keys.count(None) == len(self.keys) else self.keys,
            None if self.not_befores.count(None) == len(self.not_befores) else self.not_befores,
            None if self.tenants.count(None) == len(self.tenants) else self.tenants,
        )
