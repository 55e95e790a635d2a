"""Jobs whose numeric ids are drawn inside their commit, so that each id is free when it lands.

An id chosen before a commit can name a job that is already in the queue (the source of ids
restarted, or another writer took that number), and an add of a known id adds nothing: it
answers with the job that holds it. ``numbering`` draws the ids in the commit's operation
instead, which runs on the current index under the compare-and-swap: a candidate that the
index knows (a live job, or one its history holds) or that an earlier job of the same round
took is skipped, so every job is added, whatever the source of ids remembers.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime, timedelta

from jqueue.core.commits import Operation
from jqueue.domain.effects import Added
from jqueue.domain.index import QueueIndex
from jqueue.domain.times import span_micros, to_micros, utc_now

IdSource = Callable[[], int]
"""Returns a new candidate id at each call, never one it returned before."""

ID_EPOCH = datetime(2025, 1, 1, tzinfo=UTC)
"""Time-ordered ids count seconds from here."""
COUNTER_BITS = 20
"""A time-ordered id is its second above this many bits of a counter (a million ids a second)."""
MAX_SAFE_ID = 2**53 - 1
"""The largest id handed out: JSON clients in JavaScript read every number up to it exactly
(seconds take 33 bits, 272 years from ``ID_EPOCH``)."""


class TimeOrderedIds:
    """Candidate ids, increasing in this process and roughly ordered by time: the seconds since
    ``ID_EPOCH`` above ``COUNTER_BITS`` bits of a counter. A burst of more ids than that in a
    second borrows from the next seconds, so a call never waits.

    Parameters
    ----------
    clock : callable
        Returns the time in seconds since the Unix epoch (``time.time`` by default).
    """

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._last = -1

    def __call__(self) -> int:
        """Return the next candidate id (larger than every earlier one)."""
        second = int(self._clock() - ID_EPOCH.timestamp())
        self._last = max(self._last + 1, max(0, second) << COUNTER_BITS)
        if self._last > MAX_SAFE_ID:
            raise OverflowError(f"time-ordered ids end at {MAX_SAFE_ID}")
        return self._last


def numbering(
    new: list[Added], retention: timedelta, ids: IdSource, max_bytes: int | None = None
) -> Operation[list[Added]]:
    """Return the operation that adds ``new`` jobs (their ids are replaced), each under an id
    drawn from ``ids`` that no job of the index has and no earlier job of ``new`` took; it
    returns the jobs added, in order.

    The loop is bounded: candidates are distinct, so at most as many are skipped as the index
    knows ids (live jobs and history records) plus the jobs of ``new``.
    """

    def operation(index: QueueIndex) -> list[Added]:
        tries = len(index) + len(index.history) + len(new) + 1
        taken: set[str] = set()
        numbered: list[Added] = []
        for job in new:
            candidate = _free_id(index, taken, ids, tries)
            taken.add(candidate)
            numbered.append(replace(job, id=candidate))
        found, _ = index.add(numbered, to_micros(utc_now()), span_micros(retention), max_bytes=max_bytes)
        # its id is free, so a job answered under another id was matched by its dedup key
        if any(answer.job_id != job.id for job, answer in zip(numbered, found, strict=True)):
            raise RuntimeError("a job under a free id was not added (its dedup key is held)")
        return numbered

    return operation


def _free_id(index: QueueIndex, taken: set[str], ids: IdSource, tries: int) -> str:
    for _ in range(tries):
        candidate = str(ids())
        if candidate not in taken and index.known(candidate) is None:
            return candidate
    raise RuntimeError("the id source repeats itself: no free id found")
