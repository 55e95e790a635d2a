"""Parts: immutable payload objects written beside a log-structured queue by bulk writers.

A part holds up to ``PART_ROWS`` jobs (or about ``PART_BYTES`` of payload) in the log
entry format, so it is read like any entry that holds payloads. Its segment number
(``segment << 24 | position`` payload references, see ``payload_refs``) says where it
is and when it was written: bit 62 set, the epoch second above 24 random bits, and its
name is ``part/<segment in hex>``. Log entries have small sequence numbers, so the two
never meet. A queue learns of a part only when a commit adds jobs whose payloads refer
to it (``StoredPart.jobs``); compaction deletes a part that no live job refers to once
it is older than ``LogSettings.part_lifetime`` (an abandoned write's part included).
"""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from jqueue.core.formats.entry import encode_entry
from jqueue.core.formats.part_runs import COLUMN_OF, ID_HEAD, PART_ROWS, AddPart, part_job_id
from jqueue.core.formats.payload_refs import POSITIONS_PER_SEGMENT
from jqueue.domain.effects import Added
from jqueue.domain.errors import CASConflictError
from jqueue.domain.models import JobStatus
from jqueue.ports.storage import KeyedStoragePort

PART_PREFIX = "part/"
PART_BYTES = 8 * 1024 * 1024
"""A part is closed once its payloads reach this size, so that a dequeue that has to fetch
one (the payload cache holds 64 MiB by default) fetches little."""
_PART_FLAG = 1 << 62
_RANDOM_BITS = 24
_NAME_ATTEMPTS = 8


def new_part_segment(at_seconds: int) -> int:
    """Return a fresh part segment number written at ``at_seconds`` (epoch seconds)."""
    random = int.from_bytes(os.urandom(3), "big")
    return _PART_FLAG | at_seconds << _RANDOM_BITS | random


def is_part(segment: int) -> bool:
    """Whether a segment number is a part's (not a log entry's)."""
    return segment >= _PART_FLAG


def part_name(segment: int) -> str:
    """Return the object name of part ``segment``."""
    return f"{PART_PREFIX}{segment:016x}"


def part_segment(name: str) -> int | None:
    """Return the segment number of a part's object name, or None if it is not one."""
    if not name.startswith(PART_PREFIX):
        return None
    try:
        segment = int(name[len(PART_PREFIX) :], 16)
    except ValueError:
        return None
    return segment if is_part(segment) and name == part_name(segment) else None


def part_written_at(segment: int) -> int:
    """Return when part ``segment`` was written, in epoch seconds."""
    return (segment ^ _PART_FLAG) >> _RANDOM_BITS


class PartRow(NamedTuple):
    """A job of a part, as a writer gives it: the fields a bulk write's rows may set
    (``WRITTEN_FIELDS``), the payload first; ``tests/test_schema_forms.py`` checks the two agree."""

    payload: bytes
    priority: int = 0
    dedup_key: str | None = None
    not_before: int | None = None
    """Epoch microseconds."""
    tenant: str | None = None
    id: str | None = None
    """The id the writer chose; None: one made from the part's seed."""
    after: tuple[str, ...] = ()
    on_parent_failure: str | None = None


@dataclass(frozen=True)
class StoredPart:
    """What a bulk write's commit needs to add one written part's jobs: their fields, whose
    payloads stay in the part.

    Job ids are ``seed`` with the row number in its last eight hex digits (``part_job_id``),
    unless the writer chose them (an ``id`` column), so that the fields travel to the committer
    as a few columns, and a commit's entry holds them as few (``AddPart``).

    Attributes
    ----------
    columns : dict
        By field of ``PartRow`` (but the payload), its values by row; a field that every row
        has at its default has none.
    """

    segment: int
    entrypoint: str
    seed: str
    count: int
    columns: dict[str, list[Any]] = field(default_factory=dict)

    def job_ids(self) -> list[str]:
        """Return the ids of this part's jobs, by row."""
        head, ids = self.seed[:ID_HEAD], self.columns.get("id") or [None] * self.count
        return [ids[row] or part_job_id(head, row) for row in range(self.count)]

    def jobs(self, created: int) -> list[Added]:
        """Return the effects that add this part's jobs at ``created`` (epoch microseconds; the
        part's own time is when it was written), payloads as references into it: what the
        entry's ``AddPart`` of the whole part decodes to."""
        columns: dict[str, Any] = {COLUMN_OF[name]: values for name, values in self.columns.items()}
        if "after" in self.columns:  # every parent is awaited until the commit's add looks them up
            columns[COLUMN_OF["awaiting"]] = self.columns["after"]
        head, rows = self.seed[:ID_HEAD], [(0, self.count)]
        return AddPart(
            self.segment, head, self.entrypoint, created, JobStatus.QUEUED, rows, **columns
        ).effects()


def _columns(rows: list[PartRow]) -> dict[str, list[Any]]:
    """Return the rows' fields (but the payload) by row, leaving out those every row has at its default."""
    columns = {}
    for name, default in PartRow._field_defaults.items():
        values = [getattr(row, name) for row in rows]
        if values.count(default) != len(values):
            columns[name] = values
    return columns


def part_seed() -> str:
    """Return a random job-id seed: a version-4 UUID whose last eight hex digits the rows fill."""
    return str(uuid.uuid4())


async def write_part(
    keyed: KeyedStoragePort,
    entrypoint: str,
    created: int,
    rows: list[PartRow],
) -> StoredPart:
    """Write one part of ``rows`` and return what its commit needs; a fresh name is drawn
    again if it is taken."""
    if not 0 < len(rows) <= min(PART_ROWS, POSITIONS_PER_SEGMENT):
        raise ValueError(f"a part holds 1 to {PART_ROWS} jobs, not {len(rows)}")
    columns = _columns(rows)
    for _ in range(_NAME_ATTEMPTS):
        part = StoredPart(new_part_segment(created // 1_000_000), entrypoint, part_seed(), len(rows), columns)
        jobs = part.jobs(created)
        for job, row in zip(jobs, rows, strict=True):
            job.payload = row.payload
        try:
            await keyed.create(part_name(part.segment), encode_entry(part.segment, part.seed, created, jobs))
        except CASConflictError:
            continue
        return part
    raise CASConflictError(f"no free part name after {_NAME_ATTEMPTS} attempts")
