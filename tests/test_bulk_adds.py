"""A long run of adds is applied in bulk (``IndexState.apply_all``): the same index as one
``apply`` an add, and undone as a whole."""

from __future__ import annotations

from typing import get_args

import pytest

from jqueue.domain.effects import Added, Claimed, Effect
from jqueue.domain.index import _APPLIERS, BULK_ADDS, QueueIndex
from jqueue.domain.models import JobStatus
from jqueue.domain.stats import stats_of

T0 = 1_767_225_600_000_000


def adds(count: int, start: int = 0) -> list[Added]:
    def add(i: int) -> Added:
        status = JobStatus.STAGED if i % 7 == 0 else JobStatus.QUEUED
        return Added(
            f"j{i}",
            "a" if i % 3 else "b",
            i % 5 - 2,
            T0 + (i % 11),
            status,
            None,
            b"p%d" % i,
            not_before=T0 + 1_000 if i % 13 == 0 else None,
            dedup_key=f"k{i}" if i % 4 == 0 else None,
            batch="w" if status is JobStatus.STAGED else None,
        )

    return [add(i) for i in range(start, start + count)]


def claimed_in_order(index: QueueIndex) -> list[str]:
    return [c.job_id for c in index.claim(None, 10_000, T0 + 2_000, T0 + 9_000, lambda: "L")]


def test_a_run_in_bulk_builds_the_index_that_one_apply_an_add_builds() -> None:
    run = adds(5 * BULK_ADDS)
    bulk, single = QueueIndex(), QueueIndex()
    bulk.apply(adds(1, start=10_000)[0])
    single.apply(adds(1, start=10_000)[0])
    effects: list[Effect] = [*run, Claimed("j10000", T0 + 5)]
    bulk.apply_all(effects)
    for effect in effects:
        single.apply(effect)
    assert [r.as_added() for r in bulk.in_order()] == [r.as_added() for r in single.in_order()]
    assert [(r.order, r.stamp) for r in bulk.in_order()] == [(r.order, r.stamp) for r in single.in_order()]
    assert stats_of(bulk, T0) == stats_of(single, T0)
    assert bulk.staged_batches() == single.staged_batches()
    assert bulk.with_dedup_key("k8") is bulk.records["j8"]
    assert claimed_in_order(bulk) == claimed_in_order(single)


def test_a_run_in_bulk_is_undone_as_a_whole_and_refuses_duplicates() -> None:
    index = QueueIndex()
    index.apply_all(adds(3))
    index.journal.begin()
    index.apply_all(adds(2 * BULK_ADDS, start=100))
    assert len(index.journal.effects) == 2 * BULK_ADDS
    index.journal.rollback()
    assert sorted(index.records) == ["j0", "j1", "j2"]
    assert stats_of(index, T0).entrypoints.keys() == {"a", "b"}
    with pytest.raises(ValueError, match="added twice"):
        index.apply_all(adds(BULK_ADDS, start=2))
    with pytest.raises(ValueError, match="dedup key"):
        index.apply_all([*adds(BULK_ADDS, start=1_000), _same_key("k1000", 5_000)])
    assert sorted(index.records) == ["j0", "j1", "j2"]
    fresh = QueueIndex()
    fresh.apply_all(adds(3))
    assert claimed_in_order(index) == claimed_in_order(fresh)  # no entry of the undone run is claimed


def _same_key(key: str, number: int) -> Added:
    [added] = adds(1, start=number)
    added.dedup_key = key
    return added


def test_every_kind_of_effect_is_applied_by_the_index() -> None:
    """``IndexState.apply`` dispatches on the effect's type: a kind of effect added to
    ``Effect`` without a way to apply it fails here, not in a replay."""
    assert set(get_args(Effect)) == set(_APPLIERS)
