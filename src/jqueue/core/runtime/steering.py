"""What a handler may raise to steer its job: ``Retry`` after a delay, or ``Fail`` for good; and
what ends a job whose value cannot be its result (``ResultError``)."""

from __future__ import annotations

from datetime import timedelta

from jqueue.domain.spec import checked_span


class HandlerFailure(Exception):  # noqa: N818 - a failure, named as such
    """A handler failure whose message says it all: the worker records the message without
    a traceback (as it does for ``Retry`` and ``Fail``)."""


class Retry(Exception):  # noqa: N818 - the name users of other queues know
    """Raise in a handler to end this attempt and run the job again after ``delay``.

    The attempt counts: a job that has used its last attempt dies as after any failure.

    Parameters
    ----------
    delay : timedelta or None
        How long the job waits before it can be claimed again; None for the usual back-off.
    reason : str
        Recorded as the job's last error.
    """

    def __init__(self, delay: timedelta | None = None, reason: str = "retry requested") -> None:
        if delay is not None:
            checked_span("delay", delay)
        super().__init__(delay, reason)
        self.delay = delay
        self.reason = reason

    def __str__(self) -> str:
        return self.reason


class Fail(Exception):  # noqa: N818 - the name users of other queues know
    """Raise in a handler to send the job to the dead letters at once, whatever attempts it has
    left (its ``dead_reason`` is ``failed``).

    Parameters
    ----------
    reason : str
        Recorded as the job's last error.
    """

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason

    def __str__(self) -> str:
        return self.reason


class ResultError(Exception):
    """What a handler returned cannot be its job's result: not bytes, text or a value JSON can
    hold, not what a typed task's return annotation says, or too large to store. No retry would
    change it: the job is dead at once, with this as its error (as after ``Fail``).

    Parameters
    ----------
    reason : str
        Why it cannot be kept.
    """

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason

    def __str__(self) -> str:
        return f"its result was not kept: {self.reason}"
