"""Failover soak: brokers killed and frozen in turn under producers and workers through ``connect``.

Two ``jqueue serve`` processes share a root (a directory, or an ``s3://`` root); producer
processes enqueue batches through ``connect(ROOT, "q")`` and worker processes run a ``Worker``
on the same. Every ``--every`` seconds the serving broker is, in turn, SIGKILLed (a new one is
started in its place) or frozen with SIGSTOP for ``--freeze`` seconds and then let go with
SIGCONT. After ``--faults`` faults the producers stop, the workers drain the queue, and the soak
checks (``chaos_check.check``), from the histories the clients wrote (each call's start, end and
answer) and the queue's own history:

- every enqueue that returned was finished, and no job was acked twice;
- every ack that returned is in the history as acked;
- no worker or producer exited before it was told to;

and prints the longest stall of a client call (an enqueue, claim or ack). Exit status 1 if a
check fails. ``Brokers`` and ``Load`` are the harness of ``chaos_matrix.py`` too.

Each batch a producer enqueues is a fan-in: ``BATCH - 1`` jobs of ``TENANTS`` tenants and a
callback that waits for them all (``after``), on queues limited to ``TENANT_LIMIT`` jobs in
progress per tenant. Replaying every queue's log entry by entry, the soak checks that no tenant
ever had more jobs in progress than its limit, and that no callback was claimed before all of
its parents had left the queue.

With ``--members N`` (2 or more), N brokers serve the root together (``jqueue serve --member``)
over ``--queues`` queues, and the faults take the members in turn; the soak also checks, from
every queue's log, that no entry was written by a broker after another took its queue over
(each entry's commit id names its writer). With ``--shards S`` the clients share one queue of
S shards instead (``jqueue.sharded(ROOT, "q", S, broker="require")``), which the members place
as queues; each fan-in is then of one tenant (of ``SHARDED_TENANTS``, in turn), so that its
jobs share a shard, and every shard's log is checked.

Examples::

    .venv/bin/python tools/soak_failover.py --faults 18
    .venv/bin/python tools/soak_failover.py --faults 18 --members 3 --queues 6 --clients 6
    .venv/bin/python tools/soak_failover.py --faults 18 --members 3 --shards 6 --clients 6
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
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any, TextIO, TypeVar

from chaos_check import Ack, Call, Histories, ack_line, call_line, check, read_client
from jqueue import (
    DirectQueue,
    Job,
    JobSpec,
    JobStatus,
    JQueueError,
    QueuePolicy,
    RemoteQueue,
    ShardedQueue,
    Worker,
    sharded,
)
from jqueue.adapters.service.wire.root import root_storage
from jqueue.adapters.web.queue_names import shard_name
from jqueue.core.formats.entry import ENTRY_PREFIX, Entry, decode_entry, entry_seq
from jqueue.core.loop.store import StorageUse
from jqueue.domain.effects import Claimed, Owned
from jqueue.domain.index import QueueIndex
from jqueue.domain.models import new_job_id
from jqueue.ports.storage import KeyedStoragePort
from served import free_port

T = TypeVar("T")

FAST = ["--renew-every", "0.2", "--stale-after", "1"]
"""Broker settings that make a takeover quick: a record not renewed for 1 s is stale."""
BATCH = 5
"""Jobs a producer enqueues at once: ``BATCH - 1`` of tenants, and their fan-in callback."""
TENANTS = 3
SHARDED_TENANTS = 256
"""Tenants of a sharded queue's fan-ins (one a fan-in, in turn): enough to reach every shard."""
TENANT_LIMIT = 2
"""Jobs of one tenant in progress at once, in each queue (``limit(None, 2, per_tenant=True)``)."""
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
    env: Callable[[int], dict[str, str] | None] = lambda n: None
    """The environment of the ``n``th broker started, if not this process's."""
    members: bool = False
    """Whether the brokers are members of the root (the default): all serve, each its queues; else
    they run with ``--standby``, one serving the root and the others waiting."""
    _turn: int = 0

    def start(self) -> Broker:
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        command = [sys.executable, "-m", "jqueue", "serve", "--storage", self.root]
        mode = "--member" if self.members else "--standby"
        command += ["--listen", f"127.0.0.1:{port}", *FAST, mode]
        with (self.logs / f"serve-{self.started}.log").open("wb") as log:
            process = subprocess.Popen(
                command, stderr=log, start_new_session=True, env=self.env(self.started)
            )
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
        """The broker that serves (of members: the next in turn, each serving its queues)."""
        if self.members:
            self._turn += 1
            return self.alive[self._turn % len(self.alive)]
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            for broker in self.alive:
                if (_health(broker.url) or {}).get("role") == "active":
                    return broker
            time.sleep(0.05)
        raise RuntimeError(f"no broker serves {self.root} within {within:g} s")

    def kill(self) -> str:
        """SIGKILL the serving broker and start another in its place; say what was done."""
        serving = self.serving()
        serving.process.kill()
        serving.process.wait()
        self.alive.remove(serving)
        self.start()
        return f"killed {serving.url}"

    def freeze(self, seconds: float) -> str:
        """SIGSTOP the serving broker for ``seconds``, then SIGCONT it; say what was done."""
        serving = self.serving()
        os.kill(serving.process.pid, signal.SIGSTOP)
        time.sleep(seconds)
        os.kill(serving.process.pid, signal.SIGCONT)
        return f"froze {serving.url} for {seconds:g} s"

    def restart_exited(self) -> list[str]:
        """Start a broker in place of each that exited (as a service manager would)."""
        exited = [broker for broker in self.alive if broker.process.poll() is not None]
        for broker in exited:
            self.alive.remove(broker)
            self.start()
        return [f"restarted {broker.url} (exited {broker.process.returncode})" for broker in exited]

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


async def produce(
    root: str, out: Path, stop: Path, batch: int = BATCH, name: str = "q", shards: int = 1
) -> None:
    """Enqueue batches to queue ``name`` (of ``shards`` shards) until ``stop`` exists, writing each
    call to ``out`` (``call_line``: its start, end, and the jobs enqueued or the error it raised)."""
    n = 0
    opened = (
        RemoteQueue(root, name, visibility_timeout=LEASE)
        if shards == 1
        else sharded(root, name, shards, broker="require", visibility_timeout=LEASE)
    )
    async with opened as queue:
        await queue.limit(None, TENANT_LIMIT, per_tenant=True)
        with out.open("a", buffering=1) as lines:
            while not stop.exists():  # noqa: ASYNC240 (a local file, seldom)
                started = time.monotonic()
                try:
                    jobs = await queue.enqueue_many(fan_in(n, batch, one_tenant=shards > 1))
                except JQueueError as error:
                    lines.write(call_line("enqueue", started, time.monotonic(), [], repr(error)))
                    await asyncio.sleep(0.05)
                    continue
                lines.write(call_line("enqueue", started, time.monotonic(), [job.id for job in jobs]))
                n += batch
                await asyncio.sleep(0.05)


def fan_in(n: int, batch: int, one_tenant: bool = False) -> list[JobSpec]:
    """``batch - 1`` jobs of the tenants in turn (``one_tenant``: of one, the next at each batch,
    so that they share a shard), numbered from ``n``, and a callback after them."""
    parents = [
        JobSpec(
            "work",
            f"{n + k}".encode(),
            id=new_job_id(),
            tenant=f"t{(n // batch) % SHARDED_TENANTS}" if one_tenant else f"t{(n + k) % TENANTS}",
        )
        for k in range(batch - 1)
    ]
    return [*parents, JobSpec("work", b"fan-in", after=[parent.id for parent in parents if parent.id])]


class TimedQueue(RemoteQueue):
    """A ``RemoteQueue`` that writes each claim or ack to ``lines`` (a ``Worker``'s claims carry
    its acks: ``ack_and_dequeue``)."""

    lines: TextIO | None = None

    async def _timed(self, name: str, call: Awaitable[T]) -> T:
        started = time.monotonic()
        try:
            answer = await call
        except JQueueError as error:
            self._write(call_line(name, started, time.monotonic(), [], repr(error)))
            raise
        jobs = answer if isinstance(answer, list) else answer[1] if isinstance(answer, tuple) else []
        self._write(call_line(name, started, time.monotonic(), [job.id for job in jobs]))
        return answer

    def _write(self, line: str) -> None:
        if self.lines is not None:
            self.lines.write(line)

    async def dequeue(self, *args: Any, **kwargs: Any) -> list[Job]:
        return await self._timed("dequeue", super().dequeue(*args, **kwargs))

    async def ack_and_dequeue(self, *args: Any, **kwargs: Any) -> tuple[list[JQueueError | None], list[Job]]:
        return await self._timed("ack_and_dequeue", super().ack_and_dequeue(*args, **kwargs))

    async def ack(self, *args: Any, **kwargs: Any) -> None:
        await self._timed("ack", super().ack(*args, **kwargs))


async def work(
    root: str, out: Path, stop: Path, concurrency: int = 8, name: str = "q", shards: int = 1
) -> None:
    """Run a ``Worker`` on queue ``name`` (of ``shards`` shards) until ``stop`` exists, writing each
    claim and ack call to ``out`` (``call_line``, of each shard) and each ack that returned
    (``ack_line``)."""
    timed = [TimedQueue(root, shard_name(name, k), visibility_timeout=LEASE) for k in range(shards)]
    queue = timed[0] if shards == 1 else ShardedQueue(timed.__getitem__, shards)
    async with queue:
        worker = Worker(
            queue, concurrency=concurrency, visibility_timeout=LEASE, max_poll_interval=timedelta(seconds=0.5)
        )

        @worker.handler("work")
        async def handle(job: Job) -> None:
            await asyncio.sleep(0.01)

        with out.open("a", buffering=1) as lines:
            for shard in timed:
                shard.lines = lines

            @worker.on("after_job")
            def record(result: Any) -> None:
                if result.outcome == "acked":
                    lines.write(ack_line(result.job.id, time.monotonic()))

            running = asyncio.create_task(worker.run(install_signals=False))
            while not stop.exists():  # noqa: ASYNC240
                done, _ = await asyncio.wait({running}, timeout=0.2)
                if done:
                    running.result()  # a worker that stops on its own fails the run
                    raise RuntimeError("the worker stopped before it was told to")
            worker.stop()
            await running


async def _history(root: str, names: list[str]) -> tuple[dict[str, JobStatus], dict[str, str]]:
    """The outcome of each job of the queues' histories, and the status of each job still in one."""
    history: dict[str, JobStatus] = {}
    live: dict[str, str] = {}
    for name in names:
        async with DirectQueue(root_storage(root, name)) as queue:
            history |= {record.job_id: record.outcome for record in await queue.history()}
            jobs = await queue.jobs(limit=None)
            live |= {job.id: f"{job.status.value}, lease until {job.lease_expires_at}" for job in jobs}
    return history, live


async def log_checks(root: str, names: list[str]) -> list[str]:
    """What every queue's log shows wrong, entry by entry (``log_faults``), each log's entries
    fetched 64 at a time through one held storage (a remote log is long, and on S3 a storage
    not held open makes a client a read)."""
    found = []
    for name in names:
        storage = root_storage(root, name)
        assert isinstance(storage, KeyedStoragePort)
        async with StorageUse(storage):
            listed = sorted(await storage.list_names(ENTRY_PREFIX))
            contents: list[bytes | None] = []
            for start in range(0, len(listed), 64):
                contents += await asyncio.gather(*(storage.get(n) for n in listed[start : start + 64]))
        entries = [
            decode_entry(data, seq, entry_name)
            for entry_name, data in zip(listed, contents, strict=True)
            if (seq := entry_seq(entry_name)) is not None and data is not None
        ]
        found += [f"{name}: {fault}" for fault in log_faults(entries)]
    return found


def log_faults(entries: list[Entry]) -> list[str]:
    """What a queue's log entries (in order) show wrong:

    - an entry written by a broker after another took the queue over (each entry's commit id
      names its writer, the last ``Owned`` entry the owner; entries before the first ``Owned``
      still in the log, which compaction may have left, are not judged);
    - replayed from the first entry (a log that compaction shortened is not replayed): a
      tenant with more than ``TENANT_LIMIT`` jobs in progress, or a job claimed while a job it
      waits for (``after``) was still in the queue.
    """
    found = []
    owner: str | None = None
    index = QueueIndex() if entries and entries[0].seq == 1 else None
    for entry in entries:
        owner = next((e.owner for e in entry.effects if isinstance(e, Owned)), owner)
        writer = entry.commit.partition("/")[0] if "/" in entry.commit else ""
        if owner is not None and writer and writer != owner:
            found.append(f"entry {entry.seq} written by {writer}, owned by {owner}")
        if index is None:
            continue
        tenants = set()
        for effect in entry.effects:
            claimed = index.job(effect.job_id) if isinstance(effect, Claimed) else None
            if claimed is not None and any(index.job(parent) is not None for parent in claimed.after):
                found.append(f"entry {entry.seq} claims {claimed.id} before its parents left")
            if claimed is not None:
                tenants.add(claimed.tenant)
            index.apply(effect)
        for tenant in sorted(t for t in tenants if t is not None):  # a claim is what can pass a limit
            if index.running_of(None, tenant) > TENANT_LIMIT:
                found.append(
                    f"entry {entry.seq}: {index.running_of(None, tenant)} jobs of {tenant} in progress"
                )
    return found


def root_in(scratch: Path, given: str | None) -> str:
    """The root a run uses: ``given``, else a new directory in ``scratch``."""
    if given is not None:
        return given
    (scratch / "root").mkdir()
    return str(scratch / "root")


@dataclass
class Load:
    """Producer and worker processes on a root (``clients`` of each), each writing its history to
    a file of ``work_dir``; ``env(name)`` is the environment of the client ``name``, if any."""

    root: str
    work_dir: Path
    clients: int
    batch: int = BATCH
    concurrency: int = 8
    env: Callable[[str], dict[str, str] | None] = lambda name: None
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    queues: int = 1
    """Client ``n`` uses queue ``q`` (one queue) or ``q{n % queues}``."""
    shards: int = 1
    """The shards of queue ``q`` (with one queue)."""

    @property
    def names(self) -> list[str]:
        """The queues the clients use (each shard's name, of a sharded queue)."""
        if self.queues == 1:
            return [shard_name("q", k) for k in range(self.shards)]
        return [f"q{n}" for n in range(self.queues)]

    def start(self) -> None:
        me = str(Path(__file__).resolve())
        for n in range(self.clients):
            for mode in ("produce", "work"):
                name = f"{mode}-{n}"
                command = [sys.executable, me, mode, self.root, str(self._file(name)), str(self._stop(mode))]
                command.append(str(self.batch if mode == "produce" else self.concurrency))
                command += [self.names[n % len(self.names)] if self.shards == 1 else "q", str(self.shards)]
                self.processes[name] = subprocess.Popen(command, env=self.env(name))

    def _file(self, name: str) -> Path:
        return self.work_dir / f"{name}.jsonl"

    def _stop(self, mode: str) -> Path:
        return self.work_dir / f"stop-{mode}"

    def drain(self, within: float) -> None:
        """Stop the producers, wait (at most ``within`` seconds) until every job they enqueued
        was acked, then stop the workers."""
        self._stop("produce").write_text("")
        for n in range(self.clients):
            self.processes[f"produce-{n}"].wait(120)
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            seen = self.seen()
            if {i for c in seen.calls if c.call == "enqueue" for i in c.ids} <= {a.job_id for a in seen.acks}:
                break
            time.sleep(0.5)
        self._stop("work").write_text("")
        for n in range(self.clients):
            self.processes[f"work-{n}"].wait(120)

    def resumed(self, since: float, within: float) -> float | None:
        """Wait (at most ``within`` seconds) until an enqueue that started at ``since`` or later has
        returned jobs and an ack has returned after it; return when that enqueue returned, or
        ``None`` if none did in time."""
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            seen = self.seen()
            returned = [c.end for c in seen.calls if c.call == "enqueue" and c.start >= since and c.ids]
            if returned and any(a.at >= min(returned) for a in seen.acks):
                return min(returned)
            time.sleep(0.1)
        return None

    def seen(self) -> Histories:
        """What the clients wrote so far (no queue history)."""
        calls: list[Call] = []
        acks: list[Ack] = []
        for path in sorted([*self.work_dir.glob("produce-*.jsonl"), *self.work_dir.glob("work-*.jsonl")]):
            more_calls, more_acks = read_client(path)
            calls += more_calls
            acks += more_acks
        return Histories(calls, acks, {}, {})

    def histories(self) -> Histories:
        """Every client's history and the queue's."""
        seen = self.seen()
        queue, live = asyncio.run(_history(self.root, self.names))
        full = len(queue) >= QueuePolicy().history_limit
        return Histories(seen.calls, seen.acks, queue, live, full)

    def failures(self) -> list[str]:
        """The clients that exited other than by being told to."""
        return [
            f"{name} exited with {p.returncode}" for name, p in self.processes.items() if p.returncode != 0
        ]

    def kill(self) -> None:
        for process in self.processes.values():
            if process.poll() is None:
                process.kill()


def soak(
    root: str,
    work_dir: Path,
    faults: int,
    every: float,
    freeze: float,
    clients: int,
    members: int,
    queues: int,
    shards: int = 1,
) -> list[str]:
    """Run the soak; return the checks that failed (none if it passed), printing what it saw."""
    brokers = Brokers(root, work_dir, members=members > 1)
    load = Load(root, work_dir, clients, queues=queues, shards=shards)
    events: list[str] = []
    try:
        brokers.start()
        brokers.serving()
        for _ in range(max(members, 2) - 1):
            brokers.start()
        load.start()
        for turn in range(faults):
            time.sleep(every)
            events.append(brokers.kill() if turn % 2 == 0 else brokers.freeze(freeze))
        load.drain(120)
        histories = load.histories()
    finally:
        load.kill()
        brokers.stop()
    verdict = check(histories)
    logged = asyncio.run(log_checks(root, load.names))
    failures = load.failures() + verdict.failures + logged
    if verdict.lost:
        print(
            "never acked:",
            {j: histories.queue.get(j) or histories.live.get(j, "nowhere") for j in verdict.lost},
        )
    print(f"{len(events)} broker faults: {'; '.join(events)}")
    deposed = [fault for fault in logged if "owned by" in fault]
    print(f"{len(deposed)} log entries by a deposed owner")
    print(f"{len(logged) - len(deposed)} breaches of a tenant's limit or a fan-in's order in the logs")
    print(
        f"{verdict.enqueued} jobs enqueued, {len(histories.acks)} acks returned, "
        f"{len(histories.queue)} in the history" + (" (full: the newest kept)" if histories.full else "")
    )
    print(f"longest client stall: {verdict.stall:.2f} s")
    for failure in failures:
        print(f"FAILED: {failure}")
    return failures


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "produce":
        root, out, stop, batch, name, shards = sys.argv[2:8]
        asyncio.run(produce(root, Path(out), Path(stop), int(batch), name, int(shards)))
        return
    if len(sys.argv) > 1 and sys.argv[1] == "work":
        root, out, stop, concurrency, name, shards = sys.argv[2:8]
        asyncio.run(work(root, Path(out), Path(stop), int(concurrency), name, int(shards)))
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
    parser.add_argument(
        "--members", type=int, default=1, help="2 or more: brokers that all serve (jqueue serve --member)"
    )
    parser.add_argument("--queues", type=int, default=1, help="queues the clients spread over")
    parser.add_argument("--shards", type=int, default=1, help="shards of the one queue the clients share")
    options = parser.parse_args()
    if options.shards > 1 and options.queues > 1:
        parser.error("--shards is for one queue: leave --queues at 1")
    with tempfile.TemporaryDirectory(prefix="jqueue-soak-") as scratch:
        root = root_in(Path(scratch), options.root)
        failures = soak(
            root, Path(scratch), options.faults, options.every, options.freeze, options.clients,
            members=options.members, queues=options.queues, shards=options.shards,
        )  # fmt: skip
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
