"""Count the jqueue modules and functions that one warm ``enqueue`` enters, three ways.

Modes:

- ``memory``: a queue on ``InMemoryStorage``;
- ``file``: a queue on ``LocalFileSystemStorage`` (default layout, durable commit);
- ``serve``: ``jqueue.connect`` to the service app (``create_app``, as ``jqueue serve`` builds
  it) run by uvicorn in this process on a free loopback port over a file root, so that one
  profiler sees client and server.

The queue is a ``BrokerQueue`` (the README's quick start), or with ``--queue direct`` a
``DirectQueue`` (memory and file only). After ``WARM_ENQUEUES`` enqueues (the queue made, the
imports done), a profile hook records every Python code object entered during one more
enqueue, awaited until it returns, so with its durable commit: on this thread
(``sys.setprofile``), on threads started meanwhile (``threading.setprofile``) and in the
loop's default executor, whose threads the warm-up started (``ProfiledThreads``). A function
is a code object of a file under the ``jqueue`` package, named ``module:qualname``
(comprehensions and lambdas count: they are code objects of their own).

    .venv/bin/python tools/enqueue_path.py [--mode memory|file|serve|all] [--queue broker|direct]
                                           [--functions] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import json
import sys
import tempfile
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from types import CodeType, FrameType
from typing import Any, Literal, ParamSpec, TypeVar, get_args

import uvicorn

import jqueue
from jqueue import BrokerQueue, DirectQueue, InMemoryStorage, LocalFileSystemStorage
from jqueue.adapters.service.app import create_app
from jqueue.adapters.service.client.remote_queue import RemoteQueue
from jqueue.adapters.web.allowed_hosts import http_protocol
from jqueue.testing import free_port

Mode = Literal["memory", "file", "serve"]
QueueKind = Literal["broker", "direct"]
MODES: tuple[Mode, ...] = get_args(Mode)
PACKAGE = Path(jqueue.__file__).parent
WARM_ENQUEUES = 3
PAYLOAD = b'{"to": "user@example.com"}'

P = ParamSpec("P")
T = TypeVar("T")


@dataclass(frozen=True)
class PathReport:
    """The jqueue functions (``module:qualname``) that one enqueue entered, in one mode, through
    ``via`` (the queue called)."""

    mode: str
    via: str
    functions: frozenset[str]

    @property
    def modules(self) -> dict[str, int]:
        """Each module entered, sorted, with how many of its functions were entered."""
        counts = collections.Counter(function.partition(":")[0] for function in self.functions)
        return dict(sorted(counts.items()))

    def as_json(self) -> dict[str, list[str]]:
        """The sorted module and function names."""
        return {"modules": list(self.modules), "functions": sorted(self.functions)}


def module_name(filename: str) -> str | None:
    """The dotted name of the jqueue module in ``filename``, or None for a file outside jqueue."""
    path = Path(filename)
    if not path.is_relative_to(PACKAGE):
        return None
    parts = list(path.relative_to(PACKAGE).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(["jqueue", *parts])


class Recorder:
    """The code objects entered, on every thread it profiles, while its window is open."""

    def __init__(self) -> None:
        self.entered: set[CodeType] = set()
        self._open = False

    def profile(self, frame: FrameType, event: str, _: Any) -> None:
        """A ``sys.setprofile`` hook (a generator's resumption is a ``call`` too)."""
        if self._open and event == "call":
            self.entered.add(frame.f_code)

    @contextlib.contextmanager
    def window(self) -> Iterator[None]:
        """Record on this thread and on the threads started meanwhile while the block runs."""
        threading.setprofile(self.profile)
        sys.setprofile(self.profile)
        self._open = True
        try:
            yield
        finally:
            self._open = False
            sys.setprofile(None)
            threading.setprofile(None)

    def functions(self) -> frozenset[str]:
        """The jqueue code objects entered, as ``module:qualname``."""
        named = ((module_name(code.co_filename), code.co_qualname) for code in self.entered)
        return frozenset(f"{module}:{qualname}" for module, qualname in named if module is not None)


class ProfiledThreads(ThreadPoolExecutor):
    """A thread pool that runs each call under its recorder's hook: ``threading.setprofile``
    reaches only threads started after it, and the warm-up started this pool's."""

    def __init__(self, recorder: Recorder) -> None:
        super().__init__(thread_name_prefix="enqueue-path")
        self._recorder = recorder

    def submit(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> Future[T]:
        """Submit ``fn(*args, **kwargs)``, profiled while it runs."""
        profile = self._recorder.profile

        def profiled() -> T:
            sys.setprofile(profile)
            try:
                return fn(*args, **kwargs)
            finally:
                sys.setprofile(None)

        return super().submit(profiled)


async def _measured(queue: BrokerQueue | DirectQueue | RemoteQueue, recorder: Recorder) -> None:
    """Enqueue ``WARM_ENQUEUES`` jobs, then one more inside the recorder's window."""
    for _ in range(WARM_ENQUEUES):
        await queue.enqueue("send_email", PAYLOAD)
    with recorder.window():
        await queue.enqueue("send_email", PAYLOAD)


def _local_queue(mode: Mode, kind: QueueKind, root: Path) -> BrokerQueue | DirectQueue:
    storage = InMemoryStorage(name="jobs") if mode == "memory" else LocalFileSystemStorage(root / "jobs.json")
    return BrokerQueue(storage) if kind == "broker" else DirectQueue(storage)


@contextlib.asynccontextmanager
async def _served(root: Path) -> AsyncIterator[str]:
    """The service app of ``root`` under uvicorn on a free loopback port, as ``jqueue serve``
    configures it; yields its URL."""
    port = free_port()
    address = f"http://127.0.0.1:{port}"
    app = create_app(str(root), address=address, listen="127.0.0.1")
    config = uvicorn.Config(
        app, host="127.0.0.1", port=port, log_level="warning", access_log=False, http=http_protocol()
    )
    server = uvicorn.Server(config)
    serving = asyncio.create_task(server.serve())
    try:
        while not server.started:
            if serving.done():
                serving.result()  # raises what stopped it
                raise RuntimeError("the service stopped before it started")
            await asyncio.sleep(0.01)
        yield address
    finally:
        server.should_exit = True
        await serving


async def _run(mode: Mode, kind: QueueKind, root: Path) -> PathReport:
    recorder = Recorder()
    asyncio.get_running_loop().set_default_executor(ProfiledThreads(recorder))
    queue: BrokerQueue | DirectQueue | RemoteQueue
    if mode == "serve":
        async with _served(root) as address, jqueue.connect(address, "jobs") as queue:
            await _measured(queue, recorder)
    else:
        async with _local_queue(mode, kind, root) as queue:
            await _measured(queue, recorder)
    return PathReport(mode, type(queue).__name__, recorder.functions())


def enqueue_path(mode: Mode, kind: QueueKind = "broker") -> PathReport:
    """Measure the jqueue functions one warm enqueue enters in ``mode`` (``kind``: the local
    queue's class, ``broker`` or ``direct``; the service's client is always ``RemoteQueue``).

    Runs its own event loop (``asyncio.run``), so call it outside one.
    """
    with tempfile.TemporaryDirectory(prefix="enqueue-path-") as root:
        return asyncio.run(_run(mode, kind, Path(root)))


def render(report: PathReport, *, functions: bool) -> str:
    """A report as text: the counts, each module with its count of functions (and with
    ``functions``, their qualnames)."""
    modules = report.modules
    lines = [
        f"{report.mode} ({report.via}): {len(modules)} jqueue modules, {len(report.functions)} functions"
    ]
    by_module = collections.defaultdict(list)
    for function in sorted(report.functions):
        module, _, qualname = function.partition(":")
        by_module[module].append(qualname)
    for module, count in modules.items():
        lines.append(f"  {count:4d}  {module}")
        if functions:
            lines.extend(f"          {qualname}" for qualname in by_module[module])
    return "\n".join(lines)


def main() -> None:
    """Measure the modes asked for and print their reports (as text, or one JSON object)."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--mode", choices=[*MODES, "all"], default="all", help="default: all")
    parser.add_argument(
        "--queue", choices=get_args(QueueKind), default="broker", help="memory and file's queue class"
    )
    parser.add_argument("--functions", action="store_true", help="list each module's functions")
    parser.add_argument("--json", action="store_true", help="print {mode: {modules, functions}}")
    arguments = parser.parse_args()
    modes = MODES if arguments.mode == "all" else (arguments.mode,)
    reports = [enqueue_path(mode, arguments.queue) for mode in modes]
    if arguments.json:
        print(json.dumps({report.mode: report.as_json() for report in reports}, indent=2))
    else:
        print("\n\n".join(render(report, functions=arguments.functions) for report in reports))


if __name__ == "__main__":
    main()
