"""Several processes on one queue, and processes killed in the middle of a commit."""

from __future__ import annotations

import asyncio
import os
import random
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from pathlib import Path

import pytest

from conftest import BUCKET, s3_env, s3_session
from jqueue import (
    DirectQueue,
    Layout,
    LocalFileSystemStorage,
    ObjectStoragePort,
    QueueState,
    S3Storage,
    storage_from_url,
)
from servers import S3Endpoint

HERE = Path(__file__).parent
JOBS_PER_PROCESS = 500

pytestmark = pytest.mark.slow


def run_workers(url: str, outdir: Path, env: dict[str, str], layout: Layout, processes: int) -> None:
    workers = [
        subprocess.Popen(
            [
                sys.executable,
                str(HERE / "mp_worker.py"),
                url,
                str(i),
                str(JOBS_PER_PROCESS),
                str(processes),
                str(outdir),
                layout,
            ],
            env=env,
        )
        for i in range(processes)
    ]
    deadline = time.monotonic() + 300
    try:  # a worker that fails leaves the others waiting for its jobs: stop at the first failure
        while (codes := [w.poll() for w in workers]).count(0) < processes:
            assert not any(codes), f"worker exit codes: {codes}"
            assert time.monotonic() < deadline, f"workers still running after 300 s: {codes}"
            time.sleep(0.05)
    finally:
        for w in workers:
            w.kill()


def check_claims(outdir: Path, processes: int) -> None:
    lines = [line for i in range(processes) for line in (outdir / f"claims-{i}.txt").read_text().splitlines()]
    job_ids = Counter(line.split()[0] for line in lines)
    payloads = Counter(line.split()[1] for line in lines)
    expected = {f"{i}:{n}" for i in range(processes) for n in range(JOBS_PER_PROCESS)}
    assert set(payloads) == expected
    assert max(payloads.values()) == 1, "a job was claimed twice"
    assert len(job_ids) == len(lines) == processes * JOBS_PER_PROCESS


async def final_state(storage: ObjectStoragePort, layout: Layout) -> QueueState:
    async with DirectQueue(storage, layout=layout) as q:
        return await q.read_state()


@pytest.mark.parametrize("processes", [2, 4])
async def test_processes_share_a_file_queue(tmp_path: Path, layout: Layout, processes: int) -> None:
    url = (tmp_path / "queue.json").as_uri()
    run_workers(url, tmp_path, dict(os.environ), layout, processes)
    check_claims(tmp_path, processes)
    assert (await final_state(storage_from_url(url), layout)).jobs == ()


@pytest.mark.parametrize(
    ("server", "processes"),
    [("moto", 4), ("seaweedfs", 4)],  # SeaweedFS: its races are checked (test_conditional_races)
)
async def test_processes_share_an_s3_queue(
    tmp_path: Path, request: pytest.FixtureRequest, server: str, layout: Layout, processes: int
) -> None:
    endpoint: S3Endpoint = request.getfixturevalue(server)
    key = f"mp-{uuid.uuid4().hex}.json"
    url = f"s3://{BUCKET}/{key}?endpoint_url={endpoint.url}&region={endpoint.region}"
    run_workers(url, tmp_path, s3_env(endpoint), layout, processes)
    check_claims(tmp_path, processes)
    session = s3_session(endpoint)
    storage = S3Storage(BUCKET, key, endpoint_url=endpoint.url, region_name=endpoint.region, session=session)
    assert (await final_state(storage, layout)).jobs == ()


async def test_a_writer_killed_mid_commit_leaves_a_whole_state(tmp_path: Path, layout: Layout) -> None:
    path = tmp_path / "queue.json"
    committed: set[str] = set()
    rng = random.Random(7)
    for _ in range(10):
        writer = await asyncio.create_subprocess_exec(
            sys.executable, str(HERE / "kill_writer.py"), str(path), layout, stdout=asyncio.subprocess.PIPE
        )
        assert writer.stdout is not None
        await writer.stdout.readline()
        await asyncio.sleep(rng.uniform(0.05, 0.4))
        writer.send_signal(signal.SIGKILL)
        out, _ = await writer.communicate()
        committed.update(out.decode().split())
        state = await final_state(LocalFileSystemStorage(path), layout)
        assert committed <= {j.id for j in state.jobs}
    assert len(committed) > 10
