"""A Worker's own metrics: run times by entrypoint and outcome, served on a port (and by the CLI)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from jqueue import DirectQueue, InMemoryStorage, Worker, WorkerMetrics
from servers import free_port


def scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """The samples at ``http://127.0.0.1:PORT/metrics``, by name and labels."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


async def test_run_times_are_counted_by_entrypoint_and_outcome() -> None:
    async with DirectQueue(InMemoryStorage()) as queue:
        worker = Worker(queue, max_attempts=1)

        @worker.handler("ok")
        async def ok(_: object) -> None:
            return None

        @worker.handler("boom")
        async def boom(_: object) -> None:
            raise RuntimeError("no")

        await queue.enqueue_many("ok", [b"1", b"2", b"3"])
        await queue.enqueue("boom", b"x")
        metrics = WorkerMetrics(worker)
        port = free_port()
        metrics.serve(port)
        try:
            await worker.run(until_empty=True)
            samples = scrape(port)
        finally:
            metrics.close()
    run = "jqueue_worker_job_run_seconds_count"
    assert samples[(run, (("entrypoint", "ok"), ("outcome", "acked")))] == 3
    assert samples[(run, (("entrypoint", "boom"), ("outcome", "dead")))] == 1
    assert samples[("jqueue_worker_job_wait_seconds_count", (("entrypoint", "ok"),))] == 3
    assert samples[("jqueue_worker_jobs_running", (("entrypoint", "ok"),))] == 0


def test_the_worker_command_serves_its_metrics_while_it_runs(tmp_path: Path) -> None:
    (tmp_path / "slow.py").write_text(
        "import asyncio\n"
        "from pathlib import Path\n"
        "from jqueue import Worker\n"
        "def make(queue):\n"
        "    worker = Worker(queue)\n"
        "    @worker.handler('wait')\n"
        "    async def wait(job):\n"
        "        for _ in range(600):\n"
        "            if Path('go').exists():\n"
        "                return\n"
        "            await asyncio.sleep(0.05)\n"
        "    return worker\n"
    )
    env = os.environ | {"JQUEUE_STORAGE": (tmp_path / "q.json").as_uri()}
    jqueue = [sys.executable, "-m", "jqueue"]
    subprocess.run([*jqueue, "enqueue", "wait", "x"], env=env, cwd=tmp_path, check=True, timeout=60)
    port = free_port()
    command = [*jqueue, "worker", "slow:make", "--burst", "--metrics-port", str(port)]
    worker = subprocess.Popen(command, env=env, cwd=tmp_path, stderr=subprocess.PIPE)
    running = ("jqueue_worker_jobs_running", (("entrypoint", "wait"),))
    try:
        deadline = time.monotonic() + 60
        while True:
            assert time.monotonic() < deadline, "the worker's metrics never showed its running job"
            try:
                if scrape(port).get(running) == 1:
                    break
            except OSError:
                pass
            time.sleep(0.1)
        (tmp_path / "go").write_text("")
        assert worker.wait(timeout=60) == 0
    finally:
        worker.kill()
        worker.wait()
