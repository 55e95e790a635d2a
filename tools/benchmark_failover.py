"""Measure how long a root goes unserved when its broker dies.

Starts two ``jqueue serve --standby`` processes on one directory (the default settings unless
given ``--renew-every``/``--stale-after``), waits until the second stands by, SIGKILLs the first
and times, from the kill, the first enqueue that the second answers with 200. Repeats
``--rounds`` times, each on a fresh directory. With ``--queued N`` the queue holds N jobs of
``--payload-bytes`` before the first broker starts (loaded in batches of 10,000, then
checkpointed), so the standby's takeover includes opening a deep queue.

With ``--member`` both are members of the root (``jqueue serve``'s default, ADR 0022): once
each lists the other and one of them serves the queue, that one is SIGKILLed, and the time
is the other's first answered enqueue (until it takes the queue over, it cannot forward the
call to the dead owner and answers 503).

With ``--join`` (members) nothing is killed: one member serves ``JOIN_QUEUES`` queues, a
second is started, and the time runs from its start to when it serves its share (each lists
the other, each serves some of the queues, every queue is served once).

Examples::

    .venv/bin/python tools/benchmark_failover.py --rounds 5
    .venv/bin/python tools/benchmark_failover.py --rounds 3 --queued 1000000
    .venv/bin/python tools/benchmark_failover.py --rounds 3 --queued 1000000 --member
    .venv/bin/python tools/benchmark_failover.py --rounds 3 --member --join
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from jqueue import DirectQueue
from jqueue.adapters.service.wire.root import root_storage
from jqueue.testing import free_port

LOAD_BATCH = 10_000
JOIN_QUEUES = [f"q{n}" for n in range(8)]


def enqueue(port: int, queue: str = "q") -> int:
    """Enqueue one job to ``queue`` through the service on ``port``; its HTTP status (0: no answer)."""
    body = json.dumps({"jobs": [{"entrypoint": "e", "payload": ""}]}).encode()
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/v1/queues/{queue}/enqueue", body, {"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=5) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as error:
        return error.code
    except OSError:
        return 0


def wait_for(port: int, status: int, seconds: float, queue: str = "q") -> float:
    """Enqueue to ``queue`` until the answer is ``status``; return the seconds it took."""
    started = time.monotonic()
    while enqueue(port, queue) != status:
        if time.monotonic() - started > seconds:
            raise TimeoutError(f"port {port} did not answer {status} within {seconds:g} s")
        time.sleep(0.02)
    return time.monotonic() - started


async def load(root: str, jobs: int, payload_bytes: int) -> None:
    """Fill queue ``q`` of ``root`` with ``jobs`` jobs, then checkpoint it."""
    payload = b"x" * payload_bytes
    async with DirectQueue(root_storage(root, "q")) as queue:
        for first in range(0, jobs, LOAD_BATCH):
            await queue.enqueue_many("e", [payload] * min(LOAD_BATCH, jobs - first))
        await queue.checkpoint()


def healths(ports: list[int]) -> list[dict[str, Any]]:
    """Each member's ``/healthz`` answer (empty for one that did not answer)."""
    answers = []
    for port in ports:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as answer:
                answers.append(json.loads(answer.read()))
        except OSError:
            answers.append({})
    return answers


def serving_member(ports: list[int], seconds: float) -> int:
    """Wait until each member lists them all and one serves queue ``q``; return its index."""
    started = time.monotonic()
    while time.monotonic() - started < seconds:
        healths_now = healths(ports)
        serving = [n for n, health in enumerate(healths_now) if "q" in health.get("queues", [])]
        if all(len(health.get("members", [])) == len(ports) for health in healths_now) and len(serving) == 1:
            return serving[0]
        time.sleep(0.05)
    raise TimeoutError(f"the members did not agree on who serves the queue within {seconds:g} s")


def members_round(command: list[str], ports: list[int]) -> float:
    """Two members: kill the one serving the queue; the seconds until the other answers."""
    members = [subprocess.Popen([*command, f"127.0.0.1:{port}"], stderr=subprocess.DEVNULL) for port in ports]
    try:
        wait_for(ports[0], 200, 60)  # the queue exists and is served (forwarded, if need be)
        owner = serving_member(ports, 60)
        members[owner].send_signal(signal.SIGKILL)
        return wait_for(ports[1 - owner], 200, 120)
    finally:
        for process in members:
            process.kill()
            process.wait()


def join_round(command: list[str], ports: list[int]) -> float:
    """One member serves ``JOIN_QUEUES``; the seconds from a second one's start to its share."""
    first = subprocess.Popen([*command, f"127.0.0.1:{ports[0]}"], stderr=subprocess.DEVNULL)
    second: subprocess.Popen[bytes] | None = None
    try:
        for queue in JOIN_QUEUES:
            wait_for(ports[0], 200, 60, queue)
        started = time.monotonic()
        second = subprocess.Popen([*command, f"127.0.0.1:{ports[1]}"], stderr=subprocess.DEVNULL)
        while time.monotonic() - started < 120:
            answers = healths(ports)
            served = [health.get("queues", []) for health in answers]
            everyone = all(len(health.get("members", [])) == 2 for health in answers)
            if everyone and all(served) and sorted(q for qs in served for q in qs) == JOIN_QUEUES:
                return time.monotonic() - started
            time.sleep(0.02)
        raise TimeoutError("the second member did not serve its share within 120 s")
    finally:
        for process in (first, second):
            if process is not None:
                process.kill()
                process.wait()


def one_round(options: list[str], queued: int, payload_bytes: int, *, join: bool = False) -> float:
    """One kill and takeover; the seconds from the kill to the first enqueue answered."""
    with tempfile.TemporaryDirectory(prefix="jqueue-failover-") as root:
        if queued:
            asyncio.run(load(root, queued, payload_bytes))
        ports = [free_port(), free_port()]
        command = [sys.executable, "-m", "jqueue", "serve", "--storage", root, *options, "--listen"]
        if join:
            return join_round(command, ports)
        if "--member" in options:
            return members_round(command, ports)
        first = subprocess.Popen([*command, f"127.0.0.1:{ports[0]}"], stderr=subprocess.DEVNULL)
        second: subprocess.Popen[bytes] | None = None
        try:
            wait_for(ports[0], 200, 60)
            second = subprocess.Popen([*command, f"127.0.0.1:{ports[1]}"], stderr=subprocess.DEVNULL)
            wait_for(ports[1], 503, 60)
            first.send_signal(signal.SIGKILL)
            return wait_for(ports[1], 200, 120)
        finally:
            for process in (first, second):
                if process is not None:
                    process.kill()
                    process.wait()


def main() -> None:
    """Run the rounds and print the failover times."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--renew-every", type=float, default=None, help="passed to jqueue serve")
    parser.add_argument("--stale-after", type=float, default=None, help="passed to jqueue serve")
    parser.add_argument("--queued", type=int, default=0, help="jobs in the queue before the first broker")
    parser.add_argument("--payload-bytes", type=int, default=100, help="bytes per queued job's payload")
    parser.add_argument("--member", action="store_true", help="two members of the root (else --standby)")
    parser.add_argument("--join", action="store_true", help="time a second member's start to its share")
    args = parser.parse_args()
    if args.join and not args.member:
        parser.error("--join times a member's join: give --member too")
    options = ["--member"] if args.member else ["--standby"]
    if args.renew_every is not None:
        options += ["--renew-every", str(args.renew_every)]
    if args.stale_after is not None:
        options += ["--stale-after", str(args.stale_after)]
    times = []
    for number in range(args.rounds):
        times.append(one_round(options, args.queued, args.payload_bytes, join=args.join))
        depth = f" with {args.queued:,} jobs queued" if args.queued else ""
        if args.join:
            shared = f"{len(JOIN_QUEUES)} queues shared by both"
            print(f"round {number + 1}: {times[-1]:.2f} s from a second member's start to {shared}{depth}")
        else:
            print(f"round {number + 1}: {times[-1]:.2f} s from SIGKILL to the first answered enqueue{depth}")
    print(f"median {statistics.median(times):.2f} s, max {max(times):.2f} s ({Path(sys.executable).name})")


if __name__ == "__main__":
    main()
