"""The native API's operator routes: the calls of ``OPERATOR_CALLS``, each the ``JobQueue`` method
of the same name on the served queue, its arguments and answer in their wire forms
(``wire.operator_calls``). ``GET /v1/queues`` is the ``Service``'s own."""

from __future__ import annotations

import inspect

from starlette.requests import Request
from starlette.routing import Route

from jqueue.adapters.service.server.endpoints import MakeEndpoint, QueueCall, read_body
from jqueue.adapters.service.wire import operator_calls as ow
from jqueue.core.broker import BrokerQueue
from jqueue.core.queue import JobQueue


class OperatorRoutes:
    """The operator routes, each made an endpoint by ``endpoint`` (``Service.endpoint``:
    authorized, served only by the broker, answered after the commit a control call made is
    durable, as every native route is); request bodies over ``max_body_bytes`` are refused."""

    def __init__(self, endpoint: MakeEndpoint, max_body_bytes: int) -> None:
        self._endpoint = endpoint
        self._max_body_bytes = max_body_bytes

    def routes(self) -> list[Route]:
        """The routes, for a Starlette application."""
        return [
            Route(
                f"/v1/queues/{{queue}}/{call.verb}",
                self._endpoint(self._call(call), create=call.creates),
                methods=["POST"],
            )
            for call in ow.OPERATOR_CALLS
        ]

    def _call(self, call: ow.OperatorCall) -> QueueCall:
        takes = frozenset(inspect.signature(getattr(JobQueue, call.verb)).parameters)

        async def answer_call(queue: BrokerQueue, request: Request) -> ow.Answer:
            body = await read_body(request, call.request, self._max_body_bytes)
            method = getattr(queue, call.verb)
            return call.response.of(await method(**ow.arguments_of(body, takes)))

        return answer_call
