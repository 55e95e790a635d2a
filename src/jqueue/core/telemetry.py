"""OpenTelemetry (extra ``otel``): spans for enqueue, claim, run and settle, the enqueuing span's
trace context carried in the job (``Job.traceparent``), so that its run is in the producer's
trace, and the worker's measures as OpenTelemetry metrics (``runtime/measures.py``).

Without ``opentelemetry-api`` installed, or with it and no tracer (meter) provider set up by the
application, every call here returns at once: the API's own no-op spans would still cost tens
of microseconds a job. An application chooses the SDK, its exporters and its sampling; jqueue
only uses the API (ADR 0020).
"""

from __future__ import annotations

import contextlib
import functools
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from jqueue.domain.spec import JobSpec

SCOPE = "jqueue"
"""The instrumentation scope of jqueue's spans and metrics."""
SYSTEM = {"messaging.system": "jqueue"}
"""The attribute every span carries (OpenTelemetry's messaging conventions)."""


@dataclass(frozen=True)
class _Api:
    """The parts of the OpenTelemetry API jqueue uses, and the providers that record nothing."""

    trace: ModuleType
    metrics: ModuleType
    propagator: Any
    idle_tracers: tuple[type, ...]
    idle_meters: tuple[type, ...]


@functools.cache
def _api() -> _Api | None:
    """The OpenTelemetry API, or None without it installed (asked once)."""
    try:
        from opentelemetry import metrics, trace
        from opentelemetry.metrics import NoOpMeterProvider
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
    except ImportError:
        return None
    idle_tracers = (trace.NoOpTracerProvider, trace.ProxyTracerProvider)
    return _Api(trace, metrics, TraceContextTextMapPropagator(), idle_tracers, (NoOpMeterProvider,))


RECHECK_SECONDS = 1.0
"""How often jqueue looks again whether the application has set a provider: asking the API costs
an environment lookup, too much for every job."""


@dataclass
class _Seen:
    """What the providers were when last looked at, and when."""

    at: float = -RECHECK_SECONDS
    tracing: tuple[_Api, Any] | None = None
    measuring: bool = False


_seen = _Seen()


def _look() -> _Seen:
    now = time.monotonic()
    if now - _seen.at >= RECHECK_SECONDS:
        api = _api()
        _seen.at, _seen.tracing, _seen.measuring = now, None, False
        if api is not None:
            tracers = api.trace.get_tracer_provider()
            if not isinstance(tracers, api.idle_tracers):
                _seen.tracing = (api, _tracer_of(tracers))
            meters = api.metrics.get_meter_provider()  # the API's proxy (a private class) until set
            _seen.measuring = (
                not isinstance(meters, api.idle_meters) and type(meters).__name__ != "_ProxyMeterProvider"
            )
    return _seen


def _tracing() -> tuple[_Api, Any] | None:
    """The API and jqueue's tracer, while the application has set a tracer provider (an SDK's):
    without one a span would record nothing and still cost tens of microseconds a job."""
    return _look().tracing


@functools.cache
def _tracer_of(provider: Any) -> Any:
    return provider.get_tracer(SCOPE)


def measuring() -> bool:
    """Whether the application has set a meter provider (an SDK's), so that measures count."""
    return _look().measuring


def meter() -> Any:
    """jqueue's meter (None without the API); its instruments record once a provider is set."""
    api = _api()
    return None if api is None else api.metrics.get_meter(SCOPE)


@contextlib.contextmanager
def enqueuing(specs: Sequence[JobSpec]) -> Iterator[str | None]:
    """Open the span of an enqueue of ``specs``; yield the trace context the jobs carry (None when
    no trace is recorded)."""
    tracing = _tracing()
    if tracing is None:
        yield None
        return
    api, tracer = tracing
    names = sorted({spec.entrypoint for spec in specs})
    attributes = SYSTEM | {
        "messaging.operation.type": "send",
        "messaging.destination.name": names[0] if len(names) == 1 else ",".join(names),
        "messaging.batch.message_count": len(specs),
    }
    span_kind = api.trace.SpanKind.PRODUCER
    with tracer.start_as_current_span("jqueue enqueue", kind=span_kind, attributes=attributes) as span:
        if not span.get_span_context().is_valid:
            yield None
            return
        carrier: dict[str, str] = {}
        api.propagator.inject(carrier)
        yield carrier.get("traceparent")


def claimed(traceparents: Sequence[str | None], started: int) -> None:
    """Record a worker's claim that began at ``started`` (``time.time_ns()``) and got jobs that
    carry ``traceparents``, as a span that ends now, linked to the jobs' traces; an empty claim
    (an idle worker's poll) is not recorded."""
    tracing = _tracing()
    if tracing is None or not traceparents:
        return
    api, tracer = tracing
    count = len(traceparents)
    attributes = SYSTEM | {"messaging.operation.type": "receive", "messaging.batch.message_count": count}
    links = []
    for traceparent in dict.fromkeys(traceparent for traceparent in traceparents if traceparent):
        context = api.trace.get_current_span(api.propagator.extract({"traceparent": traceparent}))
        if context.get_span_context().is_valid:
            links.append(api.trace.Link(context.get_span_context()))
    kind = api.trace.SpanKind.CONSUMER
    tracer.start_span("jqueue claim", kind=kind, attributes=attributes, links=links, start_time=started).end()


@contextlib.contextmanager
def running(job_id: str, entrypoint: str, attempt: int, traceparent: str | None) -> Iterator[None]:
    """Open the span of a job's run, in the trace of ``traceparent`` (the enqueue's), if any; the
    handler runs in it, so that its own spans are the run's children."""
    tracing = _tracing()
    if tracing is None:
        yield
        return
    api, tracer = tracing
    parent = None if traceparent is None else api.propagator.extract({"traceparent": traceparent})
    attributes = SYSTEM | {
        "messaging.operation.type": "process",
        "messaging.destination.name": entrypoint,
        "messaging.message.id": job_id,
        "jqueue.job.attempt": attempt,
    }
    kind = api.trace.SpanKind.CONSUMER
    with tracer.start_as_current_span(f"jqueue run {entrypoint}", parent, kind=kind, attributes=attributes):
        yield


def raised(exc: BaseException) -> None:
    """Record ``exc``, which a handler raised, on the current run span (an exception event, with
    its traceback, as tracing backends show them)."""
    tracing = _tracing()
    if tracing is not None:
        tracing[0].trace.get_current_span().record_exception(exc)


def ran(outcome: str, error: str | None) -> None:
    """Record a run's ``outcome`` (and ``error``, for one that failed) on the current run span."""
    tracing = _tracing()
    if tracing is None:
        return
    trace = tracing[0].trace
    span = trace.get_current_span()
    span.set_attribute("jqueue.job.outcome", outcome)
    if error is not None and outcome in ("retried", "dead"):
        span.set_status(trace.Status(trace.StatusCode.ERROR, error.splitlines()[0][:200]))


@contextlib.contextmanager
def settling(outcome: str) -> Iterator[None]:
    """Open the span of a job's settle (its ack, nack or release) as ``outcome``, within its run."""
    tracing = _tracing()
    if tracing is None:
        yield
        return
    attributes = SYSTEM | {"messaging.operation.type": "settle", "jqueue.job.outcome": str(outcome)}
    with tracing[1].start_as_current_span("jqueue settle", attributes=attributes):
        yield
