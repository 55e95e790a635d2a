"""Many processes on one S3 queue: through ``jqueue serve`` against each committing directly.

Starts moto's S3 server in its own process and, in front of it, a proxy (another process)
that holds every request for the round-trip time of a real object store: ``--get-latency-ms``
(60) before a GET or HEAD, ``--put-latency-ms`` (100) before anything else, then forwards it
unchanged (conditional headers and 412 answers pass through). Everything below talks to the
proxy, so the broker and the direct processes see the same latency.

Modes, each with a fresh queue:

- ``broker``: one ``jqueue serve`` on the root; N worker processes ``connect(root, "q")``.
- ``direct``: N worker processes ``connect(root, "q", broker="off")``, each committing on its own (a
  call whose commit lost its races more often than the queue retries fails; the cycles that
  failed are counted).
- ``single``: one process committing directly with as many callers as the N processes have
  together (the single-process figure).

Each process runs ``--callers`` tasks that loop enqueue, dequeue, ack; every one of the three
is a call. After ``--warmup`` seconds the calls of the next ``--seconds`` are counted. At the
end the queue must balance: every job enqueued was acked or is still in the queue.

Example::

    .venv/bin/python tools/benchmark_s3_processes.py --processes 4,16 --json bench-results/s3-processes.json
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

from jqueue.testing import free_port

sys.path.insert(0, str(Path(__file__).parent))
from request_costs import PRICE_LISTS, REQUEST_CLASSES, cost_per_million_jobs, request_class

BUCKET, REGION = "jqueue-bench", "us-east-1"
CREDENTIALS = {"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench", "AWS_DEFAULT_REGION": REGION}
SRC = Path(__file__).resolve().parents[1] / "src"


def wait_listening(port: int, process: subprocess.Popen[bytes], what: str) -> None:
    """Wait (at most 60 s) until ``port`` accepts connections."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{what} exited with {process.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"{what} did not listen within 60 s")


COUNTS_PATH = "/__request_counts"
"""The proxy's own route: the requests it forwarded so far, by price class (no bucket starts with ``_``)."""


async def proxy(port: int, target: str, get_ms: float, put_ms: float) -> None:
    """Forward every request to ``target`` after the latency of its kind, counting them by price
    class (``COUNTS_PATH`` answers the counts); run until killed."""
    import aiohttp
    from aiohttp import web

    session = aiohttp.ClientSession(auto_decompress=False)
    hop = {"host", "content-length", "transfer-encoding", "connection"}
    counts: dict[str, Any] = dict.fromkeys(REQUEST_CLASSES, 0)
    counts["detail"] = detail = collections.Counter[str]()

    async def forward(request: web.Request) -> web.StreamResponse:
        counts[request_class(request.method, request.path, request.query_string)] += 1
        key = request.path.split("/", 3)[-1] if request.path.count("/") >= 3 else "(bucket)"
        detail[f"{request.method} {re.sub(r'[0-9a-f]{6,}|[0-9]+', '#', key)}"] += 1
        await asyncio.sleep((get_ms if request.method in ("GET", "HEAD") else put_ms) / 1000)
        headers = {k: v for k, v in request.headers.items() if k.lower() not in hop}
        body = await request.read()
        async with session.request(
            request.method, f"{target}{request.rel_url}", headers=headers, data=body, allow_redirects=False
        ) as answer:
            content = await answer.read()
            kept = {k: v for k, v in answer.headers.items() if k.lower() not in hop}
            return web.Response(status=answer.status, headers=kept, body=content)

    async def counted(_: web.Request) -> web.Response:
        return web.json_response(counts)

    app = web.Application(client_max_size=1 << 30)
    app.router.add_get(COUNTS_PATH, counted)
    app.router.add_route("*", "/{tail:.*}", forward)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    await asyncio.Event().wait()


def request_counts(endpoint: str) -> dict[str, Any]:
    """The proxy's counts of requests so far, by price class, and by method and name
    (``detail``: numbers and hex ids masked)."""
    with urllib.request.urlopen(endpoint + COUNTS_PATH, timeout=30) as answer:
        counts: dict[str, Any] = json.load(answer)
    return counts


async def worker(root: str, broker: str, callers: int, window: Window, in_flight: int) -> dict[str, int]:
    """``callers`` tasks looping enqueue, dequeue, ack on queue ``q`` (each cycle started on
    schedule when ``window.period`` is set); the calls they counted within the window. With
    ``window.idle``, a ``Worker`` with one handler waits for jobs instead, until the window ends."""
    from jqueue import Job, JQueueError, Worker, connect

    counts = {"calls": 0, "enqueued": 0, "acked": 0, "failed": 0}
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
            return counts

        async def loop(phase: float) -> None:
            cycle = 0
            while (now := time.time()) < window.stop_at:
                if window.period:
                    due = window.start_at + phase + cycle * window.period
                    cycle += 1
                    if due > now:
                        await asyncio.sleep(due - now)
                try:
                    await queue.enqueue("work", b"x" * 100)
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

        phases = [n * window.period / callers for n in range(callers)]
        await asyncio.gather(*(loop(phase) for phase in phases))
    return counts


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


def start_servers(args: argparse.Namespace, stack: list[subprocess.Popen[bytes]]) -> str:
    """Start moto and the latency proxy; return the proxy's endpoint."""
    import boto3  # type: ignore[import-untyped, unused-ignore]

    moto_port, proxy_port = free_port(), free_port()
    env = {**os.environ, **CREDENTIALS}
    moto = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(moto_port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    stack.append(moto)
    wait_listening(moto_port, moto, "moto")
    boto3.client(
        "s3", endpoint_url=f"http://127.0.0.1:{moto_port}", region_name=REGION, **_keys()
    ).create_bucket(Bucket=BUCKET)
    command = [sys.executable, __file__, "--proxy", str(proxy_port), f"http://127.0.0.1:{moto_port}"]
    command += ["--get-latency-ms", str(args.get_latency_ms), "--put-latency-ms", str(args.put_latency_ms)]
    latency_proxy = subprocess.Popen(command, env=env)
    stack.append(latency_proxy)
    wait_listening(proxy_port, latency_proxy, "the latency proxy")
    return f"http://127.0.0.1:{proxy_port}"


def _keys() -> dict[str, str]:
    return {"aws_access_key_id": "bench", "aws_secret_access_key": "bench"}


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
    parser.add_argument("--proxy", nargs=2, metavar=("PORT", "TARGET"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.proxy:
        asyncio.run(proxy(int(args.proxy[0]), args.proxy[1], args.get_latency_ms, args.put_latency_ms))
        return 0
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
        f"{result['failed_cycles']} cycles failed\n"
        f"    requests: {requests['class_a']} class A, {requests['class_b']} class B, {requests['free']} free"
        f" ({result['requests_per_job']} a job); per million jobs: {costs}; per hour: {hourly}"
    )


if __name__ == "__main__":
    sys.exit(main())
