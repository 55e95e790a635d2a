"""``hold_flock``: an ``flock`` whose wait is bounded, and which a stopped holder cannot keep.

A process stopped (SIGSTOP, Ctrl-Z) while it holds a queue's lock would hold up every other
process of the queue until it goes on, and a broker frozen inside a commit would stop the
failover of its root. A waiter that finds the lock's holder stopped for
``STOPPED_HOLDER_LIMIT`` kills it (SIGKILL), as a cluster fences a node that stopped
answering: to the queue a killed writer is a crashed one, whose torn append the next writer
repairs. A holder that runs, however slowly, and one stopped by a debugger are waited for; a
wait past ``LOCK_WAIT_LIMIT`` fails with a clear error.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
import signal
import time
from dataclasses import dataclass

logger = logging.getLogger(__name__)

LOCK_WAIT_LIMIT = 30.0
"""Seconds a file operation waits for a lock another process holds before it fails."""
STOPPED_HOLDER_LIMIT = 0.5
"""Seconds a waiter sees a lock's holder stopped (state ``T``) before it kills the holder."""
_FIRST_PAUSE = 0.0001
_LONGEST_PAUSE = 0.002
_LOOK_EVERY = 0.1
"""Seconds between two looks at who holds the lock."""


def hold_flock(fd: int, mode: int, where: str) -> bool:
    """Take ``flock(fd, mode)``: with ``LOCK_NB`` in ``mode``, return False at once while another
    process holds it; else wait for it at most ``LOCK_WAIT_LIMIT`` seconds, killing a holder
    that stays stopped for ``STOPPED_HOLDER_LIMIT``.

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
    watch = _HolderWatch(fd, where)
    while True:
        time.sleep(pause)
        try:
            fcntl.flock(fd, mode | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            now = time.monotonic()
            if now >= deadline:
                text = f"{where} stayed locked by another process for {limit:g} s{watch.holder_said()}"
                raise TimeoutError(errno.ETIMEDOUT, text) from None
            watch.look(now)
        pause = min(pause * 2, _LONGEST_PAUSE)


@dataclass
class _HolderWatch:
    """Who holds a lock we wait for, and since when we have seen it stopped."""

    fd: int
    where: str
    pid: int | None = None
    stopped_since: float | None = None
    looked_at: float = -_LOOK_EVERY
    refused: bool = False

    def look(self, now: float) -> None:
        """Look at the holder (at most every ``_LOOK_EVERY``), and kill it if it has been stopped
        for ``STOPPED_HOLDER_LIMIT``."""
        if now - self.looked_at < _LOOK_EVERY:
            return
        self.looked_at = now
        pid = lock_holder(self.fd)
        if pid is None or pid == os.getpid() or not is_stopped(pid):
            self.pid, self.stopped_since = pid, None
            return
        if pid != self.pid or self.stopped_since is None:
            self.pid, self.stopped_since = pid, now
        if now - self.stopped_since >= STOPPED_HOLDER_LIMIT and not self.refused:
            self._kill(pid)

    def _kill(self, pid: int) -> None:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            return
        except PermissionError:
            self.refused = True
            logger.warning("%s is held by process %d, stopped, which this user may not kill", self.where, pid)
            return
        logger.warning(
            "killed process %d: it held %s while stopped for %g s, which held up every other process "
            "of the queue (to the queue it crashed: its unfinished write is repaired)",
            pid,
            self.where,
            STOPPED_HOLDER_LIMIT,
        )

    def holder_said(self) -> str:
        """The end of the timeout's message: who held the lock, as far as we know."""
        if self.pid is None:
            return " (is one stopped?)"
        state = "stopped" if self.stopped_since is not None else "running"
        return f" (process {self.pid}, {state})"


def lock_holder(fd: int) -> int | None:
    """Return the pid of the process holding an ``flock`` on ``fd``'s file (Linux), or None."""
    found = os.fstat(fd)
    wanted = f"{os.major(found.st_dev):02x}:{os.minor(found.st_dev):02x}:{found.st_ino}"
    with contextlib.suppress(OSError), open("/proc/locks", encoding="ascii") as locks:
        for line in locks:
            fields = line.split()
            if len(fields) >= 6 and fields[1] == "FLOCK" and fields[5] == wanted and fields[4].isdigit():
                return int(fields[4])
    return None


def is_stopped(pid: int) -> bool:
    """Whether the process is stopped by a signal (SIGSTOP, Ctrl-Z), not by a debugger."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as stat:
            return stat.read().rpartition(")")[2].split()[0] == "T"
    except (OSError, IndexError):
        return False
