"""A storage wrapper for tests: counts the calls a queue makes and injects faults into them.

``instrumented(storage)`` wraps any storage (``ObjectStoragePort``); the wrapper has
the keyed calls (``get``, ``create``, ``list_names``, ``delete``) only when the
wrapped storage has them, so a queue picks the same layout through it. It counts
every call by kind, and ``Faults`` makes the calls it selects slow, conflicting,
failing, hanging or held at a gate until the test opens it. ``async with`` and
``url`` are passed through, so it stands in for the wrapped storage anywhere.

Examples
--------
Count what a batch costs, then run the same code on a slow, flaky storage::

    from datetime import timedelta
    from jqueue import DirectQueue, InMemoryStorage
    from jqueue.testing import Faults, instrumented

    storage = instrumented(InMemoryStorage())
    async with DirectQueue(storage) as queue:
        await queue.enqueue("setup", b"")
        storage.reset()
        await queue.enqueue_many("work", [b"a", b"b", b"c"])
    assert storage.commits == 1

    flaky = instrumented(
        InMemoryStorage(), Faults(read_latency=timedelta(milliseconds=50), fail_rate=0.1), seed=1
    )
    # ... every 10th call or so now raises StorageError; flaky.failures says how many did

Faults can select calls, e.g. hold only the creates of checkpoints:
``Faults(hang=True, affects=lambda kind, name: kind == "create" and name.startswith("checkpoint/"))``.
"""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from datetime import timedelta
from types import TracebackType
from typing import Literal, Self, TypeVar, overload

from jqueue.core.formats.entry import ENTRY_PREFIX
from jqueue.core.loop.store import describe
from jqueue.domain.errors import CASConflictError, StorageError
from jqueue.domain.spec import SPAN
from jqueue.domain.values import Bounds
from jqueue.ports.storage import KeyedStoragePort, ObjectStoragePort

T = TypeVar("T")

CallKind = Literal["read", "write", "get", "create", "list", "delete"]
"""The kind of a storage call: ``list`` is ``list_names``, the others are the methods' names."""

READ_KINDS: frozenset[CallKind] = frozenset({"read", "get", "list"})
"""The calls that only look: ``Faults.read_latency`` applies to them."""

WRITE_KINDS: frozenset[CallKind] = frozenset({"write", "create", "delete"})
"""The calls that change something: ``Faults.write_latency`` applies to them."""

FAIL_RATE = Bounds(ge=0, le=1)
"""The bounds of ``Faults.fail_rate``: a share of the calls."""


def every_call(kind: CallKind, name: str) -> bool:
    """Select every call (the default of ``Faults.affects``)."""
    return True


@dataclass(frozen=True)
class Faults:
    """What goes wrong with the calls that ``affects`` selects (by default nothing).

    The faults act in this order: ``hang``, ``gate``, the latency, ``fail_rate``,
    ``conflict``; then the call goes to the wrapped storage.

    Attributes
    ----------
    affects : callable
        Given a call's kind and object name (``""`` for ``read`` and ``write`` of the
        main object, the prefix for ``list``), whether the faults apply to it.
    read_latency, write_latency : timedelta
        Added before each selected call in ``READ_KINDS`` / ``WRITE_KINDS``.
    conflict : bool
        Every selected ``write`` and ``create`` raises ``CASConflictError``; nothing is stored.
    fail_rate : float
        The share of selected calls that raise ``StorageError`` (0 to 1, drawn from the
        wrapper's seeded generator).
    hang : bool
        Selected calls never answer (until they are cancelled).
    gate : asyncio.Event or None
        Selected calls wait until the event is set: clear it to hold calls mid-flight.
    """

    affects: Callable[[CallKind, str], bool] = every_call
    read_latency: timedelta = timedelta(0)
    write_latency: timedelta = timedelta(0)
    conflict: bool = False
    fail_rate: float = 0.0
    hang: bool = False
    gate: asyncio.Event | None = None

    def __post_init__(self) -> None:
        SPAN.check("read_latency", self.read_latency)
        SPAN.check("write_latency", self.write_latency)
        FAIL_RATE.check("fail_rate", self.fail_rate)


class InstrumentedStorage:
    """A storage that counts its calls and injects ``faults``; only ``read`` and ``write``.

    Use ``instrumented`` to get the keyed variant when the wrapped storage has keyed calls.

    Parameters
    ----------
    inner : ObjectStoragePort
        The storage that does the work.
    faults : Faults
        What goes wrong; the attribute can be replaced between calls.
    seed : int
        Seed of the generator that picks the calls failing under ``Faults.fail_rate``.

    Attributes
    ----------
    calls : Counter
        Calls made, by kind (``"read"``, ``"write"``, ``"get"``, ``"create"``, ``"list"``, ``"delete"``).
    commits : int
        Commits attempted: ``write`` calls plus ``create`` calls of log entries.
    conflicts : int
        ``write`` and ``create`` calls that raised ``CASConflictError`` (injected or not).
    failures : int
        Calls that failed with an injected ``StorageError``.
    url : str
        The wrapped storage's ``url`` (or its ``repr``).
    """

    def __init__(self, inner: ObjectStoragePort, faults: Faults | None = None, *, seed: int = 0) -> None:
        self.inner = inner
        self.faults = Faults() if faults is None else faults
        self.url = describe(inner)
        self.calls: Counter[CallKind] = Counter()
        self.commits = 0
        self.conflicts = 0
        self.failures = 0
        self._random = random.Random(seed)

    @property
    def reads(self) -> int:
        """Calls in ``READ_KINDS`` so far."""
        return sum(self.calls[kind] for kind in READ_KINDS)

    @property
    def writes(self) -> int:
        """Calls in ``WRITE_KINDS`` so far."""
        return sum(self.calls[kind] for kind in WRITE_KINDS)

    def reset(self) -> None:
        """Set every count back to zero."""
        self.calls.clear()
        self.commits = self.conflicts = self.failures = 0

    async def _call(self, kind: CallKind, name: str, call: Callable[[], Awaitable[T]]) -> T:
        """Count the call, apply the faults that select it, then make it."""
        self.calls[kind] += 1
        if kind == "write" or (kind == "create" and name.startswith(ENTRY_PREFIX)):
            self.commits += 1
        faults = self.faults
        if faults.affects(kind, name):
            await self._inject(faults, kind, name)
        try:
            return await call()
        except CASConflictError:
            if kind in ("write", "create"):
                self.conflicts += 1
            raise

    async def _inject(self, faults: Faults, kind: CallKind, name: str) -> None:
        if faults.hang:
            await asyncio.get_running_loop().create_future()  # never set: only cancelling ends it
        if faults.gate is not None:
            await faults.gate.wait()
        latency = faults.read_latency if kind in READ_KINDS else faults.write_latency
        if latency > timedelta(0):
            await asyncio.sleep(latency.total_seconds())
        if faults.fail_rate > 0 and self._random.random() < faults.fail_rate:
            self.failures += 1
            raise StorageError(f"injected failure of {kind} {name}", OSError("injected"))
        if faults.conflict and kind in ("write", "create"):
            self.conflicts += 1
            raise CASConflictError(f"injected conflict on {kind} {name or self.url}")

    async def read(self) -> tuple[bytes, str | None]:
        """Read the main object."""
        return await self._call("read", "", self.inner.read)

    async def write(self, content: bytes, if_match: str | None = None) -> str:
        """Write the main object."""
        return await self._call("write", "", lambda: self.inner.write(content, if_match))

    async def __aenter__(self) -> Self:
        if isinstance(self.inner, AbstractAsyncContextManager):
            await self.inner.__aenter__()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if isinstance(self.inner, AbstractAsyncContextManager):
            await self.inner.__aexit__(exc_type, exc, tb)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.url!r}, {dict(self.calls)})"


class InstrumentedKeyedStorage(InstrumentedStorage):
    """``InstrumentedStorage`` for a storage with keyed calls, which it counts and faults too."""

    def __init__(self, inner: KeyedStoragePort, faults: Faults | None = None, *, seed: int = 0) -> None:
        super().__init__(inner, faults, seed=seed)
        self.keyed = inner

    async def get(self, name: str) -> bytes | None:
        """Read a named object."""
        return await self._call("get", name, lambda: self.keyed.get(name))

    async def create(self, name: str, content: bytes) -> None:
        """Create a named object."""
        await self._call("create", name, lambda: self.keyed.create(name, content))

    async def list_names(self, prefix: str, start_after: str = "") -> list[str]:
        """List named objects."""
        return await self._call("list", prefix, lambda: self.keyed.list_names(prefix, start_after))

    async def delete(self, name: str) -> None:
        """Delete a named object."""
        await self._call("delete", name, lambda: self.keyed.delete(name))


@overload
def instrumented(
    storage: ObjectStoragePort, faults: Faults | None = None, *, seed: int = 0, keyed: Literal[False]
) -> InstrumentedStorage: ...


@overload
def instrumented(
    storage: KeyedStoragePort,
    faults: Faults | None = None,
    *,
    seed: int = 0,
    keyed: Literal[True] | None = None,
) -> InstrumentedKeyedStorage: ...


@overload
def instrumented(
    storage: ObjectStoragePort, faults: Faults | None = None, *, seed: int = 0, keyed: bool | None = None
) -> InstrumentedStorage: ...


def instrumented(
    storage: ObjectStoragePort, faults: Faults | None = None, *, seed: int = 0, keyed: bool | None = None
) -> InstrumentedStorage:
    """Wrap ``storage`` to count its calls and inject ``faults``.

    Parameters
    ----------
    storage : ObjectStoragePort
        The storage that does the work.
    faults : Faults or None
        What goes wrong (default: nothing).
    seed : int
        Seed of the generator behind ``Faults.fail_rate``.
    keyed : bool or None
        Whether the wrapper has the keyed calls: None (the default) when ``storage`` has
        them; False hides them (a queue then keeps the single-object layout); True
        requires them.

    Returns
    -------
    InstrumentedStorage
        An ``InstrumentedKeyedStorage`` when it has the keyed calls.

    Raises
    ------
    TypeError
        If ``keyed`` is True and ``storage`` has no keyed calls.
    """
    has_keys = isinstance(storage, KeyedStoragePort)
    if keyed and not has_keys:
        raise TypeError(f"{describe(storage)} has no keyed calls (get, create, list_names, delete)")
    if isinstance(storage, KeyedStoragePort) and keyed is not False:
        return InstrumentedKeyedStorage(storage, faults, seed=seed)
    return InstrumentedStorage(storage, faults, seed=seed)
