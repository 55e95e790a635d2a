"""An S3 for the benchmarks: moto's server and, in front of it, a proxy (another process) that
holds every request for the round-trip time of a real object store (one time for a GET or
HEAD, another for anything else), counts the requests by price class (``request_costs.py``),
then forwards them unchanged (conditional headers and 412 answers pass through).

The proxy also injects faults, for ``chaos_matrix.py``: set with ``set_faults`` (``FAULTS_PATH``),
a fault answers a share (``rate``) of the requests itself, without forwarding them: ``slowdown``
answers any request ``503 SlowDown``; ``conflict`` answers a conditional PUT (``If-Match`` or
``If-None-Match``) ``409 ConditionalRequestConflict`` or ``412 PreconditionFailed``, in turn.

``python tools/s3_stack.py PORT TARGET GET_MS PUT_MS`` runs the proxy alone (``start_servers``
starts it so).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import random
import re
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

from jqueue.testing import free_port

sys.path.insert(0, str(Path(__file__).parent))
from request_costs import REQUEST_CLASSES, request_class

BUCKET, REGION = "jqueue-bench", "us-east-1"
CREDENTIALS = {"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench", "AWS_DEFAULT_REGION": REGION}


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
FAULTS_PATH = "/__faults"
"""The proxy's route that sets the fault it injects: ``{"mode": MODE, "rate": SHARE}``."""
FAULT_MODES = ("off", "slowdown", "conflict")
_FAULT_ANSWERS = {
    "slowdown": [(503, "SlowDown", "Please reduce your request rate.")],
    "conflict": [
        (409, "ConditionalRequestConflict", "A conflicting operation is in progress."),
        (412, "PreconditionFailed", "At least one of the preconditions you specified did not hold."),
    ],
}


def _faulted(mode: str, method: str, headers: Any) -> bool:
    """Whether the fault ``mode`` applies to a request (before its share is drawn)."""
    if mode == "conflict":
        return method == "PUT" and ("If-Match" in headers or "If-None-Match" in headers)
    return mode == "slowdown"


def _error_body(code: str, message: str) -> bytes:
    xml = f"<Error><Code>{code}</Code><Message>{message}</Message></Error>"
    return f"<?xml version='1.0' encoding='UTF-8'?>{xml}".encode()


async def proxy(port: int, target: str, get_ms: float, put_ms: float) -> None:
    """Forward every request to ``target`` after the latency of its kind, counting them by price
    class (``COUNTS_PATH`` answers the counts); run until killed."""
    import aiohttp
    from aiohttp import web

    session = aiohttp.ClientSession(auto_decompress=False)
    hop = {"host", "content-length", "transfer-encoding", "connection"}
    counts: dict[str, Any] = dict.fromkeys(REQUEST_CLASSES, 0)
    counts["detail"] = detail = collections.Counter[str]()
    counts["injected"] = 0
    fault: dict[str, Any] = {"mode": "off", "rate": 0.0}
    draw = random.Random(7)

    async def forward(request: web.Request) -> web.StreamResponse:
        if _faulted(fault["mode"], request.method, request.headers) and draw.random() < fault["rate"]:
            answers = _FAULT_ANSWERS[fault["mode"]]
            status, code, message = answers[counts["injected"] % len(answers)]
            counts["injected"] += 1
            await request.read()
            return web.Response(
                status=status, body=_error_body(code, message), content_type="application/xml"
            )
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

    async def set_fault(request: web.Request) -> web.Response:
        asked = await request.json()
        if asked.get("mode") not in FAULT_MODES or not 0 <= float(asked.get("rate", 0)) <= 1:
            return web.json_response({"error": f"mode one of {FAULT_MODES}, rate in [0, 1]"}, status=400)
        fault.update(mode=asked["mode"], rate=float(asked.get("rate", 0)))
        return web.json_response(fault)

    app = web.Application(client_max_size=1 << 30)
    app.router.add_get(COUNTS_PATH, counted)
    app.router.add_post(FAULTS_PATH, set_fault)
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


def set_faults(endpoint: str, mode: str, rate: float = 1.0) -> None:
    """Make the proxy at ``endpoint`` inject the fault ``mode`` (one of ``FAULT_MODES``) into a
    share ``rate`` of the requests it applies to; ``"off"`` stops it."""
    body = json.dumps({"mode": mode, "rate": rate}).encode()
    request = urllib.request.Request(endpoint + FAULTS_PATH, data=body, method="POST")
    with urllib.request.urlopen(request, timeout=30):
        pass


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
    command = [sys.executable, __file__, str(proxy_port), f"http://127.0.0.1:{moto_port}"]
    command += [str(args.get_latency_ms), str(args.put_latency_ms)]
    latency_proxy = subprocess.Popen(command, env=env)
    stack.append(latency_proxy)
    wait_listening(proxy_port, latency_proxy, "the latency proxy")
    return f"http://127.0.0.1:{proxy_port}"


class S3Stack:
    """moto and the latency proxy in front of it, for other tools (``benchmark_peers.py``): fresh
    roots under one bucket, the requests counted so far, and ``stop``."""

    def __init__(self, get_latency_ms: float, put_latency_ms: float) -> None:
        self._processes: list[subprocess.Popen[bytes]] = []
        latency = argparse.Namespace(get_latency_ms=get_latency_ms, put_latency_ms=put_latency_ms)
        try:
            self.endpoint = start_servers(latency, self._processes)
        except BaseException:
            self.stop()
            raise

    def new_root(self) -> str:
        """A root no run used before."""
        return f"s3://{BUCKET}/bench-{uuid.uuid4().hex[:8]}?endpoint_url={self.endpoint}&region={REGION}"

    def faults(self, mode: str, rate: float = 1.0) -> None:
        """Inject the fault ``mode`` into a share ``rate`` of requests (``set_faults``)."""
        set_faults(self.endpoint, mode, rate)

    def counts(self) -> dict[str, int]:
        """The requests forwarded so far, by price class."""
        counted = request_counts(self.endpoint)
        return {kind: counted[kind] for kind in REQUEST_CLASSES}

    def stop(self) -> None:
        """Stop moto and the proxy."""
        for process in self._processes:
            process.kill()
            process.wait()
        self._processes.clear()


def _keys() -> dict[str, str]:
    return {name.lower(): CREDENTIALS[name] for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")}


if __name__ == "__main__":
    port, target, get_ms, put_ms = sys.argv[1:5]
    asyncio.run(proxy(int(port), target, float(get_ms), float(put_ms)))
