"""``Outage``: how long a worker's queues have kept failing, against its ``max_outage``."""

from __future__ import annotations

import logging
import time
from datetime import timedelta

from jqueue.domain.errors import JQueueError, ServiceError, StorageError, is_transient

logger = logging.getLogger("jqueue.worker")

LOG_EVERY = 5.0
"""Seconds between two log lines of one outage (its first failure is logged at once)."""


class Outage:
    """The outage a worker rides out: transient failures (``is_transient``) of the storage, or of
    the broker of a queue served by ``jqueue serve``, retried until they have lasted longer
    than ``max_outage``.

    Parameters
    ----------
    max_outage : timedelta
        How long failures may go on before the worker stops with the last one.
    """

    def __init__(self, max_outage: timedelta) -> None:
        self.max_outage = max_outage
        self.since: float | None = None
        self.fatal: JQueueError | None = None
        self._logged = 0.0

    def failed(self, exc: JQueueError, doing: str) -> bool:
        """Note ``exc``, raised while ``doing``: re-raise it unless it is transient; True while the
        outage has lasted at most ``max_outage`` (logging what the worker waits for), else False
        with ``fatal`` set."""
        if not is_transient(exc):
            raise exc
        now = time.monotonic()
        if self.since is None:
            self.since = now
        lasted, limit = now - self.since, self.max_outage.total_seconds()
        what = "the broker" if isinstance(exc, ServiceError) else "the storage"
        if lasted <= limit:
            if lasted == 0 or now - self._logged >= LOG_EVERY:
                self._logged = now
                logger.warning(
                    "%s failed while %s; waiting for %s (%.1f s of max_outage %.0f s): %s",
                    what, doing, what, lasted, limit, exc,
                )  # fmt: skip
            return True
        if self.fatal is None:
            message = f"{what} kept failing for {lasted:.0f} s (max_outage); the worker stops"
            if isinstance(exc, ServiceError):
                self.fatal = ServiceError(exc.status, exc.code, f"{message}: {exc}", exc.broker)
            else:
                self.fatal = StorageError(message, exc)
            logger.error("%s", self.fatal)
        return False

    def ended(self) -> None:
        """A call went through: the outage, if any, is over."""
        if self.since is not None:
            logger.info("the queue answers again after %.1f s", time.monotonic() - self.since)
        self.since = None
