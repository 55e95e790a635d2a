"""The log layout's objects: the marker (the queue's main object), ``GENESIS``, and the names
of log entries and checkpoints beside it.

The **marker** is ``{"layout": "jqueue-log/1"}`` (with ``base`` naming the object that holds
the jobs a migrated queue started with); it says that the state lives in the objects
beside it: ``log/<seq>`` entries and ``checkpoint/<seq>-<micros>`` checkpoints.
"""

from __future__ import annotations

import re

import msgspec

from jqueue.core.formats.wire import UNDECODABLE
from jqueue.domain.errors import CorruptStateError

LAYOUT = "jqueue-log/1"
ENTRY_PREFIX = "log/"
CHECKPOINT_PREFIX = "checkpoint/"
BASE_PREFIX = "base/"
GENESIS = "genesis"
"""The object a new log-structured queue creates before its marker and never deletes: a
marker whose namespace lacks it (and holds no entry or checkpoint) lost its log."""
_SEQ_DIGITS = 20
MAX_SEQ = 2**63 - 1
"""The highest entry number: it fits an int64 and a name's 20 digits."""
_BASE_NAME = re.compile(rf"{BASE_PREFIX}[A-Za-z0-9_-]{{1,200}}")
"""A base object's name, as ``migrate`` makes them (``base/<uuid hex>``)."""


def entry_name(seq: int) -> str:
    """Return the object name of log entry ``seq``."""
    return f"{ENTRY_PREFIX}{seq:0{_SEQ_DIGITS}d}"


def entry_seq(name: str) -> int | None:
    """Return the sequence number of a log entry name, or None for another object."""
    digits = name.removeprefix(ENTRY_PREFIX)
    return int(digits) if len(digits) == _SEQ_DIGITS and digits.isdigit() else None


def checkpoint_name(seq: int, at: int) -> str:
    """Return the object name of a checkpoint of ``seq`` taken at ``at``."""
    return f"{CHECKPOINT_PREFIX}{seq:0{_SEQ_DIGITS}d}-{at}"


def checkpoint_key(name: str) -> tuple[int, int] | None:
    """Return ``(seq, at)`` of a checkpoint name, or None for another object."""
    seq, _, at = name.removeprefix(CHECKPOINT_PREFIX).partition("-")
    if len(seq) != _SEQ_DIGITS or not seq.isdigit() or not at.isdigit():
        return None
    return int(seq), int(at)


class _Marker(msgspec.Struct):
    layout: str
    base: str | None = None


def encode_marker(base: str | None = None) -> bytes:
    """Return the main object's content for a log-structured queue.

    ``base`` names the object holding the jobs a migrated queue started with.
    """
    return msgspec.json.encode(_Marker(LAYOUT, base))


def encode_genesis(at: int) -> bytes:
    """Return the content of the ``GENESIS`` object of a queue created at ``at``."""
    return msgspec.json.encode({"layout": LAYOUT, "created": at})


def decode_marker(data: bytes, location: str = "<bytes>") -> tuple[bool, str | None]:
    """Return whether ``data`` is a log-structured queue's marker, and its base object.

    Raises
    ------
    CorruptStateError
        If it is a marker whose base is not a ``base/<id>`` name beside it (at ``location``).
    """
    try:
        marker = msgspec.json.decode(data, type=_Marker)
    except UNDECODABLE:
        return False, None
    is_log, base = marker.layout == LAYOUT, marker.base
    if is_log and base is not None and not _BASE_NAME.fullmatch(base):
        raise CorruptStateError(location, f"its marker names a base {base[:100]!r} outside the queue")
    return is_log, base
