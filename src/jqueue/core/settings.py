"""Settings of the log-structured layout."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

MIN_RETENTION = timedelta(seconds=1)


@dataclass(frozen=True)
class LogSettings:
    """How a log-structured queue checkpoints, compacts and caches.

    Attributes
    ----------
    checkpoint_every : int
        Commits between checkpoints of the jobs' metadata.
    retention : timedelta
        How long entries and checkpoints stay after a newer checkpoint covers them
        (the history that readers and analytics can still see). Writers whose view
        is older than half of it look for a newer checkpoint before committing, so
        it must exceed the longest pause a writer can take between reading the log
        and committing (at least one second).
    payload_cache_bytes : int
        Payload bytes of recent entries kept in memory to answer dequeues.
    """

    checkpoint_every: int = 1000
    retention: timedelta = timedelta(hours=1)
    payload_cache_bytes: int = 64 * 1024 * 1024

    def __post_init__(self) -> None:
        if self.checkpoint_every < 1:
            raise ValueError(f"checkpoint_every must be at least 1, got {self.checkpoint_every}")
        if self.retention < MIN_RETENTION:
            raise ValueError(f"retention must be at least {MIN_RETENTION}, got {self.retention}")
