"""A worker's measures (``RUN``, ``WAIT``, ``RUNNING``), declared once: Prometheus
(``adapters/worker_metrics.py``) and OpenTelemetry (``OpenTelemetryMeasures``, on whenever the
API is installed) follow them."""

from __future__ import annotations

import functools
from dataclasses import dataclass

from jqueue.core import telemetry
from jqueue.core.runtime.outcomes import JobResult
from jqueue.domain.models import Job


@dataclass(frozen=True)
class Measure:
    """One measure of a worker: ``stem`` names it, in each system's own way (``prometheus_name``,
    ``otel_name``); ``unit`` is ``s`` for a time."""

    stem: str
    description: str
    labels: tuple[str, ...]
    unit: str

    @property
    def prometheus_name(self) -> str:
        """Prometheus' name: ``jqueue_worker_job_run_seconds``."""
        return f"jqueue_worker_{self.stem}" + ("_seconds" if self.unit == "s" else "")

    @property
    def otel_name(self) -> str:
        """OpenTelemetry's name: ``jqueue.worker.job.run.duration``."""
        return "jqueue.worker." + self.stem.replace("_", ".") + (".duration" if self.unit == "s" else "")


RUN = Measure(
    "job_run",
    "Time a job's handler ran, by entrypoint and outcome (acked, retried, dead, lost, released).",
    ("entrypoint", "outcome"),
    "s",
)
WAIT = Measure(
    "job_wait",
    "Time from a job's enqueue (or due time) to its claim by this worker, by entrypoint.",
    ("entrypoint",),
    "s",
)
RUNNING = Measure("jobs_running", "Jobs this worker is running now, by entrypoint.", ("entrypoint",), "{job}")


class OpenTelemetryMeasures:
    """Records a worker's ``MEASURES`` through the OpenTelemetry metrics API (``telemetry.Instrument``,
    which never raises)."""

    def __init__(self) -> None:
        self._run = telemetry.Instrument("histogram", RUN.otel_name, RUN.unit, RUN.description)
        self._wait = telemetry.Instrument("histogram", WAIT.otel_name, WAIT.unit, WAIT.description)
        self._running = telemetry.Instrument(
            "up_down_counter", RUNNING.otel_name, RUNNING.unit, RUNNING.description
        )

    def running(self, job: Job, change: int) -> None:
        """Count ``job`` as running (1) or no longer (-1)."""
        self._running.add(change, {"entrypoint": job.entrypoint})

    def finished(self, result: JobResult) -> None:
        """Record a job's run."""
        entrypoint = result.job.entrypoint
        self._run.record(result.ran, {"entrypoint": entrypoint, "outcome": str(result.outcome)})
        self._wait.record(result.waited, {"entrypoint": entrypoint})


@functools.cache
def _recorder() -> OpenTelemetryMeasures:
    return OpenTelemetryMeasures()  # on the API's proxy meter until the application sets a provider


def started(job: Job) -> None:
    """Count a job a worker starts (through OpenTelemetry, when a meter provider is set)."""
    if telemetry.measuring():
        _recorder().running(job, 1)


def stopped(job: Job) -> None:
    """Count a job a worker no longer runs, however it ended (``started``'s other half)."""
    if telemetry.measuring():
        _recorder().running(job, -1)


def finished(result: JobResult) -> None:
    """Record a job's run on its span and in the measures (through OpenTelemetry, when a tracer
    or a meter provider is set)."""
    telemetry.ran(str(result.outcome), result.error)
    if telemetry.measuring():
        _recorder().finished(result)
