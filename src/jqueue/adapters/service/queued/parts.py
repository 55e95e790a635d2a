"""The pieces of the queued-compatible API that hold no route: poll tags, the poll throttle's
windows, messages as polled and queued's error bodies."""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta

from jqueue.adapters.service.queued.bodies import POLL_TAG_BITS, PolledMessage, QueuedError
from jqueue.adapters.service.server.catalog import Throttle
from jqueue.adapters.service.server.endpoints import error_of
from jqueue.adapters.service.wire.bodies import MAX_BATCH
from jqueue.adapters.service.wire.error_codes import (
    MESSAGE_NOT_FOUND,
    NOT_FOUND,
    QUEUE_EXISTS,
    QUEUE_NOT_FOUND,
    SUSPENDED,
    THROTTLED,
    UNAUTHORIZED,
)
from jqueue.adapters.web.queue_names import UnknownQueueError
from jqueue.core.queue import JobQueue
from jqueue.domain.errors import JobNotFoundError, LeaseLostError
from jqueue.domain.models import Job, fencing_job
from jqueue.domain.schema import JobForm

QUEUED_ENTRYPOINT = "queued"
"""The entrypoint of the messages that the queued routes push and poll whose contents are text."""
BINARY_ENTRYPOINT = "queued-binary"
"""The entrypoint of pushed messages whose contents are not UTF-8 text: only MessagePack polls
claim them, so that a JSON poll never claims what it cannot answer with."""
MESSAGE_ENTRYPOINTS = (QUEUED_ENTRYPOINT, BINARY_ENTRYPOINT)
"""What a MessagePack poll claims: every message, in the order pushed."""
SCAN_LIMIT = MAX_BATCH
"""The most jobs a JSON poll claims to find its text messages behind binary ones."""
_QUEUED_CODES = {
    UNAUTHORIZED.code: "NotAuthorized",
    QUEUE_NOT_FOUND.code: "QueueNotFound",
    MESSAGE_NOT_FOUND.code: "MessageNotFound",
    SUSPENDED.code: "Suspended",
    THROTTLED.code: "Throttled",
    QUEUE_EXISTS.code: "QueueAlreadyExists",
    NOT_FOUND.code: "NotFound",
}
"""queued's name of each error code it shares with jqueue; the others are spelt alike."""


class PollWindows:
    """Counts poll requests per queue in fixed windows, for the throttle."""

    def __init__(self) -> None:
        self._windows: dict[str, tuple[int, int]] = {}

    def admit(self, queue: str, throttle: Throttle | None) -> bool:
        """Count one poll of ``queue``; False if ``throttle`` allows no more in this window."""
        if throttle is None:
            return True
        window = int(time.time() // throttle.time_window_sec)
        current, count = self._windows.get(queue, (window, 0))
        if current != window:
            count = 0
        if count >= throttle.max_polls_per_time_window:
            return False
        self._windows[queue] = (window, count + 1)
        return True


def is_text(contents: bytes) -> bool:
    """Whether message contents are UTF-8 text (what a JSON answer can carry)."""
    try:
        contents.decode()
    except UnicodeDecodeError:
        return False
    return True


def entrypoint_of(contents: str | bytes) -> str:
    """The entrypoint of a pushed message: ``BINARY_ENTRYPOINT`` for contents that are not text."""
    text = isinstance(contents, str) or is_text(contents)
    return QUEUED_ENTRYPOINT if text else BINARY_ENTRYPOINT


async def claim_text(queue: JobQueue, count: int, visibility: timedelta) -> list[Job]:
    """Claim up to ``count`` messages whose contents are text, for a JSON poll, in order.

    A push files binary contents under ``BINARY_ENTRYPOINT``, but a job of ``QUEUED_ENTRYPOINT``
    added by other means (or before that) may be binary: it is held while the poll claims
    more behind it (each round at least as many as it held, up to ``SCAN_LIMIT`` in all),
    then released for a MessagePack poller with what was claimed past ``count``.
    """
    text: list[Job] = []
    held: list[Job] = []
    ask = count
    while ask > 0:
        jobs = await queue.dequeue(QUEUED_ENTRYPOINT, batch_size=ask, visibility_timeout=visibility)
        for job in jobs:
            (text if is_text(job.payload) else held).append(job)
        if len(jobs) < ask or len(text) >= count:
            break
        ask = min(max(count - len(text), len(held)), SCAN_LIMIT - len(text) - len(held))
    held += text[count:]
    released = await asyncio.gather(*(queue.release(job) for job in held), return_exceptions=True)
    for outcome in released:  # a lease that ran out already (a poll of visibility 0) needs none
        if isinstance(outcome, BaseException) and not isinstance(outcome, LeaseLostError | JobNotFoundError):
            raise outcome
    return text[:count]


_TAG_DIGITS = POLL_TAG_BITS // 4
"""A poll tag is the first 32 bits of the claim's lease: its first 8 hexadecimal digits."""


def tag_of(lease: str) -> int | None:
    """The poll tag of a lease: its first ``POLL_TAG_BITS`` bits (None for a lease that is not
    hexadecimal, made by other means)."""
    try:
        return int(lease[:_TAG_DIGITS], 16)
    except ValueError:
        return None


def poll_tag(job: Job) -> int | None:
    """A claimed job's poll tag (None if it has no lease that makes one)."""
    return None if job.lease is None else tag_of(job.lease)


def message_of(job: Job, text: bool) -> PolledMessage | None:
    """Return a polled job as a queued message (contents as text when ``text``: the caller
    claimed text alone), or None if its id or lease is not a number (added by other means)."""
    return _message(job.id, job.payload.decode() if text else job.payload, job.lease)


def _message(job_id: str, contents: bytes | str, lease: str | None) -> PolledMessage | None:
    tag = None if lease is None else tag_of(lease)
    if not job_id.isdigit() or tag is None:
        return None
    return PolledMessage(contents, int(job_id), tag)


Polled = tuple[str, str | None, PolledMessage | None]
"""A claimed job as a binary poll answers it: its id, its lease, and its message (None for a job
added by other means, which the poll files among the dead letters)."""
POLLED_FORM: JobForm[Polled] = JobForm(
    lambda record, payload: (record.id, record.lease, _message(record.id, payload, record.lease)),
    lambda job: (job.id, job.lease, message_of(job, False)),
)
"""A binary poll's answers, made from the claimed records (``JobQueue.dequeue_as``)."""
PUSHED_FORM: JobForm[int] = JobForm(lambda record, _: int(record.id), lambda job: int(job.id))
"""A push's answers: each new message's id (a number: ``enqueue_numbered`` draws them)."""


def seconds(visibility_timeout_secs: int) -> timedelta:
    """queued's visibility timeout as a span (a negative one is none)."""
    return timedelta(seconds=max(0, visibility_timeout_secs))


async def held(queue: JobQueue, message_id: int, poll_tag: int) -> Job:
    """The argument that fences a call on message ``message_id`` with the lease whose poll tag is
    ``poll_tag``: the claim's lease as this broker knows it, if its tag is ``poll_tag``; else a
    lease no claim has, which the commit refuses as a lost lease. The commit checks the lease
    it is given, so a claim this broker has not seen yet fails as lost too."""
    lease = await queue.known_lease(str(message_id))
    if lease is None or tag_of(lease) != poll_tag:
        lease = f"poll-tag-{poll_tag}"
    return fencing_job(str(message_id), lease)


def queued_error(exc: BaseException) -> tuple[int, QueuedError]:
    """Return the status and queued's body that report ``exc``."""
    if isinstance(exc, UnknownQueueError):
        return QUEUE_NOT_FOUND.status, QueuedError(_QUEUED_CODES[QUEUE_NOT_FOUND.code])
    status, body = error_of(exc)
    code = _QUEUED_CODES.get(body.code) or "".join(part.title() for part in body.code.split("_"))
    details: dict[str, str] = {"message": body.message}
    if body.broker is not None:
        details["broker"] = body.broker
    return status, QueuedError(code, details)
