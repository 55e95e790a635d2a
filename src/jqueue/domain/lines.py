"""``Lines``: the claimable jobs of one entrypoint stand in one line per tenant, and claims
serve the lines in turn (ADR 0021).

A heap holds an entry per line, by (its head's priority, its turn): priority comes first, and
at one priority the line served longest ago (or the one that came in first) goes next. A
served line, or a new one, goes to the back of the rotation (a new turn). An entry may say a
better priority than its line's head has now (a head taken by id, say): ``top`` finds that
out when the entry comes up, and puts it back with the right one; an entry never says a worse
priority, since a job pushed ahead of its line's head moves the entry up (``enter``). Entries
no longer in ``entered`` (a line served since, or gone) are dropped when they come up.

A line that a tenant's limit or throttle blocks is parked: its entry leaves the heap, keeping
its turn, until the block may have ended (a job of the tenant stopped running, the throttle's
window ended, the limits changed), so that a claim does not pass the same blocked lines again
and again: with thousands of tenants at their limit, a claim costs what the lines that unblock
cost, not what the blocked ones do.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterator
from typing import TypeVar

from jqueue.domain.values import INT64_MAX

Tenant = str | None
"""Whose jobs a line holds: a tenant's name, or None (the jobs enqueued without one)."""
Line = tuple[str, Tenant]
"""(entrypoint, tenant): one line of claimable jobs."""
LineEntry = tuple[int, int, Tenant]
"""(head's priority, turn, tenant): turns are unique, so tenants are never compared."""
BEST_PRIORITY = -(2**63)
"""The priority of a line whose head is not known yet (the cold lines of a fresh index)."""

Head = TypeVar("Head")


class Lines:
    """The lines of one entrypoint's claimable jobs, and whose turn it is."""

    def __init__(self) -> None:
        self.heap: list[LineEntry] = []
        self.entered: dict[Tenant, tuple[int, int]] = {}
        self.parked: dict[Tenant, tuple[LineEntry, int]] = {}
        """The blocked lines out of the heap: each one's entry, and before when it stays blocked."""
        self._clock = 0
        self._soonest_unblocked = INT64_MAX
        """No parked line's block ends before this (it may be earlier than the true soonest)."""

    def __len__(self) -> int:
        """How many entries the heap holds (live or outdated), and the parked ones."""
        return len(self.heap) + len(self.parked)

    def enter(self, tenant: Tenant, priority: int) -> None:
        """Make sure ``tenant``'s line comes up no later than a head of ``priority`` would: a
        new line goes to the back of the rotation, and a line whose head gets better keeps its turn."""
        current = self.entered.get(tenant)
        if current is None:
            self._clock += 1
            turn = self._clock
        elif priority < current[0]:
            turn = current[1]
        else:
            return
        self.entered[tenant] = (priority, turn)
        heapq.heappush(self.heap, (priority, turn, tenant))

    def top(
        self,
        head: Callable[[Tenant], Head | None],
        priority: Callable[[Head], int],
        blocked: Callable[[Tenant], int | None] | None = None,
    ) -> tuple[Tenant, Head] | None:
        """Return the tenant whose line comes first, and its line's ``head``, or None if every
        line is empty; a line is forgotten once ``head`` finds it empty. A line that ``blocked``
        says is blocked (until a time it returns) is parked, keeping its place."""
        heap, entered = self.heap, self.entered
        while heap:
            entry = heap[0]
            tenant = entry[2]
            if entered.get(tenant) != entry[:2]:
                heapq.heappop(heap)
                continue
            found = head(tenant)
            if found is None:
                heapq.heappop(heap)
                del entered[tenant]
                continue
            now = priority(found)
            if now != entry[0]:
                entered[tenant] = (now, entry[1])
                heapq.heapreplace(heap, (now, entry[1], tenant))
                continue
            if blocked is not None and (until := blocked(tenant)) is not None:
                self.parked[tenant] = (heapq.heappop(heap), until)
                self._soonest_unblocked = min(self._soonest_unblocked, until)
                continue
            return tenant, found
        return None

    def parked_places(self) -> Iterator[tuple[tuple[int, int], Tenant]]:
        """Yield the parked lines still in the rotation: each one's (priority, turn), and tenant."""
        for tenant, (entry, _) in self.parked.items():
            if self.entered.get(tenant) == entry[:2]:
                yield entry[:2], tenant

    def unpark(self, tenant: Tenant) -> None:
        """Put ``tenant``'s line back in the rotation if it is parked (its block may have ended)."""
        parked = self.parked.pop(tenant, None)
        if parked is not None:
            heapq.heappush(self.heap, parked[0])

    def unpark_due(self, now: int) -> None:
        """Put back the parked lines whose throttle's window has ended by ``now``."""
        if now < self._soonest_unblocked:
            return
        for tenant in [tenant for tenant, (_, until) in self.parked.items() if until <= now]:
            self.unpark(tenant)
        self._soonest_unblocked = min((until for _, until in self.parked.values()), default=INT64_MAX)

    def unpark_all(self) -> None:
        """Put every parked line back in the rotation."""
        for entry, _ in self.parked.values():
            heapq.heappush(self.heap, entry)
        self.parked.clear()
        self._soonest_unblocked = INT64_MAX

    def served(self, tenant: Tenant) -> Callable[[], None]:
        """Send ``tenant``'s line to the back of the rotation; return the undo."""
        before = self.entered[tenant]
        self._clock += 1
        after = (before[0], self._clock)
        self.entered[tenant] = after
        heapq.heappush(self.heap, (*after, tenant))

        def undo() -> None:
            current = self.entered.get(tenant)
            restored = (before[0] if current is None else min(before[0], current[0]), before[1])
            self.entered[tenant] = restored
            heapq.heappush(self.heap, (*restored, tenant))

        return undo

    def rebuild(self) -> None:
        """Drop the outdated entries (the live ones keep their turns), parked ones too."""
        self.heap = [(priority, turn, tenant) for tenant, (priority, turn) in self.entered.items()]
        heapq.heapify(self.heap)
        self.parked.clear()
        self._soonest_unblocked = INT64_MAX
