"""Many processes on one S3 queue: through ``jqueue serve`` against each committing directly.

Starts moto's S3 server and its latency proxy (``s3_stack.py``): ``--get-latency-ms`` (60)
before a GET or HEAD, ``--put-latency-ms`` (100) before anything else. Everything below talks
to the proxy, so the broker and the direct processes see the same latency, and the proxy
counts their requests.

Modes, each with a fresh queue:

- ``broker``: one ``jqueue serve`` on the root; N worker processes ``connect(root, "q")``.
- ``direct``: N worker processes ``connect(root, "q", broker="off")``, each committing on its own (a
  call whose commit lost its races more often than the queue retries fails; the cycles that
  failed are counted).
- ``single``: one process committing directly with as many callers as the N processes have
  together (the single-process figure).

Each process runs ``--callers`` tasks that loop enqueue, dequeue, ack; every one of the three
is a call. After ``--warmup`` seconds the calls of the next ``--seconds`` are counted, and the
time each enqueue took (its p50 and p99 over every process, to the millisecond). At the end the
queue must balance: every job enqueued was acked or is still in the queue.

Example::

    .venv/bin/python tools/benchmark_s3_processes.py --processes 4,16 --json bench-results/s3-processes.json
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from jqueue.testing import free_port

sys.path.insert(0, str(Path(__file__).parent))
from request_costs import PRICE_LISTS, REQUEST_CLASSES, cost_per_million_jobs
from s3_stack import BUCKET, CREDENTIALS, REGION, request_counts, start_servers, wait_listening

SRC = Path(__file__).resolve().parents[1] / "src"


async def worker(root: str, broker: str, callers: int, window: Window, in_flight: int) -> dict[str, Any]:
    """``callers`` tasks looping enqueue, dequeue, ack on queue ``q`` (each cycle started on
    schedule when ``window.period`` is set); the calls they counted within the window. With
    ``window.idle``, a ``Worker`` with one handler waits for jobs instead, until the window ends."""
    from jqueue import Job, JQueueError, Worker, connect

    counts = {"calls": 0, "enqueued": 0, "acked": 0, "failed": 0}
    enqueue_ms: collections.Counter[int] = collections.Counter()  # whole milliseconds: enqueues
    options: dict[str, Any] = {} if broker == "off" else {"requests_in_flight": in_flight}
    async with connect(root, "q", broker=broker, **options) as queue:  # type: ignore[arg-type]
        if window.idle:
            idle = Worker(queue)

            @idle.handler("work")
            async def handle(job: Job) -> None:
                counts["acked"] += 1

            running = asyncio.create_task(idle.run())
            await asyncio.sleep(max(0.0, window.stop_at - time.time()))
            running.cancel()
            await asyncio.gather(running, return_exceptions=True)
            return {**counts, "enqueue_ms": {}}

        async def loop(phase: float) -> None:
            cycle = 0
            while (now := time.time()) < window.stop_at:
                if window.period:
                    due = window.start_at + phase + cycle * window.period
                    cycle += 1
                    if due > now:
                        await asyncio.sleep(due - now)
                try:
                    started = time.perf_counter()
                    await queue.enqueue("work", b"x" * 100)
                    took = time.perf_counter() - started
                    claimed = await queue.dequeue()
                    for job in claimed:
                        await queue.ack(job)
                except JQueueError:  # a commit that lost its races more often than it retries
                    if window.counts(time.time()):
                        counts["failed"] += 1
                    continue
                if window.counts(time.time()):
                    counts["calls"] += 2 + len(claimed)
                    counts["enqueued"] += 1
                    counts["acked"] += len(claimed)
                    enqueue_ms[int(took * 1000)] += 1

        phases = [n * window.period / callers for n in range(callers)]
        await asyncio.gather(*(loop(phase) for phase in phases))
    return {**counts, "enqueue_ms": dict(enqueue_ms)}


def percentile(histogram: collections.Counter[int], share: float) -> int | None:
    """The whole millisecond below which ``share`` of the timed calls ended (None if none was)."""
    total, seen = sum(histogram.values()), 0
    for millisecond in sorted(histogram):
        seen += histogram[millisecond]
        if seen >= share * total:
            return millisecond + 1
    return None


async def seed(root: str, broker: str) -> None:
    """Create queue ``q`` with one job, and ack it."""
    from jqueue import connect

    async with connect(root, "q", broker=broker) as queue:  # type: ignore[arg-type]
        await queue.enqueue("work", b"x" * 100)
        for job in await queue.dequeue():
            await queue.ack(job)


class Window:
    """When the processes of a run count (wall clock, shared by every process), and their pace."""

    def __init__(self, start_at: float, warmup: float, seconds: float, period: float, idle: bool) -> None:
        self.start_at, self.period, self.idle = start_at, period, idle
        self.count_from, self.stop_at = start_at + warmup, start_at + warmup + seconds

    def counts(self, now: float) -> bool:
        """Whether a call that ended at ``now`` is counted."""
        return self.count_from <= now < self.stop_at


def run_mode(args: argparse.Namespace, mode: str, processes: int, endpoint: str) -> dict[str, Any]:
    """One measured run of ``mode`` with ``processes`` worker processes on a fresh root."""
    prefix = f"bench-{uuid.uuid4().hex[:8]}"
    root = f"s3://{BUCKET}/{prefix}?endpoint_url={endpoint}&region={REGION}"
    env = {**os.environ, **CREDENTIALS, "PYTHONPATH": str(SRC)}
    serve = None
    if mode == "broker":
        port = free_port()
        command = [
            sys.executable,
            "-m",
            "jqueue",
            "serve",
            "--storage",
            root,
            "--listen",
            f"127.0.0.1:{port}",
        ]
        serve = subprocess.Popen(command, env=env, stderr=subprocess.DEVNULL)
        wait_listening(port, serve, "jqueue serve")
    seed = [sys.executable, __file__, "--child", root, "--broker", "require" if serve else "off"]
    seed += ["--requests-in-flight", str(args.requests_in_flight)]
    subprocess.run([*seed, "--seed"], env=env, check=True, stdout=subprocess.DEVNULL)
    count, callers = (1, args.callers * processes) if mode == "single" else (processes, args.callers)
    start_at = time.time() + args.start_in
    command = [*seed, "--callers", str(callers), "--start-at", str(start_at)]
    command += [
        "--warmup",
        str(args.warmup),
        "--seconds",
        str(args.seconds),
        "--rate",
        str(args.rate / count),
    ]
    command += ["--idle"] if args.idle else []
    children = [subprocess.Popen(command, env=env, stdout=subprocess.PIPE) for _ in range(count)]
    try:
        window = Window(start_at, args.warmup, args.seconds, 0.0, args.idle)
        time.sleep(max(0.0, window.count_from - time.time()))
        counted_from = request_counts(endpoint)
        time.sleep(max(0.0, window.stop_at - time.time()))
        counted = request_counts(endpoint)
        outputs = [
            child.communicate(timeout=args.start_in + args.warmup + args.seconds + 300)[0]
            for child in children
        ]
        if any(child.returncode != 0 for child in children):
            raise RuntimeError(f"a {mode} process failed")
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
        if serve is not None:
            serve.terminate()
            serve.wait(timeout=30)
    totals = {
        key: sum(json.loads(out)[key] for out in outputs) for key in ("calls", "enqueued", "acked", "failed")
    }
    enqueue_ms: collections.Counter[int] = collections.Counter()
    for out in outputs:
        enqueue_ms.update({int(ms): n for ms, n in json.loads(out)["enqueue_ms"].items()})
    requests = {kind: counted[kind] - counted_from[kind] for kind in REQUEST_CLASSES}
    detail = collections.Counter(counted["detail"]) - collections.Counter(counted_from["detail"])
    left = asyncio.run(jobs_left(root))
    return {
        "mode": mode,
        "processes": processes,
        "callers_per_process": callers,
        "calls_per_s": totals["calls"] / args.seconds,
        "jobs_per_s": totals["acked"] / args.seconds,
        "failed_cycles": totals["failed"],
        "enqueue_p50_ms": percentile(enqueue_ms, 0.5),
        "enqueue_p99_ms": percentile(enqueue_ms, 0.99),
        "left_in_queue": left,
        "requests": requests,
        "request_detail": dict(detail.most_common()),
        "requests_per_job": round(sum(requests.values()) / max(totals["acked"], 1), 4),
        "dollars_per_million_jobs": cost_per_million_jobs(requests, totals["acked"]),
        "dollars_per_hour": {
            price.name: round(price.dollars(requests) * 3600 / args.seconds, 6) for price in PRICE_LISTS
        },
    }


async def jobs_left(root: str) -> int:
    """The jobs queue ``q`` under ``root`` still holds."""
    from jqueue import DirectQueue, storage_from_url

    async with DirectQueue(storage_from_url(root.replace("?", "/q.json?", 1))) as queue:
        return len((await queue.read_state()).jobs)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--processes", default="4,16", help="worker process counts (default 4,16)")
    parser.add_argument("--modes", default="broker,direct,single")
    parser.add_argument("--callers", type=int, default=64, help="concurrent callers per process")
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--warmup", type=float, default=5.0)
    parser.add_argument("--get-latency-ms", type=float, default=60.0)
    parser.add_argument("--put-latency-ms", type=float, default=100.0)
    parser.add_argument("--requests-in-flight", type=int, default=8, help="of a broker client (connect)")
    parser.add_argument(
        "--rate", type=float, default=0.0, help="jobs/s of all processes together (default 0: flat out)"
    )
    parser.add_argument(
        "--idle", action="store_true", help="no jobs: each process runs a Worker that waits for some"
    )
    parser.add_argument("--seed", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--start-in", type=float, default=5.0, help=argparse.SUPPRESS)
    parser.add_argument("--start-at", type=float, default=0.0, help=argparse.SUPPRESS)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--child", metavar="ROOT", help=argparse.SUPPRESS)
    parser.add_argument("--broker", default="require", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child and args.seed:
        asyncio.run(seed(args.child, args.broker))
        return 0
    if args.child:
        period = args.callers / args.rate if args.rate else 0.0
        window = Window(args.start_at, args.warmup, args.seconds, period, args.idle)
        counts = worker(args.child, args.broker, args.callers, window, args.requests_in_flight)
        print(json.dumps(asyncio.run(counts)))
        return 0
    modes = args.modes.split(",")
    if not set(modes) <= {"broker", "direct", "single"}:
        parser.error("--modes takes broker, direct and single")
    os.environ.update(CREDENTIALS)
    servers: list[subprocess.Popen[bytes]] = []
    results = []
    try:
        endpoint = start_servers(args, servers)
        for processes in (int(p) for p in args.processes.split(",")):
            for mode in modes:
                result = run_mode(args, mode, processes, endpoint)
                results.append(result)
                print(line(result), flush=True)
    finally:
        for server in servers:
            server.kill()
            server.wait()
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile("w", dir=args.json.parent, delete=False) as out:
            json.dump({"results": results, "cpus": os.cpu_count(), "argv": sys.argv[1:]}, out, indent=2)
        Path(out.name).replace(args.json)
    return 0


def line(result: dict[str, Any]) -> str:
    """A run's figures: calls and jobs per second, then what its storage requests cost."""
    requests = result["requests"]
    costs = ", ".join(
        f"{name} ${dollars:.3f}" for name, dollars in result["dollars_per_million_jobs"].items()
    )
    costs = costs if result["jobs_per_s"] else "no jobs"
    hourly = ", ".join(f"{name} ${dollars:.4f}" for name, dollars in result["dollars_per_hour"].items())
    return (
        f"{result['mode']:>6} x {result['processes']:>2} processes "
        f"({result['callers_per_process']} callers each): "
        f"{result['calls_per_s']:>8,.0f} calls/s, {result['jobs_per_s']:>7,.0f} jobs/s, "
        f"{result['failed_cycles']} cycles failed; an enqueue p50 {result['enqueue_p50_ms']} ms, "
        f"p99 {result['enqueue_p99_ms']} ms\n"
        f"    requests: {requests['class_a']} class A, {requests['class_b']} class B, {requests['free']} free"
        f" ({result['requests_per_job']} a job); per million jobs: {costs}; per hour: {hourly}"
    )


if __name__ == "__main__":
    sys.exit(main())
