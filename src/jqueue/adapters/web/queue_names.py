"""The names of the queues under a root, and the errors of a name that is not one."""

from __future__ import annotations

import re

QUEUE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,127}")
"""A queue's name: letters, digits, ``_`` and ``-``, at most 128; the queue is ``ROOT/NAME.json``."""


class UnknownQueueError(LookupError):
    """No queue of this name exists under the root (create it first)."""


class BadQueueNameError(ValueError):
    """A queue name that is not ``QUEUE_NAME``: it could reach outside the root."""
