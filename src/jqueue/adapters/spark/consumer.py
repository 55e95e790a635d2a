"""``spark.readStream.format("jqueue").option("mode", "consume")``: a streaming query as the queue's consumer.

The driver claims up to ``maxJobsPerTrigger`` jobs (default 1,000; of ``entrypoint`` if
given) for each micro-batch under leases of ``leaseSeconds`` (default 600) that it keeps
alive with heartbeats, and writes them, payloads included, to a manifest beside the queue,
``stream/<consumer>/<batch>``, before it hands the batch to Spark: the offset is the batch
number (``{"batch": N}``). Executors read their share of the manifest. When Spark commits
the batch (its sink has it), the driver acks its jobs and deletes the manifest. A query
that dies and restarts from its checkpoint is given the manifests of its unfinished
batches again, so the sink sees each job in exactly one batch; a job whose lease ran out
meanwhile (the query was down longer than ``leaseSeconds``) may also have gone to another
consumer, and its late ack is logged and skipped. ``consumerId`` names the consumer: keep
it across restarts, and give each query its own.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import threading
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, TypeVar

from pydantic import TypeAdapter
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from jqueue.adapters.service.client.remote_queue import RemoteQueue
from jqueue.adapters.spark.reader import PARTITIONS, job_rows, job_schema
from jqueue.adapters.spark.shards import one_log
from jqueue.adapters.spark.writer import keyed_storage
from jqueue.core.broker import BrokerQueue
from jqueue.domain.errors import CASConflictError, CorruptStateError, JQueueError
from jqueue.domain.models import Job
from jqueue.domain.spec import LONGEST_SPAN
from jqueue.domain.values import Bounds
from jqueue.ports.storage import KeyedStoragePort
from jqueue.sync import SyncQueue, open_queue

T = TypeVar("T")

CONSUMED_COLUMNS = (
    "id",
    "entrypoint",
    "priority",
    "attempts",
    "created_at",
    "dedup_key",
    "payload",
    "tenant",
    "parent_results",
)
"""A claimed job handed to the query: the ``Job`` attributes a handler needs."""
CONSUMED_SCHEMA = job_schema(CONSUMED_COLUMNS)
logger = logging.getLogger("jqueue")
DEFAULT_PER_TRIGGER = 1000
PER_TRIGGER = Bounds(ge=1)
"""The bounds of the ``maxJobsPerTrigger`` option: the most jobs one micro-batch claims."""
LEASE_SECONDS = Bounds(gt=0, le=LONGEST_SPAN.total_seconds())
"""The bounds of the ``leaseSeconds`` option: a visibility timeout (``POSITIVE_SPAN``) in seconds."""
MANIFEST_PREFIX = "stream/"
_JOBS = TypeAdapter(list[Job])


@dataclass
class Share(InputPartition):
    """Every ``count``-th job of batch ``batch``'s manifest, from the ``index``-th."""

    batch: int
    index: int
    count: int


def _manifest_folder(consumer: str) -> str:
    return f"{MANIFEST_PREFIX}{hashlib.sha256(consumer.encode()).hexdigest()[:32]}/"


_row = job_rows(CONSUMED_COLUMNS)


class ConsumerReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Claims jobs for each micro-batch and acks them when Spark commits it; see the module docstring."""

    def __init__(self, options: Mapping[str, str]) -> None:
        self.url = options.get("path") or ""
        if not self.url:
            raise ValueError("give the queue's storage URL: .load(url)")
        consumer = options.get("consumerId") or ""
        if not consumer:
            raise ValueError("name the consumer: .option('consumerId', ...), the same across restarts")
        self.folder = _manifest_folder(consumer)
        entrypoints = options.get("entrypoint")
        self.entrypoints = None if not entrypoints else [e.strip() for e in entrypoints.split(",")]
        self.per_trigger = int(options.get("maxJobsPerTrigger", str(DEFAULT_PER_TRIGGER)))
        self.lease_seconds = float(options.get("leaseSeconds", "600"))
        self.partition_count = int(options.get("partitions", "4"))
        PER_TRIGGER.check("maxJobsPerTrigger", self.per_trigger)
        LEASE_SECONDS.check("leaseSeconds", self.lease_seconds)
        PARTITIONS.check("partitions", self.partition_count)
        self.url = one_log(self.url, "a consumer", options.get("shard"))
        self._queue: SyncQueue[BrokerQueue] | None = None
        self._storage: KeyedStoragePort | None = None
        self._in_flight: dict[int, list[Job]] = {}
        self._available_now = False
        self._lock = threading.Lock()
        self._stopped = threading.Event()

    def __getstate__(self) -> dict[str, Any]:
        """What executors get: the settings, not the driver's open queue."""
        state = self.__dict__.copy()
        for name in ("_queue", "_storage", "_in_flight", "_lock", "_stopped"):
            state.pop(name)
        return state

    # --- on the driver -----------------------------------------------------------------

    def _open(self) -> SyncQueue[BrokerQueue]:
        if self._queue is None:
            self._queue = open_queue(self.url, visibility_timeout=timedelta(seconds=self.lease_seconds))
            self._storage = keyed_storage(self.url)
            threading.Thread(target=self._beat, name="jqueue-consumer-beats", daemon=True).start()
        return self._queue

    def _beat(self) -> None:
        """Heartbeat the jobs of the batches Spark has not committed, every third of the lease."""
        while not self._stopped.wait(self.lease_seconds / 3):
            with self._lock:
                jobs = [job for batch in self._in_flight.values() for job in batch]
            if jobs and self._queue is not None:
                self._settle("heartbeat", jobs)

    def _settle(self, verb: str, jobs: list[Job]) -> None:
        """Ack or heartbeat each job (one group commit); a lost lease is logged, not raised."""

        async def each(queue: BrokerQueue | RemoteQueue) -> list[BaseException | None]:
            calls = [getattr(queue, verb)(job) for job in jobs]
            return list(await asyncio.gather(*calls, return_exceptions=True))

        for job, outcome in zip(jobs, self._open().call(each), strict=True):
            if isinstance(outcome, JQueueError):
                logger.warning("%s of job %s failed: %s", verb, job.id, outcome)
            elif isinstance(outcome, BaseException):
                raise outcome

    def _manifest_name(self, batch: int) -> str:
        return f"{self.folder}{batch:020d}"

    def _in_storage(self, call: Callable[[KeyedStoragePort], Awaitable[T]]) -> T:
        """Run a call of the storage in the queue's loop."""
        queue = self._open()
        assert self._storage is not None
        storage = self._storage
        return queue.call(lambda _: call(storage))

    def _manifests(self) -> list[int]:
        names = self._in_storage(lambda storage: storage.list_names(self.folder))
        return sorted(int(name.removeprefix(self.folder)) for name in names)

    def _load(self, batch: int) -> list[Job]:
        name = self._manifest_name(batch)
        data = self._in_storage(lambda storage: storage.get(name))
        if data is None:
            raise CorruptStateError(f"{self.url} {name}", "the manifest of an uncommitted batch is missing")
        return _JOBS.validate_json(data)

    def _track(self, batch: int) -> list[Job]:
        with self._lock:
            jobs = self._in_flight.get(batch)
        if jobs is None:
            jobs = self._load(batch)
            with self._lock:
                self._in_flight[batch] = jobs
        return jobs

    def initialOffset(self) -> dict[str, int]:  # noqa: N802
        """Before batch 1 (Spark may ask more than once, so it never changes)."""
        return {"batch": 0}

    def getDefaultReadLimit(self) -> ReadLimit:  # noqa: N802
        """``maxJobsPerTrigger`` jobs a batch."""
        return ReadMaxRows(self.per_trigger)

    def prepareForTriggerAvailableNow(self) -> None:  # noqa: N802
        """End the query once a batch finds nothing to claim."""
        self._available_now = True

    def latestOffset(self, start: dict[str, int], limit: ReadLimit) -> dict[str, int]:  # noqa: N802
        """Finish the batches up to ``start`` (Spark plans a batch once the one before it is
        committed), claim the next batch's jobs and write its manifest; ``start`` if nothing
        is claimable."""
        self.commit(start)
        batch = int(start["batch"]) + 1
        if batch in self._manifests():  # claimed before the driver died, not yet given to Spark
            self._track(batch)
            return {"batch": batch}
        size = limit.max_rows if isinstance(limit, ReadMaxRows) else self.per_trigger
        entrypoints = self.entrypoints
        jobs = self._open().call(lambda queue: queue.dequeue(entrypoints, batch_size=size))
        if not jobs:
            return start
        name = self._manifest_name(batch)
        try:
            self._in_storage(lambda storage: storage.create(name, _JOBS.dump_json(jobs)))
        except CASConflictError:
            self._settle("release", jobs)
            raise CASConflictError(f"{self.url} {name}: another query consumes as this consumerId") from None
        with self._lock:
            self._in_flight[batch] = jobs
        return {"batch": batch}

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> list[Share]:
        """The shares of the batches after ``start`` up to ``end`` (kept alive until committed)."""
        shares = []
        for batch in range(int(start["batch"]) + 1, int(end["batch"]) + 1):
            self._track(batch)
            shares += [Share(batch, index, self.partition_count) for index in range(self.partition_count)]
        return shares

    def commit(self, end: dict[str, int]) -> None:
        """Ack the jobs of every batch up to ``end`` and delete their manifests (also called when
        the next batch is planned: Spark commits a query's last batch only in its next run)."""
        for batch in [b for b in self._manifests() if b <= int(end["batch"])]:
            self._settle("ack", self._track(batch))
            self._delete_manifest(batch)

    def _delete_manifest(self, batch: int) -> None:
        name = self._manifest_name(batch)
        self._in_storage(lambda storage: storage.delete(name))
        with self._lock:
            self._in_flight.pop(batch, None)

    def stop(self) -> None:
        """Stop the heartbeats and close the queue (uncommitted batches keep their leases)."""
        self._stopped.set()
        if self._queue is not None:
            self._queue.close()
            self._queue = None

    # --- on the executors --------------------------------------------------------------

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        """Read one share of a batch's manifest."""
        if not isinstance(partition, Share):
            raise TypeError(f"not a part of this read: {partition!r}")
        name = self._manifest_name(partition.batch)
        data = asyncio.run(keyed_storage(self.url).get(name))
        if data is None:
            raise CorruptStateError(f"{self.url} {name}", "the manifest of an uncommitted batch is missing")
        jobs = _JOBS.validate_json(data)[partition.index :: partition.count]
        return iter([_row(job) for job in jobs])
