"""``CommitStats``: what a queue's commits cost and did, counted as they land (for metrics)."""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass, field

from jqueue.domain.effects import Died, Effect, Requeued
from jqueue.domain.models import LEASE_EXPIRED

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
"""Upper bounds (seconds) of the commit-latency histogram; one more bucket holds the rest."""


@dataclass
class CommitStats:
    """Counts of the commits that landed: how long each took (from the call's turn to its
    landing, retries included), the conflicts lost on the way, and the jobs they killed or
    whose leases they found expired."""

    commits: int = 0
    conflicts: int = 0
    seconds: float = 0.0
    buckets: list[int] = field(default_factory=lambda: [0] * (len(LATENCY_BUCKETS) + 1))
    conflict_counts: dict[int, int] = field(default_factory=dict)
    died: int = 0
    expired_leases: int = 0

    def landed(self, seconds: float, conflicts: int, effects: Sequence[Effect]) -> None:
        """Count one commit that landed after ``conflicts`` lost races."""
        self.commits += 1
        self.conflicts += conflicts
        self.seconds += seconds
        self.buckets[bisect.bisect_left(LATENCY_BUCKETS, seconds)] += 1
        self.conflict_counts[conflicts] = self.conflict_counts.get(conflicts, 0) + 1
        for effect in effects:
            if isinstance(effect, Died):
                self.died += 1
                self.expired_leases += effect.error == LEASE_EXPIRED
            elif isinstance(effect, Requeued) and effect.error == LEASE_EXPIRED:
                self.expired_leases += 1

    def failed(self, conflicts: int) -> None:
        """Count the lost races of a commit that gave up."""
        self.conflicts += conflicts
