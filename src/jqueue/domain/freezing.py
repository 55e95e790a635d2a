"""``Freezing``: consistent snapshots of an index while commits go on, and the jobs changed
between two of them (what an incremental checkpoint writes)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from jqueue.domain.records import ClaimState, Frozen, JobRecord

if TYPE_CHECKING:
    from jqueue.domain.controls import Controls
    from jqueue.domain.history import History


class Freezing:
    """``freeze`` and ``thaw`` of an ``IndexState``; its changes keep ``changed``, ``_frozen``
    and ``_removed_while_frozen`` up to date."""

    version: int
    records: dict[str, JobRecord]
    history: History
    controls: Controls
    changed: dict[str, JobRecord] | None
    _frozen: dict[str, ClaimState] | None
    _removed_while_frozen: dict[str, JobRecord]
    _frozen_below: int
    _next_order: int
    _journal: list[Callable[[], None]] | None

    def flatten_waits(self) -> None:
        raise NotImplementedError

    def freeze(self, every_job: bool = False) -> Frozen:
        """Take a snapshot of the jobs changed since the previous freeze (of every live job, if
        ``every_job`` or if this is the first), the history and the controls; ``thaw`` ends it.

        Past the first, it costs O(1) Python steps for the jobs (a copy of the jobs by id for
        every job), and O(parents) for each job with parents settled since the previous freeze
        (``flatten_waits``): until ``thaw``, a record live now first saves its values as of now before
        it changes, and a removed one is kept, so a reader, even in another thread, can tell
        the jobs as they were now (``Frozen.live``). From the first freeze on, ``changed``
        collects the jobs touched since the last one.

        Raises
        ------
        RuntimeError
            If a snapshot is being taken, or a transaction is open (its changes may be undone).
        """
        if self._frozen is not None:
            raise RuntimeError("a snapshot is already being taken")
        if self._journal is not None:
            raise RuntimeError("a snapshot cannot be taken inside a transaction")
        self.flatten_waits()  # what a checkpoint reads, even from another thread, is tuples
        changed = dict(self.records) if every_job or self.changed is None else self.changed
        self.changed, self._frozen, self._removed_while_frozen = {}, {}, {}
        self._frozen_below = self._next_order
        return Frozen(
            version=self.version,
            changed=changed,
            records=self.records,
            saved=self._frozen,
            removed=self._removed_while_frozen,
            next_order=self._next_order,
            history=list(self.history),
            controls=self.controls.to_dict(),
        )

    def track_changes(self) -> None:
        """Start collecting in ``changed`` the jobs touched from now on (a freshly loaded index
        whose every job the store already holds)."""
        self.changed = {}

    def thaw(self) -> None:
        """End the snapshot started by ``freeze``."""
        self._frozen, self._removed_while_frozen = None, {}

    @property
    def frozen(self) -> bool:
        """Whether a snapshot started by ``freeze`` is still being taken."""
        return self._frozen is not None
