"""``WorkerMetrics``: a ``Worker``'s own Prometheus metrics, served on a port of its own
(extra ``serve``, for prometheus-client).

Usage::

    metrics = WorkerMetrics(worker)
    metrics.serve(9100)          # GET http://127.0.0.1:9100/metrics
    ...
    metrics.close()
"""

from __future__ import annotations

import functools
import threading
from typing import Any

from jqueue.adapters.optional import require
from jqueue.core.runtime.measures import RUN, RUNNING, WAIT
from jqueue.core.runtime.outcomes import JobResult
from jqueue.core.runtime.worker import Worker
from jqueue.domain.models import Job

prometheus = require("prometheus_client", extra="serve")

RUN_BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600)


class WorkerMetrics:
    """Counts what ``worker`` runs, by hooks on its jobs, in a registry of its own.

    Parameters
    ----------
    worker : Worker
        The worker to measure (its ``before_job`` and ``after_job`` hooks are added).
    """

    def __init__(self, worker: Worker) -> None:
        self.registry = prometheus.CollectorRegistry(auto_describe=True)
        histogram = functools.partial(prometheus.Histogram, registry=self.registry, buckets=RUN_BUCKETS)
        self.run_seconds = histogram(RUN.prometheus_name, RUN.description, list(RUN.labels))
        self.wait_seconds = histogram(WAIT.prometheus_name, WAIT.description, list(WAIT.labels))
        self.running = prometheus.Gauge(
            RUNNING.prometheus_name, RUNNING.description, list(RUNNING.labels), registry=self.registry
        )
        self._server: Any = None
        self._thread: threading.Thread | None = None
        worker.on("before_job")(self._started)
        worker.on("after_job")(self._finished)

    def _started(self, job: Job) -> None:
        self.running.labels(job.entrypoint).inc()

    def _finished(self, result: JobResult) -> None:
        entrypoint = result.job.entrypoint
        self.running.labels(entrypoint).dec()
        self.run_seconds.labels(entrypoint, str(result.outcome)).observe(result.ran)
        self.wait_seconds.labels(entrypoint).observe(result.waited)

    def serve(self, port: int, address: str = "127.0.0.1") -> None:
        """Serve ``GET /metrics`` on ``address:port`` from a background thread until ``close``."""
        if self._server is not None:
            raise RuntimeError("the worker's metrics are served already")
        self._server, self._thread = prometheus.start_http_server(port, address, registry=self.registry)

    def close(self) -> None:
        """Stop serving (if serving)."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def render(self) -> bytes:
        """The metrics in Prometheus' text format."""
        text: bytes = prometheus.generate_latest(self.registry)
        return text
