"""A log entry's ``add_part``: the jobs a commit adds from one part (``core/log/parts.py``), as columns.

A bulk write's commit adds many jobs whose payloads stay in a part, all with the same
entrypoint, time and status, and (unless the writer chose them) ids that differ only in the
row number. An entry keeps such a run as one ``add_part`` array (the fields common to all,
the part's rows as ``[start, end)`` ranges, and a column for each field that varies, left
out when every row has its default) instead of one ``add`` a job, and decoding makes the
same ``Added`` effects again. A job that waits for parents is ``waiting`` whatever the
run's status (only a queued run's jobs may wait).
"""

from __future__ import annotations

from itertools import repeat
from operator import attrgetter
from typing import TypeVar

import msgspec

from jqueue.core.formats.payload_refs import POSITIONS_PER_SEGMENT, payload_place, payload_ref
from jqueue.core.formats.wire import Count, Int64, Micros
from jqueue.domain.effects import Added
from jqueue.domain.models import JobStatus
from jqueue.domain.schema import FIELD_NAMES, STORED_FIELDS

T = TypeVar("T")

PART_ROWS = 100_000
"""The most jobs in one part (so in one ``add_part`` run)."""
ID_HEAD = 28
"""A part job's id is the first 28 characters of its part's seed (a UUID), then its row in 8 hex digits."""


def part_job_id(head: str, row: int) -> str:
    """Return the id of row ``row`` of a part whose ids start with ``head``."""
    return f"{head}{row:08x}"


class AddPart(msgspec.Struct, tag="add_part", array_like=True, omit_defaults=True):
    """Jobs added from one part, on the wire: the fields common to its jobs, then (after
    ``batch``) a column of each field that varies by row, named as the field's plural
    (``COLUMN_OF``). A field without a column has its default in every row (the id: one made
    from ``id_head``; the priority: 0).
    """

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
    ids: list[str | None] | None = None
    """Ids the writer chose, by row; None: the row's id is made from ``id_head``."""
    afters: list[tuple[str, ...]] | None = None
    on_parent_failures: list[str | None] | None = None
    awaitings: list[tuple[str, ...]] | None = None
    parent_results: list[tuple[bytes | None, ...]] | None = None

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
        columns = {name: values for name, column in COLUMN_OF.items() if (values := getattr(self, column))}
        if any(len(values) != count for values in columns.values()):
            raise ValueError("an add_part's columns differ in length")
        if self.awaitings and self.status is not JobStatus.QUEUED:
            raise ValueError(f"an add_part's {self.status} jobs wait for parents")
        head, entrypoint, created, status, batch, segment = (
            self.id_head,
            self.entrypoint,
            self.created,
            self.status,
            self.batch,
            self.segment,
        )
        ids = columns.pop("id", None) or repeat(None)
        effects = [
            Added(
                chosen or part_job_id(head, row),
                entrypoint,
                0,
                created,
                status,
                None,
                payload_ref(segment, row),
                batch=batch,
            )
            for chosen, row in zip(ids, rows, strict=False)
        ]
        for name, values in columns.items():
            for effect, value in zip(effects, values, strict=True):
                setattr(effect, name, value)
        if self.awaitings:
            for effect in effects:
                if effect.awaiting:
                    effect.status = JobStatus.WAITING
        return effects


def _field_of(column: str) -> str:
    """Return the job field whose values ``AddPart``'s ``column`` holds: the column's singular."""
    for name in (column, column.removesuffix("s"), column.removesuffix("ies") + "y"):
        if name in FIELD_NAMES:
            return name
    raise TypeError(f"AddPart.{column} is no job field's column")


_FIRST_COLUMN = AddPart.__struct_fields__.index("batch") + 1
COLUMN_OF = {_field_of(column): column for column in AddPart.__struct_fields__[_FIRST_COLUMN:]}
"""The job fields a run keeps as columns, each by row, and the ``AddPart`` attribute of each."""
_BLANK = AddPart(0, "", "", 0, JobStatus.QUEUED, [(0, 1)]).effects()[0]
_COLUMN_DEFAULTS = {name: getattr(_BLANK, name) for name in COLUMN_OF if name != "id"}
"""Each column's value in a row that the run leaves out of it (the ids are ``_ids``)."""
_COMMON = ("entrypoint", "created", "status", "batch")
_DEFAULT_NAMES = tuple(f.name for f in STORED_FIELDS if f.name not in ("payload", *COLUMN_OF, *_COMMON))
_defaults_of = attrgetter(*_DEFAULT_NAMES)
_DEFAULTS = tuple(f.default for f in STORED_FIELDS if f.name in _DEFAULT_NAMES)


class PartRun:
    """Collects consecutive part jobs of one part into an ``AddPart``."""

    def __init__(self, first: Added) -> None:
        self.segment = payload_place(first.payload)[0] if isinstance(first.payload, int) else -1
        self.common = (first.entrypoint, first.created, _run_status(first), first.batch)
        self.rows: list[list[int]] = []
        self.jobs: list[Added] = []
        self.numbers: list[int] = []

    def takes(self, added: Added) -> bool:
        """Whether ``added`` continues this run."""
        if not isinstance(added.payload, int) or payload_place(added.payload)[0] != self.segment:
            return False
        return (added.entrypoint, added.created, _run_status(added), added.batch) == self.common

    def add(self, added: Added) -> None:
        """Append a job that ``takes`` accepted.

        Raises
        ------
        ValueError
            If the run could not give the job back as it is (a field a part's job does not vary).
        """
        assert isinstance(added.payload, int)
        row = payload_place(added.payload)[1]
        waits = added.status is JobStatus.WAITING
        if _defaults_of(added) != _DEFAULTS or waits != bool(added.awaiting) or (waits and added.batch):
            raise ValueError(f"job {added.id} refers to a part but is not one of its jobs as added")
        if self.rows and self.rows[-1][1] == row:
            self.rows[-1][1] = row + 1
        else:
            self.rows.append([row, row + 1])
        self.jobs.append(added)
        self.numbers.append(row)

    def wire(self) -> AddPart:
        """Return the run on the wire."""
        entrypoint, created, status, batch = self.common
        head, ids = _ids(self.jobs, self.numbers)
        columns = {
            COLUMN_OF[name]: _sparse([getattr(job, name) for job in self.jobs], default)
            for name, default in _COLUMN_DEFAULTS.items()
        }
        rows = [(start, end) for start, end in self.rows]
        return AddPart(self.segment, head, entrypoint, created, status, rows, batch, ids=ids, **columns)


def _ids(jobs: list[Added], rows: list[int]) -> tuple[str, list[str | None] | None]:
    """Return the head of the first id that has a made id's form (its row in the last eight
    hex digits), and, by row, the ids that head does not make (None if it makes them all)."""
    made = (job.id[:ID_HEAD] for job, row in zip(jobs, rows, strict=True) if job.id[ID_HEAD:] == f"{row:08x}")
    head = next(made, "")
    ids = [None if job.id == part_job_id(head, row) else job.id for job, row in zip(jobs, rows, strict=True)]
    return head, _sparse(ids, None)


def _run_status(added: Added) -> JobStatus:
    """The status of the run a job belongs in: a waiting job's run is queued."""
    return JobStatus.QUEUED if added.status is JobStatus.WAITING else added.status


def _sparse(column: list[T], default: T) -> list[T] | None:
    """Return ``column``, or None if every row has the ``default``."""
    return None if column.count(default) == len(column) else column
