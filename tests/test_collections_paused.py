"""The cyclic collector is paused while many long-lived objects are made, and a full collection
follows only a block that made enough of them to pay for it; the switch interval is short
while a thread computes beside the event loop."""

from __future__ import annotations

import gc
import os
import sys

import pytest

from jqueue.core.formats.collections_paused import COLLECT_AFTER, collections_paused
from jqueue.core.loop.switching import QUICK_SWITCH_SECONDS, quick_switches


@pytest.fixture
def full_collections(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The full collections asked for. (The collector's own, once it runs again, are not
    counted: the threads of a test process's servers may set one off at any moment.)"""
    seen: list[int] = []
    collect = gc.collect

    def counted(generation: int = 2) -> int:
        seen.append(generation)
        return collect(generation)

    monkeypatch.setattr(gc, "collect", counted)
    return seen


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
    assert full_collections == [2]  # the objects made count as old from now on
    assert len(kept) == COLLECT_AFTER


def test_overlapping_blocks_keep_the_collector_off_until_the_last_ends() -> None:
    first, second = collections_paused(), collections_paused()
    first.__enter__()
    second.__enter__()  # a plan's thread while the loop reads a checkpoint, say
    first.__exit__(None, None, None)
    assert not gc.isenabled()
    second.__exit__(None, None, None)
    assert gc.isenabled()


def test_a_block_run_with_the_collector_off_leaves_it_off() -> None:
    gc.disable()
    try:
        with collections_paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_switches_are_quick_while_a_thread_computes_and_as_before_after() -> None:
    before = sys.getswitchinterval()
    with quick_switches():
        assert sys.getswitchinterval() == min(before, QUICK_SWITCH_SECONDS)
        with quick_switches():
            pass
        assert sys.getswitchinterval() == min(before, QUICK_SWITCH_SECONDS)  # until the last leaves
    assert sys.getswitchinterval() == before
    try:
        with quick_switches():
            sys.setswitchinterval(0.002)  # the application's own choice meanwhile is kept
        assert sys.getswitchinterval() == 0.002
    finally:
        sys.setswitchinterval(before)


def test_a_child_forked_inside_both_starts_as_the_process_was_before() -> None:
    interval = sys.getswitchinterval()
    reading, writing = os.pipe()
    with collections_paused(), quick_switches():
        child = os.fork()
        if child == 0:  # pragma: no cover (the child reports through the pipe)
            os.write(writing, b"%d %r" % (gc.isenabled(), sys.getswitchinterval()))
            os._exit(0)
    os.close(writing)
    _, status = os.waitpid(child, 0)
    with os.fdopen(reading, "rb") as pipe:
        assert pipe.read() == b"1 %r" % interval
    assert os.waitstatus_to_exitcode(status) == 0
