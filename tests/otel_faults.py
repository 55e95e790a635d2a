"""OpenTelemetry set up to fail, for tests/test_telemetry.py: ``install(FAULT)`` sets the SDK's
tracer and meter providers with one part broken, in the process that calls it (``otel_process.py``,
or a ``jqueue serve`` through a ``sitecustomize`` that imports this module). ``CALLS`` counts
the calls into the broken part, so that a test knows the fault was met, not skipped.

- ``start``, ``end``: a span processor whose ``on_start`` (``on_end``) raises;
- ``meter``: a meter provider whose instruments raise on every ``add`` and ``record``;
- ``instruments``: a meter provider whose meter raises on making an instrument;
- ``exporter``: span and metric exporters that raise (the SDK's processors catch those);
- ``slow``: a ``BatchSpanProcessor`` over an exporter that takes ``SLOW_EXPORT`` seconds an export;
- ``slow-simple``: the same exporter under a ``SimpleSpanProcessor`` (what the docs warn against).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from opentelemetry import metrics, trace
from opentelemetry.context import Context
from opentelemetry.metrics import MeterProvider, NoOpMeter
from opentelemetry.sdk.metrics import MeterProvider as SdkMeterProvider
from opentelemetry.sdk.metrics.export import (
    MetricExporter,
    MetricExportResult,
    MetricsData,
    PeriodicExportingMetricReader,
)
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    SimpleSpanProcessor,
    SpanExporter,
    SpanExportResult,
)

FAULTS = ("start", "end", "meter", "instruments", "exporter", "slow", "slow-simple")
SLOW_EXPORT = 0.5
"""Seconds the slow exporter takes for each export."""
CALLS: dict[str, int] = {}
"""The calls into the broken (or slow) part, by its name."""


def _called(name: str) -> None:
    CALLS[name] = CALLS.get(name, 0) + 1


class RaisingProcessor(SpanProcessor):
    """A span processor whose ``on_start`` or ``on_end`` (``when``) raises."""

    def __init__(self, when: str) -> None:
        self.when = when

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        if self.when == "start":
            _called("on_start")
            raise RuntimeError("the span processor broke in on_start")

    def on_end(self, span: ReadableSpan) -> None:
        if self.when == "end":
            _called("on_end")
            raise RuntimeError("the span processor broke in on_end")


class _RaisingInstrument:
    def add(self, amount: float, attributes: Any = None, context: Any = None) -> None:
        _called("add")
        raise RuntimeError("the meter broke in add")

    def record(self, amount: float, attributes: Any = None, context: Any = None) -> None:
        _called("record")
        raise RuntimeError("the meter broke in record")


class RaisingMeter(NoOpMeter):
    """A meter whose instruments raise (``on_create`` False) or that raises making them."""

    def __init__(self, name: str, on_create: bool) -> None:
        super().__init__(name)
        self.on_create = on_create

    def _make(self) -> Any:
        if self.on_create:
            _called("create")
            raise RuntimeError("the meter broke making an instrument")
        return _RaisingInstrument()

    def create_counter(self, name: str, unit: str = "", description: str = "") -> Any:
        return self._make()

    def create_up_down_counter(self, name: str, unit: str = "", description: str = "") -> Any:
        return self._make()

    def create_histogram(self, name: str, unit: str = "", description: str = "", **options: Any) -> Any:
        return self._make()


class RaisingMeterProvider(MeterProvider):
    """A meter provider whose meters are ``RaisingMeter``s."""

    def __init__(self, on_create: bool) -> None:
        self.on_create = on_create

    def get_meter(
        self,
        name: str,
        version: str | None = None,
        schema_url: str | None = None,
        attributes: Any = None,
    ) -> RaisingMeter:
        return RaisingMeter(name, self.on_create)


class SpanExporterOf(SpanExporter):
    """A span exporter that raises (``slow`` 0) or takes ``slow`` seconds an export."""

    def __init__(self, slow: float) -> None:
        self.slow = slow

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        _called("span export")
        if not self.slow:
            raise RuntimeError("the span exporter broke")
        time.sleep(self.slow)
        return SpanExportResult.SUCCESS


class RaisingMetricExporter(MetricExporter):
    """A metric exporter that raises."""

    def export(
        self, metrics_data: MetricsData, timeout_millis: float = 10_000, **kwargs: Any
    ) -> MetricExportResult:
        _called("metric export")
        raise RuntimeError("the metric exporter broke")

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        return True

    def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
        return None


def install(fault: str) -> TracerProvider:
    """Set the tracer and meter providers of this process with ``fault``; return the tracer's."""
    if fault not in FAULTS:
        raise ValueError(f"no such fault: {fault!r}, one of {FAULTS}")
    tracers = TracerProvider()
    if fault in ("start", "end"):
        tracers.add_span_processor(RaisingProcessor(fault))
    elif fault == "exporter":
        tracers.add_span_processor(SimpleSpanProcessor(SpanExporterOf(0)))
    elif fault == "slow":
        tracers.add_span_processor(BatchSpanProcessor(SpanExporterOf(SLOW_EXPORT)))
    elif fault == "slow-simple":
        tracers.add_span_processor(SimpleSpanProcessor(SpanExporterOf(SLOW_EXPORT)))
    trace.set_tracer_provider(tracers)
    if fault in ("meter", "instruments"):
        metrics.set_meter_provider(RaisingMeterProvider(on_create=fault == "instruments"))
    elif fault == "exporter":
        reader = PeriodicExportingMetricReader(RaisingMetricExporter(), export_interval_millis=50)
        metrics.set_meter_provider(SdkMeterProvider(metric_readers=[reader]))
    return tracers
