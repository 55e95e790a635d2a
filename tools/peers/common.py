"""What every runner of ``benchmark_peers.py`` shares (standard library only: the peers' runners
use it from their own virtual environment).

A runner is called as ``python run_<system>.py SCENARIO WORKDIR JOBS ...`` and prints one JSON
object. Handlers count finished jobs by appending one byte to ``WORKDIR/done`` (opened with
``O_APPEND``, not synced), so that the driver knows when a drain has ended the same way for
every system.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import time
from collections.abc import Callable, Coroutine, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

PAYLOAD_BYTES = 1024
BATCH = 100
ENTRYPOINT = "work"


def payload(stamp: float | None = None) -> bytes:
    """A 1 KB payload that starts with its enqueue time (seconds since the epoch)."""
    head = repr(time.time() if stamp is None else stamp).encode()
    return head + b" " + b"x" * (PAYLOAD_BYTES - len(head) - 1)


def enqueued_at(data: bytes) -> float:
    """The enqueue time a ``payload`` carries."""
    return float(data.split(b" ", 1)[0])


_DONE = "done"


class Done:
    """The finished-job counter of one run: one byte per job in ``WORKDIR/done``."""

    def __init__(self, workdir: Path) -> None:
        self._fd = os.open(workdir / _DONE, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def one(self) -> None:
        """Count one finished job."""
        os.write(self._fd, b"x")


def finished(workdir: Path) -> int:
    """How many jobs of a run finished, in every process."""
    try:
        return (workdir / _DONE).stat().st_size
    except FileNotFoundError:
        return 0


def wait_until_done(
    workdir: Path, jobs: int, timeout: float, children: list[subprocess.Popen[bytes]]
) -> float:
    """Wait until ``jobs`` jobs are counted; return when that happened (monotonic). Raises
    ``TimeoutError`` (or ``RuntimeError`` when every child exited first)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        exited = bool(children) and all(child.poll() is not None for child in children)
        if finished(workdir) >= jobs:
            return time.monotonic()
        if exited:
            raise RuntimeError(f"the workers exited with {finished(workdir)} of {jobs} jobs done")
        time.sleep(0.002)
    raise TimeoutError(f"{jobs} jobs were not done within {timeout:g} s")


def stop(children: list[subprocess.Popen[bytes]]) -> None:
    """Stop worker processes (terminate, then kill after 5 s)."""
    for child in children:
        if child.poll() is None:
            child.terminate()
    for child in children:
        try:
            child.wait(5)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()


@contextmanager
def measured(result: dict[str, Any], jobs: int) -> Iterator[None]:
    """Time the block; put jobs/s and this process's CPU per job (ms, all threads) in ``result``."""
    started, cpu = time.perf_counter(), time.process_time()
    yield
    seconds = time.perf_counter() - started
    if jobs == 0:  # a run that only creates the queue
        return
    result.update(
        seconds=round(seconds, 4),
        jobs_per_s=round(jobs / seconds, 1),
        cpu_ms_per_job=round((time.process_time() - cpu) * 1000 / jobs, 4),
    )


def percentiles(latencies: list[float]) -> dict[str, float]:
    """p50/p95/p99/max of latencies in seconds, as milliseconds."""
    ordered = sorted(latencies)

    def at(q: float) -> float:
        return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000, 2)

    return {
        "p50_ms": at(0.50),
        "p95_ms": at(0.95),
        "p99_ms": at(0.99),
        "max_ms": round(ordered[-1] * 1000, 2),
    }


def paced(jobs: int, rate: float) -> Iterator[float]:
    """Yield how long to sleep before each of ``jobs`` sends, to send ``rate`` per second."""
    start = time.monotonic()
    for n in range(jobs):
        yield max(0.0, start + n / rate - time.monotonic())


def latency_file(workdir: Path) -> Path:
    """Where a latency run's handler appends the latency of each job (one float per line)."""
    return workdir / "latencies"


def record_latency(workdir: Path) -> Callable[[bytes], None]:
    """Return a function that records the latency of a job from its payload."""
    fd = os.open(latency_file(workdir), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def record(data: bytes) -> None:
        os.write(fd, b"%r\n" % (time.time() - enqueued_at(data)))

    return record


def read_latencies(workdir: Path) -> list[float]:
    """The latencies a run recorded."""
    return [float(line) for line in latency_file(workdir).read_text().split()]


def runner_arguments(kinds: list[str] | None = None) -> argparse.Namespace:
    """Parse a runner's command line: ``[KIND] SCENARIO WORKDIR [--jobs --rate --concurrency --index]``."""
    parser = argparse.ArgumentParser()
    if kinds is not None:
        parser.add_argument("kind", choices=kinds)
    parser.add_argument("scenario")
    parser.add_argument("workdir", type=Path)
    parser.add_argument("--jobs", type=int, default=0)
    parser.add_argument("--rate", type=float, default=100.0)
    parser.add_argument("--concurrency", type=int, default=10)
    parser.add_argument("--index", type=int, default=0)
    return parser.parse_args()


def emit(result: dict[str, Any]) -> None:
    """Print the runner's result as its one line of JSON."""
    print(json.dumps(result), flush=True)


async def ready_then_go(args: argparse.Namespace) -> None:
    """Say this worker is ready (``WORKDIR/ready-INDEX``), then wait until ``WORKDIR/go`` exists."""
    (args.workdir / f"ready-{args.index}").touch()
    while not (args.workdir / "go").exists():
        await asyncio.sleep(0.005)


def run_asyncio_runner(
    produce: Callable[[argparse.Namespace], Coroutine[Any, Any, dict[str, Any]]],
    work: Callable[[argparse.Namespace], Coroutine[Any, Any, None]],
    *,
    worker_on_uvloop: bool = False,
) -> None:
    """The ``main`` of a runner written with asyncio: a worker scenario runs ``work`` (on uvloop's
    loop with ``worker_on_uvloop``, for a library whose worker command runs on it), any other
    prints what ``produce`` returns."""
    args = runner_arguments()
    if args.scenario.endswith("worker"):
        if worker_on_uvloop:
            import uvloop

            uvloop.run(work(args))
        else:
            asyncio.run(work(args))
    else:
        emit(asyncio.run(produce(args)))
