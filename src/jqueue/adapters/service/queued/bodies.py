"""The bodies of the queued-compatible API (``/queue/NAME/...``), as queued's clients send them.

MessagePack (queued's own encoding) or JSON, chosen by ``Content-Type`` (requests) and
``Accept`` (responses), as in the native API. Message contents are binary in MessagePack and
text in JSON; ids are integers and poll tags 32-bit integers, as in queued.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import msgspec

from jqueue.adapters.service.server.catalog import Throttle
from jqueue.adapters.service.wire.bodies import MAX_BATCH
from jqueue.domain.spec import LONGEST_SPAN
from jqueue.domain.values import INT64_MAX

LONGEST_SECONDS = int(LONGEST_SPAN.total_seconds())

VisibilitySecs = Annotated[int, msgspec.Meta(ge=-LONGEST_SECONDS, le=LONGEST_SECONDS)]
"""Seconds from now, at most ``LONGEST_SPAN``; as in queued, a negative one means at once."""
MessageId = Annotated[int, msgspec.Meta(ge=0, le=INT64_MAX)]
"""A message id: a job id that is a number of 64 bits (those a push draws are below 2**53)."""
POLL_TAG_BITS = 32
"""queued's poll tags are 32-bit numbers (``parts.tag_of`` maps a lease to one)."""
PollTag = Annotated[int, msgspec.Meta(ge=0, le=2**POLL_TAG_BITS - 1)]
"""A poll tag."""
if TYPE_CHECKING:
    Contents = str | bytes
else:
    Contents = Any
"""Text (JSON, or a MessagePack str) or bytes (a MessagePack bin): msgspec decodes no union of
the two, so the struct takes any value and ``NewMessage`` checks it as it is decoded."""


class NewMessage(msgspec.Struct, forbid_unknown_fields=True):
    """A message to push; it becomes visible after ``visibility_timeout_secs``. Contents that
    are neither text nor bytes fail the decoding of the body (a ``msgspec.ValidationError``:
    400, nothing pushed)."""

    contents: Contents
    visibility_timeout_secs: VisibilitySecs = 0

    def __post_init__(self) -> None:
        if not isinstance(self.contents, str | bytes):  # msgspec reports it as a ValidationError
            raise TypeError(f"contents must be text or binary, not {type(self.contents).__name__}")

    def contents_bytes(self) -> bytes:
        """The contents as bytes (text is UTF-8)."""
        return self.contents.encode() if isinstance(self.contents, str) else self.contents


class PushRequest(msgspec.Struct, forbid_unknown_fields=True):
    """``POST /queue/NAME/messages/push``."""

    messages: list[NewMessage]


class PushResponse(msgspec.Struct):
    """The new messages' ids, in the order pushed."""

    ids: list[int]


class PollRequest(msgspec.Struct, forbid_unknown_fields=True):
    """``POST /queue/NAME/messages/poll``: up to ``count`` visible messages, hidden for
    ``visibility_timeout_secs`` (or until updated or deleted). queued's debugging switch
    ``ignore_existing_visibility_timeouts`` is taken only when false."""

    visibility_timeout_secs: VisibilitySecs
    count: Annotated[int, msgspec.Meta(ge=0, le=MAX_BATCH)] = 1
    ignore_existing_visibility_timeouts: bool | None = None


class PolledMessage(msgspec.Struct):
    """A polled message: ``poll_tag`` is what updates and deletes it (the fields of queued
    0.9, and no others: its clients check them strictly)."""

    contents: Contents
    id: int
    poll_tag: int


class PollResponse(msgspec.Struct):
    """The polled messages (none when nothing is visible)."""

    messages: list[PolledMessage]


class UpdateRequest(msgspec.Struct, forbid_unknown_fields=True):
    """``POST /queue/NAME/messages/update``: make a polled message visible again after
    ``visibility_timeout_secs`` from now."""

    id: MessageId
    poll_tag: PollTag
    visibility_timeout_secs: VisibilitySecs


class UpdateResponse(msgspec.Struct):
    """The poll tag that now updates or deletes the message."""

    new_poll_tag: int


class MessageRef(msgspec.Struct, forbid_unknown_fields=True):
    """A polled message by its id and poll tag."""

    id: MessageId
    poll_tag: PollTag


class DeleteRequest(msgspec.Struct, forbid_unknown_fields=True):
    """``POST /queue/NAME/messages/delete``."""

    messages: list[MessageRef]


class Suspension(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True):
    """Which endpoints are suspended (a request sets only those it names)."""

    push: bool | None = None
    poll: bool | None = None
    update: bool | None = None
    delete: bool | None = None


class ThrottleSetting(msgspec.Struct, forbid_unknown_fields=True):
    """``GET|POST /queue/NAME/throttle``: the poll throttle, or None for none."""

    throttle: Throttle | None


class QueueEntry(msgspec.Struct):
    """A queue in ``GET /queues``."""

    name: str


class QueuesResponse(msgspec.Struct):
    """``GET /queues``: every queue of the root."""

    queues: list[QueueEntry]


class QueueMetrics(msgspec.Struct):
    """``GET /queue/NAME/metrics`` (with ``Accept`` JSON or MessagePack): queued's counters
    of this broker, the messages in the queue and how long the oldest visible one has
    waited. jqueue does not keep queued's two visibility-time gauges; they are 0."""

    empty_poll_counter: int
    message_counter: int
    missing_delete_counter: int
    missing_update_counter: int
    successful_delete_counter: int
    successful_poll_counter: int
    successful_push_counter: int
    successful_update_counter: int
    suspended_delete_counter: int
    suspended_poll_counter: int
    suspended_push_counter: int
    suspended_update_counter: int
    throttled_poll_counter: int
    first_message_visibility_timeout_sec_gauge: int
    last_message_visibility_timeout_sec_gauge: int
    longest_unpolled_message_sec_gauge: int


class QueuedError(msgspec.Struct):
    """The body of a queued answer that is not 2xx."""

    error: str
    error_details: dict[str, str] | None = None


class ApiKeyRequest(msgspec.Struct, forbid_unknown_fields=True):
    """``PUT /api-key/KEY``: the key opens the queues whose names start with ``prefix``."""

    prefix: str


class ApiKey(msgspec.Struct):
    """A key and its prefix."""

    key: str
    prefix: str


class ApiKeysResponse(msgspec.Struct):
    """``GET /api-keys``."""

    keys: list[ApiKey]
