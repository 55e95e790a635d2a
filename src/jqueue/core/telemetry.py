"""OpenTelemetry (extra ``otel``): spans for enqueue, claim, run and settle, the enqueuing span's
trace context carried in the job (``Job.traceparent``), so that its run is in the producer's
trace, and the worker's measures as OpenTelemetry metrics (``runtime/measures.py``).

Without ``opentelemetry-api`` installed, or with it and no tracer (meter) provider set up by the
application, every call here returns at once: the API's own no-op spans would still cost tens
of microseconds a job. An application chooses the SDK, its exporters and its sampling; jqueue
only uses the API (ADR 0020). Every call into it goes through a guard (``_TRACING``,
``_METRICS``): a span processor, meter or exporter that raises is logged once and the queue's
call goes on untraced, never failed.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from types import ModuleType, TracebackType
from typing import Any, ClassVar, Literal

from jqueue.domain.spec import JobSpec

SCOPE = "jqueue"
"""The instrumentation scope of jqueue's spans and metrics."""
SYSTEM = {"messaging.system": "jqueue"}
"""The attribute every span carries (OpenTelemetry's messaging conventions)."""

logger = logging.getLogger("jqueue.telemetry")


class _Guard:
    """Wraps every call jqueue makes into OpenTelemetry's ``kind`` (``with _TRACING:``): an
    exception there, from the application's span processor, meter or exporter, is logged once a
    process for each kind and type, and dropped, so that the queue's call goes on as if untraced.
    """

    __slots__ = ("kind",)
    _logged: ClassVar[set[tuple[str, type[BaseException]]]] = set()

    def __init__(self, kind: str) -> None:
        self.kind = kind

    def __enter__(self) -> None:
        return None

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool:
        if not isinstance(exc, Exception):  # a cancellation or an exit passes on
            return False
        if (self.kind, type(exc)) not in self._logged:
            self._logged.add((self.kind, type(exc)))
            logger.warning(
                "OpenTelemetry %s failed (%s: %s); jqueue goes on without it, and logs this failure "
                "only once",
                self.kind,
                type(exc).__name__,
                exc,
                exc_info=exc,
            )
        return True


_TRACING = _Guard("tracing")
_METRICS = _Guard("metrics")


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
            with _TRACING:
                tracers = api.trace.get_tracer_provider()
                if not isinstance(tracers, api.idle_tracers):
                    _seen.tracing = (api, _tracer_of(tracers))
            with _METRICS:
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


class Instrument:
    """One of jqueue's OpenTelemetry instruments, of ``kind`` (with the API installed; else it
    records nothing); ``add`` and ``record`` count only while a meter provider is set, and never
    raise."""

    def __init__(
        self,
        kind: Literal["counter", "up_down_counter", "histogram"],
        name: str,
        unit: str = "",
        description: str = "",
    ) -> None:
        self._made: Any = None
        api = _api()
        if api is not None:
            with _METRICS:  # on the API's proxy meter until a provider is set
                meter = api.metrics.get_meter(SCOPE)
                self._made = getattr(meter, f"create_{kind}")(name, unit=unit, description=description)

    def add(self, amount: float, attributes: Mapping[str, str]) -> None:
        """Add ``amount`` to a counter (a negative one to an up-down counter)."""
        if self._made is not None and measuring():
            with _METRICS:
                self._made.add(amount, attributes)

    def record(self, value: float, attributes: Mapping[str, str]) -> None:
        """Record ``value`` in a histogram."""
        if self._made is not None and measuring():
            with _METRICS:
                self._made.record(value, attributes)


@contextlib.contextmanager
def _span(opening: Callable[[], AbstractContextManager[Any]]) -> Iterator[Any]:
    """Enter the span ``opening`` starts and yield it (None when OpenTelemetry failed to), and end
    it with the block, passing it the block's exception; OpenTelemetry's failures in either are the
    guard's, never the block's."""
    entered = None
    with _TRACING:
        manager = opening()
        entered = (manager, manager.__enter__())
    if entered is None:
        yield None
        return
    manager, span = entered
    try:
        yield span
    except BaseException as exc:
        with _TRACING:
            manager.__exit__(type(exc), exc, exc.__traceback__)
        raise
    with _TRACING:
        manager.__exit__(None, None, None)


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
    opening = functools.partial(
        tracer.start_as_current_span,
        "jqueue enqueue",
        kind=api.trace.SpanKind.PRODUCER,
        attributes=attributes,
    )
    with _span(opening) as span:
        yield None if span is None else _traceparent(api, span)


def _traceparent(api: _Api, span: Any) -> str | None:
    """The trace context of ``span``, the current one, as jobs carry it (None if not recorded)."""
    with _TRACING:
        if span.get_span_context().is_valid:
            carrier: dict[str, str] = {}
            api.propagator.inject(carrier)
            return carrier.get("traceparent")
    return None


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
    with _TRACING:
        links = []
        for traceparent in dict.fromkeys(traceparent for traceparent in traceparents if traceparent):
            context = api.trace.get_current_span(api.propagator.extract({"traceparent": traceparent}))
            if context.get_span_context().is_valid:
                links.append(api.trace.Link(context.get_span_context()))
        kind = api.trace.SpanKind.CONSUMER
        tracer.start_span(
            "jqueue claim", kind=kind, attributes=attributes, links=links, start_time=started
        ).end()


@contextlib.contextmanager
def running(job_id: str, entrypoint: str, attempt: int, traceparent: str | None) -> Iterator[None]:
    """Open the span of a job's run, in the trace of ``traceparent`` (the enqueue's), if any; the
    handler runs in it, so that its own spans are the run's children."""
    tracing = _tracing()
    if tracing is None:
        yield
        return
    api, tracer = tracing
    attributes = SYSTEM | {
        "messaging.operation.type": "process",
        "messaging.destination.name": entrypoint,
        "messaging.message.id": job_id,
        "jqueue.job.attempt": attempt,
    }

    def opening() -> AbstractContextManager[Any]:
        parent = None if traceparent is None else api.propagator.extract({"traceparent": traceparent})
        kind = api.trace.SpanKind.CONSUMER
        return tracer.start_as_current_span(  # type: ignore[no-any-return]
            f"jqueue run {entrypoint}", parent, kind=kind, attributes=attributes
        )

    with _span(opening):
        yield


def raised(exc: BaseException) -> None:
    """Record ``exc``, which a handler raised, on the current run span (an exception event, with
    its traceback, as tracing backends show them)."""
    tracing = _tracing()
    if tracing is not None:
        with _TRACING:
            tracing[0].trace.get_current_span().record_exception(exc)


def ran(outcome: str, error: str | None) -> None:
    """Record a run's ``outcome`` (and ``error``, for one that failed) on the current run span."""
    tracing = _tracing()
    if tracing is None:
        return
    trace = tracing[0].trace
    with _TRACING:
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
    with _span(functools.partial(tracing[1].start_as_current_span, "jqueue settle", attributes=attributes)):
        yield
