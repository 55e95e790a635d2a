"""A waiting job's ``awaiting`` and ``parent_results`` as views that one parent's settle
advances in O(1), however many parents the job has.

A record holds both fields as tuples when the job is added or loaded. The first settle of one
of its parents starts a ``Settles``: those tuples, then each parent settled in turn, shared by
every version of the two fields. A version (``Awaiting``, ``ParentResults``) sees the first
``seen`` settles, so one that an undo keeps stays true while later settles are appended; a
settle from a version that is not the newest copies it into a new ``Settles`` first (O(parents),
after a rollback only). The views read as the tuples they stand for; ``as_tuple`` turns one back
into its tuple (``JobRecord.as_added``, a freeze, the single format: what leaves the index).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any, overload


class Settles:
    """The parents of one job settled since its fields were last tuples, shared by their versions.

    Attributes
    ----------
    after : tuple of str
        The job's parents (``after``): results go in their order.
    awaited, results : tuple
        The job's ``awaiting`` and ``parent_results`` before the first of these settles.
    """

    __slots__ = ("_outcomes", "_parents", "_sizes", "_slots", "_turns", "after", "awaited", "results")

    def __init__(
        self, after: tuple[str, ...], awaited: tuple[str, ...], results: tuple[bytes | None, ...]
    ) -> None:
        self.after, self.awaited, self.results = after, awaited, results
        first: dict[str, int] = {}
        for position, parent in enumerate(after):
            first.setdefault(parent, position)
        self._slots = {parent: first.get(parent, -1) for parent in awaited}
        """Each awaited parent's position in ``after`` (-1: not one of them)."""
        self._parents: list[str] = []
        self._outcomes: list[bytes | None] = []
        self._turns: dict[str, int] = {}
        """Each settled parent's turn: its index in ``_parents``."""
        self._sizes = [sum(len(result) for result in results if result is not None)]
        """The results' total size after each number of settles."""

    def awaits(self, parent: str, seen: int) -> bool:
        """Whether ``parent`` is awaited once ``seen`` settles are done."""
        return parent in self._slots and self._turns.get(parent, seen) >= seen

    def settle(self, parent: str, result: bytes | None) -> int:
        """Append the settle of awaited ``parent`` with ``result``; return the number of settles."""
        if self._slots[parent] < 0:
            raise ValueError(f"parent {parent!r} is awaited but is not one of the job's parents")
        self._turns[parent] = len(self._parents)
        self._parents.append(parent)
        self._outcomes.append(result)
        self._sizes.append(self._sizes[-1] + (0 if result is None else len(result)))
        return len(self._parents)

    @property
    def newest(self) -> int:
        """The number of settles: the newest version sees them all."""
        return len(self._parents)

    def between(self, start: int, stop: int) -> list[str]:
        """The parents settled from turn ``start`` to turn ``stop`` (excluded)."""
        return self._parents[start:stop]

    def awaited_after(self, seen: int) -> tuple[str, ...]:
        """``awaiting`` once ``seen`` settles are done."""
        turns = self._turns
        return tuple(parent for parent in self.awaited if turns.get(parent, seen) >= seen)

    def results_after(self, seen: int) -> tuple[bytes | None, ...]:
        """``parent_results`` once ``seen`` settles are done."""
        if not seen:
            return self.results
        results = list(self.results or (None,) * len(self.after))
        slots = self._slots
        for parent, result in zip(self._parents[:seen], self._outcomes, strict=False):
            results[slots[parent]] = result
        return tuple(results)

    def size_after(self, seen: int) -> int:
        """The total size of the results once ``seen`` settles are done."""
        return self._sizes[seen]


class _View(Sequence[Any]):
    """One version of a field of a ``Settles``: it reads as the tuple it stands for."""

    __slots__ = ("_tuple", "seen", "settles")

    def __init__(self, settles: Settles, seen: int) -> None:
        self.settles, self.seen = settles, seen
        self._tuple: tuple[Any, ...] | None = None

    def _made(self) -> tuple[Any, ...]:
        raise NotImplementedError

    def as_tuple(self) -> tuple[Any, ...]:
        """The tuple this version stands for (made once, O(parents))."""
        if self._tuple is None:
            self._tuple = self._made()
        return self._tuple

    @overload
    def __getitem__(self, index: int) -> Any: ...

    @overload
    def __getitem__(self, index: slice) -> tuple[Any, ...]: ...

    def __getitem__(self, index: int | slice) -> Any:
        return self.as_tuple()[index]

    def __iter__(self) -> Iterator[Any]:
        return iter(self.as_tuple())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, _View):
            other = other.as_tuple()
        return isinstance(other, tuple) and self.as_tuple() == other

    def __hash__(self) -> int:
        return hash(self.as_tuple())

    def __repr__(self) -> str:
        return repr(self.as_tuple())


class Awaiting(_View):
    """``awaiting`` once ``seen`` settles of ``settles`` are done; ``in`` and ``len`` cost O(1)."""

    __slots__ = ()

    def __len__(self) -> int:
        return len(self.settles.awaited) - self.seen  # each settle ended the wait for one parent

    def __contains__(self, parent: object) -> bool:
        return isinstance(parent, str) and self.settles.awaits(parent, self.seen)

    def _made(self) -> tuple[str, ...]:
        return self.settles.awaited_after(self.seen)


class ParentResults(_View):
    """``parent_results`` once ``seen`` settles of ``settles`` are done; ``size`` costs O(1)."""

    __slots__ = ()

    def __len__(self) -> int:
        return len(self.settles.after) if self.seen or self.settles.results else 0

    @property
    def size(self) -> int:
        """The results' total size in bytes."""
        return self.settles.size_after(self.seen)

    def _made(self) -> tuple[bytes | None, ...]:
        return self.settles.results_after(self.seen)


def as_tuple(value: Sequence[Any]) -> tuple[Any, ...]:
    """Return a field held as a view (or a tuple already) as its tuple."""
    return value.as_tuple() if isinstance(value, _View) else tuple(value)


def after_settle(
    after: tuple[str, ...],
    awaiting: Sequence[str],
    results: Sequence[bytes | None],
    parent: str,
    result: bytes | None,
) -> tuple[Awaiting, ParentResults]:
    """Return a job's ``awaiting`` and ``parent_results`` once ``parent`` settled with ``result``:
    O(1) from the newest version of its ``Settles``, O(parents) from tuples or an older version.

    Raises
    ------
    ValueError
        If the job does not await ``parent``.
    """
    if (
        isinstance(awaiting, Awaiting)
        and isinstance(results, ParentResults)
        and awaiting.settles is results.settles
        and awaiting.seen == results.seen == awaiting.settles.newest
    ):
        settles, seen = awaiting.settles, awaiting.seen
    else:
        settles, seen = Settles(after, as_tuple(awaiting), as_tuple(results)), 0
    if not settles.awaits(parent, seen):
        raise ValueError(f"the job does not await parent {parent!r}")
    seen = settles.settle(parent, result)
    return Awaiting(settles, seen), ParentResults(settles, seen)


def _place(value: Sequence[str], other: Sequence[str]) -> tuple[Settles, int] | None:
    """Where ``value`` is along the ``Settles`` of ``other`` or its own, if it is on one."""
    if isinstance(value, Awaiting):
        return value.settles, value.seen
    if isinstance(other, Awaiting) and value is other.settles.awaited:
        return other.settles, 0
    return None


def awaiting_change(before: Sequence[str], now: Sequence[str]) -> tuple[Iterable[str], Iterable[str]]:
    """Return the parents that ``awaiting`` lost and gained from ``before`` to ``now``: O(settles
    between them) along one ``Settles``, else O(parents)."""
    then, here = _place(before, now), _place(now, before)
    if then is not None and here is not None and then[0] is here[0]:
        settles, start, stop = then[0], then[1], here[1]
        return (settles.between(start, stop), ()) if start <= stop else ((), settles.between(stop, start))
    old, new = set(before), set(now)
    return old - new, new - old


def results_size(results: Sequence[bytes | None]) -> int:
    """The total size in bytes of a job's ``parent_results`` (O(1) for a view)."""
    if isinstance(results, ParentResults):
        return results.size
    return sum(len(result) for result in results if result is not None)
