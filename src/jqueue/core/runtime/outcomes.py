"""What a worker reports: each job's outcome and result, and the counts of a run."""

from __future__ import annotations

import json
import logging
import traceback
from dataclasses import dataclass, field
from enum import StrEnum

from pydantic import ValidationError

from jqueue.core.runtime.steering import ResultError
from jqueue.domain.errors import headline
from jqueue.domain.models import Job

TRACEBACK_CHARS = 4_000
"""The most characters of a failed handler's traceback kept with its error (the end of it)."""


def traceback_text(exc: BaseException) -> str:
    """Return the traceback of ``exc`` (with a process handler's, which it carries), cut to
    its last ``TRACEBACK_CHARS`` characters."""
    text = "".join(traceback.format_exception(exc)).rstrip()
    return text if len(text) <= TRACEBACK_CHARS else "..." + text[-TRACEBACK_CHARS:]


def error_message(exc: BaseException) -> str:
    """Return the message of ``exc`` on one line, as the first line of a job's error (what logs
    and listings show) has it: a pydantic ``ValidationError`` as its title and each field with
    its problem, any other message's lines joined."""
    if isinstance(exc, ValidationError):
        problems = "; ".join(
            f"{'.'.join(map(str, error['loc']))}: {error['msg']}" if error["loc"] else error["msg"]
            for error in exc.errors(include_url=False)
        )
        count = exc.error_count()
        return f"{count} validation error{'s' if count != 1 else ''} for {exc.title}: {problems}"
    return " ".join(line.strip() for line in str(exc).splitlines() if line.strip())


def result_bytes(returned: object) -> bytes | None:
    """Return what a handler returned as the bytes its job's history keeps: bytes as they are,
    text as UTF-8, anything else as JSON; None for None.

    Raises
    ------
    ResultError
        For a value JSON cannot hold (the job dies with it).
    """
    if returned is None:
        return None
    if isinstance(returned, bytes | bytearray | memoryview):
        return bytes(returned)
    if isinstance(returned, str):
        return returned.encode()
    try:
        return json.dumps(returned).encode()
    except (TypeError, ValueError) as exc:
        raise ResultError(f"{type(returned).__name__} is not bytes, text or JSON ({exc})") from None


class Outcome(StrEnum):
    """What became of a job a worker ran."""

    ACKED = "acked"
    RETRIED = "retried"
    DEAD = "dead"
    LOST = "lost"
    RELEASED = "released"
    CANCELLED = "cancelled"


@dataclass(frozen=True)
class JobResult:
    """One job's run: its outcome, error and timings (seconds)."""

    job: Job
    outcome: Outcome
    error: str | None
    waited: float
    ran: float

    def level(self) -> int:
        """The log level of this run: a dead job is an error (it needs someone), a lost one a
        warning, the rest (a retry included: the job goes on) information."""
        if self.outcome is Outcome.DEAD:
            return logging.ERROR
        return logging.WARNING if self.outcome is Outcome.LOST else logging.INFO

    def summary(self) -> str:
        """The run in one line: the job, its outcome and, when retried or dead, the error's
        ``headline`` (its type and message): ``ID send_email: retried (ValueError: no such user)``."""
        line = f"{self.job.id} {self.job.entrypoint}: {self.outcome}"
        if self.error is None or self.outcome not in (Outcome.RETRIED, Outcome.DEAD):
            return line
        return f"{line} ({headline(self.error)})"  # whole: a terminal wraps it

    def log_fields(self) -> dict[str, object]:
        """The fields of the log record of this run (the structured log's ``extra``)."""
        return {
            "job_id": self.job.id,
            "entrypoint": self.job.entrypoint,
            "outcome": str(self.outcome),
            "attempts": self.job.attempts,
            "error": self.error,
            "wait_s": round(self.waited, 6),
            "run_s": round(self.ran, 6),
        }


@dataclass
class WorkerStats:
    """What a worker run did.

    Attributes
    ----------
    claimed : int
        Jobs claimed.
    outcomes : dict of Outcome to int
        Jobs per outcome: acked, retried (failed, back in the queue), dead (failed
        their last attempt), lost (their lease was lost before the ack), released
        (returned at shutdown), cancelled (stopped by ``cancel``).
    timed_out : int
        Failures that were time limits.
    seconds : float
        Duration of the run.
    """

    claimed: int = 0
    outcomes: dict[Outcome, int] = field(default_factory=lambda: dict.fromkeys(Outcome, 0))
    timed_out: int = 0
    seconds: float = 0.0

    @property
    def running(self) -> int:
        """Jobs claimed that have no outcome yet."""
        return self.claimed - sum(self.outcomes.values())

    @property
    def acked(self) -> int:
        """Jobs that succeeded."""
        return self.outcomes[Outcome.ACKED]

    @property
    def failed(self) -> int:
        """Jobs whose handler failed (retried or dead)."""
        return self.outcomes[Outcome.RETRIED] + self.outcomes[Outcome.DEAD]
