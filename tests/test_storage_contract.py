"""The storage port contract, checked on every backend against real servers by the function users
run on theirs (``jqueue.testing.check_storage``); its own tests are in test_storage_contract_check.py."""

from __future__ import annotations

from conftest import Backend
from jqueue import ObjectStoragePort
from jqueue.testing import STORAGE_CHECKS, check_storage

NOT_APPLICABLE = {
    "memory": {"change-signal"},
    "file": set(),
    "s3-moto": {"mapped-reads", "change-signal"},
    "s3-seaweedfs": {"mapped-reads", "change-signal"},
    "gcs": {"mapped-reads", "change-signal"},
}
"""The checks of ports a backend does not have: the file and memory backends map (a file's
mapping, a view of the bytes held), and only the file backend signals."""


async def test_every_backend_meets_the_storage_contract(backend: Backend) -> None:
    # SeaweedFS stalls ~3 s per round of ten racing writers, so it races one round.
    rounds = 1 if backend.name == "s3-seaweedfs" else 3
    report = await check_storage(backend.handle, keyed=True, racers=10, races=rounds)
    skipped = NOT_APPLICABLE[backend.name]
    assert report.passed == ("object-port", *(check for check in STORAGE_CHECKS if check not in skipped))
    assert set(report.skipped) == skipped


async def test_every_adapter_satisfies_the_port(backend: Backend) -> None:
    storage, _ = backend.new()
    assert isinstance(storage, ObjectStoragePort)
    assert getattr(storage, "url", "").split("://")[0] in {"memory", "file", "s3", "gs"}
