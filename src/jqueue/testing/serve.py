"""A real ``jqueue serve`` for a test or a tool: a subprocess on a free loopback port, stopped
(its whole process group) when the block ends.

Examples
--------
::

    from jqueue import connect
    from jqueue.testing import serve

    with serve("/tmp/queues") as served:
        async with connect(served.url, "emails") as queue:
            await queue.enqueue("send", b"{}")
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import NamedTuple

LOOPBACK = "127.0.0.1"
TAIL_BYTES = 4_000
"""How much of the end of its log a service that did not start shows in the error."""


class Served(NamedTuple):
    """A running ``jqueue serve``: its URL and its process id."""

    url: str
    pid: int


def free_port() -> int:
    """Return a TCP port of 127.0.0.1 that nothing listens on now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((LOOPBACK, 0))
        return int(probe.getsockname()[1])


@contextlib.contextmanager
def serve(
    root: str | Path,
    *,
    log: Path | None = None,
    env: Mapping[str, str] | None = None,
    options: Sequence[str] = (),
    port: int | None = None,
    start_within: float = 60.0,
) -> Iterator[Served]:
    """Run ``jqueue serve --storage ROOT`` on ``port`` of 127.0.0.1 (by default a free one), with
    ``options`` and ``env``, its standard error going to ``log`` (else discarded); yield it
    once ``/healthz`` answers, and stop it (SIGTERM, then SIGKILL after 10 s) when the block
    ends.

    Raises
    ------
    RuntimeError
        If it exits, or does not answer within ``start_within`` seconds (with its log's end).
    """
    port = free_port() if port is None else port
    url = f"http://{LOOPBACK}:{port}"
    command = [
        sys.executable,
        "-m",
        "jqueue",
        "serve",
        "--storage",
        str(root),
        "--listen",
        f"{LOOPBACK}:{port}",
    ]
    with open(log, "wb") if log is not None else open(os.devnull, "wb") as stderr:
        proc = subprocess.Popen([*command, *options], env=env, stderr=stderr, start_new_session=True)
    try:
        deadline = time.monotonic() + start_within
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"jqueue serve exited with {proc.returncode}: {log_tail(log)}")
            with contextlib.suppress(OSError), urllib.request.urlopen(f"{url}/healthz", timeout=1):
                break
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"jqueue serve did not answer /healthz within {start_within:g} s: {log_tail(log)}"
                )
            time.sleep(0.05)
        yield Served(url, proc.pid)
    finally:
        stop_group(proc, timeout=10)


def stop_group(proc: subprocess.Popen[bytes], timeout: float) -> None:
    """Terminate the process group that ``proc`` leads; kill it if it lingers."""
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):  # the leader is not reaped before ``wait``
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=timeout)


def log_tail(log: Path | None) -> str:
    """The end of a log (its last ``TAIL_BYTES``), for an error that says why a server did not start."""
    if log is None:
        return "(no log kept)"
    try:
        with log.open("rb") as handle:
            handle.seek(0, os.SEEK_END)
            handle.seek(max(0, handle.tell() - TAIL_BYTES))
            return handle.read().decode(errors="replace")
    except OSError as exc:
        return f"<cannot read {log}: {exc}>"
