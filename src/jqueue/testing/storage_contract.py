"""The storage contract as one call: check that a backend does what jqueue needs of it.

``check_storage(open_storage)`` runs every check of the storage port
(``ObjectStoragePort``, and ``KeyedStoragePort``, ``MappedStoragePort`` and
``ChangeSignalPort`` where the storage has their calls) against a real store:
creates that are exclusive, compare-and-swap writes that lose with ``CASConflictError``,
racing writers of which exactly one wins, reads of what is missing, etags that change.
It returns a ``StorageContractReport`` of what passed and what did not apply, or raises
``StorageContractError`` (an ``AssertionError``) naming each check that failed and what
it saw. jqueue's own backends are tested with it; it needs no test framework, so it runs
from a plain script (``check_storage_sync``) as well as inside a test.

Examples
--------
Check an S3-compatible store (R2, MinIO, Tigris...) under a scratch prefix::

    from jqueue import S3Storage
    from jqueue.testing import check_storage_sync

    report = check_storage_sync(
        lambda name: S3Storage("scratch-bucket", f"jqueue-check/{name}", endpoint_url="https://...")
    )
    print(report)
"""

from __future__ import annotations

import asyncio
import os
import threading
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, AsyncExitStack
from dataclasses import dataclass, field
from typing import Literal, NamedTuple, TypedDict, TypeVar, Unpack, cast

from jqueue.domain.errors import CASConflictError
from jqueue.domain.values import Bounds
from jqueue.ports.storage import (
    ChangeSignalPort,
    KeyedStoragePort,
    MappedStoragePort,
    ObjectStoragePort,
    RemovableStoragePort,
)

T = TypeVar("T")

SIGNAL_WAIT = 10.0
"""Seconds a change signal may take to call back after another handle's ``create``."""
RACERS = Bounds(ge=2)
"""The bounds of ``check_storage``'s ``racers``: a race needs two."""
RACES = Bounds(ge=1)
"""The bounds of ``check_storage``'s ``races``."""
LARGE_OBJECT_BYTES = Bounds(ge=0)
"""The bounds of ``check_storage``'s ``large_object_bytes``."""
CHECK_TIMEOUT = Bounds(gt=0)
"""The bounds of ``check_storage``'s ``check_timeout``, in seconds."""

Needs = Literal["object", "removable", "keyed", "mapped", "signal"]
"""The port a check needs: ``object`` is every storage, ``removable`` adds
``RemovableStoragePort``, ``keyed`` adds ``KeyedStoragePort``, ``mapped`` and ``signal`` add
``MappedStoragePort`` or ``ChangeSignalPort`` to it."""


class CheckFailure(NamedTuple):
    """A check the storage failed, and what the check saw."""

    check: str
    seen: str


@dataclass(frozen=True)
class StorageContractReport:
    """What ``check_storage`` found.

    Attributes
    ----------
    storage : str
        The storage's class name.
    passed : tuple of str
        The checks that passed, in the order they ran.
    skipped : mapping of str to str
        The checks that did not apply, each with the reason (a port the storage does not have).
    """

    storage: str
    passed: tuple[str, ...]
    skipped: Mapping[str, str] = field(default_factory=dict)

    def __str__(self) -> str:
        reasons = dict.fromkeys(self.skipped.values())
        skipped = "".join(
            f"\n  skipped, {why}: {', '.join(c for c, w in self.skipped.items() if w == why)}"
            for why in reasons
        )
        return f"{self.storage}: {len(self.passed)} checks passed, {len(self.skipped)} skipped{skipped}"


class StorageContractError(AssertionError):
    """A storage failed checks of the storage contract.

    Attributes
    ----------
    failures : tuple of CheckFailure
        Each failed check and what it saw, in the order they ran.
    report : StorageContractReport
        The checks that passed and those that did not apply.
    """

    def __init__(self, report: StorageContractReport, failures: Sequence[CheckFailure]) -> None:
        self.report = report
        self.failures = tuple(failures)
        lines = "".join(f"\n- {failure.check}: {failure.seen}" for failure in self.failures)
        super().__init__(
            f"{report.storage} does not meet the storage contract: {len(self.failures)} of "
            f"{len(self.failures) + len(report.passed)} checks failed{lines}"
        )

    @property
    def checks(self) -> tuple[str, ...]:
        """The names of the failed checks."""
        return tuple(failure.check for failure in self.failures)


class ContractOptions(TypedDict, total=False):
    """The options of ``check_storage`` (and ``check_storage_sync``), by keyword."""

    keyed: bool | None
    racers: int
    races: int
    large_object_bytes: int
    check_timeout: float


async def check_storage(
    open_storage: Callable[[str], ObjectStoragePort],
    *,
    keyed: bool | None = None,
    racers: int = 10,
    races: int = 3,
    large_object_bytes: int = 8 * 1024 * 1024,
    check_timeout: float = 60.0,
) -> StorageContractReport:
    """Run every check of the storage contract that applies to a storage; return a
    ``StorageContractReport`` of the checks that passed and those that did not apply.

    Each check works on objects of its own, with fresh names; every check runs, even after
    one fails (but none runs on an object without ``read`` and ``write``). A handle that is
    an async context manager is entered while its check runs, as a queue enters its storage.
    The objects are left behind (the port cannot delete a main object), so point
    ``open_storage`` at a scratch location.

    Parameters
    ----------
    open_storage : callable
        Given a name (letters, digits and ``-``), returns a handle on the object of that name;
        called again with the same name, a new handle on the same object (as another process
        would open it). A name the checks pass has never been written. Called in the event loop.
    keyed : bool or None
        Whether to check the keyed calls (``KeyedStoragePort``): None checks them if the
        storage has them, True fails if it has not, False skips them.
    racers : int
        How many handles race in the checks of concurrent writers (at least 2).
    races : int
        How many rounds of compare-and-swap writes they race, after the race to create.
    large_object_bytes : int
        The size of the object of the large-object checks.
    check_timeout : float
        Seconds each check may take; a check that takes longer fails.

    Raises
    ------
    StorageContractError
        If any check failed (an exception raised by the storage fails its check).
    ValueError
        If an argument is out of range.
    """
    options = _Options(racers, races, large_object_bytes, check_timeout)
    probe = open_storage(f"probe-{uuid.uuid4().hex[:16]}")
    storage = type(probe).__name__
    if not isinstance(probe, ObjectStoragePort):
        seen = f"{storage} has no async read() and write(content, if_match=None)"
        raise StorageContractError(StorageContractReport(storage, ()), [CheckFailure("object-port", seen)])
    has = _ports(probe, keyed)
    failures: list[CheckFailure] = []
    if keyed and not has["keyed"]:
        failures.append(
            CheckFailure("keyed-port", f"keyed=True, but {storage} has no {_missing_keyed(probe)}")
        )
    passed, skipped = await _run_checks(open_storage, options, has, keyed, failures)
    report = StorageContractReport(storage, ("object-port", *passed), skipped)
    if failures:
        raise StorageContractError(report, failures)
    return report


async def _run_checks(
    open_storage: Callable[[str], ObjectStoragePort],
    options: _Options,
    has: Mapping[Needs, bool],
    keyed: bool | None,
    failures: list[CheckFailure],
) -> tuple[list[str], dict[str, str]]:
    """Run each check the storage's ports allow, in order; return those that passed and those
    skipped (with why), adding each failure to ``failures``."""
    passed: list[str] = []
    skipped: dict[str, str] = {}
    for check in _CHECKS:
        if not has[check.needs]:
            skipped[check.name] = _WITHOUT[check.needs] if keyed is not False else "keyed=False"
            continue
        outcome = await _run(check, open_storage, options)
        if isinstance(outcome, CheckFailure):
            failures.append(outcome)
        elif outcome is None:
            passed.append(check.name)
        else:
            skipped[check.name] = outcome
    return passed, skipped


def check_storage_sync(
    open_storage: Callable[[str], ObjectStoragePort], **options: Unpack[ContractOptions]
) -> StorageContractReport:
    """``check_storage`` for code without an event loop: runs it in a new one (``asyncio.run``).

    The parameters, result and errors are those of ``check_storage``.
    """
    return asyncio.run(check_storage(open_storage, **options))


@dataclass(frozen=True)
class _Options:
    """The sizes of the checks (``check_storage``'s parameters), checked."""

    racers: int
    races: int
    large_object_bytes: int
    check_timeout: float

    def __post_init__(self) -> None:
        RACERS.check("racers", self.racers)
        RACES.check("races", self.races)
        LARGE_OBJECT_BYTES.check("large_object_bytes", self.large_object_bytes)
        CHECK_TIMEOUT.check("check_timeout", self.check_timeout)


_WITHOUT: dict[Needs, str] = {
    "object": "",
    "removable": "no remove (RemovableStoragePort)",
    "keyed": "no get, create, list_names and delete (KeyedStoragePort)",
    "mapped": "no mapped (MappedStoragePort), or no keyed calls",
    "signal": "no watch_changes (ChangeSignalPort), or no keyed calls",
}
"""Why the checks that need each port are skipped on a storage without it."""


def _ports(probe: ObjectStoragePort, keyed: bool | None) -> dict[Needs, bool]:
    """Which ports the checks may use on this storage."""
    with_keyed = keyed is not False and isinstance(probe, KeyedStoragePort)
    return {
        "object": True,
        "removable": isinstance(probe, RemovableStoragePort),
        "keyed": with_keyed,
        "mapped": with_keyed and isinstance(probe, MappedStoragePort),
        "signal": with_keyed and isinstance(probe, ChangeSignalPort),
    }


def _missing_keyed(probe: object) -> str:
    calls = ("get", "create", "list_names", "delete")
    return ", ".join(f"{call}()" for call in calls if not callable(getattr(probe, call, None)))


class _UnmetError(Exception):
    """A check saw the storage break the contract; the message says what it saw."""


class _NotApplicableError(Exception):
    """A check found at run time that it does not apply (the message says why)."""


class _Trial:
    """One check's run: opens handles on fresh objects, entered until the check ends."""

    def __init__(
        self, check: str, open_storage: Callable[[str], ObjectStoragePort], options: _Options
    ) -> None:
        self.check = check
        self.options = options
        self.stack = AsyncExitStack()
        self._open_storage = open_storage

    async def fresh(self) -> tuple[ObjectStoragePort, str]:
        """A handle on an object never written, and the object's name."""
        name = f"{self.check}-{uuid.uuid4().hex[:16]}"
        return await self.again(name), name

    async def again(self, name: str) -> ObjectStoragePort:
        """Another handle on the object ``name``."""
        handle = self._open_storage(name)
        if isinstance(handle, AbstractAsyncContextManager):
            await self.stack.enter_async_context(handle)
        return handle

    async def fresh_keyed(self) -> tuple[KeyedStoragePort, str]:
        """``fresh``, for a check that needs the keyed calls."""
        handle, name = await self.fresh()
        return cast(KeyedStoragePort, handle), name

    async def again_keyed(self, name: str) -> KeyedStoragePort:
        """``again``, for a check that needs the keyed calls."""
        return cast(KeyedStoragePort, await self.again(name))


async def _run(
    check: _Check, open_storage: Callable[[str], ObjectStoragePort], options: _Options
) -> CheckFailure | str | None:
    """Run one check: None if it passed, the reason if it did not apply, else its failure."""
    trial = _Trial(check.name, open_storage, options)
    try:
        async with asyncio.timeout(options.check_timeout) as deadline:
            async with trial.stack:
                await check.run(trial)
    except _NotApplicableError as exc:
        return str(exc)
    except _UnmetError as exc:
        return CheckFailure(check.name, str(exc))
    except TimeoutError as exc:
        if deadline.expired():
            return CheckFailure(check.name, f"did not finish within {options.check_timeout:g} s")
        return CheckFailure(check.name, f"raised {_raised(exc)}")
    except Exception as exc:
        return CheckFailure(check.name, f"raised {_raised(exc)}")
    return None


def _raised(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def _show(value: object) -> str:
    """``repr`` of a value, shortened to what a message can hold."""
    text = repr(value)
    return text if len(text) <= 120 else f"{text[:100]}... ({len(text)} characters)"


def _require(condition: bool, seen: str) -> None:
    if not condition:
        raise _UnmetError(seen)


async def _ok(doing: str, call: Awaitable[T]) -> T:
    """Await a call that must succeed."""
    try:
        return await call
    except Exception as exc:
        raise _UnmetError(f"{doing} raised {_raised(exc)}") from exc


async def _conflict(doing: str, call: Awaitable[object]) -> None:
    """Await a call that must raise ``CASConflictError``."""
    try:
        outcome = await call
    except CASConflictError:
        return
    except Exception as exc:
        raise _UnmetError(f"{doing} raised {_raised(exc)}, not CASConflictError") from exc
    raise _UnmetError(f"{doing} returned {_show(outcome)} instead of raising CASConflictError")


async def _wrote(doing: str, call: Awaitable[object]) -> str:
    """Await a ``write`` that must succeed, and return its etag."""
    etag = await _ok(doing, call)
    _require(isinstance(etag, str), f"{doing} returned {_show(etag)}, not an etag (a str)")
    return cast(str, etag)


async def _holds(storage: ObjectStoragePort, content: bytes, etag: str | None, when: str) -> None:
    """Check that ``read`` returns ``content`` at ``etag``."""
    seen = await _ok(f"read() {when}", storage.read())
    if seen == (content, etag):
        return
    if isinstance(seen, tuple) and len(seen) == 2 and seen[1] == etag and isinstance(seen[0], bytes):
        raise _UnmetError(f"read() {when} returned the right etag but {_differs(seen[0], content)}")
    raise _UnmetError(f"read() {when} returned {_show(seen)}, expected {_show((content, etag))}")


def _differs(seen: bytes, expected: bytes) -> str:
    """How ``seen`` differs from the ``expected`` content."""
    if len(expected) <= 50:
        return f"content {_show(seen)}, not {_show(expected)}"
    first = next((i for i, (a, b) in enumerate(zip(seen, expected, strict=False)) if a != b), None)
    where = f"first differing at byte {first}" if first is not None else "one a prefix of the other"
    return f"{len(seen)} bytes where {len(expected)} were written, {where}"


async def _reads_of_a_missing_object(trial: _Trial) -> None:
    storage, _ = await trial.fresh()
    for attempt in ("a first", "a second"):
        await _holds(storage, b"", None, f"({attempt}) of an object never written")
    await _wrote(
        "write(if_match=None) after reads of the missing object (a read must create nothing)",
        storage.write(b"created", None),
    )


async def _create_if_absent(trial: _Trial) -> None:
    storage, name = await trial.fresh()
    other = await trial.again(name)
    etag = await _wrote("write(b'first', if_match=None) of a new object", storage.write(b"first", None))
    await _conflict("write(if_match=None) of an object that exists", storage.write(b"second", None))
    await _conflict(
        "write(if_match=None) of an object that exists, through another handle", other.write(b"third", None)
    )
    await _holds(storage, b"first", etag, "after the rejected creates")


async def _remove(trial: _Trial) -> None:
    storage, name = await trial.fresh()
    removing = cast(RemovableStoragePort, storage)
    await _ok("remove() of an object never written", removing.remove())
    await _wrote("write(b'first', if_match=None) of a new object", storage.write(b"first", None))
    await _ok("remove()", removing.remove())
    await _holds(storage, b"", None, "after remove()")
    await _holds(await trial.again(name), b"", None, "after remove(), through another handle")
    await _ok("remove() of an object removed already", removing.remove())
    etag = await _wrote("write(b'again', if_match=None) after remove()", storage.write(b"again", None))
    await _holds(storage, b"again", etag, "once created again")


async def _write_at_current_etag(trial: _Trial) -> None:
    storage, name = await trial.fresh()
    first = await _wrote("write(b'v1') of a new object", storage.write(b"v1"))
    second = await _wrote("write(b'v2', if_match=<the etag of v1>)", storage.write(b"v2", if_match=first))
    _require(second != first, f"the etag did not change with the content: both writes returned {first!r}")
    await _holds(storage, b"v2", second, "after a write at the current etag")
    await _holds(await trial.again(name), b"v2", second, "through another handle")


async def _write_at_stale_etag(trial: _Trial) -> None:
    storage, name = await trial.fresh()
    other = await trial.again(name)
    stale = await _wrote("write(b'v1') of a new object", storage.write(b"v1"))
    current = await _wrote(
        "another handle's write(b'v2', if_match=<the etag of v1>)", other.write(b"v2", if_match=stale)
    )
    await _conflict(
        "write(if_match=<an etag another handle's write replaced>)", storage.write(b"lost", if_match=stale)
    )
    await _holds(storage, b"v2", current, "after the write at a stale etag")


async def _write_at_foreign_etag(trial: _Trial) -> None:
    storage, _ = await trial.fresh()
    elsewhere, _ = await trial.fresh()
    etag = await _wrote("write(b'v1') of a new object", elsewhere.write(b"v1"))
    await _conflict(
        "write(if_match=<another object's etag>) of an object that does not exist",
        storage.write(b"v1", if_match=etag),
    )
    await _holds(storage, b"", None, "after the rejected write")


async def _racing_writers(trial: _Trial) -> None:
    storage, name = await trial.fresh()
    writers = [await trial.again(name) for _ in range(trial.options.racers)]
    etag: str | None = None
    for round_number in range(trial.options.races + 1):
        race = f"round {round_number} (if_match={etag!r})" if round_number else "the race to create"
        bodies = [f"round-{round_number}-writer-{i}".encode() for i in range(len(writers))]
        outcomes = await asyncio.gather(
            *(writer.write(body, if_match=etag) for writer, body in zip(writers, bodies, strict=True)),
            return_exceptions=True,
        )
        winner = _one_winner(outcomes, lambda outcome: isinstance(outcome, str), race)
        etag = cast(str, outcomes[winner])
        await _holds(storage, bodies[winner], etag, f"after {race}, which writer {winner} won")


async def _racing_creators(trial: _Trial) -> None:
    _, name = await trial.fresh()
    creators = [await trial.again_keyed(name) for _ in range(trial.options.racers)]
    outcomes = await asyncio.gather(
        *(creator.create("log/7", b"creator-%d" % i) for i, creator in enumerate(creators)),
        return_exceptions=True,
    )
    winner = _one_winner(outcomes, lambda outcome: outcome is None, "the race to create log/7")
    seen = await _ok("get('log/7') after the race", creators[0].get("log/7"))
    _require(seen == b"creator-%d" % winner, f"get('log/7') returned {_show(seen)}, but creator {winner} won")


def _one_winner(outcomes: Sequence[object], won: Callable[[object], bool], race: str) -> int:
    """The one racer that won; every other must have lost with ``CASConflictError``."""
    winners = [i for i, outcome in enumerate(outcomes) if won(outcome)]
    if len(winners) != 1:
        lost = Counter(
            _raised(o) if isinstance(o, BaseException) else _show(o) for o in outcomes if not won(o)
        )
        which = f" (racers {winners})" if 0 < len(winners) < len(outcomes) else ""
        others = "; the others got " + ", ".join(f"{seen} ({n}x)" for seen, n in lost.items()) if lost else ""
        raise _UnmetError(f"{len(winners)} of {len(outcomes)} racers won {race}{which}{others}")
    wrong = [o for o in outcomes if not won(o) and not isinstance(o, CASConflictError)]
    if wrong:
        got = _raised(wrong[0]) if isinstance(wrong[0], BaseException) else _show(wrong[0])
        raise _UnmetError(f"a racer that lost {race} got {got}, not CASConflictError")
    return winners[0]


async def _large_object(trial: _Trial) -> None:
    storage, _ = await trial.fresh()
    big = os.urandom(trial.options.large_object_bytes)
    etag = await _wrote(f"write() of {len(big)} bytes", storage.write(big))
    await _holds(storage, big, etag, f"of {len(big)} bytes written")
    bigger = big[::-1] + b"tail"
    new_etag = await _wrote(
        f"write() of {len(bigger)} bytes at the current etag", storage.write(bigger, etag)
    )
    await _holds(storage, bigger, new_etag, f"of {len(bigger)} bytes that replaced them")


async def _get_of_a_missing_name(trial: _Trial) -> None:
    storage, _ = await trial.fresh_keyed()
    seen = await _ok("get() of a name never created", storage.get("log/00000000000000000001"))
    _require(seen is None, f"get() of a name never created returned {_show(seen)}, not None")
    listed = await _ok("list_names('log/') of a new object", storage.list_names("log/"))
    _require(listed == [], f"list_names('log/') of a new object returned {_show(listed)}, not []")
    await _ok(
        "create() after get() of the missing name (a get must create nothing)",
        storage.create("log/00000000000000000001", b"entry"),
    )


async def _create_is_exclusive(trial: _Trial) -> None:
    storage, name = await trial.fresh_keyed()
    other = await trial.again_keyed(name)
    await _ok("create('log/1') of a new name", storage.create("log/1", b"first"))
    await _conflict(
        "create('log/1') through another handle, once it exists", other.create("log/1", b"second")
    )
    await _conflict("create('log/1') once it exists", storage.create("log/1", b"third"))
    seen = await _ok("get('log/1')", other.get("log/1"))
    _require(
        seen == b"first", f"get('log/1') after the rejected creates returned {_show(seen)}, not b'first'"
    )


async def _named_apart_from_main(trial: _Trial) -> None:
    storage, _ = await trial.fresh_keyed()
    await _ok("create('log/1')", storage.create("log/1", b"entry"))
    await _holds(storage, b"", None, "of the main object after create('log/1')")
    etag = await _wrote("write(b'main') of the main object", storage.write(b"main"))
    await _holds(storage, b"main", etag, "of the main object")
    seen = await _ok("get('log/1')", storage.get("log/1"))
    _require(seen == b"entry", f"get('log/1') after a write of the main object returned {_show(seen)}")


async def _list_names(trial: _Trial) -> None:
    storage, _ = await trial.fresh_keyed()
    for name in ["log/0003", "log/0001", "log/0002", "snap/0002", "logbook/0001"]:
        await _ok(f"create({name!r})", storage.create(name, name.encode()))
    expected: list[tuple[str, str, list[str]]] = [
        ("log/", "", ["log/0001", "log/0002", "log/0003"]),
        ("log/", "log/0001", ["log/0002", "log/0003"]),
        ("log/", "log/0003", []),
        ("snap/", "", ["snap/0002"]),
        ("none/", "", []),
    ]
    for prefix, start_after, names in expected:
        call = f"list_names({prefix!r}, start_after={start_after!r})"
        seen = await _ok(call, storage.list_names(prefix, start_after=start_after))
        _require(seen == names, f"{call} returned {_show(seen)}, not {names}")


async def _delete(trial: _Trial) -> None:
    storage, _ = await trial.fresh_keyed()
    await _ok("create('log/1')", storage.create("log/1", b"x"))
    await _ok("delete('log/1')", storage.delete("log/1"))
    await _ok("delete('log/1') of a name already deleted", storage.delete("log/1"))
    await _ok("delete('log/2') of a name never created", storage.delete("log/2"))
    seen = await _ok("get('log/1') after its delete", storage.get("log/1"))
    _require(seen is None, f"get('log/1') after its delete returned {_show(seen)}, not None")
    listed = await _ok("list_names('log/') after the delete", storage.list_names("log/"))
    _require(listed == [], f"list_names('log/') after the delete returned {_show(listed)}, not []")
    await _ok("create('log/1') again after its delete", storage.create("log/1", b"again"))
    seen = await _ok("get('log/1')", storage.get("log/1"))
    _require(seen == b"again", f"get('log/1') of the name created again returned {_show(seen)}, not b'again'")


async def _large_named_object(trial: _Trial) -> None:
    storage, _ = await trial.fresh_keyed()
    big = os.urandom(trial.options.large_object_bytes)
    await _ok(f"create('slab/1') of {len(big)} bytes", storage.create("slab/1", big))
    seen = await _ok("get('slab/1')", storage.get("slab/1"))
    _require(isinstance(seen, bytes), f"get('slab/1') of a large object returned {_show(seen)}")
    _require(seen == big, f"get('slab/1') returned {_differs(cast(bytes, seen), big)}")


async def _mapped_reads(trial: _Trial) -> None:
    storage, _ = await trial.fresh_keyed()
    mapping = cast(MappedStoragePort, storage)
    missing = await _ok("mapped('slab/1') of a name never created", mapping.mapped("slab/1"))
    _require(missing is None, f"mapped() of a name never created returned {_show(missing)}, not None")
    content = os.urandom(64 * 1024)
    await _ok("create('slab/1')", storage.create("slab/1", content))
    view = await _ok("mapped('slab/1')", mapping.mapped("slab/1"))
    _require(view is not None, "mapped('slab/1') of an object that exists returned None")
    _require(
        bytes(cast(memoryview, view)) == content, f"mapped('slab/1') {_differs(bytes(view or b''), content)}"
    )
    await _ok("delete('slab/1')", storage.delete("slab/1"))
    kept = bytes(cast(memoryview, view))
    cast(memoryview, view).release()
    _require(kept == content, f"a mapping, after delete('slab/1'), holds {_differs(kept, content)}")


async def _change_signal(trial: _Trial) -> None:
    watched, name = await trial.fresh_keyed()
    writer = await trial.again_keyed(name)
    loop = asyncio.get_running_loop()
    called = asyncio.Event()
    outside: list[str] = []

    def callback() -> None:
        if _running_loop() is loop:
            called.set()
        else:
            outside.append(threading.current_thread().name)
            loop.call_soon_threadsafe(called.set)

    stop = cast(ChangeSignalPort, watched).watch_changes(callback)
    if stop is None:
        raise _NotApplicableError("watch_changes returned None (it cannot watch a new object)")
    try:
        for entry in ("log/00000000000000000001", "log/00000000000000000002"):
            called.clear()
            await _ok(f"another handle's create({entry!r})", writer.create(entry, b"entry"))
            try:
                async with asyncio.timeout(SIGNAL_WAIT):
                    await called.wait()
            except TimeoutError:
                raise _UnmetError(
                    f"no call back within {SIGNAL_WAIT:g} s of another handle's create({entry!r})"
                ) from None
            _require(not outside, f"the callback was called outside the event loop, in thread {outside[:1]}")
    finally:
        stop()


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


@dataclass(frozen=True)
class _Check:
    """One check: its name, the port it needs, what it requires and the coroutine that runs it."""

    name: str
    needs: Needs
    requires: str
    run: Callable[[_Trial], Awaitable[None]]


_CHECKS = (
    _Check(
        "reads-of-a-missing-object",
        "object",
        "read() of an object never written returns (b'', None), and creates nothing",
        _reads_of_a_missing_object,
    ),
    _Check(
        "create-if-absent",
        "object",
        "write(content, if_match=None) creates the object, and raises CASConflictError if it exists",
        _create_if_absent,
    ),
    _Check(
        "remove",
        "removable",
        "remove() deletes the object (read() returns (b'', None)), which can be created again;"
        " a missing one is no error",
        _remove,
    ),
    _Check(
        "write-at-current-etag",
        "object",
        "a write at the current etag replaces the content and returns a new etag, which every handle reads",
        _write_at_current_etag,
    ),
    _Check(
        "write-at-stale-etag",
        "object",
        "a write at an etag another write replaced raises CASConflictError and changes nothing",
        _write_at_stale_etag,
    ),
    _Check(
        "write-at-foreign-etag",
        "object",
        "a write of a missing object at another object's etag raises CASConflictError and creates nothing",
        _write_at_foreign_etag,
    ),
    _Check(
        "racing-writers",
        "object",
        "of handles racing to create the object, then to write at one etag, one wins each race; the rest get"
        " CASConflictError",
        _racing_writers,
    ),
    _Check(
        "large-object",
        "object",
        "an object of large_object_bytes (8 MiB) reads back byte for byte, and is replaced at its etag",
        _large_object,
    ),
    _Check(
        "get-of-a-missing-name",
        "keyed",
        "get() of a name never created returns None, and creates nothing",
        _get_of_a_missing_name,
    ),
    _Check(
        "create-is-exclusive",
        "keyed",
        "create() of a name that exists raises CASConflictError and keeps the first content",
        _create_is_exclusive,
    ),
    _Check(
        "named-apart-from-main",
        "keyed",
        "named objects and the main object do not touch each other",
        _named_apart_from_main,
    ),
    _Check(
        "list-names",
        "keyed",
        "list_names(prefix, start_after) returns the names under the prefix after start_after, sorted",
        _list_names,
    ),
    _Check(
        "delete",
        "keyed",
        "delete() removes a name (it can be created again); a missing name is no error",
        _delete,
    ),
    _Check(
        "racing-creators",
        "keyed",
        "of handles racing to create one name, exactly one wins; the others raise CASConflictError",
        _racing_creators,
    ),
    _Check(
        "large-named-object",
        "keyed",
        "a named object of large_object_bytes reads back byte for byte",
        _large_named_object,
    ),
    _Check(
        "mapped-reads",
        "mapped",
        "mapped() returns None for a missing name, else the content, which stays readable after delete()",
        _mapped_reads,
    ),
    _Check(
        "change-signal",
        "signal",
        "watch_changes() calls back in the event loop after each create() by another handle",
        _change_signal,
    ),
)
"""Every check, in the order they run."""

STORAGE_CHECKS: Mapping[str, str] = {check.name: check.requires for check in _CHECKS}
"""The name of each check of ``check_storage``, in the order they run, and what it requires of a
storage (besides ``object-port``: the storage has ``read`` and ``write``, and ``keyed-port``:
with ``keyed=True``, it has the keyed calls)."""
