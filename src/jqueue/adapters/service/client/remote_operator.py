"""``RemoteOperator``: the operator calls of ``RemoteQueue``, each the ``JobQueue`` method of the
same name, with its signature and its documentation, answered by the service's operator routes
(``wire.operator_calls``)."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, TypeVar

from jqueue.adapters.service.wire import operator_calls as ow
from jqueue.core.queue import JobQueue

P = ParamSpec("P")
R = TypeVar("R")
T = TypeVar("T")


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
    """Return a function with the parameters of ``signature`` that returns its arguments but the
    first (the receiver) by name, defaults filled in; a call that does not fit raises a
    ``TypeError`` that starts with ``name()``.

    A method whose parameters past the receiver all take a position or a keyword, or a keyword
    alone (every ``JobQueue`` method mirrored), is bound by a few dictionary operations;
    ``inspect.Signature.bind`` (about 13 µs a call) binds the other calls and words the errors.
    """
    kinds = inspect.Parameter
    parameters = list(signature.parameters.values())[1:]
    positional = tuple(p.name for p in parameters if p.kind is kinds.POSITIONAL_OR_KEYWORD)
    names = frozenset(p.name for p in parameters)
    defaults = {p.name: p.default for p in parameters if p.default is not p.empty}
    plain = all(p.kind in (kinds.POSITIONAL_OR_KEYWORD, kinds.KEYWORD_ONLY) for p in parameters)

    def bound_by_signature(args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        try:
            bound = signature.bind(*args, **kwargs)
        except TypeError as exc:
            raise TypeError(f"{name}() {exc}") from None
        bound.apply_defaults()
        return {key: value for key, value in bound.arguments.items() if key in names}

    def bind(*args: Any, **kwargs: Any) -> dict[str, Any]:
        if plain and 1 <= len(args) <= len(positional) + 1 and kwargs.keys() <= names:
            arguments = dict(zip(positional, args[1:], strict=False))
            if not kwargs.keys() & arguments.keys():
                arguments.update(kwargs)
                for key, value in defaults.items():
                    arguments.setdefault(key, value)
                if len(arguments) == len(names):
                    return arguments
        return bound_by_signature(args, kwargs)

    return bind


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

        async def call(self, verb: str, body: object, answer: type[T], *, wait: float = 0.0) -> T: ...

    async def queue_names(self) -> list[str]:
        """Return the queues of the service's root, sorted."""
        answer = await self.call("/v1/queues", None, ow.QueueNamesResponse)
        return answer.queues

    stats = remote(JobQueue.stats)
    jobs = remote(JobQueue.jobs)
    shards = remote(JobQueue.shards)
    reshard = remote(JobQueue.reshard)
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
