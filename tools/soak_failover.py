"""Failover soak: brokers killed and frozen in turn under producers and workers through ``connect``.

Two ``jqueue serve`` processes share a root (a directory, or an ``s3://`` root); producer
processes enqueue batches through ``connect(ROOT, "q")`` and worker processes run a ``Worker``
on the same. Every ``--every`` seconds the serving broker is, in turn, SIGKILLed (a new one is
started in its place) or frozen with SIGSTOP for ``--freeze`` seconds and then let go with
SIGCONT. After ``--faults`` faults the producers stop, the workers drain the queue, and the soak
checks, from the files the clients wrote and the queue's own history:

- every enqueue that returned was acked exactly once (one ack that returned, per job);
- every ack that returned is in the history as acked;
- no worker or producer exited before it was told to;

and prints the longest stall of a client call (an enqueue, claim or ack). Exit status 1 if a
check fails.

Example::

    .venv/bin/python tools/soak_failover.py --faults 18
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections import Counter
from collections.abc import Awaitable
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any, TypeVar

from jqueue import DirectQueue, Job, JobStatus, JQueueError, QueuePolicy, RemoteQueue, Worker
from jqueue.adapters.service.host import root_storage
from served import free_port

T = TypeVar("T")

FAST = ["--renew-every", "0.2", "--stale-after", "1"]
"""Broker settings that make a takeover quick: a record not renewed for 1 s is stale."""
BATCH = 5
LEASE = timedelta(seconds=10)
"""Short, so that a claim whose answer a broker never sent (it died or froze) comes back soon."""


def _health(url: str) -> dict[str, Any] | None:
    try:
        with urllib.request.urlopen(f"{url}/healthz", timeout=1) as answer:
            found: dict[str, Any] = json.loads(answer.read())
            return found
    except OSError:
        return None


@dataclass
class Broker:
    """One ``jqueue serve`` process of the soak."""

    url: str
    process: subprocess.Popen[bytes]


@dataclass
class Brokers:
    """The brokers of the root: two at a time, one serving."""

    root: str
    logs: Path
    started: int = 0
    alive: list[Broker] = field(default_factory=list)

    def start(self) -> Broker:
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        command = [sys.executable, "-m", "jqueue", "serve", "--storage", self.root]
        command += ["--listen", f"127.0.0.1:{port}", *FAST]
        with (self.logs / f"serve-{self.started}.log").open("wb") as log:
            process = subprocess.Popen(command, stderr=log, start_new_session=True)
        self.started += 1
        deadline = time.monotonic() + 60
        while _health(url) is None:
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"jqueue serve on {self.root} did not start (see {self.logs})")
            time.sleep(0.05)
        broker = Broker(url, process)
        self.alive.append(broker)
        return broker

    def serving(self, within: float = 30.0) -> Broker:
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            for broker in self.alive:
                if (_health(broker.url) or {}).get("role") == "active":
                    return broker
            time.sleep(0.05)
        raise RuntimeError(f"no broker serves {self.root} within {within:g} s")

    def stop(self) -> None:
        for broker in self.alive:
            with contextlib.suppress(ProcessLookupError):
                os.kill(broker.process.pid, signal.SIGCONT)
                broker.process.terminate()
        for broker in self.alive:
            with contextlib.suppress(subprocess.TimeoutExpired):
                broker.process.wait(15)
            if broker.process.poll() is None:
                broker.process.kill()


def _queue(root: str) -> RemoteQueue:
    return RemoteQueue(root, "q", visibility_timeout=LEASE)


async def produce(root: str, out: Path, stop: Path) -> None:
    """Enqueue batches until ``stop`` exists; write ``ID`` for each job enqueued, and the longest
    call as ``stall SECONDS``."""
    longest, n = 0.0, 0
    async with _queue(root) as queue:
        with out.open("a", buffering=1) as lines:
            while not stop.exists():  # noqa: ASYNC240 (a local file, seldom)
                started = time.monotonic()
                jobs = await queue.enqueue_many("work", [f"{n + k}".encode() for k in range(BATCH)])
                longest = max(longest, time.monotonic() - started)
                n += BATCH
                lines.write("".join(f"{job.id}\n" for job in jobs))
                await asyncio.sleep(0.05)
            lines.write(f"stall {longest:.3f}\n")


class TimedQueue(RemoteQueue):
    """A ``RemoteQueue`` that remembers its slowest claim or ack (a ``Worker``'s claims carry its
    acks: ``ack_and_dequeue``)."""

    longest: float = 0.0

    async def _timed(self, call: Awaitable[T]) -> T:
        started = time.monotonic()
        try:
            return await call
        finally:
            self.longest = max(self.longest, time.monotonic() - started)

    async def dequeue(self, *args: Any, **kwargs: Any) -> list[Job]:
        return await self._timed(super().dequeue(*args, **kwargs))

    async def ack_and_dequeue(self, *args: Any, **kwargs: Any) -> tuple[list[JQueueError | None], list[Job]]:
        return await self._timed(super().ack_and_dequeue(*args, **kwargs))

    async def ack(self, *args: Any, **kwargs: Any) -> None:
        await self._timed(super().ack(*args, **kwargs))


async def work(root: str, out: Path, stop: Path) -> None:
    """Run a ``Worker`` until ``stop`` exists and nothing is left; write ``acked ID`` for each ack
    that returned, and the longest claim or ack as ``stall SECONDS``."""
    queue = TimedQueue(root, "q", visibility_timeout=LEASE)
    async with queue:
        worker = Worker(
            queue, concurrency=8, visibility_timeout=LEASE, max_poll_interval=timedelta(seconds=0.5)
        )

        @worker.handler("work")
        async def handle(job: Job) -> None:
            await asyncio.sleep(0.01)

        with out.open("a", buffering=1) as lines:

            @worker.on("after_job")
            def record(result: Any) -> None:
                if result.outcome == "acked":
                    lines.write(f"acked {result.job.id}\n")

            running = asyncio.create_task(worker.run(install_signals=False))
            while not stop.exists():  # noqa: ASYNC240
                done, _ = await asyncio.wait({running}, timeout=0.2)
                if done:
                    running.result()  # a worker that stops on its own fails the soak
                    raise RuntimeError("the worker stopped before it was told to")
            worker.stop()
            await running
            lines.write(f"stall {queue.longest:.3f}\n")


def _rows(path: Path) -> list[list[str]]:
    return [line.split() for line in path.read_text().splitlines()] if path.exists() else []


async def _history(root: str) -> tuple[dict[str, JobStatus], dict[str, str]]:
    """The outcome of each job of the history, and the status of each job still in the queue."""
    async with DirectQueue(root_storage(root, "q")) as queue:
        history = {record.job_id: record.outcome for record in await queue.history()}
        jobs = await queue.jobs(limit=None)
        live = {job.id: f"{job.status.value}, lease until {job.lease_expires_at}" for job in jobs}
        return history, live


def root_in(scratch: Path, given: str | None) -> str:
    """The root a run uses: ``given``, else a new directory in ``scratch``."""
    if given is not None:
        return given
    (scratch / "root").mkdir()
    return str(scratch / "root")


def soak(root: str, work_dir: Path, faults: int, every: float, freeze: float, clients: int) -> list[str]:
    """Run the soak; return the checks that failed (none if it passed), printing what it saw."""
    brokers = Brokers(root, work_dir)
    stop_producing, stop_working = work_dir / "stop-producing", work_dir / "stop-working"
    processes: dict[str, subprocess.Popen[bytes]] = {}
    me = str(Path(__file__).resolve())
    events: list[str] = []
    try:
        brokers.start()
        brokers.serving()
        brokers.start()
        for n in range(clients):
            for mode, stop in (("produce", stop_producing), ("work", stop_working)):
                command = [sys.executable, me, mode, root, str(work_dir / f"{mode}-{n}.txt"), str(stop)]
                processes[f"{mode}-{n}"] = subprocess.Popen(command)
        for turn in range(faults):
            time.sleep(every)
            serving = brokers.serving()
            if turn % 2 == 0:
                serving.process.kill()
                serving.process.wait()
                brokers.alive.remove(serving)
                events.append(f"killed {serving.url}")
                brokers.start()
            else:
                os.kill(serving.process.pid, signal.SIGSTOP)
                events.append(f"froze {serving.url} for {freeze:g} s")
                time.sleep(freeze)
                os.kill(serving.process.pid, signal.SIGCONT)
        stop_producing.write_text("")
        for n in range(clients):
            processes[f"produce-{n}"].wait(120)
        produced = {
            row[0] for n in range(clients) for row in _rows(work_dir / f"produce-{n}.txt") if len(row) == 1
        }
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            acked = {
                row[1]
                for n in range(clients)
                for row in _rows(work_dir / f"work-{n}.txt")
                if row[0] == "acked"
            }
            if produced <= acked:
                break
            time.sleep(0.5)
        stop_working.write_text("")
        for n in range(clients):
            processes[f"work-{n}"].wait(120)
        history, live = asyncio.run(_history(root))
    finally:
        for process in processes.values():
            if process.poll() is None:
                process.kill()
        brokers.stop()
    failures = [f"{name} exited with {p.returncode}" for name, p in processes.items() if p.returncode != 0]
    acks = Counter(
        row[1] for n in range(clients) for row in _rows(work_dir / f"work-{n}.txt") if row[0] == "acked"
    )
    stalls = [
        float(row[1])
        for n in range(clients)
        for mode in ("produce", "work")
        for row in _rows(work_dir / f"{mode}-{n}.txt")
        if row[0] == "stall"
    ]
    missing = produced - set(acks)
    twice = [job_id for job_id, count in acks.items() if count > 1]
    # the history keeps the newest ``history_limit`` records: once it is full, an acked job
    # missing from it was acked before its oldest record, unless the job is still in the queue
    full = len(history) >= QueuePolicy().history_limit
    unrecorded = [
        job_id
        for job_id in acks
        if (history[job_id] is not JobStatus.ACKED if job_id in history else not full or job_id in live)
    ]
    strangers = set(acks) - produced
    if missing:
        print(
            "never acked:", {job_id: history.get(job_id) or live.get(job_id, "nowhere") for job_id in missing}
        )
    for name, found in (
        ("enqueued but never acked", missing),
        ("acked twice", twice),
        ("acked but not acked in the history", unrecorded),
        ("acked but never enqueued", strangers),
    ):
        if found:
            failures.append(f"{len(found)} jobs {name}, e.g. {sorted(found)[:3]}")
    print(f"{len(events)} broker faults: {'; '.join(events)}")
    print(
        f"{len(produced)} jobs enqueued, {sum(acks.values())} acks returned, {len(history)} in the history"
        + (" (full: the newest kept)" if full else "")
    )
    print(f"longest client stall: {max(stalls, default=0.0):.2f} s")
    for failure in failures:
        print(f"FAILED: {failure}")
    return failures


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] in ("produce", "work"):
        mode, root, out, stop = sys.argv[1:5]
        asyncio.run((produce if mode == "produce" else work)(root, Path(out), Path(stop)))
        return
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--root", help="a directory or s3:// root (default: a new temporary directory)")
    parser.add_argument(
        "--faults", type=int, default=18, help="broker faults to make, killing and freezing in turn"
    )
    parser.add_argument("--every", type=float, default=10.0, help="seconds between two broker faults")
    parser.add_argument("--freeze", type=float, default=5.0, help="how long a frozen broker stays frozen")
    parser.add_argument("--clients", type=int, default=2, help="producer processes, and as many workers")
    options = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="jqueue-soak-") as scratch:
        root = root_in(Path(scratch), options.root)
        failures = soak(root, Path(scratch), options.faults, options.every, options.freeze, options.clients)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
