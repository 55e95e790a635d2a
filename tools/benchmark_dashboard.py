"""Benchmark what one refresh of each dashboard page costs as the queue grows deep.

For each depth, a fresh file root gets one queue of ``depth`` jobs over five entrypoints
(100-byte payloads), of which 2,000 were claimed: 1,500 acked (history) and 500 dead. A
``jqueue serve`` subprocess serves it; every page is then refreshed ``--refreshes`` times the
way the page's script does it (``X-Dashboard-Refresh: 1``); "jobs: none match" is the worst
case of the jobs page, a filter nothing matches (a page looks at up to 200,000 jobs). The
figures are the median and p95 wall time per refresh as the client sees it, and the server
process's CPU time per refresh (from ``/proc/PID/stat``).

Examples
--------
The issue's figure (about a minute and 2 GB of memory at 1M jobs)::

    .venv/bin/python tools/benchmark_dashboard.py --depths 1000,1000000 --json bench-results/dashboard.json

A quick look::

    .venv/bin/python tools/benchmark_dashboard.py --depths 1000,20000 --refreshes 5
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from jqueue import BrokerQueue, JobSpec, LocalFileSystemStorage
from served import jqueue_serve

ENTRYPOINTS = ["email", "sms", "push", "report", "resize"]
CHUNK = 20_000


async def fill(path: Path, depth: int) -> dict[str, str]:
    """Fill the queue at ``path``; return a job id and a dedup key to look up."""
    async with BrokerQueue(LocalFileSystemStorage(str(path))) as queue:
        first = None
        for start in range(0, depth, CHUNK):
            specs = [
                JobSpec(ENTRYPOINTS[i % 5], b"x" * 100, dedup_key=f"key-{i}" if i % 1000 == 0 else None)
                for i in range(start, min(depth, start + CHUNK))
            ]
            added = await queue.enqueue_many(specs)
            first = first or added[0].id
        claimed = await queue.dequeue(batch_size=2_000)
        await asyncio.gather(*(queue.ack(job) for job in claimed[:1_500]))
        await asyncio.gather(
            *(queue.nack(job, error="ValueError: bad", max_attempts=1) for job in claimed[1_500:])
        )
        assert first is not None
        return {"job": first, "key": "key-1000" if depth > 1000 else "key-0"}


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def refresh(url: str) -> float:
    request = urllib.request.Request(url, headers={"X-Dashboard-Refresh": "1"})
    started = time.perf_counter()
    with urllib.request.urlopen(request, timeout=120) as answer:
        answer.read()
        if answer.status != 200:
            raise RuntimeError(f"{url}: {answer.status}")
    return time.perf_counter() - started


def measure(depth: int, refreshes: int) -> dict[str, dict[str, float]]:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        started = time.perf_counter()
        found = asyncio.run(fill(root / "q.json", depth))
        print(f"depth {depth:,}: filled in {time.perf_counter() - started:.1f} s", file=sys.stderr)
        pages = {
            "overview": "/",
            "queue": "/q/q",
            "jobs": "/q/q/jobs",
            "jobs: dead": "/q/q/jobs?status=dead",
            "jobs: none match": "/q/q/jobs?status=in_progress",
            "jobs: dedup key": f"/q/q/jobs?dedup_key={found['key']}",
            "job": f"/q/q/jobs/{found['job']}",
            "dead letters": "/q/q/dead",
        }
        results: dict[str, dict[str, float]] = {}
        with jqueue_serve(root) as (url, pid):
            started = time.perf_counter()
            refresh(f"{url}/q/q")  # opens the queue: reads its checkpoint and log
            results["open"] = {"first_load_ms": (time.perf_counter() - started) * 1000}
            for name, path in pages.items():
                refresh(url + path)
                cpu_before = cpu_seconds(pid)
                times = [refresh(url + path) for _ in range(refreshes)]
                cpu = (cpu_seconds(pid) - cpu_before) / refreshes
                ordered = sorted(times)
                results[name] = {
                    "median_ms": statistics.median(times) * 1000,
                    "p95_ms": ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))] * 1000,
                    "server_cpu_ms": cpu * 1000,
                }
        return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--depths", default="1000,1000000", help="comma-separated queue depths")
    parser.add_argument("--refreshes", type=int, default=20, help="refreshes of each page")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    options = parser.parse_args()
    depths = [int(d) for d in options.depths.split(",")]
    figures = {depth: measure(depth, options.refreshes) for depth in depths}
    names = [name for name in next(iter(figures.values())) if name != "open"]
    print(f"{'page':<18}" + "".join(f"{f'{d:,} jobs: median / p95 / CPU ms':>40}" for d in depths))
    for name in names:
        cells = [figures[d][name] for d in depths]
        row = "".join(
            f"{c['median_ms']:>22.1f} / {c['p95_ms']:>6.1f} / {c['server_cpu_ms']:>6.1f}" for c in cells
        )
        print(f"{name:<18}{row}")
    print(
        "first load (open): "
        + ", ".join(f"{d:,}: {figures[d]['open']['first_load_ms']:.0f} ms" for d in depths)
    )
    if options.json:
        options.json.parent.mkdir(parents=True, exist_ok=True)
        options.json.write_text(json.dumps({str(d): f for d, f in figures.items()}, indent=2) + "\n")


if __name__ == "__main__":
    main()
