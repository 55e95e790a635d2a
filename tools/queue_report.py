"""Report on a queue's history, as ``jqueue report`` does (``jqueue.adapters.report``).

.venv/bin/python tools/queue_report.py file:///path/queue.json --out queue-report [--engine spark]
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from jqueue.adapters.report import ENGINES, compute, write


def main(argv: Sequence[str] | None = None) -> int:
    """Compute and write the report; returns the exit status."""
    parser = argparse.ArgumentParser(prog="queue_report.py", description=__doc__)
    parser.add_argument("url", help="the queue's storage URL")
    parser.add_argument("--out", type=Path, default=Path("queue-report"), help="output directory")
    parser.add_argument("--engine", choices=ENGINES, default="auto")
    args = parser.parse_args(argv)
    report, engine = compute(args.url, args.engine)
    for path in write(report, args.out):
        print(path)
    print(f"computed with {engine}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
