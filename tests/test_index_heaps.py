"""The index's heaps stay proportional to the live jobs however many claims and heartbeats pass."""

from __future__ import annotations

import pytest

from jqueue.domain.claim_order import HEAP_FLOOR, HEAP_SLACK, ClaimOrder
from jqueue.domain.effects import Added, Beat, Claimed, Effect, Removed
from jqueue.domain.index import QueueIndex
from jqueue.domain.models import JobStatus


def test_claims_and_heartbeats_leave_no_unbounded_trail() -> None:
    index = QueueIndex()
    now = 1_000_000
    for n in range(40_000):  # 200,000 operations: add, claim, three beats, then an ack
        job_id = f"job-{n}"
        index.apply(Added(job_id, "work", 0, now, JobStatus.QUEUED, None, b""))
        index.journal.begin()
        [claim] = index.claim(None, 1, now, now + 300_000_000, lambda: "lease")
        index.journal.commit()
        assert claim.job_id == job_id
        index.apply_all([Beat(job_id, now + beat) for beat in (1, 2, 3)])
        if n % 100:
            index.apply(Removed(job_id, now + 4))
        now += 10
    live = len(index.records)
    assert live == 400
    assert index.heap_entries() <= HEAP_SLACK * index.order.live() + HEAP_FLOOR
    index.journal.begin()
    assert {c.job_id for c in index.requeue_expired(now + 10**12)} == set(index.records)
    index.journal.commit()
    index.journal.begin()
    assert len(index.claim(None, 1000, now + 10**12, None)) == live  # the rebuilt heaps still work
    index.journal.commit()


def test_a_replayed_log_prunes_too() -> None:
    index = QueueIndex()
    effects: list[Effect] = []
    for n in range(20_000):
        job_id = f"job-{n}"
        effects += [
            Added(job_id, "work", 0, n, JobStatus.QUEUED, None, b""),
            Claimed(job_id, n, "lease", n + 10**9),
            *(Beat(job_id, n + beat) for beat in range(1, 4)),
            Removed(job_id, n + 5),
        ]
    index.apply_all(effects)
    assert index.records == {}
    assert index.heap_entries() <= HEAP_FLOOR


def test_a_transaction_that_goes_on_as_the_next_prunes_too() -> None:
    """Commits applied ahead (ADR 0017) keep one transaction open from round to round."""
    index = QueueIndex()
    now = 1_000_000
    index.journal.begin()
    for n in range(10_000):
        job_id = f"job-{n}"
        index.apply(Added(job_id, "work", 0, now, JobStatus.QUEUED, None, b""))
        mark = index.journal.savepoint()  # what follows is the next round, applied ahead
        [claim] = index.claim(None, 1, now, now + 300_000_000, lambda: "lease")
        assert claim.job_id == job_id
        index.apply_all([Beat(job_id, now + beat) for beat in (1, 2, 3)])
        if n % 100:
            index.apply(Removed(job_id, now + 4))
        index.journal.commit_through(mark)
        assert index.journal.open
        now += 10
    index.journal.commit()
    live = len(index.records)
    assert live == 100
    assert index.heap_entries() <= HEAP_SLACK * index.order.live() + HEAP_FLOOR


def test_many_tenants_of_one_job_each_are_drained_without_rebuilding_again_and_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An empty line stays in its round until its turn comes: live too, not a reason to rebuild."""
    rebuilds = 0
    rebuild = ClaimOrder.rebuild

    def counted(self: ClaimOrder) -> None:
        nonlocal rebuilds
        rebuilds += 1
        rebuild(self)

    monkeypatch.setattr(ClaimOrder, "rebuild", counted)
    index = QueueIndex()
    for n in range(5_000):
        index.apply(Added(f"job-{n}", "work", 0, n, JobStatus.QUEUED, None, b"", tenant=f"tenant-{n}"))
    drained = 0
    while True:
        index.journal.begin()
        claims = index.claim(None, 10, 10**6, None)
        index.journal.commit()
        if not claims:
            break
        index.apply_all([Removed(claim.job_id, 10**6) for claim in claims])
        drained += len(claims)
    assert drained == 5_000
    assert rebuilds <= 10  # each claim of the last ones rebuilt when the empty lines did not count
