"""OpenTelemetry (extra ``otel``): spans for enqueue, claim, run and settle, the enqueuing span's
trace context carried in the job (``Job.traceparent``), so that its run is in the producer's
trace, and the worker's measures as OpenTelemetry metrics (``runtime/measures.py``).

Without ``opentelemetry-api`` installed every call here does nothing; with it and no SDK set up,
the API's own no-op tracer and meter answer. An application chooses the SDK, its exporters and
its sampling; jqueue only uses the API (ADR 0020).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator, Sequence
from types import ModuleType
from typing import Any

SCOPE = "jqueue"
"""The instrumentation scope of jqueue's spans and metrics."""
SYSTEM = {"messaging.system": "jqueue"}
"""The attribute every span carries (OpenTelemetry's messaging conventions)."""


@functools.cache
def _api() -> tuple[ModuleType, ModuleType, Any] | None:
    """The OpenTelemetry API's ``trace`` and ``metrics`` and a W3C trace-context propagator, or
    None without the API installed (asked once)."""
    try:
        from opentelemetry import metrics, trace
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
    except ImportError:
        return None
    return trace, metrics, TraceContextTextMapPropagator()


def installed() -> bool:
    """Whether the OpenTelemetry API is installed."""
    return _api() is not None


def meter() -> Any:
    """jqueue's meter (None without the API)."""
    api = _api()
    return None if api is None else api[1].get_meter(SCOPE)


def _tracer(api: tuple[ModuleType, ModuleType, Any]) -> Any:
    return api[0].get_tracer(SCOPE)


@contextlib.contextmanager
def enqueuing(entrypoints: Sequence[str]) -> Iterator[str | None]:
    """Open the span of an enqueue of jobs of ``entrypoints`` (one per job); yield the trace
    context the jobs carry (None when no trace is recorded)."""
    api = _api()
    if api is None:
        yield None
        return
    names = sorted(set(entrypoints))
    attributes = SYSTEM | {
        "messaging.operation.type": "send",
        "messaging.destination.name": names[0] if len(names) == 1 else ",".join(names),
        "messaging.batch.message_count": len(entrypoints),
    }
    span_kind = api[0].SpanKind.PRODUCER
    with _tracer(api).start_as_current_span("jqueue enqueue", kind=span_kind, attributes=attributes) as span:
        if not span.get_span_context().is_valid:
            yield None
            return
        carrier: dict[str, str] = {}
        api[2].inject(carrier)
        yield carrier.get("traceparent")


def claimed(traceparents: Sequence[str | None], started: int) -> None:
    """Record a worker's claim that began at ``started`` (``time.time_ns()``) and got jobs that
    carry ``traceparents``, as a span that ends now, linked to the jobs' traces; an empty claim
    (an idle worker's poll) is not recorded."""
    api = _api()
    if api is None or not traceparents:
        return
    count = len(traceparents)
    attributes = SYSTEM | {"messaging.operation.type": "receive", "messaging.batch.message_count": count}
    links = []
    for traceparent in dict.fromkeys(traceparent for traceparent in traceparents if traceparent):
        context = api[0].get_current_span(api[2].extract({"traceparent": traceparent})).get_span_context()
        if context.is_valid:
            links.append(api[0].Link(context))
    kind = api[0].SpanKind.CONSUMER
    tracer = _tracer(api)
    tracer.start_span("jqueue claim", kind=kind, attributes=attributes, links=links, start_time=started).end()


@contextlib.contextmanager
def running(job_id: str, entrypoint: str, attempt: int, traceparent: str | None) -> Iterator[None]:
    """Open the span of a job's run, in the trace of ``traceparent`` (the enqueue's), if any; the
    handler runs in it, so that its own spans are the run's children."""
    api = _api()
    if api is None:
        yield
        return
    parent = None if traceparent is None else api[2].extract({"traceparent": traceparent})
    attributes = SYSTEM | {
        "messaging.operation.type": "process",
        "messaging.destination.name": entrypoint,
        "messaging.message.id": job_id,
        "jqueue.job.attempt": attempt,
    }
    kind = api[0].SpanKind.CONSUMER
    tracer = _tracer(api)
    with tracer.start_as_current_span(f"jqueue run {entrypoint}", parent, kind=kind, attributes=attributes):
        yield


def raised(exc: BaseException) -> None:
    """Record ``exc``, which a handler raised, on the current run span (an exception event, with
    its traceback, as tracing backends show them)."""
    api = _api()
    if api is not None:
        api[0].get_current_span().record_exception(exc)


def ran(outcome: str, error: str | None) -> None:
    """Record a run's ``outcome`` (and ``error``, for one that failed) on the current run span."""
    api = _api()
    if api is None:
        return
    span = api[0].get_current_span()
    span.set_attribute("jqueue.job.outcome", outcome)
    if error is not None and outcome in ("retried", "dead"):
        span.set_status(api[0].Status(api[0].StatusCode.ERROR, error.splitlines()[0][:200]))


@contextlib.contextmanager
def settling(outcome: str) -> Iterator[None]:
    """Open the span of a job's settle (its ack, nack or release) as ``outcome``, within its run."""
    api = _api()
    if api is None:
        yield
        return
    attributes = SYSTEM | {"messaging.operation.type": "settle", "jqueue.job.outcome": str(outcome)}
    with _tracer(api).start_as_current_span("jqueue settle", attributes=attributes):
        yield
