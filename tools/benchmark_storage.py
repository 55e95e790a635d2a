"""Benchmark jqueue's queues on its storage backends: see ``jqueue.adapters.benchmark``.

    .venv/bin/python tools/benchmark_storage.py --help

The same benchmark runs against any storage URL as ``jqueue bench --storage URL``.
"""

import sys

from jqueue.adapters.benchmark import main

if __name__ == "__main__":
    sys.exit(main())
