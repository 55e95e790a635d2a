"""Signals to a worker's process group, and time limits, with real child processes.

A terminal's Ctrl-C and a service manager's SIGTERM reach every process of the group:
the worker decides what becomes of its children (running jobs finish in the grace
period; then, or at a second signal, they are stopped), and a command or a handler
process that is stopped leaves nothing running behind it.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from jqueue import DirectQueue, Job, JobStatus, storage_from_url

HERE = Path(__file__).parent

pytestmark = pytest.mark.slow


def state(pid: int) -> str | None:
    """Return the state letter of process ``pid`` (``Z`` for a zombie), or None if it is gone."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    return next(line.split()[1] for line in status.splitlines() if line.startswith("State:"))


def running(pid: int) -> bool:
    """Whether process ``pid`` exists and is not a zombie."""
    return state(pid) not in (None, "Z")


class Children:
    """The processes a test starts, each ``jqueue`` command in its own session (so the test
    can signal its group); whatever still runs at the end is killed."""

    def __init__(self, tmp_path: Path) -> None:
        self.cwd = tmp_path
        self.url = (tmp_path / "q.json").as_uri()
        self.processes: list[subprocess.Popen[str]] = []
        self.pids: list[int] = []

    def jqueue(self, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
        """Start ``python -m jqueue --storage URL ARGS``."""
        process = subprocess.Popen(
            [sys.executable, "-m", "jqueue", "--storage", self.url, *args],
            cwd=self.cwd,
            env=os.environ | (env or {}),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        self.processes.append(process)
        return process

    def worker(self, *args: str, **env: str) -> subprocess.Popen[str]:
        """Start ``jqueue worker signal_handlers:worker ARGS --json`` with ``env`` added."""
        path = os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")]))
        return self.jqueue(
            "worker", "signal_handlers:worker", *args, "--json", env=env | {"PYTHONPATH": path}
        )

    def pid_in(self, name: str, process: subprocess.Popen[str], seconds: float = 30) -> int:
        """Wait for ``process``'s job to write a pid to the file ``name``; return the pid."""
        path = self.cwd / name
        deadline = time.monotonic() + seconds
        while not path.exists():
            if process.poll() is not None:
                pytest.fail(f"jqueue exited ({process.returncode}) before {name}: {process.communicate()[1]}")
            assert time.monotonic() < deadline, f"no {name} after {seconds} s"
            time.sleep(0.05)
        pid = int(path.read_text())
        self.pids.append(pid)
        return pid

    def finish(self, process: subprocess.Popen[str], seconds: float = 30) -> tuple[dict[str, Any], str]:
        """Wait for ``process`` to exit with status 0; return its JSON summary and its standard error."""
        try:
            out, err = process.communicate(timeout=seconds)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            pytest.fail(f"jqueue still running after {seconds} s: {process.communicate()[1]}")
        assert process.returncode == 0, err
        summary: dict[str, Any] = json.loads(out)
        return summary, err

    def kill_all(self) -> None:
        """Kill what still runs."""
        for process in self.processes:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
                process.communicate(timeout=30)
        for pid in self.pids:
            if running(pid):
                os.kill(pid, signal.SIGKILL)

    def enqueue(self, entrypoint: str, payload: bytes, max_attempts: int | None = None) -> None:
        """Add one job to the queue."""

        async def go() -> None:
            async with DirectQueue(storage_from_url(self.url)) as queue:
                await queue.enqueue(entrypoint, payload, max_attempts=max_attempts)

        asyncio.run(go())

    def jobs(self, status: JobStatus) -> list[Job]:
        """Return the queue's jobs in ``status``."""

        async def go() -> list[Job]:
            async with DirectQueue(storage_from_url(self.url)) as queue:
                return await queue.jobs(status, limit=None)

        return asyncio.run(go())


@pytest.fixture
def children(tmp_path: Path) -> Iterator[Children]:
    started = Children(tmp_path)
    try:
        yield started
    finally:
        started.kill_all()


def nap(tmp_path: Path, seconds: float) -> bytes:
    """Return the payload of a ``signal_handlers.nap`` job."""
    return json.dumps({"dir": str(tmp_path), "sleep": seconds}).encode()


def test_a_signal_to_the_group_of_exec_lets_the_running_command_finish(children: Children) -> None:
    children.enqueue("shell", b"x")
    script = "echo $$ > started.tmp && mv started.tmp started; sleep 3; echo $$ > finished"
    process = children.jqueue("exec", "shell", "--json", "--", "sh", "-c", script)
    pid = children.pid_in("started", process)
    os.killpg(process.pid, signal.SIGINT)
    summary, _ = children.finish(process)
    assert (summary["acked"], summary["retried"], summary["released"]) == (1, 0, 0)
    assert (children.cwd / "finished").read_text().strip() == str(pid)
    assert children.jobs(JobStatus.QUEUED) == []


def test_exec_past_its_timeout_kills_the_command_s_whole_process_group(children: Children) -> None:
    children.enqueue("slow", b"x", max_attempts=1)
    script = "sleep 30 & echo $! > sleep.tmp && mv sleep.tmp sleep.pid; wait"
    process = children.jqueue("exec", "slow", "--burst", "--timeout", "1", "--json", "--", "sh", "-c", script)
    sleeper = children.pid_in("sleep.pid", process)
    summary, _ = children.finish(process)
    assert (summary["dead"], summary["timed_out"]) == (1, 1)
    assert state(sleeper) in (None, "Z"), "the command's background sleep still runs"
    assert children.jobs(JobStatus.IN_PROGRESS) == []


def test_a_signal_to_the_group_of_a_worker_lets_a_process_handler_finish(children: Children) -> None:
    children.enqueue("nap", nap(children.cwd, 3))
    process = children.worker()
    pid = children.pid_in("started-1", process)
    os.killpg(process.pid, signal.SIGINT)
    summary, stderr = children.finish(process)
    assert (summary["acked"], summary["retried"], summary["released"]) == (1, 0, 0)
    assert "BrokenProcessPool" not in stderr
    assert (children.cwd / "finished-1").read_text() == str(pid)
    assert state(pid) in (None, "Z")


@pytest.mark.parametrize("second_signal", [True, False], ids=["second-signal", "grace-period-over"])
def test_a_stopping_worker_kills_the_handler_processes_it_gave_up_on(
    children: Children, second_signal: bool
) -> None:
    children.enqueue("nap", nap(children.cwd, 30))
    process = children.worker(JQUEUE_TEST_GRACE="60" if second_signal else "2")
    pid = children.pid_in("started-1", process)
    os.killpg(process.pid, signal.SIGINT)
    if second_signal:
        time.sleep(1)
        assert process.poll() is None  # in its grace period
        os.killpg(process.pid, signal.SIGINT)
    summary, _ = children.finish(process, seconds=20)
    assert summary["released"] == 1
    assert state(pid) in (None, "Z"), "the handler's process still runs"
    assert not (children.cwd / "finished-1").exists()
    [job] = children.jobs(JobStatus.QUEUED)
    assert (job.attempts, job.last_error) == (1, None)


def test_a_process_handler_past_its_time_limit_is_killed_before_its_retry(children: Children) -> None:
    children.enqueue("nap", nap(children.cwd, 30), max_attempts=2)
    # 4 s: a busy machine takes over a second to spawn the pool process a retry runs in
    process = children.worker("--burst", JQUEUE_TEST_TIMEOUT="4")
    first = children.pid_in("started-1", process)
    children.pid_in("started-2", process)
    assert state(first) in (None, "Z"), "the first attempt still runs beside the second"
    summary, _ = children.finish(process)
    assert (summary["dead"], summary["timed_out"]) == (1, 2)
    assert not running(children.pids[-1])
