"""A process-pool handler and a worker factory for test_signals.py.

``jqueue worker signal_handlers:worker`` runs ``nap`` in a process pool for jobs of
entrypoint "nap"; JQUEUE_TEST_GRACE and JQUEUE_TEST_TIMEOUT (seconds) set the worker's
grace period (60 by default) and the handler's time limit (none by default). A spawned
pool process imports this module by name, so tests/ must be on its path.
"""

from __future__ import annotations

import json
import os
import time
from datetime import timedelta
from pathlib import Path

from jqueue import BrokerQueue, Job, Worker


def _write(path: Path, text: str) -> None:
    partial = path.with_suffix(".partial")
    partial.write_text(text)
    partial.rename(path)  # a reader sees the whole file or none


def nap(job: Job) -> None:
    """Write this process's pid to ``started-ATTEMPT``, sleep, then write ``finished-ATTEMPT``.

    The payload is JSON: ``{"dir": folder of the files, "sleep": seconds}``.
    """
    order = json.loads(job.payload)
    folder = Path(order["dir"])
    _write(folder / f"started-{job.attempts}", str(os.getpid()))
    time.sleep(order["sleep"])
    _write(folder / f"finished-{job.attempts}", str(os.getpid()))


def worker(queue: BrokerQueue) -> Worker:
    """Return a worker running ``nap`` in processes, configured from the environment."""
    grace = timedelta(seconds=float(os.environ.get("JQUEUE_TEST_GRACE", "60")))
    limit = os.environ.get("JQUEUE_TEST_TIMEOUT")
    runner = Worker(queue, concurrency=2, grace_period=grace)
    timeout = None if limit is None else timedelta(seconds=float(limit))
    runner.register("nap", nap, timeout=timeout, in_process=True)
    return runner
