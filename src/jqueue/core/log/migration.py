"""Migrating a queue from the single-object layout to the log layout."""

from __future__ import annotations

import uuid

from jqueue.core.formats.entry import BASE_PREFIX, encode_entry, encode_marker
from jqueue.domain.effects import Effect
from jqueue.domain.errors import CASConflictError
from jqueue.domain.index import QueueIndex
from jqueue.domain.times import to_micros, utc_now
from jqueue.ports.storage import KeyedStoragePort


async def migrate(storage: KeyedStoragePort, state: QueueIndex, etag: str) -> str | None:
    """Move a single-object state into a log; returns the base object's name, or None on a lost race.

    The jobs go to an immutable base object first; replacing the main object with a
    marker that names it (compare-and-swap on ``etag``) is the one step that decides.
    The pauses and throttles move with the jobs; the history of finished jobs does not.
    """
    name = f"{BASE_PREFIX}{uuid.uuid4().hex}"
    effects: list[Effect] = [record.as_added() for record in state.in_order()]
    effects += state.controls.as_effects()
    await storage.create(name, encode_entry(0, uuid.uuid4().hex, to_micros(utc_now()), effects))
    try:
        await storage.write(encode_marker(name), if_match=etag)
    except CASConflictError:
        await storage.delete(name)
        return None
    return name
