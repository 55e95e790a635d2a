"""``DirectoryWatch``: file-system notifications (Linux inotify) that a directory's files changed.

It tells the event loop's callbacks that a local queue may have changed, so that idle workers
wake when another process commits instead of polling. Where inotify is not available (another
system, or ``inotify_simple`` not installed) there is no watch and callers keep polling.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

logger = logging.getLogger("jqueue")


class DirectoryWatch:
    """Calls every subscribed callback, in the event loop, after files in ``directory`` change.

    Parameters
    ----------
    directory : Path
        An existing directory; appends to, creations in and renames into it count as changes.
    """

    def __init__(self, directory: Path) -> None:
        from inotify_simple import INotify, flags

        self.directory = directory
        self._inotify: Any = INotify(nonblocking=True)
        try:
            self._inotify.add_watch(directory, flags.MODIFY | flags.CREATE | flags.MOVED_TO)
        except BaseException:
            self._inotify.close()
            raise
        self._callbacks: list[Callable[[], None]] = []
        self._loop: asyncio.AbstractEventLoop | None = None

    @classmethod
    def start(cls, directory: Path) -> DirectoryWatch | None:
        """Return a watch of ``directory``, or None if it does not exist or cannot be watched."""
        try:
            return cls(directory)
        except ImportError:
            return None
        except OSError as exc:
            if directory.is_dir():
                logger.info("no change notifications for %s (%s): idle workers poll", directory, exc)
            return None

    def subscribe(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Call ``callback`` after each change (in the running loop); returns the unsubscribe call."""
        loop = asyncio.get_running_loop()
        if self._loop is not loop:
            self._detach()
            loop.add_reader(self._inotify.fileno(), self._readable)
            self._loop = loop
        self._callbacks.append(callback)

        def unsubscribe() -> None:
            with contextlib.suppress(ValueError):
                self._callbacks.remove(callback)
            if not self._callbacks:
                self._detach()

        return unsubscribe

    def _readable(self) -> None:
        with contextlib.suppress(BlockingIOError, ValueError):  # ValueError: closed meanwhile
            self._inotify.read(timeout=0)
        for callback in list(self._callbacks):
            callback()

    def _detach(self) -> None:
        if self._loop is not None and not self._loop.is_closed() and not self._inotify.closed:
            self._loop.remove_reader(self._inotify.fileno())
        self._loop = None

    def close(self) -> None:
        """Stop watching (again is harmless)."""
        self._detach()
        self._callbacks.clear()
        if not self._inotify.closed:
            self._inotify.close()
