"""``Lines``: the claimable jobs of one entrypoint stand in one line per tenant, and claims
serve the lines in turn (ADR 0021).

A heap holds an entry per line, by (its head's priority, its turn): priority comes first, and
at one priority the line served longest ago (or the one that came in first) goes next. A
served line, or a new one, goes to the back of the round (a new turn). An entry may say a
better priority than its line's head has now (a head taken by id, say): ``top`` finds that
out when the entry comes up, and puts it back with the right one; an entry never says a worse
priority, since a job pushed ahead of its line's head moves the entry up (``enter``). Entries
no longer in ``entered`` (a line served since, or gone) are dropped when they come up.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from typing import TypeVar

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
        self._clock = 0

    def __len__(self) -> int:
        """How many entries the heap holds, live or outdated."""
        return len(self.heap)

    def enter(self, tenant: Tenant, priority: int) -> None:
        """Make sure ``tenant``'s line comes up no later than a head of ``priority`` would: a
        new line goes to the back of the round, and a line whose head gets better keeps its turn."""
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
        passed: Callable[[Tenant], bool] | None = None,
    ) -> tuple[Tenant, Head] | None:
        """Return the tenant whose line comes first, and its line's ``head``, or None if every
        line is empty; a line is forgotten once ``head`` finds it empty. Lines that ``passed``
        names are passed over, keeping their place."""
        heap, entered = self.heap, self.entered
        skipped: list[LineEntry] = []
        try:
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
                if passed is not None and passed(tenant):
                    skipped.append(heapq.heappop(heap))
                    continue
                return tenant, found
            return None
        finally:
            for entry in skipped:
                heapq.heappush(heap, entry)

    def served(self, tenant: Tenant) -> Callable[[], None]:
        """Send ``tenant``'s line to the back of the round; return the undo."""
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
        """Drop the outdated entries (the live ones keep their turns)."""
        self.heap = [(priority, turn, tenant) for tenant, (priority, turn) in self.entered.items()]
        heapq.heapify(self.heap)
