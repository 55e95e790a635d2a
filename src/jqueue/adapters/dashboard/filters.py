"""Template filters: ages, times, durations and counts as people read them."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any
from urllib.parse import unquote

from jqueue.domain.errors import headline
from jqueue.domain.figures import readable_span
from jqueue.domain.times import from_micros

NONE = "\N{EN DASH}"
"""What a missing value shows."""


def span(seconds: float | None) -> str:
    """A duration as people read it (``readable_span``): ``0.0123`` -> ``12 ms``."""
    return NONE if seconds is None else readable_span(seconds)


def age(when: datetime | None) -> str:
    """How long ago ``when`` was."""
    if when is None:
        return NONE
    return span(max(0.0, (datetime.now(UTC) - when).total_seconds()))


def ago(epoch_seconds: float) -> str:
    """How long ago an epoch time in seconds was."""
    return age(datetime.fromtimestamp(epoch_seconds, UTC))


def until(when: datetime | None) -> str:
    """How long until ``when`` (``in 3 s``), or how long ago it passed."""
    if when is None:
        return NONE
    left = (when - datetime.now(UTC)).total_seconds()
    return f"in {span(left)}" if left >= 0 else f"{span(-left)} ago"


def clock(when: datetime | int | None) -> str:
    """A UTC time (a datetime or epoch microseconds) as ``2026-11-25 03:04:05 UTC``."""
    if when is None:
        return NONE
    moment = from_micros(when) if isinstance(when, int) else when
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def count(value: int) -> str:
    """``12345`` -> ``12,345``."""
    return f"{value:,}"


def percent(share: float) -> str:
    """``0.0123`` -> ``1.2%``."""
    return f"{share * 100:.1f}%"


ALL: dict[str, Callable[..., Any]] = {
    "span": span,
    "age": age,
    "ago": ago,
    "until": until,
    "clock": clock,
    "count": count,
    "percent": percent,
    "urldecode": unquote,
    "headline": headline,
}
