"""Where the longest dequeue+ack pairs of a queue's tail wait: collections, merges, checkpoints.

Loads a queue of ``--jobs`` jobs with checkpoints on (``benchmark_engine_depth.py``'s load, in
a process of its own), then, in a fresh process, times ``--calls`` dequeue+ack pairs as that
tool's tail step does, noting meanwhile each cyclic collection (its generation and time, from
``gc.callbacks``), each merge of slabs and each checkpoint. Prints the pairs' p50, p99 and
maximum, each kind's count, longest and total, the objects the collector tracked at the end,
and what overlapped each of the slowest pairs (by their number), as JSON.

Example::

    .venv/bin/python tools/trace_tail.py --jobs 5000 --calls 40000
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from functools import wraps
from pathlib import Path
from typing import Any, TypeVar

from jqueue import DirectQueue
from jqueue.adapters.storage.url import storage_at
from jqueue.core.log.checkpoints import Checkpoints
from jqueue.core.log.store import LogStore
from jqueue.domain.figures import percentiles

ENTRYPOINT = "work"  # benchmark_engine_depth.py's
SLOWEST = 8
T = TypeVar("T")

Span = tuple[str, float, float]
"""What ran (a collection ``gc0`` to ``gc2``, ``merge`` or ``checkpoint``), from and to (perf_counter)."""


class Tracer:
    """The spans of the collections, merges and checkpoints of this process."""

    def __init__(self) -> None:
        self.spans: list[Span] = []
        self._collecting = 0.0

    def on_collection(self, phase: str, info: dict[str, Any]) -> None:
        """A ``gc.callbacks`` entry: note each collection's span."""
        if phase == "start":
            self._collecting = time.perf_counter()
        else:
            self.spans.append((f"gc{info['generation']}", self._collecting, time.perf_counter()))

    def timed(self, kind: str, call: Callable[..., Awaitable[T]]) -> Callable[..., Awaitable[T]]:
        """``call`` (a coroutine function), noting each of its runs' span as ``kind``."""

        @wraps(call)
        async def run(*arguments: Any, **keywords: Any) -> T:
            started = time.perf_counter()
            try:
                return await call(*arguments, **keywords)
            finally:
                self.spans.append((kind, started, time.perf_counter()))

        return run

    def overlapping(self, start: float, end: float) -> list[tuple[str, float]]:
        """The spans that overlap ``start`` to ``end``, each with its length in ms."""
        return [(kind, _ms(to - since)) for kind, since, to in self.spans if since < end and to > start]


def _ms(seconds: float) -> float:
    return round(seconds * 1000, 1)


async def pairs(location: str, calls: int, tracer: Tracer) -> list[tuple[float, float]]:
    """Time ``calls`` dequeue+ack pairs, each followed by an enqueue that keeps the depth."""
    spans: list[tuple[float, float]] = []
    async with DirectQueue(storage_at(location)) as queue:
        [job] = await queue.dequeue(ENTRYPOINT)  # the open's first claim, untimed
        await queue.ack(job)
        await queue.enqueue(ENTRYPOINT, b"x" * 100)
        for _ in range(calls):
            start = time.perf_counter()
            [job] = await queue.dequeue(ENTRYPOINT)
            await queue.ack(job)
            spans.append((start, time.perf_counter()))
            await queue.enqueue(ENTRYPOINT, b"x" * 100)
    return spans


def traced(location: str, calls: int) -> dict[str, Any]:
    """Run the pairs with every collection, merge and checkpoint noted; return the figures."""
    tracer = Tracer()
    gc.callbacks.append(tracer.on_collection)
    setattr(Checkpoints, "_merge", tracer.timed("merge", Checkpoints._merge))  # noqa: B010
    setattr(LogStore, "_write_checkpoint", tracer.timed("checkpoint", LogStore._write_checkpoint))  # noqa: B010
    spans = asyncio.run(pairs(location, calls, tracer))
    lengths = [_ms(end - start) for start, end in spans]
    p50, p99 = percentiles(lengths, (0.5, 0.99))
    kinds: dict[str, list[float]] = {}
    for kind, since, to in tracer.spans:
        kinds.setdefault(kind, []).append(_ms(to - since))
    slowest = sorted(range(len(spans)), key=lambda n: spans[n][0] - spans[n][1])[:SLOWEST]
    return {
        "calls": calls,
        "p50_ms": p50,
        "p99_ms": p99,
        "max_ms": max(lengths),
        "kinds": {
            k: {"count": len(v), "max_ms": max(v), "total_ms": round(sum(v))} for k, v in kinds.items()
        },
        "tracked_objects_at_end": len(gc.get_objects()),
        "slowest": [{"pair": n, "ms": lengths[n], "during": tracer.overlapping(*spans[n])} for n in slowest],
    }


def main(argv: Sequence[str] | None = None) -> int:
    """Load the queue, trace its tail in a fresh process, print the figures."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=5_000, help="depth of the queue")
    parser.add_argument("--calls", type=int, default=40_000, help="dequeue+ack pairs traced")
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    arguments = parser.parse_args(argv)
    if arguments.child is not None:
        print(json.dumps(traced(str(arguments.child), arguments.calls)))
        return 0
    with tempfile.TemporaryDirectory() as directory:
        location = str(Path(directory) / "tail.json")
        depth = Path(__file__).with_name("benchmark_engine_depth.py")
        load = [
            sys.executable,
            str(depth),
            "--child-load",
            location,
            str(arguments.jobs),
            "100",
            "10000",
            "on",
        ]
        subprocess.run(load, check=True, capture_output=True)
        trace = [sys.executable, __file__, "--child", location, "--calls", str(arguments.calls)]
        done = subprocess.run(trace, check=True, capture_output=True, text=True)
    print(json.dumps(json.loads(done.stdout.strip().splitlines()[-1]), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
