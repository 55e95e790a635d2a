"""``jqueue.testing.check_storage`` fails the storages that break the contract, naming the checks they
break: each storage here is an in-memory one with one fault injected (the real backends pass, in
test_storage_contract.py). Also its report, its arguments, and the runnable example of docs/storage.md."""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TypedDict, Unpack

import pytest

import jqueue
from jqueue import CASConflictError, InMemoryStorage, ObjectStoragePort, StorageError
from jqueue.testing import (
    STORAGE_CHECKS,
    StorageContractError,
    StorageContractReport,
    check_storage,
    check_storage_sync,
    storage_contract,
)

DOCS = Path(__file__).parent.parent / "docs" / "storage.md"
OBJECT_CHECKS = (
    "reads-of-a-missing-object",
    "create-if-absent",
    "write-at-current-etag",
    "write-at-stale-etag",
    "write-at-foreign-etag",
    "racing-writers",
    "large-object",
)
REMOVABLE_OBJECT_CHECKS = (*OBJECT_CHECKS[:2], "remove", *OBJECT_CHECKS[2:])
"""What a storage of every object check and ``remove`` passes (in the order they run)."""


class Options(TypedDict, total=False):
    """Keyword arguments of ``check_storage``."""

    keyed: bool | None
    racers: int
    races: int
    large_object_bytes: int
    check_timeout: float


FAST = Options(races=2, large_object_bytes=64 * 1024)
"""Sizes that keep the checks of in-memory storages quick."""


def shared(kind: Callable[[], InMemoryStorage]) -> Callable[[str], InMemoryStorage]:
    """Opens one storage of ``kind`` per name: every handle on a name is the same object."""
    objects: dict[str, InMemoryStorage] = {}
    return lambda name: objects.setdefault(name, kind())


async def failed_checks(
    open_storage: Callable[[str], ObjectStoragePort], **options: Unpack[Options]
) -> StorageContractError:
    """The error ``check_storage`` raises for the storage (with ``FAST`` sizes unless ``options`` say)."""
    with pytest.raises(StorageContractError) as raised:
        await check_storage(open_storage, **(FAST | options))
    return raised.value


class IgnoresIfMatch(InMemoryStorage):
    """Writes whatever etag it is given (as a PUT without its condition would)."""

    async def write(self, content: bytes, if_match: str | None = None) -> str:
        _, current = await self.read()
        return await super().write(content, current)


class ConstantEtag(InMemoryStorage):
    """Honours ``if_match``, but its etag never changes once the object exists."""

    async def read(self) -> tuple[bytes, str | None]:
        content, etag = await super().read()
        return content, etag and "same"

    async def write(self, content: bytes, if_match: str | None = None) -> str:
        _, current = await super().read()
        if if_match != (current and "same"):
            raise CASConflictError(f"at {current!r}")
        await super().write(content, current)
        return "same"


class ConflictAsStorageError(InMemoryStorage):
    """Reports a lost race as a failure of the store (a 412 left untranslated)."""

    async def write(self, content: bytes, if_match: str | None = None) -> str:
        try:
            return await super().write(content, if_match)
        except CASConflictError as exc:
            raise StorageError("PreconditionFailed (412)", cause=exc) from exc


class CreateOverwrites(InMemoryStorage):
    """Creates a named object even when it exists."""

    async def create(self, name: str, content: bytes) -> None:
        await self.delete(name)
        await super().create(name, content)


class ListIgnoresStartAfter(InMemoryStorage):
    """Lists every name under the prefix, whatever ``start_after`` says."""

    async def list_names(self, prefix: str, start_after: str = "") -> list[str]:
        return await super().list_names(prefix)


async def test_a_storage_that_ignores_if_match_fails_the_conditional_writes() -> None:
    error = await failed_checks(shared(IgnoresIfMatch))
    assert error.checks == (
        "create-if-absent",
        "write-at-stale-etag",
        "write-at-foreign-etag",
        "racing-writers",
    )
    seen = dict(error.failures)
    assert seen["create-if-absent"] == (
        "write(if_match=None) of an object that exists returned '2' instead of raising CASConflictError"
    )
    assert seen["racing-writers"] == "10 of 10 racers won the race to create"
    assert str(error).startswith("IgnoresIfMatch does not meet the storage contract: 4 of 17 checks failed\n")


async def test_a_storage_whose_etag_does_not_change_fails_the_compare_and_swap_checks() -> None:
    error = await failed_checks(shared(ConstantEtag))
    assert error.checks == ("write-at-current-etag", "write-at-stale-etag", "racing-writers")
    seen = dict(error.failures)
    assert (
        seen["write-at-current-etag"]
        == "the etag did not change with the content: both writes returned 'same'"
    )
    assert seen["racing-writers"].startswith("10 of 10 racers won round 1 (if_match='same')"), seen


async def test_a_lost_race_reported_as_a_storage_error_is_named() -> None:
    error = await failed_checks(shared(ConflictAsStorageError))
    assert error.checks == (
        "create-if-absent",
        "write-at-stale-etag",
        "write-at-foreign-etag",
        "racing-writers",
    )
    seen = dict(error.failures)
    assert seen["create-if-absent"] == (
        "write(if_match=None) of an object that exists raised StorageError: PreconditionFailed (412):"
        " memory://: expected etag None, found '1', not CASConflictError"
    )
    assert seen["racing-writers"].startswith(
        "a racer that lost the race to create got StorageError: PreconditionFailed (412): memory://"
    ), seen


async def test_creates_that_overwrite_fail_the_exclusive_create_checks() -> None:
    error = await failed_checks(shared(CreateOverwrites))
    assert error.checks == ("create-is-exclusive", "racing-creators")
    assert dict(error.failures)["create-is-exclusive"] == (
        "create('log/1') through another handle, once it exists returned None"
        " instead of raising CASConflictError"
    )


async def test_a_list_that_ignores_start_after_fails_only_the_list_check() -> None:
    error = await failed_checks(shared(ListIgnoresStartAfter))
    assert error.failures == (
        (
            "list-names",
            "list_names('log/', start_after='log/0001') returned ['log/0001', 'log/0002', 'log/0003'],"
            " not ['log/0002', 'log/0003']",
        ),
    )
    assert set(error.report.passed) == {"object-port", *STORAGE_CHECKS} - {
        "list-names",
        *error.report.skipped,
    }


async def test_handles_that_do_not_share_their_object_fail_every_check_of_two_handles() -> None:
    error = await failed_checks(lambda name: InMemoryStorage(name=name))
    assert error.checks == (
        "create-if-absent",
        "write-at-current-etag",
        "write-at-stale-etag",
        "racing-writers",
        "create-is-exclusive",
        "racing-creators",
    )
    assert dict(error.failures)["write-at-current-etag"] == (
        "read() through another handle returned (b'', None), expected (b'v2', '2')"
    )


async def test_a_hanging_call_fails_its_check_in_time_and_the_others_run() -> None:
    class HangsOnV2(InMemoryStorage):
        async def write(self, content: bytes, if_match: str | None = None) -> str:
            if content == b"v2":
                await asyncio.Event().wait()
            return await super().write(content, if_match)

    error = await failed_checks(shared(HangsOnV2), check_timeout=0.2)
    assert error.failures == (
        ("write-at-current-etag", "did not finish within 0.2 s"),
        ("write-at-stale-etag", "did not finish within 0.2 s"),
    )


async def test_a_large_object_read_back_wrong_is_described_by_its_first_difference() -> None:
    class FlipsByte100(InMemoryStorage):
        async def read(self) -> tuple[bytes, str | None]:
            content, etag = await super().read()
            if len(content) > 1000:
                content = content[:100] + bytes([content[100] ^ 1]) + content[101:]
            return content, etag

    error = await failed_checks(shared(FlipsByte100), large_object_bytes=4096)
    assert error.failures == (
        (
            "large-object",
            "read() of 4096 bytes written returned the right etag but 4096 bytes where 4096 were written,"
            " first differing at byte 100",
        ),
    )


class Mapped(InMemoryStorage):
    """Maps its named objects; with ``lost_on_delete``, a mapping is zeroed when its object is deleted."""

    def __init__(self, *, lost_on_delete: bool) -> None:
        super().__init__()
        self.lost_on_delete = lost_on_delete
        self.maps: dict[str, bytearray] = {}

    async def mapped(self, name: str) -> memoryview | None:
        content = await self.get(name)
        if content is None:
            return None
        return memoryview(self.maps.setdefault(name, bytearray(content)))

    async def delete(self, name: str) -> None:
        await super().delete(name)
        if self.lost_on_delete and name in self.maps:
            self.maps[name][:] = bytes(len(self.maps[name]))


async def test_a_mapping_must_outlive_the_delete_of_its_object() -> None:
    report = await check_storage(shared(lambda: Mapped(lost_on_delete=False)), **FAST)
    assert "mapped-reads" in report.passed
    error = await failed_checks(shared(lambda: Mapped(lost_on_delete=True)))
    assert error.failures == (
        (
            "mapped-reads",
            "a mapping, after delete('slab/1'), holds 65536 bytes where 65536 were written,"
            " first differing at byte 0",
        ),
    )


class Signalling(InMemoryStorage):
    """Calls its watchers after each create: in the event loop, from another thread, or never."""

    def __init__(self, how: str) -> None:
        super().__init__()
        self.how = how
        self.watchers: list[Callable[[], None]] = []

    def watch_changes(self, callback: Callable[[], None]) -> Callable[[], None] | None:
        if self.how == "cannot":
            return None
        self.watchers.append(callback)
        return lambda: self.watchers.remove(callback)

    async def create(self, name: str, content: bytes) -> None:
        await super().create(name, content)
        for watcher in self.watchers if self.how != "never" else []:
            if self.how == "thread":
                threading.Thread(target=watcher).start()
            else:
                asyncio.get_running_loop().call_soon(watcher)


async def test_a_change_signal_must_call_back_in_the_event_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    report = await check_storage(shared(lambda: Signalling("loop")), **FAST)
    assert "change-signal" in report.passed
    report = await check_storage(shared(lambda: Signalling("cannot")), **FAST)
    assert report.skipped["change-signal"] == "watch_changes returned None (it cannot watch a new object)"
    monkeypatch.setattr(storage_contract, "SIGNAL_WAIT", 0.2)
    error = await failed_checks(shared(lambda: Signalling("never")))
    assert error.failures == (
        ("change-signal", "no call back within 0.2 s of another handle's create('log/00000000000000000001')"),
    )
    error = await failed_checks(shared(lambda: Signalling("thread")))
    assert error.checks == ("change-signal",)
    assert error.failures[0].seen.startswith(
        "the callback was called outside the event loop, in thread ['Thread-"
    )


class TwoMethods:
    """A storage with only ``read`` and ``write``, over an in-memory one."""

    def __init__(self, inner: InMemoryStorage) -> None:
        self.inner = inner

    async def read(self) -> tuple[bytes, str | None]:
        return await self.inner.read()

    async def write(self, content: bytes, if_match: str | None = None) -> str:
        return await self.inner.write(content, if_match)


async def test_the_keyed_checks_run_when_the_storage_has_them_or_when_asked() -> None:
    objects: dict[str, InMemoryStorage] = {}
    two_methods = lambda name: TwoMethods(objects.setdefault(name, InMemoryStorage()))  # noqa: E731
    report = await check_storage(two_methods, **FAST)
    assert report.passed == ("object-port", *OBJECT_CHECKS)
    assert set(report.skipped) == set(STORAGE_CHECKS) - set(OBJECT_CHECKS)
    error = await failed_checks(two_methods, keyed=True)
    assert error.failures == (
        ("keyed-port", "keyed=True, but TwoMethods has no get(), create(), list_names(), delete()"),
    )
    report = await check_storage(shared(InMemoryStorage), **(FAST | Options(keyed=False)))
    assert report.passed == ("object-port", *REMOVABLE_OBJECT_CHECKS)
    assert set(report.skipped.values()) == {"keyed=False"}


async def test_an_object_that_is_no_storage_fails_the_port_check_alone() -> None:
    class ReadOnly:
        async def read(self) -> tuple[bytes, str | None]:
            return b"", None

    error = await failed_checks(lambda name: ReadOnly())  # type: ignore[arg-type,return-value]
    assert error.failures == (
        ("object-port", "ReadOnly has no async read() and write(content, if_match=None)"),
    )
    assert error.report == StorageContractReport("ReadOnly", ())


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("racers", 1, "racers must be at least 2, got 1"),
        ("races", 0, "races must be at least 1, got 0"),
        ("large_object_bytes", -1, "large_object_bytes must not be negative, got -1"),
        ("check_timeout", 0, "check_timeout must be positive, got 0"),
    ],
)
async def test_the_sizes_are_checked(option: str, value: float, message: str) -> None:
    with pytest.raises(ValueError, match=f"^{message}$"):
        await check_storage(shared(InMemoryStorage), **{option: value})  # type: ignore[arg-type]


def test_the_sync_call_runs_the_checks_in_a_loop_of_its_own() -> None:
    report = check_storage_sync(shared(InMemoryStorage), **FAST)
    assert str(report) == (
        "InMemoryStorage: 17 checks passed, 1 skipped\n"
        "  skipped, no watch_changes (ChangeSignalPort), or no keyed calls: change-signal"
    )


def _documented_example() -> str:
    text = DOCS.read_text()
    section = text[text.index("### Checking a backend of your own") :]
    start = section.index("```python\n") + len("```python\n")
    return section[start : section.index("```\n", start)]


def test_the_documented_check_of_a_storage_of_your_own_runs_as_a_plain_script(tmp_path: Path) -> None:
    for module in ("pytest", "hypothesis", "moto", "boto3", "aioboto3"):
        (tmp_path / f"{module}.py").write_text(f"raise ImportError('{module} is not installed')\n")
    (tmp_path / "check_my_storage.py").write_text(_documented_example())
    source = Path(jqueue.__file__).resolve().parents[1]
    done = subprocess.run(
        [sys.executable, str(tmp_path / "check_my_storage.py")],
        env={"PYTHONPATH": f"{tmp_path}:{source}", "PATH": ""},
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("DictStorage: 8 checks passed, 10 skipped\n"), done.stdout


def test_the_documentation_names_every_check() -> None:
    section = DOCS.read_text().split("### Checking a backend of your own")[1].split("\n## ")[0]
    named = set(re.findall(r"`([a-z-]+)`", section))
    assert {"object-port", "keyed-port", *STORAGE_CHECKS} <= named
