"""Module-level handlers for worker tests (a process pool imports them by name)."""

from __future__ import annotations

import os

from jqueue import Job


def square_in_process(job: Job) -> None:
    """Fail unless run in another process; write nothing."""
    if int(job.payload) < 0:
        raise ValueError("negative")
    if os.environ.get("JQUEUE_TEST_PARENT_PID") == str(os.getpid()):
        raise RuntimeError("ran in the parent process")


def give_up_in_process(job: Job) -> None:
    """Dead-letter the job from a handler process."""
    from jqueue import Fail

    raise Fail(f"cannot use {job.payload.decode()}")


def sleep_in_process(job: Job) -> None:
    """Write this process's id to the file the payload names, then sleep (until killed)."""
    import time
    from pathlib import Path

    Path(job.payload.decode()).write_text(str(os.getpid()))
    time.sleep(120)
