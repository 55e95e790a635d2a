"""persist-queue's ``SQLiteAckQueue`` (WAL, ``synchronous=FULL``), for ``benchmark_peers.py``:
``run_persistqueue.py sequential|batch WORKDIR --jobs N``. It is a library queue without a worker
runtime or a batch put, so it runs the producer scenarios only, ``batch`` one put at a time."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from common import emit, measured, payload
from persistqueue import SQLiteAckQueue


def main() -> None:
    """Run one scenario and print its result."""
    parser = argparse.ArgumentParser()
    parser.add_argument("scenario", choices=["sequential", "batch"])
    parser.add_argument("workdir", type=Path)
    parser.add_argument("--jobs", type=int, default=0)
    args = parser.parse_args()
    queue = SQLiteAckQueue(str(args.workdir / "pq"), auto_commit=True)
    queue._conn.execute("PRAGMA synchronous=FULL")  # its default leaves SQLite's, made explicit
    result: dict[str, Any] = {}
    with measured(result, args.jobs):
        for _ in range(args.jobs):
            queue.put(payload())
    if args.scenario == "batch":
        result["note"] = "no batch API: one put per job"
    emit(result)


if __name__ == "__main__":
    main()
