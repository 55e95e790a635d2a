"""The native API's operator routes: ``GET /v1/queues`` and the calls of ``OPERATOR_CALLS``, each
the ``JobQueue`` method of the same name on the served queue, its arguments and answer in
their wire forms (``operator_wire``)."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from jqueue.adapters.service import operator_wire as ow
from jqueue.adapters.service.answers import answer, error_of
from jqueue.adapters.service.wire import ErrorResponse
from jqueue.adapters.web.media import wants_msgpack
from jqueue.core.broker import BrokerQueue
from jqueue.core.queue import JobQueue

if TYPE_CHECKING:
    from jqueue.adapters.service.app import Service


class OperatorRoutes:
    """The operator routes of ``service``: authorized, served only by the broker, answered
    after the commit a control call made is durable, as every native route is."""

    def __init__(self, service: Service) -> None:
        self.service = service

    def routes(self) -> list[Route]:
        """The routes, for a Starlette application."""
        routes = [Route("/v1/queues", self._names, methods=["GET"])]
        for call in ow.OPERATOR_CALLS:
            endpoint = self.service.endpoint(self._call(call), create=call.creates)
            routes.append(Route(f"/v1/queues/{{queue}}/{call.verb}", endpoint, methods=["POST"]))
        return routes

    def _call(self, call: ow.OperatorCall) -> Callable[[BrokerQueue, Request], Awaitable[Any]]:
        takes = frozenset(inspect.signature(getattr(JobQueue, call.verb)).parameters)

        async def answer_call(queue: BrokerQueue, request: Request) -> Any:
            body = await self.service.read_body(request, call.request)
            method = getattr(queue, call.verb)
            return call.response.of(await method(**ow.arguments_of(body, takes)))

        return answer_call

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
