"""What ``jqueue serve`` and its clients both read under a storage root: where each queue lives
(``ROOT/NAME.json``), the broker record (``ROOT/_broker.json``) that names the process clients
call first, and the members of a root that many brokers serve (``ROOT/_brokers.json``, each
member's beat in ``ROOT/_member-OWNER.json``)."""

from __future__ import annotations

from pathlib import Path
from typing import TypeVar
from urllib.parse import urlsplit, urlunsplit

import msgspec

from jqueue.adapters.storage.url import is_url, storage_at
from jqueue.adapters.web.queue_names import QUEUE_NAME, BadQueueNameError, shard_name
from jqueue.domain.errors import CorruptStateError
from jqueue.ports.storage import ObjectStoragePort

RECORD_NAME = "_broker.json"
"""The broker record's name under the root (no queue name starts with ``_``)."""


class BrokerRecord(msgspec.Struct, forbid_unknown_fields=True):
    """The record: who serves the root (its advertised URL), since which epoch, a beat that
    every renewal raises, and whether its broker stopped (then anyone may take over at once)."""

    address: str
    epoch: int
    beat: int
    owner: str
    renewed_at: str
    released: bool = False


R = TypeVar("R", bound=msgspec.Struct)

MEMBERS_NAME = "_brokers.json"
"""The members record's name under the root."""


class MembersRecord(msgspec.Struct, forbid_unknown_fields=True):
    """The brokers that serve a root together: each one's owner id and advertised address."""

    members: dict[str, str] = msgspec.field(default_factory=dict)


def members_record(content: bytes, where: str) -> MembersRecord:
    """Return the members record stored as ``content`` at ``where``.

    Raises
    ------
    CorruptStateError
        If ``content`` is not a members record.
    """
    return _decoded(MembersRecord, "a members record", content, where)


def broker_record(content: bytes, where: str) -> BrokerRecord:
    """Return the broker record stored as ``content`` at ``where``.

    Raises
    ------
    CorruptStateError
        If ``content`` is not a broker record.
    """
    return _decoded(BrokerRecord, "a broker record", content, where)


def _decoded(kind: type[R], what: str, content: bytes, where: str) -> R:
    try:
        return msgspec.json.decode(content, type=kind)
    except (msgspec.DecodeError, UnicodeDecodeError) as exc:
        raise CorruptStateError(where, f"not {what}: {exc}") from exc


def root_location(root: str, filename: str) -> str:
    """Return where ``filename`` lives under ``root``: a path, or a storage URL."""
    if not is_url(root):
        return str(Path(root) / filename)
    parts = urlsplit(root)
    return urlunsplit(parts._replace(path=f"{parts.path.rstrip('/')}/{filename}"))


def queue_location(root: str, name: str) -> str:
    """Return where queue ``name`` lives under ``root``: a path, or a storage URL."""
    if not QUEUE_NAME.fullmatch(name):
        raise BadQueueNameError(f"{name!r} is not a queue name (letters, digits, '_' and '-', at most 128)")
    return root_location(root, f"{name}.json")


def root_storage(root: str, name: str) -> ObjectStoragePort:
    """Return the storage of queue ``name`` under ``root``."""
    return storage_at(queue_location(root, name))


def record_storage(root: str) -> ObjectStoragePort:
    """Return the storage of the root's broker record (``ROOT/_broker.json``)."""
    return storage_at(root_location(root, RECORD_NAME))


def shard_storage(root: str, name: str, shard: int) -> ObjectStoragePort:
    """Return the storage of shard ``shard`` of queue ``name`` under ``root``: the queue's own
    for shard 0, ``ROOT/NAME.shard-K.json`` for the others (``shard_name``)."""
    return storage_at(shard_location(queue_location(root, name), shard))


def shard_location(location: str, shard: int) -> str:
    """Return where shard ``shard`` of the queue at ``location`` (``ROOT/NAME.json``: a path, or
    a storage URL, its query kept) lives: ``location`` for shard 0, ``ROOT/NAME.shard-K.json``
    beside it for the others (``shard_name``)."""
    if shard == 0:
        return location
    parts = urlsplit(location) if is_url(location) else None
    folder, slash, file = (location if parts is None else parts.path).rpartition("/")
    moved = f"{folder}{slash}{shard_name(file.removesuffix('.json'), shard)}.json"
    return moved if parts is None else urlunsplit(parts._replace(path=moved))


def members_storage(root: str) -> ObjectStoragePort:
    """Return the storage of the root's members record (``ROOT/_brokers.json``)."""
    return storage_at(root_location(root, MEMBERS_NAME))


def member_storage(root: str, owner: str) -> ObjectStoragePort:
    """Return the storage of member ``owner``'s beat (``ROOT/_member-OWNER.json``: a broker
    record that its member renews while another member watches it)."""
    return storage_at(root_location(root, f"_member-{owner}.json"))
