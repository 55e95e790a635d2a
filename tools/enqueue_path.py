"""Count the jqueue modules that one enqueue through ``jqueue serve`` enters, client and server.

Method: the service app (``create_app``, as ``jqueue serve`` builds it) runs under uvicorn in
this process on a free loopback port, with a ``RemoteQueue`` calling it over real HTTP on
a file root. After three enqueues to warm both sides (the queue opened, the imports done), a
profile hook on every thread records each Python function entered during one more enqueue;
the tool prints the distinct ``jqueue`` modules those functions belong to, and their count.

    .venv/bin/python tools/enqueue_path.py [--list]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import threading
from pathlib import Path
from types import FrameType
from typing import Any

import uvicorn

import jqueue
from jqueue.adapters.service.app import create_app
from jqueue.adapters.service.client import RemoteQueue
from jqueue.testing import free_port

PACKAGE = Path(jqueue.__file__).parent


def _module(filename: str) -> str | None:
    path = Path(filename)
    if not path.is_relative_to(PACKAGE):
        return None
    parts = list(path.relative_to(PACKAGE).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(["jqueue", *parts])


async def _entered(root: str) -> set[str]:
    port = free_port()
    address = f"http://127.0.0.1:{port}"
    app = create_app(root, address=address, listen="127.0.0.1")
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    serving = asyncio.create_task(server.serve())
    while not server.started:
        await asyncio.sleep(0.01)
    try:
        queue = RemoteQueue(address, "jobs")
        await queue.start()
        try:
            for _ in range(3):
                await queue.enqueue("warm", b"x")
            files: set[str] = set()

            def profile(frame: FrameType, event: str, _: Any) -> None:
                if event == "call":
                    files.add(frame.f_code.co_filename)

            threading.setprofile(profile)
            sys.setprofile(profile)
            try:
                await queue.enqueue("measured", b"x")
            finally:
                sys.setprofile(None)
                threading.setprofile(None)
        finally:
            await queue.stop()
    finally:
        server.should_exit = True
        await serving
    return {module for name in files if (module := _module(name)) is not None}


def main() -> None:
    """Print the count of modules (and with ``--list``, their names)."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--list", action="store_true", help="print the modules, one a line")
    arguments = parser.parse_args()
    with tempfile.TemporaryDirectory() as root:
        modules = asyncio.run(_entered(root))
    if arguments.list:
        print("\n".join(sorted(modules)))
    print(f"one enqueue through jqueue serve enters {len(modules)} jqueue modules (client and server)")


if __name__ == "__main__":
    main()
