"""The names of the queues under a root, and the errors of a name that is not one."""

from __future__ import annotations

import re

QUEUE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,127}(?:\.shard-[1-9][0-9]{0,3})?")
"""A queue's name: letters, digits, ``_`` and ``-``, at most 128; the queue is ``ROOT/NAME.json``.
Shard ``k`` (1 to 1023) of a sharded queue is a queue of its own beside it, ``NAME.shard-k``."""


def shard_name(name: str, shard: int) -> str:
    """The name of shard ``shard`` of queue ``name`` (the queue's own for shard 0)."""
    return name if shard == 0 else f"{name}.shard-{shard}"


def queue_of(name: str) -> str:
    """The queue that queue ``name`` is a shard of (``name`` itself for an unsharded queue)."""
    return name.partition(".shard-")[0]


class UnknownQueueError(LookupError):
    """No queue of this name exists under the root (create it first)."""


class BadQueueNameError(ValueError):
    """A queue name that is not ``QUEUE_NAME``: it could reach outside the root."""
