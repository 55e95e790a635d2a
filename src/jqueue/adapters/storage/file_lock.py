"""``hold_flock``: an ``flock`` whose wait is bounded, so that a process stopped while holding a
lock (SIGSTOP, a debugger) costs the others a clear error instead of a thread blocked for ever."""

from __future__ import annotations

import errno
import fcntl
import time

LOCK_WAIT_LIMIT = 30.0
"""Seconds a file operation waits for a lock another process holds before it fails."""
_FIRST_PAUSE = 0.0001
_LONGEST_PAUSE = 0.002


def hold_flock(fd: int, mode: int, where: str) -> bool:
    """Take ``flock(fd, mode)``: with ``LOCK_NB`` in ``mode``, return False at once while another
    process holds it; else wait for it at most ``LOCK_WAIT_LIMIT`` seconds.

    Returns
    -------
    bool
        Whether the lock is held now.

    Raises
    ------
    TimeoutError
        The lock stayed held elsewhere for ``LOCK_WAIT_LIMIT`` seconds.
    """
    try:
        fcntl.flock(fd, mode | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        if mode & fcntl.LOCK_NB:
            return False
    limit = LOCK_WAIT_LIMIT
    deadline = time.monotonic() + limit
    pause = _FIRST_PAUSE
    while True:
        time.sleep(pause)
        try:
            fcntl.flock(fd, mode | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() >= deadline:
                text = f"{where} stayed locked by another process for {limit:g} s (is one stopped?)"
                raise TimeoutError(errno.ETIMEDOUT, text) from None
        pause = min(pause * 2, _LONGEST_PAUSE)
