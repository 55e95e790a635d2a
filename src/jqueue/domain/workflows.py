"""A job's workflow: every job linked to it by ``after``, either way and at any distance, in the
queue or in its history (ADR 0019)."""

from __future__ import annotations

from collections import defaultdict, deque

from jqueue.domain.errors import JobNotFoundError
from jqueue.domain.index import QueueIndex
from jqueue.domain.models import JobStatus
from jqueue.domain.records import HistoryRecord, JobRecord

Member = JobRecord | HistoryRecord
"""A job of a workflow: live, or finished (its newest history record)."""
LEFT = frozenset({JobStatus.ACKED, JobStatus.CANCELLED})
"""The statuses of the jobs that left the queue; a workflow's job in any other (a dead one too) is
still there, and a cancel of the workflow ends it."""


def workflow_of(index: QueueIndex, job_id: str) -> list[Member]:
    """Return the jobs of ``job_id``'s workflow, parents before children (by their longest way
    from a job without parents, then by enqueue): those it waits for, those that wait for it,
    theirs in turn. It reads every job and history record (a view's cost, not
    a claim's); a job the history no longer holds ends the links that pass through it.

    Raises
    ------
    JobNotFoundError
        If ``job_id`` is neither in the queue nor in its history.
    """
    found: dict[str, Member] = {}
    links: defaultdict[str, set[str]] = defaultdict(set)
    for member in (*index.history, *index.select()):  # a live job wins over an old record of its id
        member_id = _id(member)
        found[member_id] = member
        for parent in member.after:
            links[member_id].add(parent)
            links[parent].add(member_id)
    if job_id not in found:
        raise JobNotFoundError(job_id)
    reached = {job_id}
    frontier = deque([job_id])
    while frontier:
        for linked in links[frontier.popleft()]:
            if linked not in reached and linked in found:
                reached.add(linked)
                frontier.append(linked)
    depth = _depths({member_id: found[member_id].after for member_id in reached})
    members = (found[member_id] for member_id in reached)
    return sorted(members, key=lambda member: (depth[_id(member)], member.created, _id(member)))


def _depths(parents: dict[str, tuple[str, ...]]) -> dict[str, int]:
    """Each job's longest way from a job without parents, over ``parents`` (their parents among
    them); a walk in order, not recursion, so that a long chain does not reach Python's stack."""
    children: defaultdict[str, list[str]] = defaultdict(list)
    unmet = {}
    for job_id, after in parents.items():
        known = [parent for parent in after if parent in parents]
        unmet[job_id] = len(known)
        for parent in known:
            children[parent].append(job_id)
    depth = dict.fromkeys(parents, 0)
    ready = deque(job_id for job_id, count in unmet.items() if count == 0)
    while ready:
        job_id = ready.popleft()
        for child in children[job_id]:
            depth[child] = max(depth[child], depth[job_id] + 1)
            unmet[child] -= 1
            if unmet[child] == 0:
                ready.append(child)
    return depth


def _id(member: Member) -> str:
    return member.job_id if isinstance(member, HistoryRecord) else member.id
