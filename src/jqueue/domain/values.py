"""Checks on the values a caller hands to a queue, made before anything is committed.

Names (entrypoints, dedup keys, bulk write names) must be text that every wire format can
store, so one bad name fails its own call and never the commit it would share; error text
is recorded whatever it holds, with what cannot be stored replaced.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


@dataclass(frozen=True)
class Bounds:
    """The range of a value a caller hands over, declared once beside the value and read by its
    check (``check``) and by every wire form that restates it (as constraints of its type).

    Attributes
    ----------
    ge, gt, le : int, timedelta or None
        Inclusive lower, exclusive lower and inclusive upper bounds of a number or a span.
    min_length, max_length : int or None
        The shortest and the longest text, in characters, or list or tuple, in items.
    """

    ge: Any = None
    gt: Any = None
    le: Any = None
    min_length: int | None = None
    max_length: int | None = None

    @property
    def given(self) -> bool:
        """Whether any bound is given."""
        return any(v is not None for v in (self.ge, self.gt, self.le, self.min_length, self.max_length))

    def check(self, name: str, value: Any) -> None:
        """Raise ``ValueError`` naming ``name`` if ``value`` is out of range: a text, list or tuple by
        its length when the bounds bound one (else by value, so that one given for a number fails
        as comparing it does)."""
        if isinstance(value, str | list | tuple) and (
            self.min_length is not None or self.max_length is not None
        ):
            shortest, longest = self.min_length or 0, self.max_length
            if len(value) < shortest or (longest is not None and len(value) > longest):
                wanted = f"at least {shortest}" if longest is None else f"{shortest} to {longest}"
                if isinstance(value, str):
                    unit = "character" if (longest or shortest) == 1 else "characters"
                    raise ValueError(f"{name} must be {wanted} {unit}, got {len(value)}")
                wanted = f"at most {longest}" if not shortest and longest is not None else wanted
                raise ValueError(f"{name} must hold {wanted} items, got {len(value)}")
            return
        if value != value and (self.ge, self.gt, self.le) != (None, None, None):  # NaN: no comparison fails
            raise ValueError(f"{name} must be a number, got nan")
        if self.ge is not None and value < self.ge:
            word = "not be negative" if not self.ge else f"be at least {_shown(self.ge)}"
            raise ValueError(f"{name} must {word}, got {_shown(value)}")
        if self.gt is not None and value <= self.gt:
            word = "positive" if not self.gt else f"more than {_shown(self.gt)}"
            raise ValueError(f"{name} must be {word}, got {_shown(value)}")
        if self.le is not None and value > self.le:
            raise ValueError(f"{name} must be at most {_shown(self.le)}, got {_shown(value)}")


def _shown(value: Any) -> str:
    if isinstance(value, timedelta):
        days = value.days
        return f"{days} days" if value == timedelta(days=days) and days > 1 else span(value)
    return str(value)


def checked_text(name: str, value: object) -> str:
    """Return ``value`` if it is a string that UTF-8 can encode, else raise ``ValueError``."""
    if not isinstance(value, str):
        raise ValueError(f"{name} must be a string, got {type(value).__name__}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(f"{name} {value!r} is not valid Unicode text ({exc.reason})") from None
    return value


def checked_int64(name: str, value: object) -> int:
    """Return ``value`` if it is an int that fits in 64 bits (signed), else raise ``ValueError``."""
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValueError(f"{name} must be an integer, got {type(value).__name__}")
    if not INT64_MIN <= value <= INT64_MAX:
        raise ValueError(f"{name} {value} does not fit in 64 bits")
    return value


def storable_text(text: str) -> str:
    """Return ``text`` with what UTF-8 cannot encode (lone surrogates) written as escapes."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


def span(value: timedelta) -> str:
    """Return a duration for a message, in seconds (``-5 s``, not ``-1 day, 23:59:55``)."""
    return f"{value.total_seconds():g} s"


MAX_NOTE_CHARS = 1_000
"""A progress note is cut to this many characters."""


def checked_progress(fraction: object, note: object = None) -> tuple[float, str | None]:
    """Return a progress report as stored: ``fraction`` a number from 0 to 1, ``note`` text cut
    to ``MAX_NOTE_CHARS``; else raise ``ValueError``."""
    if isinstance(fraction, bool) or not isinstance(fraction, int | float):
        raise ValueError(f"progress must be a number from 0 to 1, got {type(fraction).__name__}")
    if not 0 <= fraction <= 1:  # NaN fails this too
        raise ValueError(f"progress must be a number from 0 to 1, got {fraction}")
    if note is None:
        return float(fraction), None
    if not isinstance(note, str):
        raise ValueError(f"a progress note must be a string, got {type(note).__name__}")
    return float(fraction), storable_text(note[:MAX_NOTE_CHARS])
