"""Settings: the log-structured layout's, and a queue's job lifecycle policy."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from jqueue.domain.values import span

MIN_RETENTION = timedelta(seconds=1)
JOBS_PER_CHECKPOINT_CHANGE = 20
CHECKPOINT_INTERVAL_CAP = 50_000
"""The most changes a deep queue leaves between checkpoints (unless ``checkpoint_every`` says
more): what a new reader replays, and holds as records, before its first call."""
ENTRIES_PER_CHECKPOINT = 64
"""The fewest log entries between checkpoints (or ``checkpoint_every``, if fewer), unless the
changes reach ``CHECKPOINT_INTERVAL_CAP``: a checkpoint costs several requests on object
storage, and a group commit folds hundreds of changes into one entry."""


@dataclass(frozen=True)
class LogSettings:
    """How a log-structured queue checkpoints, compacts and caches.

    Attributes
    ----------
    checkpoint_every : int
        Changes (effects: an enqueue, a claim, an ack...) between checkpoints of the
        jobs' metadata, at least, in at least ``ENTRIES_PER_CHECKPOINT`` log entries (or
        this many, if fewer). A checkpoint writes the rows of the jobs changed since
        the last one, plus a manifest of a byte per stored row (compressed), and a new
        reader replays every change after it, so a deep queue waits for one change per
        ``JOBS_PER_CHECKPOINT_CHANGE`` live jobs, up to ``CHECKPOINT_INTERVAL_CAP``
        changes: the manifests stay flat per change, and so does a new reader's replay.
    retention : timedelta
        How long entries and checkpoints stay after a newer checkpoint covers them
        (the history that readers and analytics can still see), at least one second.
        Writers whose view is older than half of it look for a newer checkpoint before
        committing; a commit answered later than that is acknowledged only if no
        checkpoint covers it (else ``CommitUnknownError``), so the clocks of all
        processes must agree to well within half of it.
    payload_cache_bytes : int
        Payload bytes of recent entries kept in memory to answer dequeues.
    part_lifetime : timedelta
        How long a bulk write's part (payloads written beside the queue) may wait to be
        linked: ``stage_parts`` refuses older parts, and compaction deletes a part that no
        job refers to once it is this old (the parts of writes that died, too).
    """

    checkpoint_every: int = 1000
    retention: timedelta = timedelta(hours=1)
    payload_cache_bytes: int = 64 * 1024 * 1024
    part_lifetime: timedelta = timedelta(days=1)

    def interval(self, live_jobs: int) -> int:
        """Return how many changes to leave between checkpoints of ``live_jobs`` jobs."""
        deep = min(live_jobs // JOBS_PER_CHECKPOINT_CHANGE, CHECKPOINT_INTERVAL_CAP)
        return max(self.checkpoint_every, deep)

    def checkpoint_due(self, changes: int, entries: int, live_jobs: int) -> bool:
        """Whether ``changes`` in ``entries`` log entries since the last checkpoint call for the
        next one, with ``live_jobs`` jobs (``interval``, ``ENTRIES_PER_CHECKPOINT``)."""
        if changes < self.interval(live_jobs):
            return False
        return (
            entries >= min(ENTRIES_PER_CHECKPOINT, self.checkpoint_every)
            or changes >= CHECKPOINT_INTERVAL_CAP
        )

    def __post_init__(self) -> None:
        if self.checkpoint_every < 1:
            raise ValueError(f"checkpoint_every must be at least 1, got {self.checkpoint_every}")
        if self.retention < MIN_RETENTION:
            raise ValueError(f"retention must be at least {MIN_RETENTION}, got {span(self.retention)}")
        if self.part_lifetime <= timedelta(0):
            raise ValueError(f"part_lifetime must be positive, got {span(self.part_lifetime)}")
