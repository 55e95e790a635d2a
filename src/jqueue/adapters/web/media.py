"""Which media a request sends and wants: JSON or MessagePack, by ``Content-Type`` and
``Accept``; every route of ``jqueue serve`` (both APIs) and the host check answer by it."""

from __future__ import annotations

from collections.abc import Mapping

JSON = "application/json"
MSGPACK = "application/msgpack"
_MSGPACK_TYPES = (MSGPACK, "application/x-msgpack", "application/vnd.msgpack")


def is_msgpack(content_type: str | None) -> bool:
    """Whether a ``Content-Type`` or ``Accept`` value asks for MessagePack."""
    return content_type is not None and content_type.split(";", 1)[0].strip().lower() in _MSGPACK_TYPES


def answer_type(headers: Mapping[str, str]) -> str | None:
    """The media type a request wants its answer in: the first of its ``Accept``, or, when it
    has none (or accepts anything, ``*/*``), its own ``Content-Type``; None if neither says."""
    accept = headers.get("accept", "").split(",", 1)[0].split(";", 1)[0].strip()
    if accept and accept != "*/*":
        return accept
    return headers.get("content-type")


def wants_msgpack(headers: Mapping[str, str]) -> bool:
    """Whether a request wants its answer in MessagePack (see ``answer_type``): every route of
    both APIs answers by this rule."""
    return is_msgpack(answer_type(headers))
