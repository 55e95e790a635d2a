"""``ServiceMetrics``: what ``jqueue serve`` counts, in Prometheus' text format at ``GET /metrics``.

Its counters and histograms are also recorded through OpenTelemetry when the API is installed
(ADR 0020): each is a ``Twin``, ``jqueue_request_seconds`` also ``jqueue.request.duration``,
``jqueue_jobs`` also ``jqueue.jobs``.
"""

from __future__ import annotations

import collections
import functools
import itertools
from collections.abc import Iterable, Iterator, Sequence
from typing import Protocol

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from jqueue.adapters.service.server.tenure import BrokerTenure, Role
from jqueue.adapters.web.queue_names import queue_of
from jqueue.core import telemetry
from jqueue.core.broker import BrokerQueue
from jqueue.core.loop.store import LATENCY_BUCKETS, CommitStats
from jqueue.domain.stats import COUNTS

CONFLICT_BUCKETS = (0, 1, 2, 4, 8, 16)


QUEUE_ENTRYPOINT = ("queue", "entrypoint")


class Routed(Protocol):
    """A job, in any form: what has an entrypoint."""

    @property
    def entrypoint(self) -> str:
        """The handler it goes to."""
        ...


class ServiceMetrics:
    """The service's counters, histograms and per-queue gauges, in a registry of their own."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        registry = self.registry
        counter = functools.partial(twin_counter, registry)
        gauge = functools.partial(Gauge, registry=registry)
        histogram = functools.partial(twin_histogram, registry)
        self.requests = counter(
            "jqueue_requests", "Requests answered, by queue, route and status.", ["queue", "route", "status"]
        )
        self.request_seconds = histogram(
            "jqueue_request_seconds",
            "Time to answer a request (its commit included), by route.",
            ["route"],
            (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
        )
        self.batch_size = histogram(
            "jqueue_request_jobs",
            "Jobs in one request, by route.",
            ["route"],
            (1, 2, 4, 8, 16, 32, 64, 128, 256, 1024, 10_000),
        )
        self.jobs_done = counter(
            "jqueue_jobs",
            "Jobs enqueued and claimed, by queue and entrypoint.",
            ["queue", "entrypoint", "action"],
        )
        self.settled = counter(
            "jqueue_settled", "Jobs acked, nacked, heartbeaten and released, by queue.", ["queue", "action"]
        )
        self.empty_polls = counter(
            "jqueue_empty_polls", "Dequeue requests that claimed nothing, by queue.", ["queue"]
        )
        self.settle_errors = counter(
            "jqueue_settle_errors",
            "Jobs of a settling request that failed, by queue, route and code.",
            ["queue", "route", "code"],
        )
        self.queued_calls = counter(
            "jqueue_queued_calls",
            "Calls of the queued-compatible routes by queue, endpoint and outcome (messages for"
            " successful pushes and deletes, requests otherwise).",
            ["queue", "endpoint", "outcome"],
        )
        self.broker_epoch = gauge(
            "jqueue_broker_epoch", "The epoch of the root's broker record as this process last saw it."
        )
        self.broker_role = gauge(
            "jqueue_broker_role",
            "1 for this process's role for its root (active: it serves; standby: it waits).",
            ["role"],
        )
        self.commits = CommitCollector()
        registry.register(self.commits)
        self.backlog = gauge(
            "jqueue_backlog",
            "Jobs in the queue by entrypoint and status, at the last scrape.",
            [*QUEUE_ENTRYPOINT, "status"],
        )

    def jobs(self, queue: str, action: str, jobs: Iterable[Routed]) -> None:
        r"""Count jobs an action went through (``Job``\ s, or their wire form: anything with an
        ``entrypoint``)."""
        for entrypoint, count in collections.Counter(job.entrypoint for job in jobs).items():
            self.jobs_done.labels(queue, entrypoint, action).inc(count)

    async def render(self, queues: dict[str, BrokerQueue], tenure: BrokerTenure) -> bytes:
        """The text exposition, with the broker gauges, the commits and the backlog of every
        open queue read now (the shards of a queue that this process serves added up)."""
        commits: dict[str, CommitStats] = {}
        backlog: collections.Counter[tuple[str, str, str]] = collections.Counter()
        for name, queue in queues.items():
            commits.setdefault(queue_of(name), CommitStats()).add(await queue.insight.commit_stats())
            for entrypoint, counts in (await queue.stats()).entrypoints.items():
                for status in COUNTS:
                    backlog[queue_of(name), entrypoint, status] += getattr(counts, status)
        self.commits.queues = commits
        self.broker_epoch.set(tenure.epoch)
        current = Role.ACTIVE if tenure.serving() else Role.STANDBY
        for role in Role:
            self.broker_role.labels(role.value).set(1 if role is current else 0)
        self.backlog.clear()
        for labels, count in backlog.items():
            self.backlog.labels(*labels).set(count)
        return generate_latest(self.registry)


class CommitCollector(Collector):
    """The commits of each open queue, from its ``CommitStats``: their latency, the conflicts
    each lost, and the jobs they killed or whose lease they found expired."""

    def __init__(self) -> None:
        self.queues: dict[str, CommitStats] = {}

    def collect(self) -> Iterator[Metric]:
        """The families, as of the last ``ServiceMetrics.render``."""
        latency = HistogramMetricFamily(
            "jqueue_commit_seconds",
            "Time from a call taking its store's lock to its commit landing, by queue.",
            labels=["queue"],
        )
        conflicts = HistogramMetricFamily(
            "jqueue_commit_conflicts", "Races a commit lost before it landed, by queue.", labels=["queue"]
        )
        lost = CounterMetricFamily("jqueue_conflicts", "Races lost by commits, by queue.", labels=["queue"])
        dead = CounterMetricFamily(
            "jqueue_dead_jobs", "Jobs moved to the dead letters, by queue.", labels=["queue"]
        )
        expired = CounterMetricFamily(
            "jqueue_expired_leases", "Claims whose lease ran out, by queue.", labels=["queue"]
        )
        for name, stats in self.queues.items():
            bounds = [str(bound) for bound in LATENCY_BUCKETS] + ["+Inf"]
            latency.add_metric(
                [name], list(zip(bounds, itertools.accumulate(stats.buckets), strict=True)), stats.seconds
            )
            counts = sorted(stats.conflict_counts.items())
            lost_buckets = [(str(n), sum(c for k, c in counts if k <= n)) for n in CONFLICT_BUCKETS]
            lost_buckets.append(("+Inf", stats.commits))
            conflicts.add_metric([name], lost_buckets, sum(k * c for k, c in counts))
            lost.add_metric([name], stats.conflicts)
            dead.add_metric([name], stats.died)
            expired.add_metric([name], stats.expired_leases)
        yield from (latency, conflicts, lost, dead, expired)


def otel_name(name: str) -> str:
    """OpenTelemetry's name of a Prometheus metric: dots for underscores, seconds as a duration."""
    stem = name.removesuffix("_seconds")
    return stem.replace("_", ".") + (".duration" if stem != name else "")


class Twin:
    """One measure in both systems; ``labels(...)`` answers ``inc`` and ``observe`` as Prometheus'
    metrics do. A ``queue`` label names the queue a shard belongs to: its shards add up."""

    def __init__(
        self, metric: Counter | Histogram, otel: telemetry.Instrument, label_names: Sequence[str]
    ) -> None:
        self.metric = metric
        self._otel = otel
        self._label_names = tuple(label_names)

    def labels(self, *values: str) -> _Labelled:
        """The measure for these label values."""
        named = zip(self._label_names, values, strict=True)
        return _Labelled(
            self, tuple(queue_of(value) if label == "queue" else value for label, value in named)
        )


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


def twin_counter(registry: CollectorRegistry, name: str, description: str, labels: Sequence[str]) -> Twin:
    """A counter, in ``registry`` and through OpenTelemetry's meter."""
    otel = telemetry.Instrument("counter", otel_name(name), description=description)
    return Twin(Counter(name, description, labels, registry=registry), otel, labels)


def twin_histogram(
    registry: CollectorRegistry, name: str, description: str, labels: Sequence[str], buckets: Sequence[float]
) -> Twin:
    """A histogram, in ``registry`` and through OpenTelemetry's meter (seconds for a ``_seconds``
    name)."""
    unit = "s" if name.endswith("_seconds") else ""
    otel = telemetry.Instrument("histogram", otel_name(name), unit, description)
    return Twin(Histogram(name, description, labels, registry=registry, buckets=buckets), otel, labels)
