"""Worker processes stopped by signals and killed at random: nothing is lost."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from pathlib import Path

import pytest

from conftest import BUCKET, s3_env
from jqueue import DirectQueue, JobStatus, storage_from_url
from servers import S3Endpoint

HERE = Path(__file__).parent

pytestmark = pytest.mark.slow


def start_worker(url: str, out: Path, env: dict[str, str] | None, *options: object) -> subprocess.Popen[str]:
    """Start worker_proc.py (SLEEP_MS CONCURRENCY GRACE_S VISIBILITY_S) and wait until it is ready."""
    command = [sys.executable, str(HERE / "worker_proc.py"), url, str(out), *map(str, options)]
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, text=True)
    assert process.stdout is not None
    assert process.stdout.readline().strip() == "ready"
    return process


def completions(paths: list[Path]) -> Counter[str]:
    return Counter(line for path in paths if path.exists() for line in path.read_text().split())


async def until_started(out: Path, count: int) -> None:
    """Wait until the worker writing ``out`` has started ``count`` jobs: claimed in the queue
    is not yet started (the claim's answer may still be on its way)."""
    started = out.with_name(out.name + ".started")
    deadline = time.monotonic() + 60
    while len(completions([started])) < count:
        assert time.monotonic() < deadline, "the worker did not start its jobs"
        await asyncio.sleep(0.05)


async def test_sigterm_lets_running_jobs_finish_and_loses_nothing(tmp_path: Path) -> None:
    url = (tmp_path / "q.json").as_uri()
    async with DirectQueue(storage_from_url(url)) as q:
        jobs = await q.enqueue_many("work", [b"%d" % i for i in range(40)])
        worker = start_worker(url, tmp_path / "done.txt", None, 400, 4, 10, 60)
        await until_started(tmp_path / "done.txt", 4)
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(timeout=30) == 0
        done = completions([tmp_path / "done.txt"])
        assert 4 <= len(done) < 40
        assert max(done.values()) == 1
        assert await q.count(JobStatus.IN_PROGRESS) == 0
        queued = {job.id for job in await q.jobs(JobStatus.QUEUED, limit=None)}
        assert queued | set(done) == {job.id for job in jobs}
        assert not queued & set(done)


async def test_a_second_signal_returns_running_jobs_to_the_queue_at_once(tmp_path: Path) -> None:
    url = (tmp_path / "q.json").as_uri()
    async with DirectQueue(storage_from_url(url)) as q:
        await q.enqueue_many("work", [b"%d" % i for i in range(6)])
        worker = start_worker(url, tmp_path / "done.txt", None, 60_000, 3, 60, 60)
        await until_started(tmp_path / "done.txt", 3)
        worker.send_signal(signal.SIGTERM)
        await asyncio.sleep(0.3)
        assert worker.poll() is None  # still in its grace period
        stopped = time.monotonic()
        worker.send_signal(signal.SIGINT)
        assert worker.wait(timeout=30) == 0
        assert time.monotonic() - stopped < 10
        assert await q.count(JobStatus.IN_PROGRESS) == 0
        released = [job for job in await q.jobs(JobStatus.QUEUED) if job.attempts == 1]
        assert len(released) == 3
        assert all(job.dead_reason is None for job in released)


JOBS = 8_000
WORKERS = 4
CONCURRENCY = 16
KILL_SHARE = 1 / 8


async def crash_run(
    url: str,
    tmp_path: Path,
    env: dict[str, str] | None,
    lease_seconds: float,
    count: int = JOBS,
    every: float = 2,
) -> None:
    """Drain ``count`` jobs with WORKERS processes, one killed (SIGKILL) and restarted each time
    another KILL_SHARE of the jobs is done or ``every`` seconds passed, whichever comes first: a
    fast machine is not done before the kills.

    The lease must outlast the slowest commit of a claim and its ack, or a job runs twice
    without a kill (at-least-once, but not what this test counts).
    """
    outputs: list[Path] = []

    def spawn() -> subprocess.Popen[str]:
        out = tmp_path / f"done-{len(outputs)}.txt"
        outputs.append(out)
        return start_worker(url, out, env, 1, CONCURRENCY, 5, lease_seconds)

    async with DirectQueue(storage_from_url(url)) as q:

        async def left() -> int:
            return (await q.stats()).total(JobStatus.QUEUED) + await q.count(JobStatus.IN_PROGRESS)

        jobs = []
        for start in range(0, count, 5000):
            jobs += await q.enqueue_many("work", [b"%d" % i for i in range(start, min(count, start + 5000))])
        workers = [spawn() for _ in range(WORKERS)]
        kills = 0
        try:
            deadline = time.monotonic() + 600
            killed_at, left_at_kill = time.monotonic(), count
            while (now_left := await left()) > 0:
                assert time.monotonic() < deadline, "the workers did not drain the queue"
                if time.monotonic() - killed_at >= every or left_at_kill - now_left >= count * KILL_SHARE:
                    victim = kills % WORKERS
                    workers[victim].kill()
                    workers[victim].wait()
                    kills += 1
                    workers[victim] = spawn()
                    killed_at, left_at_kill = time.monotonic(), now_left
                await asyncio.sleep(0.1)
        finally:
            for worker in workers:
                worker.send_signal(signal.SIGTERM)
            for worker in workers:
                worker.wait(timeout=60)
        done = completions(outputs)
        assert set(done) == {job.id for job in jobs}, "a job was lost"
        duplicates = sum(count - 1 for count in done.values())
        assert duplicates <= kills * CONCURRENCY, "more jobs ran twice than were in flight at the kills"
        assert kills >= 2
        assert await q.dead_letters() == []
        assert await q.count() == 0


async def test_killed_workers_lose_no_job_on_a_file_queue(tmp_path: Path) -> None:
    await crash_run((tmp_path / "q.json").as_uri(), tmp_path, None, 3)


async def test_killed_workers_lose_no_job_on_an_s3_queue(
    tmp_path: Path, moto: S3Endpoint, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = f"s3://{BUCKET}/crash-{uuid.uuid4().hex}.json?endpoint_url={moto.url}&region={moto.region}"
    env = s3_env(moto)
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION"):
        monkeypatch.setenv(name, env[name])
    # Four processes racing on moto (a thread of this test process): on a loaded machine a
    # commit can take many seconds, and a lease shorter than that reruns jobs without a kill.
    # Fewer jobs than on a file, killed more often: moto is slower, and every kill still has 16
    # jobs in flight. The run takes the lease after the last kill: longer would only wait.
    await crash_run(url, tmp_path, env, 15, count=3_000, every=1)
