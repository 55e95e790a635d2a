"""The native API's operator routes: ``GET /v1/queues`` and the calls of ``OPERATOR_CALLS``, each
the ``JobQueue`` method of the same name on the served queue."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from jqueue.adapters.service import operator_wire as ow
from jqueue.adapters.service.answers import answer, error_of
from jqueue.adapters.service.wire import ErrorResponse, JobsResponse, api_job
from jqueue.adapters.web.media import wants_msgpack
from jqueue.core.broker import BrokerQueue

if TYPE_CHECKING:
    from jqueue.adapters.service.app import Service

Handler = Callable[[BrokerQueue, Any], Awaitable[Any]]


def _span(seconds: float | None) -> timedelta | None:
    return None if seconds is None else timedelta(seconds=seconds)


async def _stats(queue: BrokerQueue, _: ow.StatsRequest) -> ow.StatsResponse:
    return ow.StatsResponse.of(await queue.stats())


async def _jobs(queue: BrokerQueue, body: ow.JobsRequest) -> JobsResponse:
    jobs = await queue.jobs(body.status, body.entrypoint, _span(body.older_than_seconds), body.limit)
    return JobsResponse([api_job(job) for job in jobs])


async def _count(queue: BrokerQueue, body: ow.JobsRequest) -> ow.CountResponse:
    return ow.CountResponse(await queue.count(body.status, body.entrypoint, _span(body.older_than_seconds)))


async def _browse(queue: BrokerQueue, body: ow.BrowseRequest) -> ow.PageResponse:
    older = _span(body.older_than_seconds)
    jobs, cursor = await queue.browse(
        body.status, body.entrypoint, older, body.dedup_key, body.cursor, body.limit
    )
    return ow.PageResponse([api_job(job) for job in jobs], cursor)


async def _find(queue: BrokerQueue, body: ow.JobRequest) -> ow.FoundResponse:
    job = await queue.find(body.id)
    return ow.FoundResponse(None if job is None else api_job(job))


async def _history(queue: BrokerQueue, body: ow.HistoryRequest) -> ow.HistoryResponse:
    return ow.HistoryResponse(await queue.history(body.entrypoint, body.outcome, body.since, body.limit))


async def _finished(queue: BrokerQueue, body: ow.JobRequest) -> ow.FinishedResponse:
    return ow.FinishedResponse(await queue.finished(body.id))


async def _dead_letters(queue: BrokerQueue, body: ow.DeadLettersRequest) -> JobsResponse:
    return JobsResponse([api_job(job) for job in await queue.dead_letters(body.entrypoint, body.limit)])


async def _requeue_dead(queue: BrokerQueue, body: ow.IdsRequest) -> ow.CountResponse:
    return ow.CountResponse(await queue.requeue_dead(body.ids))


async def _requeue(queue: BrokerQueue, body: ow.IdsRequest) -> ow.CountResponse:
    return ow.CountResponse(await queue.requeue(body.ids or []))


async def _purge(queue: BrokerQueue, body: ow.PurgeRequest) -> ow.CountResponse:
    older = _span(body.older_than_seconds)
    return ow.CountResponse(await queue.purge(body.status, body.entrypoint, older, body.ids))


async def _pause(queue: BrokerQueue, body: ow.PauseRequest) -> ow.DoneResponse:
    await queue.pause(body.entrypoint, enqueues=body.enqueues)
    return ow.DoneResponse()


async def _resume(queue: BrokerQueue, body: ow.PauseRequest) -> ow.DoneResponse:
    await queue.resume(body.entrypoint)
    return ow.DoneResponse()


async def _throttle(queue: BrokerQueue, body: ow.ThrottleRequest) -> ow.DoneResponse:
    await queue.throttle(body.limit, timedelta(seconds=body.per_seconds), body.entrypoint)
    return ow.DoneResponse()


async def _limit(queue: BrokerQueue, body: ow.LimitRequest) -> ow.DoneResponse:
    await queue.limit(body.entrypoint, body.n)
    return ow.DoneResponse()


HANDLERS: dict[str, Handler] = {
    "stats": _stats,
    "jobs": _jobs,
    "count": _count,
    "browse": _browse,
    "find": _find,
    "history": _history,
    "finished": _finished,
    "dead_letters": _dead_letters,
    "requeue_dead": _requeue_dead,
    "requeue": _requeue,
    "purge": _purge,
    "pause": _pause,
    "resume": _resume,
    "throttle": _throttle,
    "limit": _limit,
}
"""The method behind each verb of ``OPERATOR_CALLS``."""


class OperatorRoutes:
    """The operator routes of ``service``: authorized, served only by the broker, answered
    after the commit a control call made is durable, as every native route is."""

    def __init__(self, service: Service) -> None:
        self.service = service

    def routes(self) -> list[Route]:
        """The routes, for a Starlette application."""
        routes = [Route("/v1/queues", self._names, methods=["GET"])]
        for call in ow.OPERATOR_CALLS:
            handle = self._call(HANDLERS[call.verb], call.request)
            endpoint = self.service.endpoint(handle, create=call.creates)
            routes.append(Route(f"/v1/queues/{{queue}}/{call.verb}", endpoint, methods=["POST"]))
        return routes

    def _call(self, handler: Handler, kind: type[Any]) -> Callable[[BrokerQueue, Request], Awaitable[Any]]:
        async def call(queue: BrokerQueue, request: Request) -> Any:
            return await handler(queue, await self.service.read_body(request, kind))

        return call

    async def _names(self, request: Request) -> Response:
        try:
            await self.service.authorize(request)
            await self.service.check_serving(request)
            body: Any = ow.QueueNamesResponse(self.service.host.found())
            status = 200
        except Exception as exc:
            status, error = error_of(exc)
            body = ErrorResponse(error)
        return answer(body, wants_msgpack(request.headers), status)
