"""``EnqueueCalls``: ``enqueue`` and ``enqueue_many``, the same for every queue, local or remote."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable
from dataclasses import replace
from typing import Unpack, overload

from jqueue.core import telemetry
from jqueue.domain.models import Job
from jqueue.domain.spec import EnqueueOptions, JobSpec

_OPTIONS = EnqueueOptions.__optional_keys__ | EnqueueOptions.__required_keys__


class EnqueueCalls(ABC):
    """The documented ways to add jobs, over the one a queue implements (``_enqueue_specs``)."""

    async def enqueue(
        self,
        entrypoint: str,
        payload: bytes,
        priority: int = 0,
        **options: Unpack[EnqueueOptions],
    ) -> Job:
        """Add a job; returns it once it is durably committed.

        The options (``delay``, ``not_before``, ``dedup_key``, ``max_attempts``, ``ttl``,
        ``id``: ``EnqueueOptions``) are those of ``JobSpec``, by keyword. With a
        ``dedup_key`` that a job in the queue holds, that job is returned and nothing is
        added; for a key acked within the history's retention, the acked job is returned
        (status ``ACKED``, empty payload).

        Raises
        ------
        PayloadTooLargeError
            If ``payload`` is over ``max_payload_bytes``.
        QueuePausedError
            If enqueues of ``entrypoint`` are paused.
        """
        if not options.keys() <= _OPTIONS:
            raise TypeError(
                f"enqueue() got an unexpected keyword argument {min(options.keys() - _OPTIONS)!r}"
            )
        spec = JobSpec(entrypoint, payload, priority, **options)
        return (await self.enqueue_many([spec]))[0]

    @overload
    async def enqueue_many(self, jobs: Iterable[JobSpec], /) -> list[Job]: ...

    @overload
    async def enqueue_many(
        self, entrypoint: str, payloads: Iterable[bytes], /, priority: int = 0
    ) -> list[Job]: ...

    async def enqueue_many(
        self, jobs: str | Iterable[JobSpec], payloads: Iterable[bytes] = (), /, priority: int = 0
    ) -> list[Job]:
        """Add many jobs in one commit, all or none; returns them in order.

        Either ``enqueue_many(entrypoint, payloads, priority=0)``, one job per payload,
        or ``enqueue_many(specs)`` with a ``JobSpec`` per job. Dedup keys work as in
        ``enqueue``, also between jobs of the same call.

        Raises
        ------
        PayloadTooLargeError
            If a payload is over ``max_payload_bytes``; then none is added.
        QueuePausedError
            If enqueues of one of the entrypoints are paused; then none is added.
        """
        if isinstance(jobs, str):
            jobs = [JobSpec(jobs, payload, priority) for payload in payloads]
        specs = list(jobs)
        with telemetry.enqueuing(specs) as traceparent:
            if traceparent is not None:  # the jobs run in this trace (unless one carries its own)
                specs = [replace(spec, traceparent=spec.traceparent or traceparent) for spec in specs]
            return await self._enqueue_specs(specs)

    @abstractmethod
    async def _enqueue_specs(self, specs: list[JobSpec]) -> list[Job]:
        """Add the jobs of ``specs`` in one commit, all or none; return them in order."""
