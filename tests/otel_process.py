"""A process of the OpenTelemetry test: it sets up the SDK with in-memory exporters, then either
enqueues a job under a span of its own (``produce``) or runs a ``Worker`` until the queue is
empty (``work``), on the file queue ``PATH``; it writes the spans it made, and its metrics, as
JSON to ``OUT``. With ``none`` it blocks the OpenTelemetry API's import first and does both.

    python tests/otel_process.py produce|work|service|none PATH OUT
    python tests/otel_process.py faults PATH|URL OUT FAULT

``service`` records a few of ``jqueue serve``'s measures instead, and writes them. ``faults``
sets OpenTelemetry up broken (``otel_faults.install(FAULT)``), enqueues ``FAULTY_JOBS`` jobs one
call each and drains them with a ``Worker``, on the file queue ``PATH`` or through the
``jqueue serve`` at ``URL``; it writes how many landed and were acked, how long that took, what
jqueue logged of OpenTelemetry's failures, and the calls the fault met.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
import time
from pathlib import Path
from typing import Any

MODE, PATH, OUT = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
if MODE == "none":
    sys.modules["opentelemetry"] = None  # type: ignore[assignment]  # as if not installed

from jqueue import (  # noqa: E402
    BrokerQueue,
    DirectQueue,
    Job,
    JobSpec,
    LocalFileSystemStorage,
    Outcome,
    RemoteQueue,
    Worker,
    connect,
)
from jqueue.core.queue import DEFAULT_MAX_PAYLOAD_BYTES  # noqa: E402

FAULTY_JOBS = 30


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


class Kept(logging.Handler):
    """Keeps the messages of the records it handles."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


async def drain(queue: DirectQueue | BrokerQueue | RemoteQueue) -> dict[str, Any]:
    started = time.monotonic()
    enqueued, errors = 0, set()
    for number in range(FAULTY_JOBS):
        try:
            await queue.enqueue("work", str(number).encode())
            enqueued += 1
        except Exception as exc:  # what the test must not see: reported, not raised
            errors.add(f"{type(exc).__name__}: {exc}")
    try:  # an enqueue's own error still goes through its (broken) span to its caller
        await queue.enqueue("work", bytes(DEFAULT_MAX_PAYLOAD_BYTES + 1))
        refused = None
    except Exception as exc:
        refused = type(exc).__name__
    worker = Worker(queue)

    @worker.handler("work")
    async def handle(job: Job) -> None:
        return None

    stats = await worker.run(until_empty=True, install_signals=False)
    seconds = time.monotonic() - started
    return {
        "enqueued": enqueued,
        "errors": sorted(errors),
        "refused": refused,
        "acked": stats.outcomes[Outcome.ACKED],
        "seconds": seconds,
    }


async def faults() -> dict[str, Any]:
    import otel_faults

    tracers = otel_faults.install(sys.argv[4])
    kept = Kept()
    logging.getLogger("jqueue").addHandler(kept)
    if sys.argv[2].startswith("http://"):
        async with connect(sys.argv[2], "faults") as remote:
            found = await drain(remote)
    else:
        async with DirectQueue(LocalFileSystemStorage(PATH)) as queue:
            found = await drain(queue)
    tracers.force_flush()  # the slow exporter's spans: exported after all
    return found | {"logged": kept.messages, "calls": otel_faults.CALLS}


async def main() -> None:
    if MODE == "faults":
        OUT.write_text(json.dumps(await faults()))
        return
    if MODE == "none":
        found = await produce_plain() | await work()
        OUT.write_text(json.dumps(found))
        return
    exporter, reader = sdk()
    found = await {"produce": produce, "work": work, "service": service}[MODE]()
    found |= {"spans": spans_of(exporter), "metrics": metrics_of(reader)}
    OUT.write_text(json.dumps(found))


async def service() -> dict[str, Any]:
    from jqueue.adapters.service.server.metrics import ServiceMetrics

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
