"""A script whose worker has ``in_process`` handlers and no ``if __name__ == "__main__":`` guard:
each handler process imports the script, so without a check it would enqueue and claim again.
It fails at start, saying why, with nothing enqueued twice or claimed; with the guard it runs."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest

from jqueue import DirectQueue, storage_from_url

pytestmark = pytest.mark.slow

SCRIPT = """
import asyncio, os, sys
from jqueue import DirectQueue, Worker, storage_from_url

def work(job):
    return os.getpid()

async def main():
    async with DirectQueue(storage_from_url(sys.argv[1])) as queue:
        await queue.enqueue("work", b"x")
        worker = Worker(queue, max_attempts=1)
        worker.register("work", work, in_process=True)
        await worker.run(until_empty=True)
        print("ran in", (await queue.result((await queue.history())[0].job_id)).decode(), "from", os.getpid())

{start}
"""


def run_script(tmp_path: Path, start: str) -> tuple[subprocess.CompletedProcess[str], str]:
    script = tmp_path / "jobs.py"
    script.write_text(SCRIPT.format(start=start))
    url = (tmp_path / "q.json").as_uri()
    done = subprocess.run(
        [sys.executable, str(script), url], capture_output=True, text=True, cwd=tmp_path, timeout=120
    )
    return done, url


async def _jobs(url: str) -> list[tuple[str, int]]:
    async with DirectQueue(storage_from_url(url)) as queue:
        return [(str(job.status), job.attempts) for job in await queue.jobs(limit=None)]


def test_an_unguarded_script_fails_at_start_and_claims_nothing(tmp_path: Path) -> None:
    done, url = run_script(tmp_path, "asyncio.run(main())")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "RuntimeError: a handler process did not start" in done.stderr
    assert 'must start it under `if __name__ == "__main__":`' in done.stderr
    assert "a queue was opened as a handler process imported the script" in done.stderr
    assert asyncio.run(_jobs(url)) == [("queued", 0)]  # one enqueue, not claimed


def test_a_guarded_script_runs_its_job_in_a_handler_process(tmp_path: Path) -> None:
    done, url = run_script(tmp_path, 'if __name__ == "__main__":\n    asyncio.run(main())')
    assert done.returncode == 0, done.stderr
    _, _, handler_pid, _, script_pid = done.stdout.split()
    assert handler_pid != script_pid
    assert asyncio.run(_jobs(url)) == []
