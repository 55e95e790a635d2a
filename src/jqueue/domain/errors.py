"""The jqueue exception hierarchy.

``JQueueError`` is the base of every error jqueue raises on purpose::

    JQueueError
    ├── CASConflictError      a conditional write lost its race
    ├── JobNotFoundError      an unknown job id (``.job_id``)
    ├── LeaseLostError        a fenced call whose lease is no longer the job's (``.job_id``)
    ├── StorageError          the backend failed (``.cause``)
    │   └── CommitUnknownError  a commit that may or may not count (``.location``)
    ├── CorruptStateError     the stored object is not a jqueue state (``.location``)
    ├── PayloadTooLargeError  a payload over the queue's limit (``.size``, ``.limit``, ``.job_id``)
    ├── InvalidURLError       a storage URL jqueue cannot use (``.url``)
    ├── QueuePausedError      an enqueue while enqueues of its entrypoint are paused
    ├── NotOwnerError         a broker's commit to a queue another broker took over (``.owner``)
    └── QueueClosedError      an operation on a stopped queue
"""

from __future__ import annotations

from pathlib import Path


class JQueueError(Exception):
    """Base class of all jqueue errors."""


class CASConflictError(JQueueError):
    """A compare-and-swap write was rejected because the object changed since it was read."""


TRACEBACK_START = "Traceback (most recent call last):"


def headline(error: str) -> str:
    """The line of a job's error that says what failed: its first line (a worker records the
    exception's type and message there, then the traceback), or, for an error that is a bare
    traceback, its last; "" for a blank error."""
    lines = [line.strip() for line in error.splitlines() if line.strip()]
    if not lines:
        return ""
    return lines[-1] if lines[0].startswith(TRACEBACK_START) else lines[0]


class JobFailedError(JQueueError):
    """The job whose result was asked for died instead of being acked.

    Attributes
    ----------
    job_id : str
        The job.
    error : str or None
        Its last error (with the traceback a worker recorded).
    reason : str or None
        Why it died: ``max_attempts``, ``ttl`` or ``failed``.
    """

    def __init__(self, job_id: str, error: str | None, reason: str | None) -> None:
        self.job_id, self.error, self.reason = job_id, error, reason
        super().__init__(f"job {job_id!r} died ({reason}): {headline(error or '') or 'no error recorded'}")


class JobCancelledError(JQueueError):
    """The job was cancelled: a heartbeat of a job whose cancel was asked for (its worker
    stops the handler), or the result of a job that ended cancelled.

    Attributes
    ----------
    job_id : str
        The job.
    reason : str or None
        Why, when the queue recorded a reason (its parent failed, its workflow was cancelled);
        None for a plain ``cancel``.
    """

    def __init__(self, job_id: str, reason: str | None = None) -> None:
        self.job_id = job_id
        self.reason = reason
        super().__init__(f"job {job_id!r} was cancelled" + ("" if reason is None else f": {reason}"))


class JobNotFoundError(JQueueError):
    """No job with this id is in the queue state.

    Attributes
    ----------
    job_id : str
        The id that was looked up.
    """

    def __init__(self, job_id: str) -> None:
        self.job_id = job_id
        super().__init__(f"job {job_id!r} is not in the queue")


class LeaseLostError(JQueueError):
    """A call fenced with a claim's lease came after that lease was lost.

    The job was acked or requeued by someone else, or its lease expired and it was
    claimed again. Nothing was changed.

    Attributes
    ----------
    job_id : str
        The job the call was about.
    """

    def __init__(self, job_id: str) -> None:
        self.job_id = job_id
        super().__init__(f"the lease on job {job_id!r} was lost")


class StorageError(JQueueError):
    """The storage backend failed for a reason other than a lost CAS race.

    Attributes
    ----------
    cause : Exception
        The backend's own exception.
    """

    def __init__(self, message: str, cause: Exception) -> None:
        self.cause = cause
        super().__init__(f"{message}: {cause}")


class CommitUnknownError(StorageError):
    """A commit answered too late to tell whether readers will see it; it was not acknowledged.

    The create of a log entry answered more than half the retention after the writer last
    saw the end of the log, and a checkpoint covers the entry's number: compaction may have
    deleted an earlier entry of that number meanwhile, and then no reader sees this one.
    Repeat the call with the same job ids (``JobSpec.id``) or dedup keys, so that a commit
    that did count is not doubled.

    Attributes
    ----------
    location : str
        The entry whose create answered late.
    """

    def __init__(self, location: str, detail: str) -> None:
        self.location = location
        super().__init__(f"the outcome of the commit of {location} is unknown", TimeoutError(detail))


class CorruptStateError(JQueueError):
    """The stored object cannot be read as a jqueue state; jqueue will not overwrite it.

    Attributes
    ----------
    location : str
        Where the object lives (a URL such as ``s3://bucket/key``).
    detail : str
        What is wrong with it.
    """

    def __init__(self, location: str, detail: str) -> None:
        self.location = location
        self.detail = detail
        super().__init__(f"the object at {location} is not a jqueue state ({detail}); it was left untouched")


class PayloadTooLargeError(JQueueError, ValueError):
    """A payload is larger than the queue accepts.

    Attributes
    ----------
    size : int
        The payload's size in bytes.
    limit : int
        The queue's limit in bytes.
    job_id : str or None
        The waiting job whose parents' results, summed, would be ``size`` bytes (None: the
        payload or result of the call itself).
    """

    def __init__(self, size: int, limit: int, job_id: str | None = None) -> None:
        self.size = size
        self.limit = limit
        self.job_id = job_id
        if job_id is None:
            super().__init__(f"payload of {size} bytes exceeds the limit of {limit} bytes")
        else:
            super().__init__(
                f"the results of job {job_id}'s parents would be {size} bytes, "
                f"over the limit of {limit} bytes"
            )


class InvalidURLError(JQueueError, ValueError):
    """A storage URL is malformed or names an unknown scheme.

    Attributes
    ----------
    url : str
        The URL as given.
    """

    def __init__(self, url: str, reason: str) -> None:
        self.url = url
        super().__init__(f"invalid storage URL {url!r}: {reason}")


class QueueClosedError(JQueueError):
    """An operation was submitted to a queue that is not running."""


class QueuePausedError(JQueueError):
    """An enqueue was refused because enqueues of its entrypoint (or the whole queue) are paused.

    Attributes
    ----------
    entrypoint : str
        The entrypoint of the refused job.
    """

    def __init__(self, entrypoint: str) -> None:
        self.entrypoint = entrypoint
        super().__init__(f"enqueues of {entrypoint!r} are paused")


class NotOwnerError(JQueueError):
    """A broker's call on a queue that another broker owns now: it took the queue over (an
    ``Owned`` entry in its log), so this one's commits are refused and nothing was changed. The
    call is for the owner: a client sends it again there.

    Attributes
    ----------
    owner : str or None
        The id of the broker that owns the queue (None: no broker took it).
    """

    def __init__(self, owner: str | None) -> None:
        self.owner = owner
        super().__init__(f"the queue is owned by broker {owner!r}, not by this one")


class ServiceError(JQueueError):
    """``jqueue serve`` answered a call with an error that has no class of its own here, or
    could not be asked.

    Attributes
    ----------
    status : int
        The HTTP status (0 when there was no answer).
    code : str
        The stable code of the error. Without an answer: ``"unreachable"`` (no connection:
        nothing was sent), ``"no_answer"`` (sent, and the call may have landed) or
        ``"no_broker"`` (no broker is registered for the root).
    broker : str or None
        For ``"not_broker"``, the URL of the broker to call instead, when known.
    transient : bool
        Whether the failure may pass by itself: no answer (status 0) or 503 (no broker
        serving yet, the service's storage failing or contended, the service closing).
    """

    def __init__(self, status: int, code: str, message: str, broker: str | None = None) -> None:
        self.status = status
        self.code = code
        self.broker = broker
        super().__init__(f"{code} ({status}): {message}" if status else f"{code}: {message}")

    @property
    def transient(self) -> bool:
        """Whether the failure may pass by itself (see the class's attributes)."""
        return self.status in (0, 503)


def is_transient(exc: BaseException) -> bool:
    """Whether ``exc`` is a failure that a worker outlives for a while, retrying: the storage
    failed or stayed contended (``StorageError``, ``CASConflictError``), or the service could
    not be asked or could not serve (a transient ``ServiceError``)."""
    if isinstance(exc, StorageError | CASConflictError):
        return True
    return isinstance(exc, ServiceError) and exc.transient


def missing_extra(module: str, extra: str) -> ImportError:
    """Return the ImportError of an optional dependency that is not installed: it names the
    extra of this jqueue that brings it, installed from its checkout or a wheel built there
    (the ``jqueue`` on the public package index is another project)."""
    checkout = Path(__file__).resolve().parents[3]  # src/jqueue/domain/errors.py in a checkout
    where = str(checkout) if (checkout / "pyproject.toml").is_file() else "/path/to/checkout"
    return ImportError(
        f"{module} is not installed: install jqueue's {extra!r} extra from this checkout:"
        f" pip install '{where}[{extra}]' (or a wheel built there; the jqueue on the package"
        " index is another project)"
    )
