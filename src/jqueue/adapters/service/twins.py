"""A Prometheus counter or histogram of ``jqueue serve`` and, when the OpenTelemetry API is
installed, its OpenTelemetry twin, recorded together (ADR 0020): ``jqueue_request_seconds`` is
also ``jqueue.request.duration``, ``jqueue_jobs`` also ``jqueue.jobs``."""

from __future__ import annotations

from collections.abc import Sequence

from prometheus_client import CollectorRegistry, Counter, Histogram

from jqueue.core import telemetry


def otel_name(name: str) -> str:
    """OpenTelemetry's name of a Prometheus metric: dots for underscores, seconds as a duration."""
    stem = name.removesuffix("_seconds")
    return stem.replace("_", ".") + (".duration" if stem != name else "")


class Twin:
    """One measure in both systems; ``labels(...)`` answers ``inc`` and ``observe`` as Prometheus'
    metrics do."""

    def __init__(
        self, metric: Counter | Histogram, otel: telemetry.Instrument, label_names: Sequence[str]
    ) -> None:
        self.metric = metric
        self._otel = otel
        self._label_names = tuple(label_names)

    def labels(self, *values: str) -> _Labelled:
        """The measure for these label values."""
        return _Labelled(self, values)


class _Labelled:
    def __init__(self, twin: Twin, values: tuple[str, ...]) -> None:
        self._twin, self._values = twin, values

    def _attributes(self) -> dict[str, str]:
        return dict(zip(self._twin._label_names, self._values, strict=True))

    def inc(self, amount: float = 1) -> None:
        self._twin.metric.labels(*self._values).inc(amount)  # type: ignore[union-attr]
        if telemetry.measuring():
            self._twin._otel.add(amount, self._attributes())

    def observe(self, value: float) -> None:
        self._twin.metric.labels(*self._values).observe(value)  # type: ignore[union-attr]
        if telemetry.measuring():
            self._twin._otel.record(value, self._attributes())


def counter(registry: CollectorRegistry, name: str, description: str, labels: Sequence[str]) -> Twin:
    """A counter, in ``registry`` and through OpenTelemetry's meter."""
    otel = telemetry.Instrument("counter", otel_name(name), description=description)
    return Twin(Counter(name, description, labels, registry=registry), otel, labels)


def histogram(
    registry: CollectorRegistry, name: str, description: str, labels: Sequence[str], buckets: Sequence[float]
) -> Twin:
    """A histogram, in ``registry`` and through OpenTelemetry's meter (seconds for a ``_seconds``
    name)."""
    unit = "s" if name.endswith("_seconds") else ""
    otel = telemetry.Instrument("histogram", otel_name(name), unit, description)
    return Twin(Histogram(name, description, labels, registry=registry, buckets=buckets), otel, labels)
