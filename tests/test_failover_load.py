"""Failover under load: two ``jqueue serve --standby`` on one S3 root (moto), producers and four worker
processes through ``connect``; the serving broker is SIGKILLed three times while they run.

What must hold: every job a producer was told about is processed (none lost), no job is
added twice (one id per payload), the queue ends empty, a job processed twice was handed out
again (a later attempt: its first ack never landed), and each failover is short.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections import Counter
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from conftest import BUCKET, s3_env
from jqueue import DirectQueue, storage_from_url
from servers import S3Endpoint, jqueue_serve

pytestmark = pytest.mark.slow

FAST = ["--renew-every", "0.2", "--stale-after", "1", "--standby"]
CLIENT = Path(__file__).with_name("failover_client.py")
PRODUCERS, PER_PRODUCER, WORKERS, KILLS = 2, 300, 4, 3
FAILOVER_BOUND = 10.0  # seconds from SIGKILL to the first answered call, with FAST settings


def health(url: str) -> dict[str, Any] | None:
    try:
        with urllib.request.urlopen(f"{url}/healthz", timeout=2) as answer:
            found: dict[str, Any] = json.loads(answer.read())
            return found
    except OSError:
        return None


def probe(url: str) -> int:
    """Enqueue one job in queue ``probe`` through ``url``: the status (0: no answer)."""
    body = json.dumps({"jobs": [{"entrypoint": "probe", "payload": ""}]}).encode()
    request = urllib.request.Request(
        f"{url}/v1/queues/probe/enqueue", body, {"Content-Type": "application/json"}, method="POST"
    )
    try:
        with urllib.request.urlopen(request, timeout=5) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as error:
        return error.code
    except OSError:
        return 0


def wait(condition: Any, seconds: float, what: str) -> float:
    started = time.monotonic()
    while not condition():
        assert time.monotonic() - started < seconds, f"{what}: not within {seconds} s"
        time.sleep(0.05)
    return time.monotonic() - started


def stop_all(processes: list[subprocess.Popen[bytes]]) -> None:
    for process in processes:
        if process.poll() is None:
            process.kill()
            process.wait()


async def jobs_left(root: str) -> int:
    """How many jobs queue ``q`` under ``root`` holds, read directly from the storage."""
    async with DirectQueue(storage_from_url(root.replace("?", "/q.json?", 1))) as queue:
        return len((await queue.read_state()).jobs)


def lines(path: Path) -> list[list[str]]:
    return [line.split() for line in path.read_text().splitlines()] if path.exists() else []


@pytest.fixture
def s3_root(moto: S3Endpoint, monkeypatch: pytest.MonkeyPatch) -> tuple[str, dict[str, str]]:
    env = s3_env(moto)
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION"):
        monkeypatch.setenv(name, env[name])
    prefix = f"failover-{uuid.uuid4().hex}"
    return f"s3://{BUCKET}/{prefix}?endpoint_url={moto.url}&region={moto.region}", env


def test_killing_the_broker_under_load_loses_and_doubles_nothing(
    s3_root: tuple[str, dict[str, str]], tmp_path: Path
) -> None:
    root, env = s3_root
    stop = tmp_path / "stop"
    with ExitStack() as stack:
        serves = [stack.enter_context(jqueue_serve(root, tmp_path / "serve-0.log", env=env, options=FAST))]
        wait(lambda: (health(serves[0]) or {}).get("role") == "active", 20, "the first broker")
        serves.append(
            stack.enter_context(jqueue_serve(root, tmp_path / "serve-1.log", env=env, options=FAST))
        )
        created = urllib.request.Request(f"{serves[0]}/queue/q", method="PUT")
        urllib.request.urlopen(created, timeout=10).close()  # workers may start first
        clients: list[subprocess.Popen[bytes]] = []
        stack.callback(stop_all, clients)
        for n in range(PRODUCERS):
            out = tmp_path / f"produced-{n}.txt"
            command = [
                sys.executable,
                str(CLIENT),
                "produce",
                root,
                str(out),
                str(n * PER_PRODUCER),
                str(PER_PRODUCER),
            ]
            clients.append(subprocess.Popen(command, env=env))
        workers = []
        for n in range(WORKERS):
            command = [
                sys.executable,
                str(CLIENT),
                "work",
                root,
                str(tmp_path / f"worked-{n}.txt"),
                str(stop),
            ]
            workers.append(subprocess.Popen(command, env=env))
        clients += workers

        failovers = []
        for kill in range(KILLS):
            time.sleep(1.5)
            active = [url for url in serves if (health(url) or {}).get("role") == "active"]
            assert len(active) == 1, f"kill {kill}: active brokers {active}"
            standby = [url for url in serves if url not in active and health(url) is not None]
            os.kill(health(active[0])["pid"], signal.SIGKILL)  # type: ignore[index]
            killed_at = time.monotonic()
            wait(lambda: any(probe(url) == 200 for url in standby), FAILOVER_BOUND, f"failover {kill}")  # noqa: B023
            failovers.append(time.monotonic() - killed_at)
            serves.remove(active[0])
            serves.append(
                stack.enter_context(
                    jqueue_serve(root, tmp_path / f"serve-{kill + 2}.log", env=env, options=FAST)
                )
            )

        for producer in clients[:PRODUCERS]:
            assert producer.wait(timeout=120) == 0, "a producer failed"
        produced = [row for n in range(PRODUCERS) for row in lines(tmp_path / f"produced-{n}.txt")]
        payloads = {payload for _, payload in produced}

        def all_worked() -> bool:
            worked = {
                row[1]
                for n in range(WORKERS)
                for row in lines(tmp_path / f"worked-{n}.txt")
                if row[0] != "lost"
            }
            return payloads <= worked

        wait(all_worked, 120, "every job processed")
        stop.write_text("")
        for worker in workers:
            assert worker.wait(timeout=60) == 0, "a worker failed"

    left = asyncio.run(jobs_left(root))
    assert left == 0, f"{left} jobs left in the queue"
    assert len(produced) == PRODUCERS * PER_PRODUCER
    assert len({job_id for job_id, _ in produced}) == len(produced), "a job was added twice"
    assert payloads == {f"p-{n}" for n in range(PRODUCERS * PER_PRODUCER)}
    runs = [row for n in range(WORKERS) for row in lines(tmp_path / f"worked-{n}.txt") if row[0] != "lost"]
    attempts: dict[str, list[int]] = {}
    for job_id, _, attempt in runs:
        attempts.setdefault(job_id, []).append(int(attempt))
    assert set(attempts) == {job_id for job_id, _ in produced}, "a processed job that no producer added"
    again = {job_id: seen for job_id, seen in attempts.items() if len(seen) > 1}
    for job_id, seen in again.items():
        assert len(set(seen)) == len(seen), f"job {job_id} was handed out twice in one attempt: {seen}"
    print(f"failovers {[round(t, 2) for t in failovers]} s; {len(again)} of {len(produced)} jobs ran again")
    print("attempt counts", Counter(len(seen) for seen in attempts.values()))
    assert max(failovers) < FAILOVER_BOUND
