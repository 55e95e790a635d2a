"""The cyclic collector is paused while many long-lived objects are made, and a full collection
follows only a block that made enough of them to pay for it."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from typing import Any

import pytest

from jqueue.core.formats.collections_paused import COLLECT_AFTER, collections_paused


@pytest.fixture
def full_collections() -> Iterator[list[int]]:
    seen: list[int] = []

    def note(phase: str, info: dict[str, Any]) -> None:
        if phase == "start" and info["generation"] == 2:
            seen.append(1)

    gc.callbacks.append(note)
    try:
        yield seen
    finally:
        gc.callbacks.remove(note)


def test_a_small_block_is_not_followed_by_a_full_collection(full_collections: list[int]) -> None:
    with collections_paused():
        kept = [[n] for n in range(1_000)]
        assert not gc.isenabled()
    assert gc.isenabled()
    assert full_collections == []  # a full collection of a large process costs more than 1,000 objects
    assert len(kept) == 1_000


def test_a_large_block_is_followed_by_one_full_collection(full_collections: list[int]) -> None:
    with collections_paused():
        kept = [[n] for n in range(COLLECT_AFTER)]
        assert full_collections == []  # none while the block runs
    assert full_collections == [1]  # the objects made count as old from now on
    assert len(kept) == COLLECT_AFTER
