"""The queued-compatible API of ``jqueue serve``: queued's routes over the same queues.

A queued message is a job of entrypoint ``QUEUED_ENTRYPOINT`` (``BINARY_ENTRYPOINT`` when
its contents are not text, so that JSON polls never claim it) whose id is a number; its
poll tag is the first 32 bits of its lease (``parts.tag_of``), and an update or a
delete is fenced by the whole lease the tag stands for, so a stale tag changes nothing.
Suspensions, throttles and API keys live in the root's catalog, so they survive a failover;
the request counters are the broker's own. Errors are queued's ``{"error": NAME,
"error_details": ...}`` bodies.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from prometheus_client import CONTENT_TYPE_LATEST
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from jqueue.adapters.service.queued.bodies import (
    ApiKey,
    ApiKeyRequest,
    ApiKeysResponse,
    DeleteRequest,
    PollRequest,
    PollResponse,
    PushRequest,
    PushResponse,
    QueueEntry,
    QueueMetrics,
    QueuesResponse,
    Suspension,
    ThrottleSetting,
    UpdateRequest,
    UpdateResponse,
)
from jqueue.adapters.service.queued.parts import (
    MESSAGE_ENTRYPOINTS,
    POLLED_FORM,
    PUSHED_FORM,
    PollWindows,
    claim_text,
    entrypoint_of,
    held,
    message_of,
    poll_tag,
    queued_error,
    seconds,
)
from jqueue.adapters.service.server.catalog import ENDPOINTS, CatalogRecord, QueueSettings
from jqueue.adapters.service.server.endpoints import HTTPError, Service, answer, read_body
from jqueue.adapters.service.wire.error_codes import (
    INTERNAL,
    MESSAGE_NOT_FOUND,
    NOT_FOUND,
    QUEUE_EXISTS,
    SUSPENDED,
    THROTTLED,
    UNSUPPORTED,
)
from jqueue.adapters.web.media import JSON, answer_type, is_msgpack, wants_msgpack
from jqueue.core.numbered import TimeOrderedIds
from jqueue.domain.errors import JobCancelledError, JobNotFoundError, LeaseLostError
from jqueue.domain.models import fencing_job
from jqueue.domain.spec import JobSpec
from jqueue.domain.times import utc_now

T = TypeVar("T")
Call = Callable[[Request, str], Awaitable[Any]]


class QueuedRoutes:
    """queued's routes over the queues of ``service``: its authorization and broker check, its
    host, broker tenure, token, body limit, metrics and sightings."""

    def __init__(self, service: Service) -> None:
        self.service = service
        self.ids = TimeOrderedIds()
        self.polls = PollWindows()

    def routes(self) -> list[Route]:
        """The routes, for a Starlette application."""
        get, post, get_or_post = ["GET"], ["POST"], ["GET", "POST"]
        queue = "/queue/{queue}"
        return [
            Route("/queues", self._wrap("queues", self._queues, admin=True), methods=get),
            Route("/api-keys", self._wrap("api_keys", self._api_keys, admin=True), methods=get),
            Route(
                "/api-key/{key}", self._wrap("api_key", self._api_key, admin=True), methods=["PUT", "DELETE"]
            ),
            Route(queue, self._wrap("create", self._create, admin=True), methods=["PUT"]),
            Route(queue, self._wrap("drop", self._drop, admin=True), methods=["DELETE"]),
            Route(f"{queue}/suspend", self._wrap("suspend", self._suspend), methods=get_or_post),
            Route(f"{queue}/throttle", self._wrap("throttle", self._throttle), methods=get_or_post),
            Route(f"{queue}/metrics", self._wrap("queue_metrics", self._queue_metrics), methods=get),
            Route(f"{queue}/messages/push", self._wrap("push", self._push), methods=post),
            Route(f"{queue}/messages/poll", self._wrap("poll", self._poll), methods=post),
            Route(f"{queue}/messages/update", self._wrap("update", self._update), methods=post),
            Route(f"{queue}/messages/delete", self._wrap("delete", self._delete), methods=post),
        ]

    def _wrap(
        self, route: str, call: Call, *, admin: bool = False
    ) -> Callable[[Request], Awaitable[Response]]:
        """The endpoint: authorization (the token, or for a queue's own routes an API key of
        its prefix), the broker check, the call, queued's answer and the metrics."""
        service = self.service

        async def endpoint(request: Request) -> Response:
            started = time.perf_counter()
            name = request.path_params.get("queue", "")
            msgpack = wants_msgpack(request.headers)
            status, body = 200, None
            try:
                await service.authorize(request, None if admin else name)
                await service.check_serving(request)
                forwarded = await service.forwarded(request, name) if name else None
                if forwarded is not None:
                    return forwarded
                body = await call(request, name)
                answer = _response(body, msgpack)
            except Exception as exc:
                await service.failed(name, exc)
                status, error = queued_error(exc)
                answer = _response(error, msgpack, status)
            label = name if service.host.is_open(name) else ""
            service.metrics.requests.labels(label, f"queued_{route}", str(status)).inc()
            service.metrics.request_seconds.labels(f"queued_{route}").observe(time.perf_counter() - started)
            return answer

        return endpoint

    async def _body(self, request: Request, kind: type[T]) -> T:
        return await read_body(request, kind, self.service.max_body_bytes)

    def _settings(self, name: str) -> QueueSettings:
        return self.service.host.catalog.record.queues.get(name) or QueueSettings()

    def _gate(self, name: str, endpoint: str) -> None:
        if endpoint in self._settings(name).suspended:
            self._count(name, endpoint, "suspended")
            raise HTTPError(SUSPENDED, f"the {endpoint} endpoint of queue {name} is suspended")

    def _count(self, queue: str, endpoint: str, outcome: str, amount: int = 1) -> None:
        if amount:
            self.service.metrics.queued_calls.labels(queue, endpoint, outcome).inc(amount)

    async def _queues(self, request: Request, _: str) -> QueuesResponse:
        return QueuesResponse([QueueEntry(name) for name in self.service.host.names()])

    async def _api_keys(self, request: Request, _: str) -> ApiKeysResponse:
        self._require_auth()
        keys = self.service.host.catalog.record.api_keys
        return ApiKeysResponse([ApiKey(key, prefix) for key, prefix in sorted(keys.items())])

    async def _api_key(self, request: Request, _: str) -> None:
        self._require_auth()
        key: str = request.path_params["key"]
        prefix = None if request.method == "DELETE" else (await self._body(request, ApiKeyRequest)).prefix

        def edit(record: CatalogRecord) -> None:
            if prefix is None:
                record.api_keys.pop(key, None)
            else:
                record.api_keys[key] = prefix

        await self.service.host.catalog.change(edit)

    def _require_auth(self) -> None:
        if self.service.token is None:  # as queued: no keys without authentication
            raise HTTPError(NOT_FOUND, "API keys need jqueue serve --token")

    async def _create(self, request: Request, name: str) -> None:
        host = self.service.host
        if await host.exists(name):
            raise HTTPError(QUEUE_EXISTS, f"queue {name} exists")
        await self.service.served(name, create=True)

    async def _drop(self, request: Request, name: str) -> None:
        if not await self.service.host.exists(name):
            raise HTTPError(NOT_FOUND, f"no queue named {name}")
        await self.service.host.delete(name)

    async def _push(self, request: Request, name: str) -> PushResponse:
        queue = await self.service.served(name)
        self._gate(name, "push")
        body = await self._body(request, PushRequest)
        specs = [
            JobSpec(
                entrypoint_of(m.contents),
                m.contents_bytes(),
                delay=seconds(m.visibility_timeout_secs) if m.visibility_timeout_secs > 0 else None,
            )
            for m in body.messages
        ]
        ids = await queue.bulk.enqueue_numbered(PUSHED_FORM, specs, self.ids)  # each free when it lands
        self._count(name, "push", "successful", len(ids))
        return PushResponse(ids)

    async def _poll(self, request: Request, name: str) -> PollResponse:
        queue = await self.service.served(name)
        self._gate(name, "poll")
        body = await self._body(request, PollRequest)
        if body.ignore_existing_visibility_timeouts:
            raise HTTPError(UNSUPPORTED, "ignore_existing_visibility_timeouts is not supported")
        if not self.polls.admit(name, self._settings(name).throttle):
            self._count(name, "poll", "throttled")
            raise HTTPError(THROTTLED, f"polls of queue {name} are throttled")
        self.service.sightings.saw(name, "dequeue", request)  # a poll claims
        visibility = seconds(body.visibility_timeout_secs)
        text = not wants_msgpack(request.headers)  # JSON carries text: binary stays for MessagePack
        if text:
            jobs = await claim_text(queue, body.count, visibility)
            found = [(job.id, job.lease, message_of(job, True)) for job in jobs]
        else:
            found = await queue.dequeue_as(
                POLLED_FORM, MESSAGE_ENTRYPOINTS, batch_size=body.count, visibility_timeout=visibility
            )
        for job_id, lease, message in found:  # added by other means: kept among the dead letters
            if message is None:
                fenced = job_id if lease is None else fencing_job(job_id, lease)
                await queue.nack(fenced, error="not a queued message: its id is not a number", dead=True)
        messages = [message for _, _, message in found if message is not None]
        self._count(name, "poll", "successful", len(messages))
        if not messages:
            self._count(name, "poll", "empty")
        return PollResponse(messages)

    async def _update(self, request: Request, name: str) -> UpdateResponse:
        queue = await self.service.served(name)
        self._gate(name, "update")
        body = await self._body(request, UpdateRequest)
        timeout = seconds(body.visibility_timeout_secs)
        try:  # a new poll tag, as queued's own server: the old one is stale from now on
            renewed = await queue.renew_lease(
                await held(queue, body.id, body.poll_tag), visibility_timeout=timeout
            )
        except (JobNotFoundError, LeaseLostError, JobCancelledError) as exc:  # cancelled: gone to its poller
            self._count(name, "update", "missing")
            text = f"message {body.id} with poll tag {body.poll_tag} not found"
            raise HTTPError(MESSAGE_NOT_FOUND, text) from exc
        self._count(name, "update", "successful")
        tag = poll_tag(renewed)
        if tag is None:  # renew_lease makes numbered leases: this is a defect
            raise HTTPError(INTERNAL, f"message {body.id} was renewed without a numbered lease")
        return UpdateResponse(tag)

    async def _delete(self, request: Request, name: str) -> dict[str, Any]:
        """Delete the messages whose tags hold; as queued, one whose tag is stale (or that is
        gone) is skipped and counted, not reported."""
        queue = await self.service.served(name)
        self._gate(name, "delete")
        body = await self._body(request, DeleteRequest)
        fences = [await held(queue, m.id, m.poll_tag) for m in body.messages]
        outcomes = await queue.ack_each([(job, None) for job in fences])  # one commit for the batch
        for outcome in outcomes:
            if outcome is not None and not isinstance(outcome, JobNotFoundError | LeaseLostError):
                raise outcome
        missing = sum(outcome is not None for outcome in outcomes)
        self._count(name, "delete", "successful", len(fences) - missing)
        self._count(name, "delete", "missing", missing)
        return {}

    async def _suspend(self, request: Request, name: str) -> Suspension:
        await self.service.served(name)
        if request.method == "POST":
            wanted = await self._body(request, Suspension)

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
        return Suspension(**{endpoint: endpoint in suspended for endpoint in ENDPOINTS})

    async def _throttle(self, request: Request, name: str) -> ThrottleSetting:
        await self.service.served(name)
        if request.method == "POST":
            wanted = await self._body(request, ThrottleSetting)
            limit = wanted.throttle

            def edit(record: CatalogRecord) -> None:
                settings = record.queues.setdefault(name, QueueSettings())
                settings.throttle = limit

            await self.service.host.catalog.change(edit)
        return ThrottleSetting(self._settings(name).throttle)

    async def _queue_metrics(self, request: Request, name: str) -> QueueMetrics | Response:
        queue = await self.service.served(name)
        wanted = answer_type(request.headers) or ""
        if not (is_msgpack(wanted) or wanted.startswith(JSON)):  # as queued: Prometheus by default
            text = await self.service.metrics.render(self.service.host.open_queues(), self.service.tenure)
            return Response(text, media_type=CONTENT_TYPE_LATEST)
        entrypoints = (await queue.stats()).entrypoints
        kinds = [entrypoints[name] for name in MESSAGE_ENTRYPOINTS if name in entrypoints]
        sample = self.service.metrics.registry.get_sample_value

        def calls(endpoint: str, outcome: str) -> int:
            labels = {"queue": name, "endpoint": endpoint, "outcome": outcome}
            return int(sample("jqueue_queued_calls_total", labels) or 0)

        oldest = min((c.oldest_queued_at for c in kinds if c.oldest_queued_at is not None), default=None)
        waited = 0 if oldest is None else max(0, int((utc_now() - oldest).total_seconds()))
        messages = sum(c.queued + c.scheduled + c.in_progress for c in kinds)
        return QueueMetrics(
            **{f"{outcome}_{endpoint}_counter": calls(endpoint, outcome) for endpoint, outcome in _COUNTERS},
            message_counter=messages,
            first_message_visibility_timeout_sec_gauge=0,
            last_message_visibility_timeout_sec_gauge=0,
            longest_unpolled_message_sec_gauge=waited,
        )


_COUNTERS = [
    ("poll", "empty"),
    ("delete", "missing"),
    ("update", "missing"),
    *((endpoint, "successful") for endpoint in ENDPOINTS),
    *((endpoint, "suspended") for endpoint in ENDPOINTS),
    ("poll", "throttled"),
]
"""queued's counters by endpoint and outcome (``{outcome}_{endpoint}_counter``)."""


def _response(body: Any, msgpack: bool, status: int = 200) -> Response:
    return body if isinstance(body, Response) else answer(body, msgpack, status)
