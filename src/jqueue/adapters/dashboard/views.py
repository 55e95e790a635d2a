"""What each page shows, gathered from the queues: plain data for the templates.

A refresh of any page costs O(entrypoints + what it lists) on a queue of any depth: counts
come from the index's tally, the charts and timings from a bounded slice of the history.
"""

from __future__ import annotations

import codecs
import json
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from jqueue.adapters.dashboard.source import QueueSource, ShownQueue, Sighting
from jqueue.domain.figures import Throughput, Timings
from jqueue.domain.models import Job
from jqueue.domain.records import HistoryRecord
from jqueue.domain.stats import COUNTS, EntrypointStats, QueueStats

PREVIEW_BYTES = 4_096
"""The most payload bytes a job's page shows."""
HOUR = timedelta(hours=1)
MINUTE = timedelta(minutes=1)


@dataclass
class QueueSummary:
    """One queue on the overview."""

    name: str
    stats: QueueStats
    throughput: Throughput
    expired_leases: int
    workers: list[Sighting] | None

    @property
    def totals(self) -> EntrypointStats:
        """The counts of every entrypoint added up (``oldest_queued_at``: the oldest of theirs)."""
        total = EntrypointStats()
        for counts in self.stats.entrypoints.values():
            for name in COUNTS:
                setattr(total, name, getattr(total, name) + getattr(counts, name))
            oldest = counts.oldest_queued_at
            if oldest is not None and (total.oldest_queued_at is None or oldest < total.oldest_queued_at):
                total.oldest_queued_at = oldest
        return total


async def queue_summary(source: QueueSource, name: str) -> QueueSummary:
    """Gather what the overview and the queue page show of queue ``name``."""
    queue = await source.get(name)
    stats = await queue.stats()
    found = await queue.insight.throughput(HOUR, MINUTE)
    expired = (await queue.insight.commit_stats()).expired_leases
    return QueueSummary(name, stats, found, expired, source.workers(name))


@dataclass
class EntrypointRow:
    """One entrypoint on the queue page: its counts now and how its newest jobs went."""

    name: str
    counts: EntrypointStats
    timings: Timings
    per_minute: list[int]
    paused: bool
    throttle: tuple[int, float] | None


def entrypoint_rows(summary: QueueSummary, timings: dict[str, Timings]) -> list[EntrypointRow]:
    """Return a row per entrypoint that has jobs now or in the history."""
    stats = summary.stats
    names = sorted(set(stats.entrypoints) | set(timings) | set(summary.throughput.per_entrypoint))
    buckets = len(summary.throughput.acked)
    return [
        EntrypointRow(
            name,
            stats.entrypoints.get(name, EntrypointStats()),
            timings.get(name, Timings()),
            summary.throughput.per_entrypoint.get(name, [0] * buckets),
            name in stats.paused_claims,
            stats.throttles.get(name),
        )
        for name in names
    ]


@dataclass
class Preview:
    """A payload as the job page shows it."""

    kind: str
    text: str
    size: int
    truncated: bool


def preview(payload: bytes) -> Preview:
    """Return ``payload`` as pretty JSON, text, or hex, cut at ``PREVIEW_BYTES``."""
    head, truncated = payload[:PREVIEW_BYTES], len(payload) > PREVIEW_BYTES
    try:  # a character cut in two at the end of a truncated payload is left out
        text = codecs.getincrementaldecoder("utf-8")().decode(head, final=not truncated)
    except UnicodeDecodeError:
        return Preview("hex", head.hex(" ", 1), len(payload), truncated)
    if not truncated:
        try:
            return Preview(
                "json", json.dumps(json.loads(text), indent=2, ensure_ascii=False), len(payload), False
            )
        except ValueError:
            pass
    printable = all(ch.isprintable() or ch in "\n\r\t" for ch in text)
    if not printable:
        return Preview("hex", head.hex(" ", 1), len(payload), truncated)
    return Preview("text", text, len(payload), truncated)


@dataclass
class JobDetail:
    """A job's page: the live job, or only its history record once it finished."""

    job_id: str
    job: Job | None
    finished: HistoryRecord | None
    payload: Preview | None = None
    claims: list[str] = field(default_factory=list)
    result: Preview | None = None


async def job_detail(queue: ShownQueue, job_id: str) -> JobDetail:
    """Gather a job's page."""
    job = await queue.find(job_id)
    finished = await queue.finished(job_id)
    detail = JobDetail(job_id, job, finished)
    if job is not None:
        detail.payload = preview(job.payload)
    if finished is not None and finished.result is not None:
        detail.result = preview(finished.result)
    return detail


def result_line(record: HistoryRecord) -> str | None:
    """The start of a finished job's result, on one line (its size, if it is not text)."""
    if record.result is None:
        return None
    shown = preview(record.result)
    return f"<{shown.size} bytes>" if shown.kind == "hex" else " ".join(shown.text.split())[:60]


@dataclass
class PeriodicRow:
    """A periodic job on the periodic page, as the workers that have it last reported it, and
    the state of the job of its last tick."""

    queue: str
    entrypoint: str
    schedule: str
    workers: int
    live: bool
    last_tick: datetime
    next_tick: datetime
    last_job: str
    state: str


async def periodic_rows(source: QueueSource) -> list[PeriodicRow] | None:
    """Return a row per periodic job of the workers seen lately (None if none can be seen)."""
    rows: dict[tuple[str, str, str], PeriodicRow] = {}
    for name in await source.names():
        sightings = source.workers(name)
        if sightings is None:
            return None
        for seen in sightings:
            for tick in seen.report.periodic if seen.report else []:
                key = (name, tick.entrypoint, tick.schedule)
                first = PeriodicRow(*key, 0, False, tick.last_tick, tick.next_tick, tick.last_job, "")
                row = rows.setdefault(key, first)
                if tick.last_tick > row.last_tick:
                    row.last_tick, row.next_tick, row.last_job = tick.last_tick, tick.next_tick, tick.last_job
                row.workers += 1
                row.live = row.live or not seen.stale
    for row in rows.values():
        queue = await source.get(row.queue)
        job = await queue.find(row.last_job)
        finished = None if job is not None else await queue.finished(row.last_job)
        row.state = str(job.status if job else finished.outcome if finished else "not enqueued")
    return sorted(rows.values(), key=lambda row: (row.queue, row.entrypoint, row.schedule))
