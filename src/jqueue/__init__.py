"""jqueue: a broker-less asyncio job queue on object storage.

A queue lives on S3, GCS, a local file or memory and is committed with
compare-and-swap: by default as a log of immutable entries with checkpoints (a flat
cost per operation at any depth), or as the documented single object that holds the
whole state. ``BrokerQueue`` folds concurrent calls into one commit;
``DirectQueue`` commits each call on its own. ``S3Storage`` and ``GCSStorage`` are
imported on first use, so their extras are needed only when used.
"""

from __future__ import annotations

import typing as _typing

from jqueue.adapters.storage.filesystem import LocalFileSystemStorage
from jqueue.adapters.storage.memory import InMemoryStorage
from jqueue.adapters.storage.url import storage_from_url
from jqueue.core.broker import BrokerQueue
from jqueue.core.commits import Layout
from jqueue.core.direct import DirectQueue
from jqueue.core.group_commit import GroupCommitLoop
from jqueue.core.log.store import LogSettings
from jqueue.core.runtime.context import JobContext, current_job
from jqueue.core.runtime.heartbeat import HeartbeatManager
from jqueue.core.runtime.outcomes import JobResult, Outcome, WorkerStats
from jqueue.core.runtime.queue_set import QueueSet
from jqueue.core.runtime.steering import Fail, HandlerFailure, Retry
from jqueue.core.runtime.tasks import Task
from jqueue.core.runtime.worker import Worker
from jqueue.core.runtime.workflows import Chain, Group, Signature, Workflow, chain, group
from jqueue.core.sharded import ShardedQueue
from jqueue.domain.errors import (
    CASConflictError,
    CommitUnknownError,
    CorruptStateError,
    InvalidURLError,
    JobCancelledError,
    JobFailedError,
    JobNotFoundError,
    JQueueError,
    LeaseLostError,
    PayloadTooLargeError,
    QueueClosedError,
    QueuePausedError,
    ServiceError,
    StorageError,
    is_transient,
)
from jqueue.domain.models import Job, JobStatus, QueueState
from jqueue.domain.policy import Backoff, QueuePolicy
from jqueue.domain.records import HistoryRecord
from jqueue.domain.spec import JobSpec
from jqueue.domain.stats import EntrypointStats, QueueStats
from jqueue.ports.queue import Queue
from jqueue.ports.storage import KeyedStoragePort, ObjectStoragePort
from jqueue.version import __version__

if _typing.TYPE_CHECKING:
    from jqueue.adapters.service.client.connection import connect as connect
    from jqueue.adapters.service.client.connection import sharded as sharded
    from jqueue.adapters.service.client.remote_queue import RemoteQueue as RemoteQueue
    from jqueue.adapters.storage.gcs import GCSStorage as GCSStorage
    from jqueue.adapters.storage.s3 import S3Storage as S3Storage
    from jqueue.adapters.worker_metrics import WorkerMetrics as WorkerMetrics


_LAZY = {
    "S3Storage": "jqueue.adapters.storage.s3",
    "GCSStorage": "jqueue.adapters.storage.gcs",
    "RemoteQueue": "jqueue.adapters.service.client.remote_queue",
    "connect": "jqueue.adapters.service.client.connection",
    "sharded": "jqueue.adapters.service.client.connection",
    "WorkerMetrics": "jqueue.adapters.worker_metrics",
}


def __getattr__(name: str) -> _typing.Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'jqueue' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*__all__, *_LAZY])


# S3Storage, GCSStorage and the HTTP client are left out, so that ``from jqueue import *`` needs no extra.
__all__ = [
    "Backoff",
    "BrokerQueue",
    "CASConflictError",
    "Chain",
    "CommitUnknownError",
    "CorruptStateError",
    "DirectQueue",
    "EntrypointStats",
    "Fail",
    "Group",
    "GroupCommitLoop",
    "HandlerFailure",
    "HeartbeatManager",
    "HistoryRecord",
    "InMemoryStorage",
    "InvalidURLError",
    "JQueueError",
    "Job",
    "JobCancelledError",
    "JobContext",
    "JobFailedError",
    "JobNotFoundError",
    "JobResult",
    "JobSpec",
    "JobStatus",
    "KeyedStoragePort",
    "Layout",
    "LeaseLostError",
    "LocalFileSystemStorage",
    "LogSettings",
    "ObjectStoragePort",
    "Outcome",
    "PayloadTooLargeError",
    "Queue",
    "QueueClosedError",
    "QueuePausedError",
    "QueuePolicy",
    "QueueSet",
    "QueueState",
    "QueueStats",
    "Retry",
    "ServiceError",
    "ShardedQueue",
    "Signature",
    "StorageError",
    "Task",
    "Worker",
    "WorkerStats",
    "Workflow",
    "__version__",
    "chain",
    "current_job",
    "group",
    "is_transient",
    "storage_from_url",
]
