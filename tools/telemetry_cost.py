"""What jqueue's OpenTelemetry calls cost a job and an enqueue, in microseconds: without the
API (its import blocked), with the API and no provider set (the default where the API is
installed, for instance by google-cloud-storage), and with the SDK's tracer and meter providers
and an in-memory exporter. Each setting runs in a process of its own (a provider is set once
per process).

Example::

    .venv/bin/python tools/telemetry_cost.py --calls 20000
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

SETTINGS = ("none", "api", "sdk")


def measure(setting: str, calls: int) -> tuple[float, float]:
    """Microseconds per job (its run, settle, claim and measures) and per enqueue, in ``setting``."""
    if setting == "none":
        sys.modules["opentelemetry"] = None  # type: ignore[assignment]
    if setting == "sdk":
        from opentelemetry import metrics, trace
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import InMemoryMetricReader
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(InMemorySpanExporter()))
        trace.set_tracer_provider(provider)
        metrics.set_meter_provider(MeterProvider(metric_readers=[InMemoryMetricReader()]))
    from jqueue import Job, JobSpec
    from jqueue.core import telemetry
    from jqueue.core.runtime import measures
    from jqueue.core.runtime.outcomes import JobResult, Outcome

    job = Job(entrypoint="work", payload=b"")
    result = JobResult(job, Outcome.ACKED, None, 0.001, 0.002)

    def one_job() -> None:
        telemetry.claimed([job.traceparent], time.time_ns())
        with telemetry.running(job.id, job.entrypoint, 1, job.traceparent):
            measures.started(job)
            with telemetry.settling("acked"):
                pass
            measures.finished(result)
            measures.stopped(job)

    specs = [JobSpec("work", b"")]

    def one_enqueue() -> None:
        with telemetry.enqueuing(specs):
            pass

    figures = []
    for call in (one_job, one_enqueue):
        started = time.perf_counter()
        for _ in range(calls):
            call()
        figures.append((time.perf_counter() - started) / calls * 1e6)
    return figures[0], figures[1]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--calls", type=int, default=20_000, help="calls of each kind per setting")
    parser.add_argument("--setting", choices=SETTINGS, help=argparse.SUPPRESS)  # one setting, in its process
    options = parser.parse_args()
    if options.setting is not None:
        job, enqueue = measure(options.setting, options.calls)
        print(f"{job:.2f} {enqueue:.2f}")
        return
    print(f"{'setting':<8} {'us/job':>8} {'us/enqueue':>11}")
    for setting in SETTINGS:
        command = [sys.executable, str(Path(__file__)), "--setting", setting, "--calls", str(options.calls)]
        done = subprocess.run(command, capture_output=True, text=True, check=True)
        per_job, per_enqueue = map(float, done.stdout.split())
        print(f"{setting:<8} {per_job:>8.2f} {per_enqueue:>11.2f}")


if __name__ == "__main__":
    main()
