"""The queued-compatible API of ``jqueue serve``: queued's routes over the same queues.

A queued message is a job of entrypoint ``QUEUED_ENTRYPOINT`` whose id is a decimal integer;
its poll tag is the number of its lease (``lease_number``), so the fencing of every queue
call guards updates and deletes: a stale tag answers 404 and changes nothing. Message ids
are the broker's epoch in the high bits and a counter in the low ones, so two brokers of a
root never hand out the same id. Suspensions and throttles live in the root's catalog, so
they survive a failover; the request counters are the broker's own.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from jqueue.adapters.service.answers import HTTPError, error_of
from jqueue.adapters.service.catalog import ENDPOINTS, CatalogRecord, QueueSettings, Throttle
from jqueue.adapters.service.queued_wire import (
    DeleteRequest,
    PolledMessage,
    PollRequest,
    PollResponse,
    PushRequest,
    PushResponse,
    QueueEntry,
    QueueMetrics,
    QueuesResponse,
    Suspension,
    ThrottleBody,
    ThrottleSetting,
    UpdateRequest,
    UpdateResponse,
)
from jqueue.adapters.service.wire import encode, is_msgpack
from jqueue.core.broker import BrokerQueue
from jqueue.core.queue import lease_number, lease_of_number
from jqueue.domain.errors import JobNotFoundError, LeaseLostError
from jqueue.domain.models import Job, fencing_job
from jqueue.domain.spec import JobSpec

if TYPE_CHECKING:
    from jqueue.adapters.service.app import Service

QUEUED_ENTRYPOINT = "queued"
"""The entrypoint of the jobs that the queued routes push and poll."""
_COUNTER_BITS = 40


class MessageIds:
    """Hands out message ids: the broker's epoch above ``_COUNTER_BITS`` bits of a counter."""

    def __init__(self) -> None:
        self._epoch, self._next = -1, 0

    def take(self, epoch: int, count: int) -> list[int]:
        """Return ``count`` new ids for a broker serving ``epoch``."""
        if epoch != self._epoch:
            self._epoch, self._next = epoch, 0
        start, self._next = self._next, self._next + count
        if self._next >= 1 << _COUNTER_BITS:
            raise HTTPError(
                503, "ids_exhausted", "this broker has handed out all its message ids; restart it"
            )
        return [(epoch << _COUNTER_BITS) | n for n in range(start, self._next)]


class PollWindows:
    """Counts poll requests per queue in fixed windows, for the throttle."""

    def __init__(self) -> None:
        self._windows: dict[str, tuple[int, int]] = {}

    def admit(self, queue: str, throttle: Throttle | None) -> bool:
        """Count one poll of ``queue``; False if ``throttle`` allows no more in this window."""
        if throttle is None:
            return True
        window = int(time.time() // throttle.time_window_sec)
        current, count = self._windows.get(queue, (window, 0))
        if current != window:
            count = 0
        if count >= throttle.max_polls_per_time_window:
            return False
        self._windows[queue] = (window, count + 1)
        return True


def message_of(job: Job) -> PolledMessage | None:
    """Return a polled job as a queued message (None if its id or lease is not a number)."""
    tag = None if job.lease is None else lease_number(job.lease)
    if not job.id.isdigit() or tag is None:
        return None
    return PolledMessage(job.payload, job.created_at, int(job.id), job.attempts, tag)


def held(message_id: int, poll_tag: int) -> Job:
    """The argument that fences a call with the lease whose number is ``poll_tag``."""
    return fencing_job(str(message_id), lease_of_number(poll_tag))


class QueuedRoutes:
    """queued's routes over the queues of ``service`` (its host, broker lease, token and
    metrics)."""

    def __init__(self, service: Service) -> None:
        self.service = service
        self.ids = MessageIds()
        self.polls = PollWindows()

    def routes(self) -> list[Route]:
        """The routes, for a Starlette application."""
        calls: dict[str, Callable[[BrokerQueue, Request], Awaitable[Any]]] = {
            "push": self._push,
            "poll": self._poll,
            "update": self._update,
            "delete": self._delete,
        }
        routes = [
            Route("/queues", self._wrap("queues", self._queues, queue=False), methods=["GET"]),
            Route("/queue/{queue}", self._wrap("create", self._create, create=True), methods=["PUT"]),
            Route("/queue/{queue}", self._wrap("drop", self._drop), methods=["DELETE"]),
            Route("/queue/{queue}/suspend", self._wrap("suspend", self._suspend), methods=["GET", "POST"]),
            Route("/queue/{queue}/throttle", self._wrap("throttle", self._throttle), methods=["GET", "POST"]),
            Route(
                "/queue/{queue}/metrics", self._wrap("queue_metrics", self._queue_metrics), methods=["GET"]
            ),
        ]
        for verb, call in calls.items():
            routes.append(
                Route(f"/queue/{{queue}}/messages/{verb}", self._wrap(verb, call), methods=["POST"])
            )
        return routes

    def _wrap(
        self,
        route: str,
        call: Callable[[BrokerQueue, Request], Awaitable[Any]],
        *,
        create: bool = False,
        queue: bool = True,
    ) -> Callable[[Request], Awaitable[Response]]:
        service = self.service

        async def endpoint(request: Request) -> Response:
            started = time.perf_counter()
            name = request.path_params.get("queue", "")
            msgpack = is_msgpack(request.headers.get("accept"))
            try:
                service.authorize(request)
                await service.check_serving()
                opened: Any = await service.host.get(name, create=create) if queue else None
                body = await call(opened, request)
                status = 200
                answer = Response(
                    encode(body, msgpack) if body is not None else b"",
                    media_type="application/msgpack" if msgpack else "application/json",
                )
            except Exception as exc:
                status, text = _error_of(exc)
                answer = Response(text, status_code=status, media_type="text/plain")
            label = name if service.host.is_open(name) else ""
            service.metrics.requests.labels(label, f"queued_{route}", str(status)).inc()
            service.metrics.request_seconds.labels(f"queued_{route}").observe(time.perf_counter() - started)
            return answer

        return endpoint

    def _settings(self, name: str) -> QueueSettings:
        return self.service.host.catalog.record.queues.get(name) or QueueSettings()

    def _gate(self, request: Request, endpoint: str) -> str:
        name: str = request.path_params["queue"]
        if endpoint in self._settings(name).suspended:
            self._count(name, endpoint, "suspended")
            raise HTTPError(503, "suspended", f"the {endpoint} endpoint of queue {name} is suspended")
        return name

    def _count(self, queue: str, endpoint: str, outcome: str, amount: int = 1) -> None:
        self.service.metrics.queued_calls.labels(queue, endpoint, outcome).inc(amount)

    async def _queues(self, _: BrokerQueue, request: Request) -> QueuesResponse:
        return QueuesResponse([QueueEntry(name) for name in self.service.host.names()])

    async def _create(self, queue: BrokerQueue, request: Request) -> None:
        return None

    async def _drop(self, queue: BrokerQueue, request: Request) -> None:
        await self.service.host.delete(request.path_params["queue"])

    async def _push(self, queue: BrokerQueue, request: Request) -> PushResponse:
        name = self._gate(request, "push")
        body: PushRequest = await self.service.read_body(request, PushRequest)
        ids = self.ids.take(self.service.lease.epoch, len(body.messages))
        specs = [
            JobSpec(
                QUEUED_ENTRYPOINT,
                m.contents_bytes(),
                delay=timedelta(seconds=m.visibility_timeout_secs) if m.visibility_timeout_secs else None,
                id=str(message_id),
            )
            for m, message_id in zip(body.messages, ids, strict=True)
        ]
        await queue.enqueue_many(specs)
        self._count(name, "push", "successful", len(specs))
        return PushResponse(ids)

    async def _poll(self, queue: BrokerQueue, request: Request) -> PollResponse:
        name = self._gate(request, "poll")
        body: PollRequest = await self.service.read_body(request, PollRequest)
        if not self.polls.admit(name, self._settings(name).throttle):
            self._count(name, "poll", "throttled")
            raise HTTPError(429, "throttled", f"polls of queue {name} are throttled")
        jobs = await queue.dequeue(
            QUEUED_ENTRYPOINT,
            batch_size=body.count,
            visibility_timeout=timedelta(seconds=body.visibility_timeout_secs),
        )
        ours = [(job, message) for job in jobs if (message := message_of(job)) is not None]
        for job in jobs:  # made by other means: kept among the dead letters, not handed out
            if message_of(job) is None:
                await queue.nack(job, error="not a queued message: its id is not a number", max_attempts=1)
        messages = [message for _, message in ours]
        if not is_msgpack(request.headers.get("accept")):
            try:
                messages = [_as_text(message) for message in messages]
            except HTTPError:
                await asyncio.gather(*(queue.release(job) for job, _ in ours))
                raise
        self._count(name, "poll", "successful" if messages else "empty")
        return PollResponse(messages)

    async def _update(self, queue: BrokerQueue, request: Request) -> UpdateResponse:
        name = self._gate(request, "update")
        body: UpdateRequest = await self.service.read_body(request, UpdateRequest)
        timeout = timedelta(seconds=body.visibility_timeout_secs)
        try:
            await queue.heartbeat(held(body.id, body.poll_tag), visibility_timeout=timeout)
        except (JobNotFoundError, LeaseLostError) as exc:
            self._count(name, "update", "missing")
            raise HTTPError(
                404, "message_not_found", f"message {body.id} with poll tag {body.poll_tag} not found"
            ) from exc
        self._count(name, "update", "successful")
        return UpdateResponse(body.poll_tag)

    async def _delete(self, queue: BrokerQueue, request: Request) -> None:
        name = self._gate(request, "delete")
        body: DeleteRequest = await self.service.read_body(request, DeleteRequest)
        fences = [held(m.id, m.poll_tag) for m in body.messages]
        try:  # one commit for the whole batch; if one is stale, each on its own
            await queue.ack_many(fences)
            outcomes: list[BaseException | None] = [None] * len(fences)
        except (JobNotFoundError, LeaseLostError):
            outcomes = await asyncio.gather(*(queue.ack(job) for job in fences), return_exceptions=True)
        missing = [m.id for m, outcome in zip(body.messages, outcomes, strict=True) if outcome is not None]
        for outcome in outcomes:
            if outcome is not None and not isinstance(outcome, JobNotFoundError | LeaseLostError):
                raise outcome
        self._count(name, "delete", "successful", len(body.messages) - len(missing))
        if missing:
            self._count(name, "delete", "missing", len(missing))
            raise HTTPError(
                404, "message_not_found", f"messages not found (or their poll tags are stale): {missing}"
            )

    async def _suspend(self, queue: BrokerQueue, request: Request) -> Suspension:
        name = request.path_params["queue"]
        if request.method == "POST":
            wanted: Suspension = await self.service.read_body(request, Suspension)

            def edit(record: CatalogRecord) -> None:
                settings = record.queues.setdefault(name, QueueSettings())
                suspended = set(settings.suspended)
                for endpoint in ENDPOINTS:
                    flag = getattr(wanted, endpoint)
                    if flag is not None:
                        (suspended.add if flag else suspended.discard)(endpoint)
                settings.suspended = sorted(suspended)

            await self.service.host.catalog.change(edit)
        suspended = self._settings(name).suspended
        return Suspension(*(endpoint in suspended for endpoint in ENDPOINTS))

    async def _throttle(self, queue: BrokerQueue, request: Request) -> ThrottleSetting:
        name = request.path_params["queue"]
        if request.method == "POST":
            wanted: ThrottleSetting = await self.service.read_body(request, ThrottleSetting)
            limit = wanted.throttle

            def edit(record: CatalogRecord) -> None:
                settings = record.queues.setdefault(name, QueueSettings())
                settings.throttle = None if limit is None else Throttle(**_fields(limit))

            await self.service.host.catalog.change(edit)
        throttle = self._settings(name).throttle
        return ThrottleSetting(None if throttle is None else ThrottleBody(**_fields(throttle)))

    async def _queue_metrics(self, queue: BrokerQueue, request: Request) -> QueueMetrics:
        name = request.path_params["queue"]
        counts = (await queue.stats()).entrypoints.get(QUEUED_ENTRYPOINT)
        visible = 0 if counts is None else counts.queued
        invisible = 0 if counts is None else counts.scheduled + counts.in_progress
        sample = self.service.metrics.registry.get_sample_value

        def calls(endpoint: str, outcome: str) -> int:
            found = sample(
                "jqueue_queued_calls_total", {"queue": name, "endpoint": endpoint, "outcome": outcome}
            )
            return int(found or 0)

        return QueueMetrics(
            visible=visible,
            invisible=invisible,
            empty_poll=calls("poll", "empty"),
            missing_delete=calls("delete", "missing"),
            missing_update=calls("update", "missing"),
            successful_delete=calls("delete", "successful"),
            successful_poll=calls("poll", "successful"),
            successful_push=calls("push", "successful"),
            successful_update=calls("update", "successful"),
            suspended_delete=calls("delete", "suspended"),
            suspended_poll=calls("poll", "suspended"),
            suspended_push=calls("push", "suspended"),
            suspended_update=calls("update", "suspended"),
            throttled_poll=calls("poll", "throttled"),
        )


def _fields(struct: Throttle | ThrottleBody) -> dict[str, int]:
    return {
        "max_polls_per_time_window": struct.max_polls_per_time_window,
        "time_window_sec": struct.time_window_sec,
    }


def _as_text(message: PolledMessage) -> PolledMessage:
    contents = message.contents
    if isinstance(contents, bytes):
        try:
            contents = contents.decode()
        except UnicodeDecodeError:
            raise HTTPError(
                406, "binary_contents", "a polled message is binary: ask for Accept: application/msgpack"
            ) from None
    return PolledMessage(contents, message.created, message.id, message.poll_count, message.poll_tag)


def _error_of(exc: Exception) -> tuple[int, str]:
    status, body = error_of(exc)
    return status, body.message
