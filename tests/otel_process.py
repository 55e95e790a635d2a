"""A process of the OpenTelemetry test: it sets up the SDK with in-memory exporters, then either
enqueues a job under a span of its own (``produce``) or runs a ``Worker`` until the queue is
empty (``work``), on the file queue ``PATH``; it writes the spans it made, and its metrics, as
JSON to ``OUT``. With ``none`` it blocks the OpenTelemetry API's import first and does both.

    python tests/otel_process.py produce|work|service|none PATH OUT

``service`` records a few of ``jqueue serve``'s measures instead, and writes them.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

MODE, PATH, OUT = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
if MODE == "none":
    sys.modules["opentelemetry"] = None  # type: ignore[assignment]  # as if not installed

from jqueue import DirectQueue, Job, JobSpec, LocalFileSystemStorage, Outcome, Worker  # noqa: E402


def sdk() -> tuple[Any, Any]:
    from opentelemetry import metrics, trace
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    reader = InMemoryMetricReader()
    metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))
    return exporter, reader


def spans_of(exporter: Any) -> list[dict[str, Any]]:
    return [
        {
            "name": span.name,
            "trace": f"{span.context.trace_id:032x}",
            "span": f"{span.context.span_id:016x}",
            "parent": None if span.parent is None else f"{span.parent.span_id:016x}",
            "attributes": dict(span.attributes),
            "links": [f"{link.context.span_id:016x}" for link in span.links],
            "events": [event.name for event in span.events],
            "status": span.status.status_code.name,
        }
        for span in exporter.get_finished_spans()
    ]


def metrics_of(reader: Any) -> dict[str, list[dict[str, Any]]]:
    found: dict[str, list[dict[str, Any]]] = {}
    data = reader.get_metrics_data()  # None when nothing was measured
    for resource in [] if data is None else data.resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                found[metric.name] = [
                    {
                        "attributes": dict(point.attributes),
                        "count": getattr(point, "count", None),
                        "value": getattr(point, "value", None),
                    }
                    for point in metric.data.data_points
                ]
    return found


async def produce() -> dict[str, Any]:
    from opentelemetry import trace

    with trace.get_tracer("app").start_as_current_span("request"):
        async with DirectQueue(LocalFileSystemStorage(PATH)) as queue:
            job, _ = await queue.enqueue_many([JobSpec("work", b"x"), JobSpec("fails", b"", max_attempts=1)])
    return {"traceparent": job.traceparent}


async def work() -> dict[str, Any]:
    async with DirectQueue(LocalFileSystemStorage(PATH)) as queue:
        worker = Worker(queue)

        @worker.handler("work")
        async def handle(job: Job) -> bytes:
            if MODE != "none":
                from opentelemetry import trace

                with trace.get_tracer("app").start_as_current_span("inside the handler"):
                    pass
            return b"done"

        @worker.handler("fails")
        async def fails(job: Job) -> None:
            raise ValueError("no such user")

        stats = await worker.run(until_empty=True, install_signals=False)
        return {"acked": stats.outcomes[Outcome.ACKED], "dead": stats.outcomes[Outcome.DEAD]}


async def main() -> None:
    if MODE == "none":
        found = await produce_plain() | await work()
        OUT.write_text(json.dumps(found))
        return
    exporter, reader = sdk()
    found = await {"produce": produce, "work": work, "service": service}[MODE]()
    found |= {"spans": spans_of(exporter), "metrics": metrics_of(reader)}
    OUT.write_text(json.dumps(found))


async def service() -> dict[str, Any]:
    from jqueue.adapters.service.metrics import ServiceMetrics

    metrics = ServiceMetrics()
    metrics.jobs("shop", "enqueued", [JobSpec("mail", b""), JobSpec("mail", b""), JobSpec("sms", b"")])
    metrics.request_seconds.labels("enqueue").observe(0.002)
    labels = {"queue": "shop", "entrypoint": "mail", "action": "enqueued"}
    return {"prometheus": metrics.registry.get_sample_value("jqueue_jobs_total", labels)}


async def produce_plain() -> dict[str, Any]:
    async with DirectQueue(LocalFileSystemStorage(PATH)) as queue:
        job = await queue.enqueue("work", b"x")
    return {"traceparent": job.traceparent}


asyncio.run(main())
