"""``Journal``: the transactions of an index: changes journalled as undos, and the effects
they recorded, so that a batch that lost its commit race is undone in O(batch).

A transaction may hold two commits' changes: those of a commit in flight, and after a mark,
those applied ahead on top of it. ``commit_through`` keeps the first part when its commit lands, and
leaves the rest open; ``rollback`` undoes both."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from jqueue.domain.effects import Effect

if TYPE_CHECKING:
    from jqueue.domain.claim_order import ClaimOrder


class Journal:
    """Begin, commit and roll back (to a savepoint) the changes of an ``IndexState``."""

    _journal: list[Callable[[], None]] | None
    pending_effects: list[Effect]
    order: ClaimOrder
    transaction: int
    """How many transactions were begun: it tells one from the next."""

    def begin(self) -> None:
        """Start journalling changes so that ``rollback`` can undo them."""
        if self._journal is not None:
            raise RuntimeError("a transaction is already open")
        self.order.prune()
        self._journal = []
        self.pending_effects = []
        self.transaction += 1

    @property
    def in_transaction(self) -> bool:
        """Whether a transaction is open."""
        return self._journal is not None

    def commit(self) -> None:
        """Keep the changes made since ``begin``."""
        self._journal = None
        self.pending_effects = []

    def commit_through(self, savepoint: tuple[int, int]) -> None:
        """Keep the changes made before ``savepoint``; those after it stay in the open transaction
        (which ends if there are none)."""
        journal = self._journal
        if journal is None:
            raise RuntimeError("no transaction is open")
        undo_count, effect_count = savepoint
        if len(journal) == undo_count and len(self.pending_effects) == effect_count:
            self.commit()
            return
        self._journal = journal[undo_count:]
        self.pending_effects = self.pending_effects[effect_count:]
        self.order.prune()  # as ``begin`` does: the transaction goes on as the next one

    def rollback(self) -> None:
        """Undo every change made since ``begin``, newest first."""
        journal, self._journal = self._journal or [], None
        self.pending_effects = []
        for undo in reversed(journal):
            undo()
        self.order.unpark_all()  # what blocked a tenant may be undone

    def savepoint(self) -> tuple[int, int]:
        """Mark the open transaction, so that ``rollback_to`` can undo what follows."""
        if self._journal is None:
            raise RuntimeError("no transaction is open")
        return len(self._journal), len(self.pending_effects)

    def rollback_to(self, savepoint: tuple[int, int]) -> None:
        """Undo, newest first, the changes made since ``savepoint``; the transaction stays open."""
        journal = self._journal
        if journal is None:
            raise RuntimeError("no transaction is open")
        undo_count, effect_count = savepoint
        while len(journal) > undo_count:
            journal.pop()()
        del self.pending_effects[effect_count:]
        self.order.unpark_all()  # what blocked a tenant may be undone

    def _record_undo(self, undo: Callable[[], None] | None) -> None:
        if self._journal is not None and undo is not None:
            self._journal.append(undo)
