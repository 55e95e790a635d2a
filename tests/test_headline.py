"""One line says what failed, wherever a job's error is shown in one line: the CLI's tables, the
dashboard's, the worker's log line, dead-letter groups and ``JobFailedError``."""

from __future__ import annotations

import pytest

from jqueue.domain.errors import JobFailedError, headline
from jqueue.domain.models import JobStatus
from jqueue.domain.records import HistoryRecord

WORKER_RECORDED = (
    "ValidationError: 1 validation error for send_email\nsubject\n  Field required [type=missing]\n"
    'Traceback (most recent call last):\n  File "tasks.py", line 3\n'
    "pydantic_core._pydantic_core.ValidationError: 1 validation error for send_email\n"
    "    For further information visit https://errors.pydantic.dev/2/v/missing"
)


@pytest.mark.parametrize(
    ("error", "line"),
    [
        (WORKER_RECORDED, "ValidationError: 1 validation error for send_email"),
        ("Traceback (most recent call last):\n  File \"x.py\"\nKeyError: 'a'\n", "KeyError: 'a'"),
        ("  SMTPError: 421 later  \n", "SMTPError: 421 later"),
        ("\n \n", ""),
        ("", ""),
    ],
)
def test_the_headline_is_the_line_that_says_what_failed(error: str, line: str) -> None:
    assert headline(error) == line


def test_history_records_and_failures_show_the_headline() -> None:
    record = HistoryRecord("j", "send_email", 0, (1,), 2, 1, JobStatus.DEAD, WORKER_RECORDED, "max_attempts")
    assert record.error_line == "ValidationError: 1 validation error for send_email"
    failed = JobFailedError("j", WORKER_RECORDED, "max_attempts")
    assert str(failed) == "job 'j' died (max_attempts): ValidationError: 1 validation error for send_email"
    assert str(JobFailedError("j", None, "ttl")) == "job 'j' died (ttl): no error recorded"
