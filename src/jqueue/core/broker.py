"""``BrokerQueue``: the group-commit queue as an async context manager."""

from __future__ import annotations

from jqueue.core.group_commit import GroupCommitLoop


class BrokerQueue(GroupCommitLoop):
    """A queue that batches concurrent calls into one commit per storage round-trip.

    Use it as ``async with BrokerQueue(storage) as q``: entering starts the writer
    task, leaving commits everything submitted and stops it. See ``GroupCommitLoop``
    for the parameters.
    """
