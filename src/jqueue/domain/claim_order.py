"""``ClaimOrder``: the heaps that order a ``QueueIndex``'s jobs for claims and sweeps.

One heap per line (an entrypoint's jobs of one tenant) orders its claimable jobs by
(priority, created, insertion order), and each entrypoint's ``Lines`` serve its lines in turn
at each priority (ADR 0021); a heap of scheduled jobs (delays, back-offs) releases them into
those heaps when they are due; heaps of claimed jobs by heartbeat and by lease expiry drive
the sweeps. Heaps are cleaned lazily: an entry counts only while its record still carries the
entry's stamp (or, for claimed jobs, its time), and the heaps are rebuilt once outdated
entries outnumber live ones.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Collection, Iterator
from functools import partial
from typing import Any

from jqueue.domain.cold import ClaimKey, ColdRows
from jqueue.domain.controls import Controls
from jqueue.domain.lines import BEST_PRIORITY, Line, Lines, Tenant
from jqueue.domain.models import UNLEASED_CLAIM_TIMEOUT, JobStatus
from jqueue.domain.records import JobRecord
from jqueue.domain.times import span_micros

_NO_HEARTBEAT = -(2**63)
_UNLEASED_MICROS = span_micros(UNLEASED_CLAIM_TIMEOUT)

HEAP_SLACK = 4
HEAP_FLOOR = 1024
"""The heaps are rebuilt once they hold more than ``HEAP_SLACK`` entries per live job or line plus this."""

ReadyEntry = tuple[int, int, int, int, str]
Head = tuple[ClaimKey, bool]
"""Where a line's first job stands, and whether it is cold."""
TimedEntry = tuple[int, str]
ScheduledEntry = tuple[int, int, str]


def expiry_key(record: JobRecord) -> int:
    """When a claimed job's lease runs out; a claim without a lease expiry (by the original
    jqueue) holds until ``UNLEASED_CLAIM_TIMEOUT`` after its last heartbeat."""
    if record.expires is not None:
        return record.expires
    return _NO_HEARTBEAT if record.heartbeat is None else record.heartbeat + _UNLEASED_MICROS


def _heartbeat_key(record: JobRecord) -> int:
    return _NO_HEARTBEAT if record.heartbeat is None else record.heartbeat


class ClaimOrder:
    """The claim and sweep heaps over the records of one index (a dict it shares, where it
    keeps the record of a cold job a claim takes), and the lines of its cold jobs."""

    def __init__(self, records: dict[str, JobRecord]) -> None:
        self.records = records
        self.cold: ColdRows | None = None
        self._ready: dict[Line, list[ReadyEntry]] = {}
        self._ready_entries = 0
        """How many entries the lines' heaps hold (summing them would cost a claim O(lines))."""
        self._lines: dict[str, Lines] = {}
        self._scheduled: list[ScheduledEntry] = []
        self._claimed: list[TimedEntry] = []
        self._leased: list[TimedEntry] = []

    def entries(self) -> int:
        """How many entries the heaps hold, live or outdated."""
        ready = self._ready_entries + sum(map(len, self._lines.values()))
        return ready + len(self._scheduled) + len(self._claimed) + len(self._leased)

    def rebuild(self) -> None:
        """Build the heaps from the live records alone."""
        ready: dict[Line, list[ReadyEntry]] = {}
        scheduled: list[ScheduledEntry] = []
        claimed: list[TimedEntry] = []
        leased: list[TimedEntry] = []
        for record in self.records.values():
            if record.status is JobStatus.QUEUED:
                if record.not_before is None:
                    entry = (record.priority, record.created, record.order, record.stamp, record.id)
                    ready.setdefault((record.entrypoint, record.tenant), []).append(entry)
                else:
                    scheduled.append((record.not_before, record.stamp, record.id))
            elif record.status is JobStatus.IN_PROGRESS:
                claimed.append((_heartbeat_key(record), record.id))
                leased.append((expiry_key(record), record.id))
        heaps: list[list[Any]] = [*ready.values(), scheduled, claimed, leased]
        for heap in heaps:
            heapq.heapify(heap)
        self._ready, self._scheduled, self._claimed, self._leased = ready, scheduled, claimed, leased
        self._ready_entries = sum(map(len, ready.values()))
        for lines in self._lines.values():
            lines.rebuild()
        self._enter(ready)

    def attach(self, cold: ColdRows) -> None:
        """Reach the cold rows ``cold`` too, their lines standing at the back of the rotation."""
        self.cold = cold
        for entrypoint, tenant in cold.lines():
            self._lines.setdefault(entrypoint, Lines()).enter(tenant, BEST_PRIORITY)

    def _enter(self, ready: dict[Line, list[ReadyEntry]]) -> None:
        for (entrypoint, tenant), entries in ready.items():
            self._lines.setdefault(entrypoint, Lines()).enter(tenant, min(entries)[0])

    def live(self) -> int:
        """How many entries would stay in a rebuild: a job's, a line's (an empty line stays in
        its rotation until its turn comes: many tenants of a job or two each leave many)."""
        return len(self.records) + sum(len(lines.entered) for lines in self._lines.values())

    def prune(self) -> None:
        """Rebuild once outdated entries outnumber the live ones (every claim and heartbeat leaves
        one behind): amortised O(1) per change, memory O(live jobs and lines)."""
        if self.entries() > HEAP_SLACK * self.live() + HEAP_FLOOR:
            self.rebuild()

    def push(self, record: JobRecord) -> None:
        """Add the entries of a record that just changed (its ``stamp`` is new)."""
        if record.status is JobStatus.QUEUED:
            if record.not_before is None:
                self._push_ready(record)
            else:
                heapq.heappush(self._scheduled, (record.not_before, record.stamp, record.id))
        elif record.status is JobStatus.IN_PROGRESS:
            heapq.heappush(self._claimed, (_heartbeat_key(record), record.id))
            heapq.heappush(self._leased, (expiry_key(record), record.id))

    def push_many(self, records: list[JobRecord]) -> None:
        """``push`` each of many new records; a heap that more than doubles is built anew."""
        ready: dict[Line, list[ReadyEntry]] = {}
        for record in records:
            if record.status is JobStatus.QUEUED and record.not_before is None:
                entry = (record.priority, record.created, record.order, record.stamp, record.id)
                ready.setdefault((record.entrypoint, record.tenant), []).append(entry)
            else:
                self.push(record)
        for line, entries in ready.items():
            self._ready_entries += len(entries)
            heap = self._ready.setdefault(line, [])
            if len(entries) > len(heap):
                heap.extend(entries)
                heapq.heapify(heap)
            else:
                for entry in entries:
                    heapq.heappush(heap, entry)
        self._enter(ready)

    def _push_ready(self, record: JobRecord) -> None:
        entry = (record.priority, record.created, record.order, record.stamp, record.id)
        heapq.heappush(self._ready.setdefault((record.entrypoint, record.tenant), []), entry)
        self._ready_entries += 1
        self._lines.setdefault(record.entrypoint, Lines()).enter(record.tenant, record.priority)

    def release_due(self, now: int) -> None:
        """Move the scheduled jobs due at ``now`` to the claimable heaps (no state changes)."""
        heap = self._scheduled
        while heap and heap[0][0] <= now:
            _, stamp, job_id = heapq.heappop(heap)
            record = self.records.get(job_id)
            if record is not None and record.status is JobStatus.QUEUED and record.stamp == stamp:
                self._push_ready(record)

    def reschedule(self, record: JobRecord) -> None:
        """Put back a job released too early (by a clock ahead of the claim's ``now``)."""
        assert record.not_before is not None
        heapq.heappush(self._scheduled, (record.not_before, record.stamp, record.id))

    def next_claimable(
        self,
        entrypoints: Collection[str] | None,
        controls: Controls,
        now: int,
        running: Callable[[str | None], int],
        running_of: Callable[[str | None, Tenant], int],
    ) -> tuple[str, Callable[[], None]] | None:
        """Pop the best claimable job (of ``entrypoints`` if given) whose entrypoint is neither
        paused, out of throttle, nor at its limit of ``running`` jobs, and whose tenant is
        neither out of throttle nor at its limit of jobs ``running_of`` it (a blocked tenant's
        line is parked: ``unpark``); return its id and the undo of the turn it gave its line,
        or None."""
        best: ClaimKey | None = None
        best_line: tuple[str, Tenant, bool] = ("", None, False)
        for name in self._names() if entrypoints is None else entrypoints:
            if controls.claims_paused(name) or controls.remaining(name, now) == 0:
                continue
            if controls.at_limit(name, running):
                continue
            blocked = None
            if controls.per_tenant:
                blocked = partial(controls.tenant_blocked, name, now=now, running=running_of)
                if (lines := self._lines.get(name)) is not None:
                    lines.unpark_due(now)
            first = self._first(name, blocked)
            if first is not None and (best is None or first[1][0] < best):
                tenant, (best, cold) = first
                best_line = (name, tenant, cold)
        if best is None:
            return None
        return self._pop(*best_line)

    def next_created(self, entrypoint: str, now: int) -> int | None:
        """Return when the claimable job of ``entrypoint`` next in line at ``now`` (pauses,
        throttles and limits aside) was created, or None; it moves due jobs to the claimable
        heaps and drops outdated entries, and leaves parked lines parked."""
        self.release_due(now)
        lines = self._lines.get(entrypoint)
        if lines is None:
            return None
        first = self._first(entrypoint)
        best = None if first is None else (lines.entered[first[0]], first[1])
        for place, tenant in lines.parked_places():
            if best is None or place < best[0]:
                head = self._head((entrypoint, tenant))
                if head is not None:
                    best = (place, head)
        return None if best is None else best[1][0][1]

    def unpark(self, tenant: Tenant) -> None:
        """Put ``tenant``'s parked lines back in their rotations: a job of it stopped running."""
        for lines in self._lines.values():
            if lines.parked:
                lines.unpark(tenant)

    def unpark_all(self) -> None:
        """Put every parked line back in its rotation: the limits or throttles changed, or were
        undone with the claims that counted against them."""
        for lines in self._lines.values():
            if lines.parked:
                lines.unpark_all()

    def _names(self) -> list[str]:
        return list(self._lines)  # kept when empty: an undone claim gives its turn back to them

    def _first(
        self, entrypoint: str, blocked: Callable[[Tenant], int | None] | None = None
    ) -> tuple[Tenant, Head] | None:
        """Return the line of ``entrypoint`` whose turn it is (of those ``blocked`` does not
        park), and where its first job stands."""
        lines = self._lines.get(entrypoint)
        if lines is None:
            return None
        return lines.top(lambda tenant: self._head((entrypoint, tenant)), _priority, blocked)

    def _head(self, line: Line) -> Head | None:
        """Return where the first claimable job of ``line`` stands, hot or cold, and whether it
        is cold (a slab's row, not in the heaps)."""
        heap = self._clean_top(line)
        key: ClaimKey | None = None if heap is None else heap[0][:3]
        cold = None if self.cold is None else self.cold.head(line)
        if cold is not None and (key is None or cold < key):
            return cold, True
        return None if key is None else (key, False)

    def _pop(self, entrypoint: str, tenant: Tenant, cold: bool) -> tuple[str, Callable[[], None]]:
        """Take the job ``_head`` found for a line (``cold`` as it said), in the same turn, and
        send the line to the back of the rotation."""
        line = (entrypoint, tenant)
        undo = self._lines[entrypoint].served(tenant)
        if cold:
            assert self.cold is not None
            record = self.cold.take_head(line)
            self.records[record.id] = record
            return record.id, undo
        self._ready_entries -= 1
        return heapq.heappop(self._ready[line])[4], undo

    def _clean_top(self, line: Line) -> list[ReadyEntry] | None:
        heap = self._ready.get(line)
        while heap and not self._ready_entry_live(heap[0]):
            heapq.heappop(heap)
            self._ready_entries -= 1
        if not heap:
            self._ready.pop(line, None)
            return None
        return heap

    def expired(self, now: int) -> Iterator[str]:
        """Pop and yield the claimed jobs whose lease ran out before ``now``."""
        return _pop_before(self._leased, self._leased_entry_live, now)

    def stale(self, cutoff: int) -> Iterator[str]:
        """Pop and yield the claimed jobs whose heartbeat is older than ``cutoff`` (or missing)."""
        return _pop_before(self._claimed, self._claimed_entry_live, cutoff)

    def _ready_entry_live(self, entry: ReadyEntry) -> bool:
        record = self.records.get(entry[4])
        return record is not None and record.status is JobStatus.QUEUED and record.stamp == entry[3]

    def _claimed_entry_live(self, entry: TimedEntry) -> bool:
        record = self.records.get(entry[1])
        if record is None or record.status is not JobStatus.IN_PROGRESS:
            return False
        return entry[0] == _heartbeat_key(record)

    def _leased_entry_live(self, entry: TimedEntry) -> bool:
        record = self.records.get(entry[1])
        if record is None or record.status is not JobStatus.IN_PROGRESS:
            return False
        return expiry_key(record) == entry[0]


def _priority(head: Head) -> int:
    return head[0][0]


def _pop_before(heap: list[TimedEntry], live: Callable[[TimedEntry], bool], cutoff: int) -> Iterator[str]:
    """Pop and yield the jobs of a (time, id) heap whose live entry is before ``cutoff``."""
    while heap:
        if not live(heap[0]):
            heapq.heappop(heap)
        elif heap[0][0] < cutoff:
            yield heapq.heappop(heap)[1]
        else:
            return
