"""Clients and workers through ``jqueue serve`` ride out a broker that dies, freezes or hands over:
a worker outlives an outage shorter than its ``max_outage``, a frozen broker costs a client no
more than a killed one, long polls never starve the calls a worker needs, a worker may start
before its queue exists, and an ack whose answer was lost is not reported as lost."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import os
import signal
import time
from collections.abc import AsyncIterator, Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from jqueue import DirectQueue, Job, LeaseLostError, LocalFileSystemStorage, RemoteQueue, Worker, connect
from jqueue.adapters.storage.file_lock import hold_flock, lock_holder
from servers import LOOPBACK, jqueue_serve
from test_broker_failover import FAST, STANDBY, get, wait_for

pytestmark = pytest.mark.slow


def pid_of(url: str) -> int:
    pid: int = get(f"{url}/healthz")["pid"]
    return pid


def serving(urls: list[str], name: str) -> tuple[str, str]:
    """The one of two brokers that serves queue ``name`` (the member that owns it; with
    ``--standby``, the active broker), and the other."""

    def owner() -> str | None:
        for url in urls:
            health = get(f"{url}/healthz")
            if name in health.get("queues", ()) or ("queues" not in health and health["role"] == "active"):
                return url
        return None

    wait_for(lambda: owner() is not None, 10)
    found = owner()
    assert found is not None
    return found, next(url for url in urls if url != found)


@contextlib.contextmanager
def frozen(pid: int, root: Path) -> Iterator[None]:
    """SIGSTOP the process outside every file lock under ``root``, and SIGCONT it on the way out
    whatever happens. (Stopped while holding one, it is killed by the next process that needs
    the lock: ``frozen_inside_a_commit``.)"""
    with contextlib.ExitStack() as held:
        for lock_file in sorted([*root.rglob("*.lock"), *root.rglob("lock")]):
            fd = os.open(lock_file, os.O_RDWR)
            held.callback(os.close, fd)
            hold_flock(fd, fcntl.LOCK_EX, str(lock_file))
        os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)


async def until(condition: object, seconds: float) -> None:
    """Wait (without blocking the loop) until ``condition()`` holds; fail after ``seconds``."""
    deadline = time.monotonic() + seconds
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"not within {seconds} s"
        await asyncio.sleep(0.05)


@contextlib.asynccontextmanager
async def running(worker: Worker) -> AsyncIterator[asyncio.Task[object]]:
    task: asyncio.Task[object] = asyncio.create_task(worker.run(install_signals=False))
    try:
        yield task
    finally:
        worker.stop(immediate=True)
        with contextlib.suppress(Exception):
            await asyncio.wait_for(task, 30)


async def test_a_worker_rides_out_a_broker_outage_longer_than_its_clients_failover_timeout(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    root = tmp_path / "root"
    root.mkdir()
    done: list[bytes] = []

    async def handler(job: Job) -> None:
        done.append(job.payload)

    caplog.set_level(logging.WARNING, logger="jqueue.worker")
    with jqueue_serve(str(root), tmp_path / "first.log", options=FAST) as first:
        async with connect(str(root), "q", failover_timeout=timedelta(seconds=1)) as queue:
            worker = Worker(queue, {"e": handler}, max_poll_interval=timedelta(seconds=0.2))
            async with running(worker) as task:
                await queue.enqueue("e", b"before")
                await until(lambda: done == [b"before"], 30)
                os.kill(pid_of(first), signal.SIGKILL)
                # the outage outlasts the client's failover timeout several times over
                await until(lambda: "waiting for the broker" in caplog.text, 30)
                await asyncio.sleep(4)
                assert not task.done(), task
                with jqueue_serve(str(root), tmp_path / "second.log", options=FAST):
                    async with connect(str(root), "q") as producer:
                        await producer.enqueue("e", b"after")
                    await until(lambda: done == [b"before", b"after"], 60)
                    assert not task.done()
    assert task.done()
    assert task.exception() is None


async def test_a_worker_told_to_stop_while_its_broker_is_away_stops_at_once(tmp_path: Path) -> None:
    """Neither a claim riding out the outage nor the worker's farewell to the broker holds up the
    stop: the client's failover timeout (60 s here) is not waited out."""
    root = tmp_path / "root"
    root.mkdir()
    with jqueue_serve(str(root), tmp_path / "serve.log", options=FAST) as url:
        async with connect(url, "q", failover_timeout=timedelta(seconds=60)) as queue:
            worker = Worker(queue, {"e": lambda job: None}, max_poll_interval=timedelta(seconds=0.2))
            task = asyncio.create_task(worker.run(install_signals=False))
            await queue.enqueue("e", b"x")
            await until(lambda: worker.stats.acked == 1, 30)
            os.kill(pid_of(url), signal.SIGKILL)
            await asyncio.sleep(1)  # the worker's next claim now waits for a broker
            started = time.monotonic()
            worker.stop()
            await asyncio.wait_for(task, 30)
            assert time.monotonic() - started < 15, "the stop waited for the failover timeout"


async def test_a_worker_through_the_broker_waits_for_its_queue_to_exist(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    done: list[bytes] = []

    async def handler(job: Job) -> None:
        done.append(job.payload)

    with jqueue_serve(str(root), tmp_path / "serve.log", options=FAST):
        async with connect(str(root), "fresh") as queue:
            worker = Worker(queue, {"e": handler}, max_poll_interval=timedelta(seconds=0.2))
            async with running(worker) as task:
                await asyncio.sleep(1)  # several claims and long polls of a queue that is not there
                assert not task.done(), task
                assert not (root / "fresh.json").exists()  # looking for jobs creates nothing
                async with connect(str(root), "fresh") as producer:
                    await producer.enqueue("e", b"late")
                await until(lambda: done == [b"late"], 30)
                assert not task.done()


@pytest.mark.parametrize("options", [STANDBY, FAST], ids=["standby", "member"])
async def test_a_frozen_broker_costs_a_client_no_more_than_a_killed_one(
    tmp_path: Path, options: list[str]
) -> None:
    root = tmp_path / "root"
    root.mkdir()
    with jqueue_serve(str(root), tmp_path / "first.log", options=options) as one:
        wait_for(lambda: get(f"{one}/healthz")["role"] == "active", 10)
        with jqueue_serve(str(root), tmp_path / "second.log", options=options) as two:
            async with connect(str(root), "q") as client, connect(str(root), "q") as worker:
                assert isinstance(client, RemoteQueue)
                waited = await client.enqueue("e", b"waited for")
                first, second = serving([one, two], "q")
                result = asyncio.create_task(client.result(waited.id, timeout=timedelta(seconds=120)))
                await asyncio.sleep(0.5)  # the long poll is open on the first broker
                with frozen(pid_of(first), root):
                    started = time.monotonic()
                    await client.enqueue("e", b"during the freeze")  # an ordinary call
                    enqueue_took = time.monotonic() - started
                    [claimed] = await worker.dequeue("e")
                    assert claimed.id == waited.id
                    await worker.ack(claimed, result=b"done")
                    assert await asyncio.wait_for(result, 60) == b"done"  # the long poll moved too
                    result_took = time.monotonic() - started
                    if "--standby" in options:
                        assert get(f"{second}/healthz")["role"] == "active"
    # the default per-call timeout is 30 s: a client that waited for it would take that long
    assert enqueue_took < 15, enqueue_took
    assert result_took < 20, result_took


def frozen_inside_a_commit(pids: set[int], lock_file: Path, seconds: float = 60) -> int:
    """SIGSTOP one of ``pids`` at a moment it holds ``lock_file``'s flock (inside a commit): stop
    it whenever it holds it, and let it go on and try again if it let go first; return it.
    (Any of them: on a busy machine the queue may have moved to another member meanwhile.)"""
    fd = os.open(lock_file, os.O_RDONLY)
    try:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if (pid := lock_holder(fd)) in pids:
                os.kill(pid, signal.SIGSTOP)
                if lock_holder(fd) == pid:
                    return pid
                os.kill(pid, signal.SIGCONT)
            time.sleep(0.0005)
        raise AssertionError(f"none of {sorted(pids)} was caught holding {lock_file} in {seconds} s")
    finally:
        os.close(fd)


@pytest.mark.parametrize("options", [STANDBY, FAST], ids=["standby", "member"])
async def test_a_broker_frozen_inside_a_commit_on_a_file_root_is_fenced_and_failover_goes_on(
    tmp_path: Path, options: list[str]
) -> None:
    root = tmp_path / "root"
    root.mkdir()
    landed: list[str] = []
    with jqueue_serve(str(root), tmp_path / "one.log", options=options) as one:
        wait_for(lambda: get(f"{one}/healthz")["role"] == "active", 10)
        with jqueue_serve(str(root), tmp_path / "two.log", options=options) as two:
            async with connect(str(root), "q") as client:
                landed.append((await client.enqueue("e", b"before")).id)
                first, second = serving([one, two], "q")

                async def produce() -> None:
                    while True:
                        landed.append((await client.enqueue("e", b"load")).id)

                producer = asyncio.create_task(produce())
                brokers = {pid_of(first): first, pid_of(second): second}
                lock = root / "q.json.segments" / "lock"
                frozen_pid = await asyncio.to_thread(frozen_inside_a_commit, set(brokers), lock)
                second = next(url for pid, url in brokers.items() if pid != frozen_pid)
                started = time.monotonic()
                try:
                    count = len(landed)
                    await until(lambda: len(landed) > count + 10, 60)  # enqueues go on, through the standby
                    recovered = time.monotonic() - started
                finally:
                    producer.cancel()
                    with contextlib.suppress(asyncio.CancelledError, Exception):
                        await producer
                if "--standby" in options:
                    assert get(f"{second}/healthz")["role"] == "active"
                other_log = tmp_path / ("two.log" if second == two else "one.log")
    async with DirectQueue(LocalFileSystemStorage(root / "q.json")) as queue:
        state = await queue.read_state()
    # fenced: killed by the process that needed the lock (the other broker taking over)
    assert f"killed process {frozen_pid}: it held" in other_log.read_text()
    assert set(landed) <= {job.id for job in state.jobs}  # every enqueue that returned is there
    assert recovered < 15, recovered


async def test_many_result_waiters_do_not_starve_the_workers_calls_on_the_same_queue(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    count = 150

    async def handler(job: Job) -> bytes:
        return job.payload

    with jqueue_serve(str(root), tmp_path / "serve.log"):
        async with connect(str(root), "q") as queue:
            jobs = await queue.enqueue_many("e", [str(n).encode() for n in range(count)])
            waits = [asyncio.create_task(queue.result(job.id, timeout=timedelta(seconds=20))) for job in jobs]
            await asyncio.sleep(0.5)  # every long poll is open before the worker starts
            worker = Worker(queue, {"e": handler}, concurrency=20)
            async with running(worker):
                results = await asyncio.gather(*waits, return_exceptions=True)
    failures = [result for result in results if isinstance(result, BaseException)]
    assert not failures, f"{len(failures)} of {count} failed, first: {failures[0]!r}"
    assert results == [job.payload for job in jobs]


class AnswerDropper:
    """A TCP proxy in front of a broker that forwards every request but drops the answer to the
    first ``ack`` and closes the connection: the ack lands, its client hears nothing."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.armed = True
        self.dropped = 0
        self.server: asyncio.Server | None = None

    async def start(self) -> str:
        self.server = await asyncio.start_server(self._serve, LOOPBACK, 0)
        port = self.server.sockets[0].getsockname()[1]
        return f"http://{LOOPBACK}:{port}"

    async def _serve(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        server_reader, server_writer = await asyncio.open_connection(LOOPBACK, self.target_port)
        acking = asyncio.Event()

        async def upstream() -> None:
            while data := await client_reader.read(65536):
                if self.armed and b"/ack HTTP/1.1" in data:
                    acking.set()
                server_writer.write(data)
                await server_writer.drain()

        async def downstream() -> None:
            while data := await server_reader.read(65536):
                if acking.is_set() and self.armed:
                    self.armed = False
                    self.dropped += 1
                    return  # the answer to the ack goes nowhere
                client_writer.write(data)
                await client_writer.drain()

        tasks = [asyncio.create_task(upstream()), asyncio.create_task(downstream())]
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        for task in tasks:
            task.cancel()
        for writer in (client_writer, server_writer):
            writer.close()

    async def stop(self) -> None:
        if self.server is not None:
            self.server.close()


@contextlib.asynccontextmanager
async def answers_dropped(tmp_path: Path) -> AsyncIterator[tuple[str, str, AnswerDropper]]:
    """Run ``jqueue serve`` on a fresh root with an ``AnswerDropper`` in front of it; yield the
    service's URL, the proxy's and the proxy."""
    root = tmp_path / "root"
    root.mkdir()
    with jqueue_serve(str(root), tmp_path / "serve.log") as url:
        proxy = AnswerDropper(int(url.rsplit(":", 1)[1]))
        through = await proxy.start()
        try:
            yield url, through, proxy
        finally:
            await proxy.stop()


async def test_an_ack_that_landed_but_whose_answer_was_lost_is_reported_as_acked(tmp_path: Path) -> None:
    async with answers_dropped(tmp_path) as (_, through, proxy), connect(through, "q") as queue:
        job = await queue.enqueue("e", b"x")
        [claimed] = await queue.dequeue("e")
        await queue.ack(claimed, result=b"done")  # LeaseLostError before the fix
        assert proxy.dropped == 1
        assert await queue.result(job.id) == b"done"


async def test_an_ack_whose_lost_answer_follows_another_claims_ack_is_lease_lost(tmp_path: Path) -> None:
    async with (
        answers_dropped(tmp_path) as (url, through, proxy),
        connect(through, "q") as late,
        connect(url, "q") as other,
    ):
        job = await late.enqueue("e", b"x")
        [first] = await late.dequeue("e", visibility_timeout=timedelta(seconds=1))
        deadline = time.monotonic() + 30
        while not (second := await other.dequeue("e")):  # once the first lease ran out
            assert time.monotonic() < deadline, "the first lease never ran out"
            await asyncio.sleep(0.2)
        await other.ack(second[0], result=b"by the second claim")
        with pytest.raises(LeaseLostError):  # its first answer is lost; the repeat learns why
            await late.ack(first, result=b"by the first claim")
        assert proxy.dropped == 1
        assert await other.result(job.id) == b"by the second claim"
