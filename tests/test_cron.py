"""Periodic jobs: ticks of cron expressions (with time zones) and periods, one job per tick
however many workers and processes run the schedule, and none skipped across restarts."""

from __future__ import annotations

import asyncio
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from conftest import Backend
from jqueue import BrokerQueue, DirectQueue, Job, JobStatus, LocalFileSystemStorage, Worker
from jqueue.core.runtime.cron import Schedule, time_zone

HERE = Path(__file__).parent
PARIS = ZoneInfo("Europe/Paris")


def test_ticks_of_a_cron_expression_follow_its_time_zone_across_a_dst_change() -> None:
    every_half_hour = Schedule("report", b"", "30 * * * *", tz=PARIS)
    before = datetime(2026, 3, 29, 0, 45, tzinfo=UTC)  # 01:45 in Paris; clocks go 02:00 -> 03:00
    tick = every_half_hour.latest(before)
    assert tick == datetime(2026, 3, 29, 0, 30, tzinfo=UTC)
    ticks = [tick := every_half_hour.following(tick) for _ in range(2)]
    assert [t.astimezone(PARIS).strftime("%H:%M %z") for t in ticks] == ["03:30 +0200", "04:30 +0200"]
    on_tick = datetime(2026, 3, 29, 2, 30, tzinfo=UTC)
    assert every_half_hour.latest(on_tick) == on_tick  # a tick is its own latest


def test_periods_tick_at_multiples_of_the_period_and_ids_are_shared() -> None:
    five = Schedule("sweep", b"x", every=timedelta(minutes=5))
    tick = five.latest(datetime(2026, 11, 25, 10, 7, 31, tzinfo=UTC))
    assert tick == datetime(2026, 11, 25, 10, 5, tzinfo=UTC)
    assert five.following(tick) == datetime(2026, 11, 25, 10, 10, tzinfo=UTC)
    assert five.job(tick).id == Schedule("sweep", b"x", every=timedelta(minutes=5)).job(tick).id
    assert five.job(tick).id != five.job(five.following(tick)).id
    assert five.job(tick).id != Schedule("other", b"x", every=timedelta(minutes=5)).job(tick).id


@pytest.mark.parametrize(
    ("expression", "every", "message"),
    [
        ("not cron", None, "not a cron expression"),
        (None, None, "not both or neither"),
        ("* * * * *", timedelta(minutes=1), "not both or neither"),
        (None, timedelta(0), "positive"),
    ],
)
def test_bad_schedules_are_refused(expression: str | None, every: timedelta | None, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Schedule("e", b"", expression, every)


def test_time_zones_by_name() -> None:
    assert time_zone("Europe/Paris") == PARIS
    with pytest.raises(ValueError, match="unknown time zone"):
        time_zone("Mars/Olympus")


def ticks_by_id(made: list[tuple[str, datetime]], schedule: Schedule) -> list[int]:
    """The tick number of each (job id, created) of ``schedule`` (every 0.5 s), from its id: a job
    enqueued late, on a busy machine, is created in the next tick."""
    near = {
        n
        for _, created in made
        for n in range(int(created.timestamp() // 0.5) - 4, int(created.timestamp() // 0.5) + 1)
    }
    tick_of = {schedule.job(datetime.fromtimestamp(n * 0.5, UTC)).id: n for n in near}
    return sorted(tick_of[job_id] for job_id, _ in made)


async def test_two_workers_enqueue_one_job_per_tick_and_a_restart_catches_up(file_or_s3: Backend) -> None:
    storage, _ = file_or_s3.new()
    half = timedelta(seconds=0.5)
    schedules: list[Schedule] = []

    async def work(seconds: float, workers: int) -> None:
        async with BrokerQueue(storage) as queue:
            running = []
            for _ in range(workers):
                worker = Worker(queue, {"tick": lambda job: None})
                worker.cron(None, "tick", b"", every=half)
                running.append(worker)
                schedules.append(worker.schedules[-1][1])

            def stop_all() -> None:
                for worker in running:
                    worker.stop()

            asyncio.get_running_loop().call_later(seconds, stop_all)
            await asyncio.gather(*(w.run(install_signals=False) for w in running))

    await work(1.6, workers=2)
    await asyncio.sleep(1.1)  # no worker runs for at least two ticks
    await work(0.3, workers=2)
    async with DirectQueue(storage) as queue:
        made = [(r.job_id, r.created_at) for r in await queue.history()]
        made += [(j.id, j.created_at) for j in await queue.jobs()]
    ticks = ticks_by_id(made, schedules[0])
    assert len(ticks) == len(set(ticks))  # none doubled
    first_run = [t for t in ticks if t < ticks[0] + 4]
    assert first_run == list(range(ticks[0], ticks[0] + len(first_run)))  # none skipped while running
    assert ticks[-1] > first_run[-1] + 1  # the restart enqueued the latest tick it had missed


@pytest.mark.slow
async def test_three_worker_processes_make_one_job_per_tick(tmp_path: Path) -> None:
    path = tmp_path / "q.json"
    async with BrokerQueue(LocalFileSystemStorage(path)) as producer:
        await producer.enqueue("warm-up", b"")  # the queue exists before the workers race to make it

    async def start(seconds: float) -> asyncio.subprocess.Process:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            str(HERE / "cron_worker.py"),
            path.as_uri(),
            str(seconds),
            stdout=asyncio.subprocess.PIPE,
        )
        assert proc.stdout is not None
        assert (await proc.stdout.readline()).strip() == b"ready"
        return proc

    procs = [await start(60.0), await start(4.0), await start(4.0)]  # the first, killed, outlives slow starts
    await asyncio.sleep(1.5)
    procs[0].kill()  # one dies mid-way and a new one starts
    procs.append(await start(2.0))
    codes = [await asyncio.wait_for(p.wait(), 60) for p in procs]
    assert codes[1:] == [0, 0, 0]
    async with DirectQueue(LocalFileSystemStorage(path)) as queue:
        records = await queue.history(entrypoint="tick")
        waiting = [j for j in await queue.jobs(entrypoint="tick") if j.status is not JobStatus.DEAD]
    made = [(r.job_id, r.created_at) for r in records] + [(j.id, j.created_at) for j in waiting]
    ticks = ticks_by_id(made, Schedule("tick", b"", every=timedelta(seconds=0.5)))  # as cron_worker.py's
    assert len(ticks) >= 6
    assert ticks == list(range(ticks[0], ticks[0] + len(ticks)))  # one per tick: none doubled, none skipped
    assert all(r.outcome is JobStatus.ACKED for r in records)
    assert all(isinstance(j, Job) for j in waiting)
