"""``Dependencies``: the jobs that wait for parents (``after``), kept by parent, so that the
commit that settles a parent settles its children in the same commit (ADR 0019); and what a
settle changes in a child."""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Sequence

from jqueue.domain.awaiting import Awaiting, after_settle, as_tuple, awaiting_change
from jqueue.domain.effects import Added, ParentSettled
from jqueue.domain.models import JobStatus
from jqueue.domain.records import JobRecord

ENDINGS = {JobStatus.DEAD: "died", JobStatus.CANCELLED: "was cancelled"}
"""How a parent failed, by the status it failed with, as a cancelled child's error says it."""
PURGED = "was purged"
"""How a purged parent failed (a purge leaves no status behind)."""


def parent_failure(parent: str, how: str) -> str:
    """The error of a job cancelled because its ``parent`` failed ``how`` (``ENDINGS``, ``PURGED``)."""
    return f"parent {parent} {how}"


def parents_first(jobs: Sequence[Added]) -> list[Added]:
    """Return ``jobs`` with each one after the jobs of ``jobs`` it waits for (``after``), as an
    add needs them; otherwise in their order (a job goes as early as its parents let it).

    Raises
    ------
    ValueError
        If some jobs wait for each other, or for themselves: a cycle, which no order serves.
    """
    positions: dict[str, list[int]] = {}
    for position, job in enumerate(jobs):
        positions.setdefault(job.id, []).append(position)
    parents_left = [0] * len(jobs)
    children: dict[int, list[int]] = {}
    in_order = True
    for position, job in enumerate(jobs):
        for parent in dict.fromkeys(job.after):
            for earlier in positions.get(parent, ()):
                in_order = in_order and earlier < position
                parents_left[position] += 1
                children.setdefault(earlier, []).append(position)
    if in_order:
        return list(jobs)
    ready = [position for position, count in enumerate(parents_left) if count == 0]
    ordered: list[Added] = []
    while ready:
        position = heapq.heappop(ready)
        ordered.append(jobs[position])
        for child in children.get(position, ()):
            parents_left[child] -= 1
            if parents_left[child] == 0:
                heapq.heappush(ready, child)
    if len(ordered) < len(jobs):
        stuck = [job.id for job, count in zip(jobs, parents_left, strict=True) if count > 0]
        shown = ", ".join(stuck[:5]) + (f" and {len(stuck) - 5} more" if len(stuck) > 5 else "")
        raise ValueError(f"jobs wait for each other in a cycle, or for one: {shown}")
    return ordered


class Dependencies:
    """The children of each parent that is not settled yet, kept by parent, for an index.

    It holds no records: the index hands it the records whose ``awaiting`` changed.
    """

    def __init__(self, records: dict[str, JobRecord]) -> None:
        self._records = records
        self.by_parent: dict[str, dict[str, None]] = {}
        """The children of each parent that is not settled yet, in the order they were added."""
        self._views: dict[str, None] = {}
        """The jobs whose ``awaiting`` may be a view (``flatten`` makes tuples of them)."""

    def children_of(self, parent_id: str) -> list[JobRecord]:
        """Return the jobs that await ``parent_id``, in insertion order (they are never cold)."""
        children = self.by_parent.get(parent_id)
        if not children:
            return []
        return sorted((self._records[child] for child in children), key=lambda record: record.order)

    def link(self, record: JobRecord, parents: Iterable[str] | None = None) -> None:
        """Count ``record`` among the children of ``parents`` (by default, those it awaits)."""
        for parent in record.awaiting if parents is None else parents:
            self.by_parent.setdefault(parent, {})[record.id] = None

    def unlink(self, record: JobRecord, parents: Iterable[str] | None = None) -> None:
        """Stop counting ``record`` among the children of ``parents`` (by default, those it awaits)."""
        for parent in record.awaiting if parents is None else parents:
            children = self.by_parent.get(parent)
            if children is not None:
                children.pop(record.id, None)
                if not children:
                    del self.by_parent[parent]

    def relink(self, record: JobRecord, before: Sequence[str]) -> None:
        """Follow a change of ``record.awaiting`` from ``before``: only the parents that differ,
        found in O(1) for a settle (``awaiting_change``), so that settling one parent of a
        fan-in costs no walk of the others."""
        lost, gained = awaiting_change(before, record.awaiting)
        self.unlink(record, lost)
        self.link(record, gained)
        if isinstance(record.awaiting, Awaiting):
            self._views[record.id] = None

    def flatten(self) -> None:
        """Hold the ``awaiting`` and ``parent_results`` of every job as tuples again (what a
        format encodes): O(the parents of the jobs settled since the last call)."""
        views, self._views = self._views, {}
        for job_id in views:
            record = self._records.get(job_id)
            if record is not None:
                record.awaiting = as_tuple(record.awaiting)
                record.parent_results = as_tuple(record.parent_results)


def settled_changes(record: JobRecord, settled: ParentSettled) -> dict[str, object]:
    """The changes of ``record`` that ``settled`` makes: the child keeps the parent's result,
    and a waiting child that awaits no other parent becomes claimable. O(1), but for the
    child's first settle since its fields were tuples (an add, a load, a freeze) and its last:
    O(its parents), once each (``jqueue.domain.awaiting``).

    Raises
    ------
    ValueError
        If ``record`` does not await ``settled``'s parent.
    """
    try:
        awaiting, results = after_settle(
            record.after, record.awaiting, record.parent_results, settled.parent, settled.result
        )
    except ValueError:
        raise ValueError(f"{settled} settles a parent that the job does not await") from None
    changes: dict[str, object] = {"awaiting": awaiting, "parent_results": results}
    if not awaiting:
        changes.update(awaiting=(), parent_results=results.as_tuple())
        if record.status is JobStatus.WAITING:
            changes["status"] = JobStatus.QUEUED
            changes["released"] = settled.at
    return changes
