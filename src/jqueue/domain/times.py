"""Time in the domain: aware UTC datetimes outside, integer epoch microseconds inside."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)
MIN_MICROS = (datetime.min.replace(tzinfo=UTC) - _EPOCH) // _MICROSECOND
MAX_MICROS = (datetime.max.replace(tzinfo=UTC) - _EPOCH) // _MICROSECOND
"""The range of times a ``datetime`` can hold, in microseconds since the epoch."""


class TimeRangeError(ValueError):
    """A time reckoned from stored times falls outside the years 1 to 9999 (damaged state)."""


def checked_time(micros: int, what: str) -> int:
    """Return ``micros`` if a ``datetime`` can hold it, else raise ``TimeRangeError`` naming ``what``.

    The one check of times that are stored, or reckoned from stored times (a lease moved by a
    heartbeat): the queue's store reports it as ``CorruptStateError`` with its location.
    """
    if not MIN_MICROS <= micros <= MAX_MICROS:
        raise TimeRangeError(f"{what} falls outside the years 1 to 9999 ({micros} microseconds since 1970)")
    return micros


def utc_now() -> datetime:
    """Return the current time as an aware UTC datetime."""
    return datetime.now(UTC)


def to_micros(moment: datetime) -> int:
    """Return an aware datetime as integer microseconds since the epoch."""
    return (moment - _EPOCH) // _MICROSECOND


def from_micros(micros: int) -> datetime:
    """Return integer microseconds since the epoch as an aware UTC datetime."""
    return _EPOCH + timedelta(microseconds=micros)


def span_micros(span: timedelta) -> int:
    """Return a span of time as whole microseconds (rounded down)."""
    return span // _MICROSECOND


def span_of(micros: int) -> timedelta:
    """Return a span of microseconds as a ``timedelta``."""
    return timedelta(microseconds=micros)
