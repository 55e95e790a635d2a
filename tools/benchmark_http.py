"""HTTP throughput of ``jqueue serve`` on a file root, through its queued-compatible routes.

Starts ``jqueue serve`` on a fresh directory (every answer is durable: a 2xx comes after the
commit is on disk) and client processes (``--client-processes``) that share ``--clients``
concurrent clients. Each client loops: push a batch of ``--batch`` messages, poll up to as
many, delete what it polled; MessagePack bodies over one pooled connection per client. After
a warm-up, it counts for ``--seconds`` the messages pushed, polled and deleted and the
requests answered, and reads the server's CPU time. A message counts once per operation, so
a full cycle of one message is three "messages" in the total, as queued counts operations.

At the end the queue's counts must balance: every message pushed was deleted or is still in
the queue (the run fails otherwise).

Examples
--------
Batches of 64 and of 1 from 64 clients (the default)::

    .venv/bin/python tools/benchmark_http.py --json bench-results/http.json

Two brokers of one root (``jqueue serve --member``) serving two queues, each client calling
the broker that serves its queue; then one queue of two shards (each shard the queue
``bench.shard-k`` to the queued API, as a sharded queue's client calls it)::

    .venv/bin/python tools/benchmark_http.py --members 2 --queues 2 --batch 64
    .venv/bin/python tools/benchmark_http.py --members 2 --shards 2 --batch 64

A short run::

    .venv/bin/python tools/benchmark_http.py --batch 8 --clients 4 --seconds 2 --warmup 0.5
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent / "peers"))

from peer_servers import JqueueServer

from jqueue.adapters.web.queue_names import shard_name

MSGPACK = {"Content-Type": "application/msgpack", "Accept": "application/msgpack"}


async def client_loop(
    target: str, batch: int, stop_at: float, count_from: float, totals: dict[str, int]
) -> None:
    """One client of ``target`` (``URL/queue/NAME``): push, poll and delete batches until
    ``stop_at``, counting after ``count_from``."""
    import aiohttp
    import msgspec

    url, _, queue_path = target.partition("/queue/")
    encode, decode = msgspec.msgpack.encode, msgspec.msgpack.decode
    push = encode({"messages": [{"contents": b"x" * 64} for _ in range(batch)]})
    poll = encode({"count": batch, "visibility_timeout_secs": 60})
    connector = aiohttp.TCPConnector(limit=1)
    async with aiohttp.ClientSession(f"{url}", connector=connector, headers=MSGPACK) as session:

        async def call(path: str, body: bytes) -> Any:
            async with session.post(path, data=body) as answer:
                content = await answer.read()
                if answer.status != 200:
                    raise RuntimeError(f"{path}: {answer.status} {content[:200]!r}")
                return decode(content) if content else None

        messages = f"/queue/{queue_path}/messages"
        while (now := time.monotonic()) < stop_at:
            pushed = await call(f"{messages}/push", push)
            polled = (await call(f"{messages}/poll", poll))["messages"]
            refs = [{"id": m["id"], "poll_tag": m["poll_tag"]} for m in polled]
            if refs:
                await call(f"{messages}/delete", encode({"messages": refs}))
            if now >= count_from and time.monotonic() < stop_at:
                totals["pushed"] += len(pushed["ids"])
                totals["polled"] += len(refs)
                totals["deleted"] += len(refs)
                totals["requests"] += 3 if refs else 2


async def run_clients(
    targets: list[str], batch: int, clients: int, warmup: float, seconds: float
) -> dict[str, int]:
    """Run ``clients`` clients in this process, spread over ``targets``; return what they counted."""
    totals = {"pushed": 0, "polled": 0, "deleted": 0, "requests": 0}
    start = time.monotonic()
    loops = [
        client_loop(targets[n % len(targets)], batch, start + warmup + seconds, start + warmup, totals)
        for n in range(clients)
    ]
    await asyncio.gather(*loops)
    return totals


def http(method: str, url: str) -> bytes:
    """Send a request without a body, asking for JSON; return the answer's body."""
    request = urllib.request.Request(url, method=method, headers={"Accept": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as answer:
        body: bytes = answer.read()
        return body


def cpu_of(pid: int) -> float:
    """CPU seconds used by process ``pid`` so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(f) for f in fields[11:13]) / os.sysconf("SC_CLK_TCK")


def _placed(servers: list[JqueueServer], queues: list[str]) -> dict[str, str] | None:
    """The member that serves each queue, once every member sees them all and each queue has
    one (None before)."""
    healths = [json.loads(http("GET", f"{server.url}/healthz")) for server in servers]
    if any(len(health["members"]) != len(servers) for health in healths):
        return None
    owners = {
        name: server.url for server, health in zip(servers, healths, strict=True) for name in health["queues"]
    }
    served = sorted(name for health in healths for name in health["queues"])
    return owners if served == sorted(queues) else None


def start_servers(args: argparse.Namespace, root: Path, env: dict[str, str]) -> list[JqueueServer]:
    """One broker, or ``--members`` brokers of one root (``jqueue serve --member``)."""
    options = ["--member"] if args.members > 1 else []
    servers: list[JqueueServer] = []
    try:
        for _ in range(args.members):
            servers.append(JqueueServer(root, sys.executable, env, options))
    except BaseException:
        for server in servers:
            server.stop()
        raise
    return servers


def targets_of(args: argparse.Namespace, servers: list[JqueueServer]) -> tuple[list[str], list[str]]:
    """Create the queues; return them and each one's URL at the broker that serves it (what a
    client's routing table holds after its first call)."""
    queues = [f"bench{n}" for n in range(args.queues)]
    if args.shards > 1:  # one queue of so many shards: its shards are queues of their own to serve
        queues = [shard_name("bench", k) for k in range(args.shards)]
    deadline = time.monotonic() + 60
    while args.members > 1 and _placed(servers, []) is None:  # every member sees every other
        if time.monotonic() > deadline:
            raise RuntimeError("the members did not see each other within 60 s")
        time.sleep(0.1)
    for name in queues:
        http("PUT", f"{servers[0].url}/queue/{name}")
    if args.members == 1:
        return queues, [f"{servers[0].url}/queue/{name}" for name in queues]
    while (placed := _placed(servers, queues)) is None:
        if time.monotonic() > deadline:
            raise RuntimeError("the members did not share the queues within 60 s")
        time.sleep(0.1)
    time.sleep(1)  # a look more, so that no move is under way
    placed = _placed(servers, queues) or placed
    return queues, [f"{placed[name]}/queue/{name}" for name in queues]


def measure(args: argparse.Namespace, batch: int, root: Path) -> dict[str, Any]:
    """One run: fresh servers, the client processes, the figures."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1] / "src")}
    servers = start_servers(args, root, env)
    try:
        queues, targets = targets_of(args, servers)
        share = [args.clients // args.client_processes] * args.client_processes
        share[0] += args.clients - sum(share)
        command = [sys.executable, __file__, "--child", ",".join(targets), "--warmup", str(args.warmup)]
        command += ["--seconds", str(args.seconds), "--batch", str(batch)]
        children = [
            subprocess.Popen([*command, "--clients", str(n)], stdout=subprocess.PIPE, env=env) for n in share
        ]
        time.sleep(args.warmup)
        cpu_before = sum(cpu_of(server.process.pid) for server in servers)
        time.sleep(args.seconds)
        server_cpu = sum(cpu_of(server.process.pid) for server in servers) - cpu_before
        outputs = [child.communicate(timeout=args.warmup + args.seconds + 120)[0] for child in children]
        if any(child.returncode != 0 for child in children):
            raise RuntimeError("a client process failed")
        totals = {
            key: sum(json.loads(out)[key] for out in outputs)
            for key in ("pushed", "polled", "deleted", "requests")
        }
        metrics = [json.loads(http("GET", f"{servers[0].url}/queue/{name}/metrics")) for name in queues]
    finally:
        for server in servers:
            server.stop()
    for name, counts in zip(queues, metrics, strict=True):
        pushed_all, deleted_all = counts["successful_push_counter"], counts["successful_delete_counter"]
        left = counts["message_counter"]
        if pushed_all != deleted_all + left:
            raise RuntimeError(
                f"{name}: messages do not balance: pushed {pushed_all}, deleted {deleted_all}, left {left}"
            )
    messages = totals["pushed"] + totals["polled"] + totals["deleted"]
    return {
        "batch": batch,
        "clients": args.clients,
        "members": args.members,
        "queues": args.queues,
        "shards": args.shards,
        "seconds": args.seconds,
        "messages_per_s": messages / args.seconds,
        "requests_per_s": totals["requests"] / args.seconds,
        "pushed_per_s": totals["pushed"] / args.seconds,
        "deleted_per_s": totals["deleted"] / args.seconds,
        "server_cpu_ms_per_message": 1000 * server_cpu / max(messages, 1),
        "server_cpu_share": server_cpu / args.seconds,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", default="64,1", help="batch sizes, comma-separated (default 64,1)")
    parser.add_argument("--clients", type=int, default=64)
    parser.add_argument("--client-processes", type=int, default=1)
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--warmup", type=float, default=3.0)
    parser.add_argument("--members", type=int, default=1, help="brokers of the root (2+: --member)")
    parser.add_argument("--queues", type=int, default=1, help="queues, the clients spread over them")
    parser.add_argument("--shards", type=int, default=1, help="2+: one queue of so many shards instead")
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument("--child", metavar="URL", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        totals = asyncio.run(
            run_clients(args.child.split(","), int(args.batch), args.clients, args.warmup, args.seconds)
        )
        print(json.dumps(totals))
        return 0
    if args.clients < args.client_processes or args.client_processes < 1:
        parser.error("--clients must be at least --client-processes, which must be at least 1")
    if args.members < 1 or args.queues < 1:
        parser.error("--members and --queues must be at least 1")
    results = []
    with tempfile.TemporaryDirectory(prefix="jqueue-http-") as scratch:
        for batch in (int(b) for b in args.batch.split(",")):
            result = measure(args, batch, Path(scratch) / f"batch-{batch}")
            results.append(result)
            print(
                f"batch {batch:>4}, {args.clients} clients, {args.members} brokers, "
                f"{f'a queue of {args.shards} shards' if args.shards > 1 else f'{args.queues} queues'}: "
                f"{result['messages_per_s']:>9,.0f} messages/s "
                f"({result['requests_per_s']:,.0f} requests/s, {result['pushed_per_s']:,.0f} pushed/s); "
                f"server CPU {result['server_cpu_ms_per_message']:.3f} ms/message, "
                f"{100 * result['server_cpu_share']:.0f}% of a core"
            )
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"results": results, "cpus": os.cpu_count()}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
