"""A queue's policy for its jobs' lifecycle: attempts, back-off between them, time to live, history."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from datetime import timedelta

from jqueue.domain.spec import ATTEMPTS, POSITIVE_SPAN
from jqueue.domain.values import Bounds

HISTORY_LIMIT = Bounds(ge=0)
"""The bounds of ``QueuePolicy.history_limit`` (0 keeps no history)."""


@dataclass(frozen=True)
class Backoff:
    """Exponential back-off with jitter between the attempts of a failing job.

    After attempt ``n`` the job waits ``min(maximum, initial * multiplier ** (n - 1))``,
    of which the fraction ``jitter`` is random (``jitter=1`` is full jitter).

    Attributes
    ----------
    initial : timedelta
        The wait after the first failed attempt.
    multiplier : float
        How much longer each further wait is.
    maximum : timedelta
        The longest wait.
    jitter : float
        The random part of each wait, from 0 (none) to 1.
    """

    initial: timedelta = timedelta(seconds=1)
    multiplier: float = 2.0
    maximum: timedelta = timedelta(minutes=10)
    jitter: float = 0.5

    def __post_init__(self) -> None:
        if self.initial < timedelta(0) or self.maximum < self.initial:
            raise ValueError("a back-off needs 0 <= initial <= maximum")
        if self.multiplier < 1 or not 0 <= self.jitter <= 1:
            raise ValueError("a back-off needs multiplier >= 1 and 0 <= jitter <= 1")

    def delay(self, attempts: int, rng: random.Random | None = None) -> timedelta:
        """Return the wait after ``attempts`` attempts (at least 1)."""
        growth = self.multiplier ** min(max(attempts, 1) - 1, 64)
        ceiling = min(self.maximum.total_seconds(), self.initial.total_seconds() * growth)
        spread = (rng or random).uniform(1 - self.jitter, 1)
        return timedelta(seconds=ceiling * spread)


@dataclass(frozen=True)
class QueuePolicy:
    """A queue's defaults for its jobs' lifecycle; the defaults behave as the documented jqueue.

    Attributes
    ----------
    max_attempts : int or None
        Claims a job may take: a failure (``nack``, an expired lease) after the last
        one makes it dead. A job's own ``max_attempts`` wins. None: no limit.
    backoff : Backoff or None
        How long a ``nack``-ed job waits before it can be claimed again, unless the
        ``nack`` gives a delay. None: no wait.
    ttl : timedelta or None
        Jobs enqueued without a ``ttl`` die (reason ``ttl``) instead of being claimed
        once they are this old. None: no limit.
    history_retention : timedelta
        How long records of finished jobs are kept (and dedup keys of acked jobs
        remembered).
    history_limit : int
        The most history records kept; the oldest go first. 0 keeps none.
    staged_timeout : timedelta
        A bulk write whose staged jobs are older than this is taken to be abandoned (its
        writer died before publishing it): the next commit discards it.
    """

    max_attempts: int | None = None
    backoff: Backoff | None = None
    ttl: timedelta | None = None
    history_retention: timedelta = timedelta(days=1)
    history_limit: int = 10_000
    staged_timeout: timedelta = timedelta(hours=1)
    _rng: random.Random = field(default_factory=random.Random, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.max_attempts is not None:
            ATTEMPTS.check("max_attempts", self.max_attempts)
        if self.ttl is not None:
            POSITIVE_SPAN.check("ttl", self.ttl)
        POSITIVE_SPAN.check("history_retention", self.history_retention)
        POSITIVE_SPAN.check("staged_timeout", self.staged_timeout)
        HISTORY_LIMIT.check("history_limit", self.history_limit)

    def retry_delay(self, attempts: int) -> timedelta | None:
        """Return how long a job that failed after ``attempts`` attempts waits; None for no wait."""
        return None if self.backoff is None else self.backoff.delay(attempts, self._rng)
