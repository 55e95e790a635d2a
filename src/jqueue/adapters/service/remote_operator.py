"""``RemoteOperator``: the operator calls of ``RemoteQueue``, each the ``JobQueue`` method of the
same name, with its signature and its documentation, answered by the service's operator routes
(``operator_wire``)."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, TypeVar

from jqueue.adapters.service import operator_wire as ow
from jqueue.core.queue import JobQueue

P = ParamSpec("P")
R = TypeVar("R")


def mirrors(
    local: Callable[Concatenate[Any, P], Coroutine[Any, Any, R]],
) -> Callable[
    [Callable[[Any, dict[str, Any]], Coroutine[Any, Any, R]]],
    Callable[Concatenate[Any, P], Coroutine[Any, Any, R]],
]:
    """Give a remote call the signature of ``local``, the ``JobQueue`` method it stands for: the
    decorated method takes the call's arguments by parameter name, defaults filled in."""
    signature = inspect.signature(local)
    arguments_of = _binder(local.__name__, signature)

    def decorate(
        body: Callable[[Any, dict[str, Any]], Coroutine[Any, Any, R]],
    ) -> Callable[Concatenate[Any, P], Coroutine[Any, Any, R]]:
        async def call(self: Any, /, *args: P.args, **kwargs: P.kwargs) -> R:
            return await body(self, arguments_of(self, *args, **kwargs))

        call.__name__ = call.__qualname__ = local.__name__
        call.__doc__ = body.__doc__ or local.__doc__
        call.__signature__ = signature  # type: ignore[attr-defined]
        return call

    return decorate


def _binder(name: str, signature: inspect.Signature) -> Callable[..., dict[str, Any]]:
    """Return a function named ``name`` with the parameters of ``signature`` that returns its
    arguments but the first (the receiver) by name, defaults filled in; a call that does not
    fit raises the ``TypeError`` Python raises for ``name``. Generated once, as dataclasses
    generate ``__init__``: ``inspect.Signature.bind`` costs about 13 µs a call."""
    kinds = inspect.Parameter
    parameters: list[str] = []
    defaults: dict[str, Any] = {}
    previous = None
    for parameter in signature.parameters.values():
        kind = parameter.kind
        if previous is kinds.POSITIONAL_ONLY and kind is not kinds.POSITIONAL_ONLY:
            parameters.append("/")
        if kind is kinds.KEYWORD_ONLY and previous not in (kinds.KEYWORD_ONLY, kinds.VAR_POSITIONAL):
            parameters.append("*")
        stars = "*" if kind is kinds.VAR_POSITIONAL else "**" if kind is kinds.VAR_KEYWORD else ""
        text = stars + parameter.name
        if parameter.default is not parameter.empty:
            defaults[f"_default_{parameter.name}"] = parameter.default
            text += f"=_default_{parameter.name}"
        parameters.append(text)
        previous = kind
    if previous is kinds.POSITIONAL_ONLY:
        parameters.append("/")
    names = list(signature.parameters)[1:]
    body = ", ".join(f"{n!r}: {n}" for n in names)
    namespace: dict[str, Any] = dict(defaults)
    exec(f"def {name}({', '.join(parameters)}):\n    return {{{body}}}\n", namespace)
    binder: Callable[..., dict[str, Any]] = namespace[name]
    return binder


def remote(
    local: Callable[Concatenate[Any, P], Coroutine[Any, Any, R]],
) -> Callable[Concatenate[Any, P], Coroutine[Any, Any, R]]:
    """Return the remote form of the ``JobQueue`` method ``local``: the same signature and
    documentation, its arguments sent as the body of the operator call of the same name, its
    answer read back."""
    call = ow.OPERATOR_CALL[local.__name__]

    async def operate(self: Any, arguments: dict[str, Any]) -> R:
        answer = await self.call(call.verb, ow.request_of(call.request, arguments), call.response)
        value: R = answer.value()
        return value

    return mirrors(local)(operate)


class RemoteOperator:
    """What a remote operator reads and steers (``call`` is ``RemoteQueue.call``): a call fails
    with the exception the same call raises on the queue itself."""

    if TYPE_CHECKING:

        async def call(self, verb: str, body: Any, answer: type[Any], *, wait: float = 0.0) -> Any: ...

    async def queue_names(self) -> list[str]:
        """Return the queues of the service's root, sorted."""
        answer: ow.QueueNamesResponse = await self.call("/v1/queues", None, ow.QueueNamesResponse)
        return answer.queues

    stats = remote(JobQueue.stats)
    jobs = remote(JobQueue.jobs)
    count = remote(JobQueue.count)
    browse = remote(JobQueue.browse)
    find = remote(JobQueue.find)
    history = remote(JobQueue.history)
    finished = remote(JobQueue.finished)
    dead_letters = remote(JobQueue.dead_letters)
    requeue_dead = remote(JobQueue.requeue_dead)
    requeue = remote(JobQueue.requeue)
    purge = remote(JobQueue.purge)
    pause = remote(JobQueue.pause)
    resume = remote(JobQueue.resume)
    throttle = remote(JobQueue.throttle)
    limit = remote(JobQueue.limit)
    workflow = remote(JobQueue.workflow)
    cancel_workflow = remote(JobQueue.cancel_workflow)
