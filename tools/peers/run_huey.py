"""Huey on SQLite (WAL, ``synchronous=FULL``), for ``benchmark_peers.py``:
``run_huey.py SCENARIO WORKDIR ...``. Huey has no batch enqueue: ``batch`` enqueues one by one."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from common import BATCH, Done, emit, measured, paced, payload, record_latency, runner_arguments
from huey import SqliteHuey

WORKDIR = Path(os.environ["BENCH_WORKDIR"])
huey = SqliteHuey("bench", filename=str(WORKDIR / "huey.db"), fsync=True, journal_mode="wal", results=False)
_done: Done | None = None
_record: Any = None


@huey.task()
def work(data: bytes) -> None:
    """The benchmark's handler: count the job (and its latency, in a latency run)."""
    if _record is not None:
        _record(data)
    assert _done is not None
    _done.one()


def main() -> None:
    """Run one scenario and print its result."""
    global _done, _record
    args = runner_arguments()
    result: dict[str, Any] = {}
    if args.scenario in ("sequential", "batch"):
        with measured(result, args.jobs):
            for _ in range(args.jobs):
                work(payload())
        if args.scenario == "batch":
            result["note"] = "no batch API: one enqueue per job"
    elif args.scenario == "fill":
        for _ in range(args.jobs // BATCH * BATCH):
            work(payload())
    elif args.scenario == "paced":
        for pause in paced(args.jobs, args.rate):
            time.sleep(pause)
            work(payload())
    else:  # a worker: threads, Huey's default polling (0.1 s, growing to 10 s when idle)
        _done = Done(args.workdir)
        _record = record_latency(args.workdir) if args.scenario == "latency-worker" else None
        consumer = huey.create_consumer(workers=args.concurrency, worker_type="thread")
        (args.workdir / f"ready-{args.index}").touch()
        while not (args.workdir / "go").exists():
            time.sleep(0.005)
        consumer.run()
        return
    emit(result)


if __name__ == "__main__":
    main()
