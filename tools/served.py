"""``jqueue serve`` in a subprocess for the tools: on a free loopback port, until the block ends."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path


def free_port() -> int:
    """A TCP port of 127.0.0.1 that nothing listens on now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def jqueue_serve(root: Path | str, env: dict[str, str] | None = None) -> Iterator[tuple[str, int]]:
    """Run ``jqueue serve --storage ROOT``; yield its URL and process id once ``/healthz`` answers."""
    port = free_port()
    command = [
        sys.executable,
        "-m",
        "jqueue",
        "serve",
        "--storage",
        str(root),
        "--listen",
        f"127.0.0.1:{port}",
    ]
    proc = subprocess.Popen(command, env=env, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            with contextlib.suppress(OSError):
                urllib.request.urlopen(f"{url}/healthz", timeout=1).close()
                break
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"jqueue serve on {root} did not start")
            time.sleep(0.1)
        yield url, proc.pid
    finally:
        proc.terminate()
        proc.wait(30)
