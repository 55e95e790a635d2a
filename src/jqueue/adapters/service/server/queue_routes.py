"""The native API's queue routes: enqueue, claim, settle and wait, each a call of the served
``BrokerQueue`` with its arguments and answer in their wire forms (``wire.bodies``)."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Awaitable, Sequence
from datetime import timedelta
from typing import TypeVar

from starlette.requests import Request
from starlette.routing import Route

from jqueue.adapters.service.server.endpoints import (
    AbsentCall,
    MakeEndpoint,
    QueueCall,
    error_of,
    read_body,
    verb_of,
)
from jqueue.adapters.service.server.host import QueueHost
from jqueue.adapters.service.server.metrics import ServiceMetrics
from jqueue.adapters.service.wire import bodies as wire
from jqueue.core.broker import BrokerQueue
from jqueue.domain.errors import JobCancelledError, JobFailedError
from jqueue.domain.models import Job, JobStatus, fencing_job

T = TypeVar("T")


def fenced(ref: wire.JobRef) -> Job | str:
    """The argument that fences a call with the ref's lease (the id alone when it has none): the
    queue reads only the id and the lease of a ``Job`` it is given to fence a call."""
    if ref.lease is None:
        return ref.id
    return fencing_job(ref.id, ref.lease)


class QueueRoutes:
    """The queue routes (``POST /v1/queues/{queue}/VERB``) over the queues of ``host``, each made
    an endpoint by ``endpoint`` (``Service.endpoint``: authorized, served only by the broker,
    answered after their commit is durable), counted in ``metrics``; request bodies over
    ``max_body_bytes`` are refused."""

    def __init__(
        self, endpoint: MakeEndpoint, host: QueueHost, metrics: ServiceMetrics, max_body_bytes: int
    ) -> None:
        self._endpoint = endpoint
        self._host = host
        self._metrics = metrics
        self._max_body_bytes = max_body_bytes

    def routes(self) -> list[Route]:
        """The routes, for a Starlette application."""
        calls: dict[str, QueueCall] = {
            "dequeue": self._dequeue,
            wire.ACK_AND_DEQUEUE: self._ack_and_dequeue,
            "peek": self._peek,
            "changes": self._changes,
            "ack": self._settle,
            "nack": self._settle,
            "heartbeat": self._settle,
            "release": self._settle,
            "cancel": self._settle,
            "result": self._result,
        }
        endpoint = self._endpoint
        routes = [Route("/v1/queues/{queue}/enqueue", endpoint(self._enqueue, create=True), methods=["POST"])]
        for verb, call in calls.items():
            absent = self._absent.get(verb)
            routes.append(
                Route(f"/v1/queues/{{queue}}/{verb}", endpoint(call, absent=absent), methods=["POST"])
            )
        return routes

    @property
    def _absent(self) -> dict[str, AbsentCall]:
        """What the calls that only look for jobs answer for a queue that does not exist yet: what
        they answer for an empty queue, as a queue committed to directly does (a worker
        started before its queue waits for it)."""
        return {"dequeue": self._nothing_claimed, "peek": self._nothing_claimed, "changes": self._no_change}

    async def _body(self, request: Request, kind: type[T]) -> T:
        return await read_body(request, kind, self._max_body_bytes)

    async def _nothing_claimed(self, request: Request) -> wire.JobsResponse:
        kind = wire.DequeueRequest if verb_of(request) == "dequeue" else wire.PeekRequest
        await self._body(request, kind)
        return wire.JobsResponse([])

    async def _no_change(self, request: Request) -> wire.ChangesResponse:
        body = await self._body(request, wire.ChangesRequest)
        name = request.path_params["queue"]
        deadline = time.monotonic() + body.wait_seconds
        while time.monotonic() < deadline and not await self._host.exists(name):
            await asyncio.sleep(min(1.0, max(0.0, deadline - time.monotonic())))
        return wire.ChangesResponse(body.seen)

    async def _enqueue(self, queue: BrokerQueue, request: Request) -> wire.JobsResponse:
        body = await self._body(request, wire.EnqueueRequest)
        jobs = await queue.enqueue_as(wire.WIRE_FORM, [wire.spec_of(job) for job in body.jobs])
        self._count(request, "enqueued", jobs)
        return wire.JobsResponse(jobs)

    async def _dequeue(self, queue: BrokerQueue, request: Request) -> wire.JobsResponse:
        body = await self._body(request, wire.DequeueRequest)
        jobs = await queue.dequeue_as(
            wire.WIRE_FORM,
            body.entrypoints,
            batch_size=body.batch_size,
            visibility_timeout=_span(body.visibility_timeout_seconds),
        )
        self._claimed(request, jobs)
        return wire.JobsResponse(jobs)

    async def _ack_and_dequeue(self, queue: BrokerQueue, request: Request) -> wire.AckAndDequeueResponse:
        body = await self._body(request, wire.AckAndDequeueRequest)
        outcomes, jobs = await queue.ack_and_dequeue_as(
            wire.WIRE_FORM,
            [(fenced(ref), ref.result) for ref in body.acks],
            body.entrypoints,
            batch_size=body.batch_size,
            visibility_timeout=_span(body.visibility_timeout_seconds),
        )
        self._claimed(request, jobs)
        return wire.AckAndDequeueResponse(jobs, self._settled(request, "ack", outcomes))

    async def _peek(self, queue: BrokerQueue, request: Request) -> wire.JobsResponse:
        body = await self._body(request, wire.PeekRequest)
        return wire.JobsResponse(
            [wire.api_job(job) for job in await queue.peek(body.entrypoints, body.limit)]
        )

    async def _changes(self, queue: BrokerQueue, request: Request) -> wire.ChangesResponse:
        body = await self._body(request, wire.ChangesRequest)
        return wire.ChangesResponse(await queue.changes.wait(body.seen, body.wait_seconds))

    async def _settle(self, queue: BrokerQueue, request: Request) -> wire.ResultsResponse:
        body = await self._body(request, wire.SettleRequest)
        verb = verb_of(request)
        delay = _span(body.delay_seconds)

        def call(ref: wire.JobRef) -> Awaitable[object]:
            target = fenced(ref)
            if verb == "nack":
                return queue.nack(target, delay, body.error, max_attempts=body.max_attempts, dead=body.dead)
            if verb == "heartbeat":
                return queue.heartbeat(target, progress=ref.progress, note=ref.note)
            return queue.release(target) if verb == "release" else queue.cancel(target)

        if verb == "ack":  # the hot path: one operation for the request's acks
            outcomes: Sequence[object] = await queue.ack_each([(fenced(j), j.result) for j in body.jobs])
        else:
            outcomes = await asyncio.gather(*(call(ref) for ref in body.jobs), return_exceptions=True)
        return wire.ResultsResponse(self._settled(request, verb, outcomes))

    async def _result(self, queue: BrokerQueue, request: Request) -> wire.ResultResponse:
        body = await self._body(request, wire.ResultRequest)
        try:
            found = await queue.result(body.id, timeout=timedelta(seconds=body.wait_seconds))
        except TimeoutError:
            return wire.ResultResponse(wire.RUNNING)
        except JobFailedError as exc:
            return wire.ResultResponse(JobStatus.DEAD, error=exc.error, reason=exc.reason)
        except JobCancelledError as exc:
            return wire.ResultResponse(JobStatus.CANCELLED, error=exc.reason)
        if body.lease is not None:
            record = await queue.finished(body.id)
            if record is not None and record.lease not in (None, body.lease):
                return wire.ResultResponse(wire.ACKED_BY_ANOTHER_CLAIM)
        return wire.ResultResponse(JobStatus.ACKED, found)

    def _claimed(self, request: Request, jobs: Sequence[wire.ApiJob]) -> None:
        self._count(request, "claimed", jobs)
        if not jobs:
            self._metrics.empty_polls.labels(request.path_params["queue"]).inc()

    def _count(self, request: Request, action: str, jobs: Sequence[wire.ApiJob]) -> None:
        self._metrics.batch_size.labels(verb_of(request)).observe(len(jobs))
        self._metrics.jobs(request.path_params["queue"], action, jobs)

    def _settled(self, request: Request, verb: str, outcomes: Sequence[object]) -> list[wire.ItemResult]:
        """Each outcome's wire form, counted in the settle metrics as ``verb``."""
        results, name, metrics = _results(outcomes), request.path_params["queue"], self._metrics
        metrics.batch_size.labels(verb).observe(len(results))
        errors = Counter(result.error.code for result in results if result.error is not None)
        if settled := len(results) - errors.total():
            metrics.settled.labels(name, verb).inc(settled)
        for code, count in errors.items():
            metrics.settle_errors.labels(name, verb, code).inc(count)
        return results


def _span(seconds: float | None) -> timedelta | None:
    return None if seconds is None else timedelta(seconds=seconds)


def _results(outcomes: Sequence[object]) -> list[wire.ItemResult]:
    results = []
    for outcome in outcomes:
        if isinstance(outcome, BaseException):
            results.append(wire.ItemResult(error_of(outcome)[1]))
        else:
            results.append(wire.ItemResult(cancelled=outcome is True))
    return results
