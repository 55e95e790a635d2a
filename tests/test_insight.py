"""What the dashboard reads from a queue: pages of jobs, throughput, timings, dead letters by
error, and purges by id; on file and S3, both layouts."""

from __future__ import annotations

from datetime import timedelta

import pytest

from conftest import Backend, Clock
from jqueue import BrokerQueue, JobSpec, JobStatus, Layout
from jqueue.domain import figures, insight


async def test_pages_of_jobs_cover_each_match_once_within_their_budget(
    file_or_s3: Backend, layout: Layout, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(insight, "SCAN_BUDGET", 7)  # a page looks at 7 jobs at most
    storage, _ = file_or_s3.new()
    async with BrokerQueue(storage, layout=layout) as queue:
        added = await queue.enqueue_many([JobSpec("a" if i % 3 else "b", b"%d" % i) for i in range(40)])
        await queue.enqueue("a", b"keyed", dedup_key="k")
        wanted = [job.id for job in added if job.entrypoint == "b"]
        seen: list[str] = []
        cursor: int | None = 0
        pages = 0
        while cursor is not None:
            jobs, cursor = await queue.browse(entrypoint="b", cursor=cursor, limit=3)
            assert len(jobs) <= 3
            seen += [job.id for job in jobs]
            pages += 1
        assert seen == wanted
        assert pages >= 41 // 7  # the budget split the walk, whatever the matches
        [keyed], end = await queue.browse(dedup_key="k")
        assert (keyed.payload, end) == (b"keyed", None)
        assert await queue.browse(dedup_key="none") == ([], None)


async def test_dead_letters_are_grouped_by_the_first_line_of_their_error(file_or_s3: Backend) -> None:
    storage, _ = file_or_s3.new()
    async with BrokerQueue(storage) as queue:
        await queue.enqueue_many("a", [b"1", b"2", b"3"])
        await queue.enqueue("b", b"4")
        errors = ["Boom: x\ntrace 1", "Boom: x\ntrace 2", "Other", "Boom: x"]
        for job, error in zip(await queue.dequeue(["a", "b"], batch_size=4), errors, strict=True):
            await queue.nack(job, error=error, max_attempts=1)
        groups = await queue.insight.dead_groups()
        assert [(g.error, len(g.ids), g.entrypoints) for g in groups] == [
            ("Boom: x", 3, {"a": 2, "b": 1}),
            ("Other", 1, {"a": 1}),
        ]
        assert [len(g.ids) for g in await queue.insight.dead_groups("b")] == [1]
        # A purge by id touches only the named jobs that match its filters.
        boom = groups[0].ids
        assert await queue.purge(JobStatus.DEAD, ids=[*boom[:2], "missing"]) == 2
        assert await queue.purge(JobStatus.QUEUED, ids=boom[2:]) == 0
        assert (await queue.stats()).total(JobStatus.DEAD) == 2


async def test_throughput_and_timings_come_from_the_history(file_or_s3: Backend, clock: Clock) -> None:
    storage, _ = file_or_s3.new()
    clock.now = clock.now.replace(second=10, microsecond=0)  # 10 s into a clock minute
    async with BrokerQueue(storage) as queue:
        await queue.enqueue_many("a", [b"%d" % i for i in range(4)])
        clock.advance(timedelta(seconds=2))  # each job waited 2 s
        jobs = await queue.dequeue("a", batch_size=4)
        clock.advance(timedelta(seconds=1))  # and ran 1 s
        for job in jobs[:3]:
            await queue.ack(job)
        clock.advance(timedelta(minutes=2))
        await queue.nack(jobs[3], error="late", max_attempts=1)
        found = await queue.insight.throughput(timedelta(minutes=10), timedelta(minutes=1))
        assert (len(found.acked), sum(found.acked), sum(found.dead)) == (10, 3, 1)
        assert found.start % 60_000_000 == 0  # buckets are clock minutes, the last one this minute
        assert found.acked[-3] == 3  # two clock minutes before this one
        assert found.dead[-1] == 1
        assert found.per_entrypoint["a"][-3:] == [3, 0, 1]
        timings = (await queue.insight.timings())["a"]
        assert (timings.finished, timings.acked, timings.dead, timings.retried) == (4, 3, 1, 0)
        assert timings.wait == (2.0, 2.0, 2.0)
        assert timings.run == pytest.approx((1.0, 103.0, 117.4))  # 1, 1, 1 and 121 s, interpolated
        with pytest.raises(ValueError, match="positive"):
            await queue.insight.throughput(timedelta(0))


def test_percentiles_interpolate_between_ranks_as_spark_does() -> None:
    assert figures.percentiles(list(range(1, 101)), (0.0, 0.5, 0.95, 0.99, 1.0)) == pytest.approx(
        (1.0, 50.5, 95.05, 99.01, 100.0)
    )
    assert figures.percentiles([]) == ()
    assert figures.percentiles([3.0]) == (3.0, 3.0, 3.0)
    assert figures.percentiles([4.0, 1.0]) == pytest.approx((2.5, 3.85, 3.97))


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [
        (0.0000004, "0 µs"),
        (0.0005, "500 µs"),
        (0.0123, "12 ms"),
        (4.25, "4.2 s"),
        (185, "3 m 5 s"),
        (4000, "1 h 6 m"),
        (2 * 86400 + 3 * 3600 + 59, "2 d 3 h"),
        (0.0009996, "1 ms"),
        (0.9996, "1.0 s"),
        (59.96, "1 m 0 s"),
        (3599.6, "1 h 0 m"),
        (-5, "-5.0 s"),
        (float("nan"), "?"),
        (float("inf"), "?"),
    ],
)
def test_every_duration_people_read_has_one_form(seconds: float, shown: str) -> None:
    assert figures.readable_span(seconds) == shown
