"""The pieces of the queued-compatible API that hold no route: poll tags, the poll throttle's
windows, messages as polled and queued's error bodies."""

from __future__ import annotations

import time
from datetime import timedelta

from jqueue.adapters.service.answers import HTTPError, error_of
from jqueue.adapters.service.catalog import Throttle
from jqueue.adapters.service.host import UnknownQueueError
from jqueue.adapters.service.queued_wire import PolledMessage, QueuedError
from jqueue.core.queue import lease_number, lease_of_number
from jqueue.domain.models import Job, fencing_job

QUEUED_ENTRYPOINT = "queued"
"""The entrypoint of the jobs that the queued routes push and poll."""
_QUEUED_CODES = {
    "unauthorized": "NotAuthorized",
    "queue_not_found": "QueueNotFound",
    "message_not_found": "MessageNotFound",
    "suspended": "Suspended",
    "throttled": "Throttled",
    "queue_exists": "QueueAlreadyExists",
    "not_found": "NotFound",
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


def message_of(job: Job, text: bool) -> PolledMessage | None:
    """Return a polled job as a queued message (contents as text when ``text``), or None if
    its id or lease is not a number (a job added by other means)."""
    tag = None if job.lease is None else lease_number(job.lease)
    if not job.id.isdigit() or tag is None:
        return None
    contents: str | bytes = job.payload
    if text:
        try:
            contents = job.payload.decode()
        except UnicodeDecodeError:
            raise HTTPError(406, "binary_contents", "a message is binary: poll it with MessagePack") from None
    return PolledMessage(contents, int(job.id), tag)


def seconds(visibility_timeout_secs: int) -> timedelta:
    """queued's visibility timeout as a span (a negative one is none)."""
    return timedelta(seconds=max(0, visibility_timeout_secs))


def held(message_id: int, poll_tag: int) -> Job:
    """The argument that fences a call with the lease whose number is ``poll_tag``."""
    return fencing_job(str(message_id), lease_of_number(poll_tag))


def queued_error(exc: BaseException) -> tuple[int, QueuedError]:
    """Return the status and queued's body that report ``exc``."""
    if isinstance(exc, UnknownQueueError):
        return 404, QueuedError("QueueNotFound")
    status, body = error_of(exc)
    code = _QUEUED_CODES.get(body.code) or "".join(part.title() for part in body.code.split("_"))
    details: dict[str, str] = {"message": body.message}
    if body.broker is not None:
        details["broker"] = body.broker
    return status, QueuedError(code, details)
