"""Crash test of a workflow: a fan-in of ``--parts`` jobs across ``--workers`` worker processes,
SIGKILLed in turn, and a broker failover; the callback must run once, with every result.

Two ``jqueue serve`` processes share a root (a new directory, or ``--root``). The harness
defers ``group(part.s(n) for n in range(parts)) | total.s()`` through ``RemoteQueue`` (one
request, one commit) and starts the worker processes, each a ``Worker`` on the same root. While
fewer than ``--kill-until`` of the parts have run, it SIGKILLs ``--kills`` workers, one at each
of as many even shares of the parts, and starts another in place of each; after the first, it
SIGKILLs the serving broker instead and starts a new standby, and it does so again when every
part has run, while the last acks commit and the callback is released. The killed workers' jobs come back
when their leases run out. When the callback has run, the harness stops the workers and checks, from the
files the workers wrote and the queue's history:

- the callback ran once (one run in all the workers' files), with the parts' results in order,
  as its first attempt unless a worker's claim got no answer (a claim that landed on a broker
  killed before it answered holds its job until the lease runs out);
- it is acked once in the history, with their sum as its result;
- every part is acked in the history.

Exit status 1 if a check fails.

Example::

    .venv/bin/python tools/crash_workflow.py --parts 1000 --workers 4 --kills 4
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import re
import signal
import subprocess
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

from jqueue import DirectQueue, JobStatus, RemoteQueue, Task, Worker, current_job, group
from jqueue.adapters.service.wire.root import root_storage
from soak_failover import Brokers, root_in

LEASE = timedelta(seconds=8)
"""Short, so that the jobs of a killed worker come back soon; long enough that a failover (a few
seconds) does not outlast the lease of the callback's run, whose ack waits for it."""
QUEUE = "workflow"


def workflow_tasks(
    worker: Worker | None, log: Path | None, parts: int, part_seconds: float
) -> tuple[Task[..., Any], Task[..., Any]]:
    """The tasks ``part`` and ``total``, registered with ``worker`` when given (a producer needs
    only their signatures); each run is written to ``log``."""

    async def part(n: int) -> int:
        await asyncio.sleep(part_seconds)
        if log is not None:
            with log.open("a") as lines:
                lines.write(f"part {n}\n")
        return n

    async def total(values: list[int]) -> int:
        job = current_job().job
        if log is not None:
            with log.open("a") as lines:
                lines.write(f"total {job.id} {job.attempts} {len(values)} {values == list(range(parts))}\n")
        return sum(values)

    if worker is None:
        return Task(part, "part"), Task(total, "total")
    return worker.task(part), worker.task(total)


async def work(root: str, log: Path, parts: int, part_seconds: float) -> None:
    """Run a ``Worker`` on the workflow's tasks until SIGTERM."""
    async with RemoteQueue(root, QUEUE, visibility_timeout=LEASE) as queue:
        worker = Worker(
            queue, concurrency=8, visibility_timeout=LEASE, max_poll_interval=timedelta(seconds=0.5)
        )
        workflow_tasks(worker, log, parts, part_seconds)
        await worker.run()


async def defer(root: str, parts: int) -> tuple[str, list[str]]:
    """Defer the fan-in; return the callback's id and the parts' ids."""
    part, total = workflow_tasks(None, None, parts, 0)
    fan_in = group(part.s(n) for n in range(parts)) | total.s()
    async with RemoteQueue(root, QUEUE) as queue:
        jobs = await fan_in.defer(queue)
    return jobs[-1].id, [job.id for job in jobs[:-1]]


async def history(root: str) -> dict[str, list[tuple[JobStatus, bytes | None]]]:
    """Each job's records in the queue's history: its outcomes and results."""
    async with DirectQueue(root_storage(root, QUEUE)) as queue:
        found: dict[str, list[tuple[JobStatus, bytes | None]]] = {}
        for record in await queue.history(limit=None):
            found.setdefault(record.job_id, []).append((record.outcome, record.result))
        return found


def lines_of(logs: Path, kind: str) -> list[list[str]]:
    return [
        line.split()
        for log in sorted(logs.glob("worker-*.log"))
        for line in log.read_text().splitlines()
        if line.startswith(kind + " ")
    ]


def lost_claims(logs: Path) -> int:
    """The claims the workers sent that got no answer: each may have landed, and its job then
    comes back when its lease runs out, one attempt later, without having run."""
    lost = re.compile(r"no_answer: \S+/(dequeue|ack-and-dequeue)\b")
    found = 0
    for errors in sorted(logs.glob("worker-*.err")):
        text = errors.read_text(errors="replace")
        found += len(lost.findall(text))
        sys.stderr.write(text)
    return found


def crash(root: str, scratch: Path, options: argparse.Namespace) -> list[str]:
    """Run the crash test; return the checks that failed, printing what it saw."""
    brokers = Brokers(root, scratch)
    workers: list[subprocess.Popen[bytes]] = []
    me = str(Path(__file__).resolve())
    events: list[str] = []

    def kill_broker(when: str) -> None:
        serving = brokers.serving()
        serving.process.kill()
        serving.process.wait()
        brokers.alive.remove(serving)
        brokers.start()
        events.append(f"killed broker {serving.url} {when}")

    def start_worker() -> None:
        log = scratch / f"worker-{len(workers)}.log"
        command = [sys.executable, me, "work", root, str(log), str(options.parts), str(options.part_seconds)]
        with log.with_suffix(".err").open("wb") as errors:
            workers.append(subprocess.Popen(command, stderr=errors, start_new_session=True))

    try:
        brokers.start()
        brokers.serving()
        brokers.start()
        callback, part_ids = asyncio.run(defer(root, options.parts))
        started = time.monotonic()
        for _ in range(options.workers):
            start_worker()
        # the faults come as the parts run, at even shares of them up to --kill-until, whatever
        # the machine's speed: a worker at each, the broker once (after the first worker)
        faults = ["worker"] * options.kills
        faults.insert(min(1, len(faults)), "broker")
        shares = [options.kill_until * (n + 1) / (len(faults) + 1) for n in range(len(faults))]
        for share, fault in zip(shares, faults, strict=True):
            while len(lines_of(scratch, "part")) < share * options.parts:
                if time.monotonic() - started > options.within:
                    raise RuntimeError(f"the parts stalled (see {scratch})")
                time.sleep(0.02)
            ran = len(lines_of(scratch, "part"))
            if ran >= options.kill_until * options.parts:
                break  # the callback may be about to run: a kill now could run it twice
            if fault == "broker":
                kill_broker(f"after {ran} part runs")
                continue
            victim = next(worker for worker in workers if worker.poll() is None)
            victim.kill()
            victim.wait()
            start_worker()
            events.append(f"killed worker {victim.pid} after {ran} part runs")
        while len(lines_of(scratch, "part")) < options.parts and time.monotonic() - started < options.within:
            time.sleep(0.05)
        kill_broker(f"after {len(lines_of(scratch, 'part'))} part runs")  # the last acks and the release
        deadline = time.monotonic() + options.within
        recorded = asyncio.run(history(root))
        while callback not in recorded and time.monotonic() < deadline:  # acked, or dead
            time.sleep(0.5)
            recorded = asyncio.run(history(root))
        took = time.monotonic() - started
    finally:
        for worker in workers:
            with contextlib.suppress(ProcessLookupError):
                worker.send_signal(signal.SIGTERM)
        for worker in workers:
            with contextlib.suppress(subprocess.TimeoutExpired):
                worker.wait(30)
            if worker.poll() is None:
                worker.kill()
        brokers.stop()
    runs = lines_of(scratch, "total")
    failures = []
    if len(runs) != 1:
        failures.append(f"the callback ran {len(runs)} times: {runs}")
    elif runs[0][1:2] + runs[0][3:] != [callback, str(options.parts), "True"]:
        failures.append(f"the callback's run did not have every result in order: {runs[0]}")
    elif int(runs[0][2]) > 1 + lost_claims(scratch):
        failures.append(f"the callback's run was attempt {runs[0][2]}, with no claim's answer lost")
    expected = [(JobStatus.ACKED, str(sum(range(options.parts))).encode())]
    if recorded.get(callback) != expected:
        failures.append(f"the callback's history is {recorded.get(callback)}, not {expected}")
    unacked = [
        job_id for job_id in part_ids if JobStatus.ACKED not in (o for o, _ in recorded.get(job_id, []))
    ]
    if unacked:
        failures.append(f"{len(unacked)} parts not acked in the history, e.g. {unacked[:3]}")
    part_runs = len(lines_of(scratch, "part"))
    print(f"{len(events)} faults: {'; '.join(events)}")
    print(f"{options.parts} parts, {part_runs} part runs, {len(runs)} callback runs, in {took:.1f} s")
    for failure in failures:
        print(f"FAILED: {failure}")
    return failures


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "work":
        root, log, parts, part_seconds = sys.argv[2:6]
        with contextlib.suppress(KeyboardInterrupt):
            asyncio.run(work(root, Path(log), int(parts), float(part_seconds)))
        return
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--root", help="a directory or s3:// root (default: a new temporary directory)")
    parser.add_argument("--parts", type=int, default=1000, help="the fan-in's parts")
    parser.add_argument("--workers", type=int, default=4, help="worker processes at a time")
    parser.add_argument("--kills", type=int, default=4, help="worker processes to SIGKILL")
    parser.add_argument("--part-seconds", type=float, default=0.1, help="how long a part runs")
    parser.add_argument(
        "--kill-until", type=float, default=0.8, help="kill only while fewer than this share of the parts ran"
    )
    parser.add_argument("--within", type=float, default=300.0, help="seconds the callback has to run")
    options = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="jqueue-crash-") as scratch:
        failures = crash(root_in(Path(scratch), options.root), Path(scratch), options)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
