"""Periodic jobs: one job per tick of a schedule, however many workers run it.

Every worker that has the schedule enqueues each tick's job under an id made from the
entrypoint, the schedule and the tick's time, so the queue keeps one and returns it to the
others (an id the queue knows, live or in its history, is never added twice). A worker that
starts enqueues the latest tick that passed, so a tick that fell while workers restarted
still runs once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, tzinfo
from typing import Any
from zoneinfo import ZoneInfo

from jqueue.domain.errors import JQueueError, missing_extra
from jqueue.domain.spec import POSITIVE_SPAN, JobSpec
from jqueue.domain.times import utc_now
from jqueue.domain.values import checked_text
from jqueue.ports.queue import Queue

logger = logging.getLogger("jqueue.worker")

_NAMESPACE = uuid.UUID("5f0d0f55-8d56-4d1c-9a43-7b0b0a3c2a11")
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
RETRY_PAUSE = 1.0
"""Seconds between tries of a tick's enqueue that the storage refused."""


def _croniter() -> Any:
    try:
        from croniter import croniter  # type: ignore[import-untyped]
    except ImportError as exc:
        raise missing_extra("croniter (for cron schedules)", "cron") from exc
    return croniter


@dataclass(frozen=True)
class Schedule:
    """When a periodic job runs: a cron expression in a time zone, or every so long (ticks at
    whole multiples of ``every`` since the epoch, so that every worker agrees on them).

    Raises
    ------
    ValueError
        For an invalid expression or time zone, a period that is not positive, or neither
        or both of ``expression`` and ``every``.
    """

    entrypoint: str
    payload: bytes
    expression: str | None = None
    every: timedelta | None = None
    tz: tzinfo = UTC
    priority: int = 0

    def __post_init__(self) -> None:
        checked_text("entrypoint", self.entrypoint)
        if (self.expression is None) == (self.every is None):
            raise ValueError("give a cron expression or every=timedelta, not both or neither")
        if self.every is not None:
            POSITIVE_SPAN.check("every", self.every)
        if self.expression is not None and not _croniter().is_valid(self.expression):
            raise ValueError(f"{self.expression!r} is not a cron expression")

    @property
    def name(self) -> str:
        """The schedule as text: the expression and zone, or the period."""
        if self.every is not None:
            return f"every {self.every.total_seconds():g} s"
        return f"{self.expression} {self.tz}"

    def latest(self, now: datetime) -> datetime:
        """The last tick at or before ``now``."""
        if self.every is not None:
            return _EPOCH + (now - _EPOCH) // self.every * self.every
        after = _croniter()(self.expression, now.astimezone(self.tz)).get_prev(datetime)
        following: datetime = _croniter()(self.expression, after).get_next(datetime)
        return following if following <= now else after

    def following(self, tick: datetime) -> datetime:
        """The tick after ``tick``."""
        if self.every is not None:
            return tick + self.every
        found: datetime = _croniter()(self.expression, tick.astimezone(self.tz)).get_next(datetime)
        return found

    def job(self, tick: datetime) -> JobSpec:
        """The job of ``tick``, with the id every worker gives it."""
        moment = tick.astimezone(UTC).isoformat()
        job_id = str(uuid.uuid5(_NAMESPACE, f"{self.entrypoint}\n{self.name}\n{moment}"))
        return JobSpec(self.entrypoint, self.payload, self.priority, id=job_id)


def time_zone(tz: str | tzinfo) -> tzinfo:
    """Return ``tz`` as a time zone (a name such as ``Europe/Paris``, or a ``tzinfo``)."""
    if isinstance(tz, tzinfo):
        return tz
    try:
        return ZoneInfo(tz)
    except (KeyError, ValueError) as exc:
        raise ValueError(f"unknown time zone {tz!r}") from exc


async def run_schedule(queue: Queue, schedule: Schedule, stopping: asyncio.Event) -> None:
    """Enqueue the job of each tick of ``schedule`` into ``queue`` until ``stopping`` is set,
    beginning with the latest tick that passed."""
    tick = schedule.latest(utc_now())
    while not stopping.is_set():
        try:
            await queue.enqueue_many([schedule.job(tick)])  # type: ignore[attr-defined]
        except JQueueError as exc:  # the storage failed: try this tick again shortly
            logger.warning(
                "could not enqueue the %s tick of %s (%s): %s", tick, schedule.entrypoint, schedule.name, exc
            )
            await _sleep_until(stopping, utc_now() + timedelta(seconds=RETRY_PAUSE))
            continue
        tick = schedule.following(tick)
        await _sleep_until(stopping, tick)


async def _sleep_until(stopping: asyncio.Event, moment: datetime) -> None:
    seconds = (moment - utc_now()).total_seconds()
    if seconds > 0:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stopping.wait(), seconds)
