"""Typed tasks: a function whose arguments are the job's payload, validated and encoded for you.

``@worker.task`` on ``async def send_email(to: str, subject: str = "")`` registers a handler
for entrypoint ``send_email``; ``await send_email.defer(queue, to="a@example.com")`` checks the
arguments against the signature (pydantic) and enqueues them as JSON. The handler validates
the payload the same way before it calls the function, so a malformed job fails with the
reason instead of reaching the code.
"""

from __future__ import annotations

import functools
import inspect
import json
from collections import abc
from collections.abc import Awaitable, Callable, Sequence
from datetime import timedelta
from typing import Any, Generic, ParamSpec, TypeVar, get_args, get_origin, get_type_hints

from pydantic import BaseModel, ConfigDict, TypeAdapter, ValidationError, create_model

from jqueue.core.runtime.steering import Fail
from jqueue.core.runtime.workflows import PARENTS_KEY, Signature
from jqueue.domain.models import Job
from jqueue.domain.spec import JobSpec

P = ParamSpec("P")
R = TypeVar("R")


class _Arguments(BaseModel):
    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=False)


def _model(function: Callable[..., Any], without: str | None = None) -> type[BaseModel]:
    """A pydantic model of ``function``'s parameters (keyword-compatible ones only), all but
    ``without``."""
    hints = get_type_hints(function)
    fields: dict[str, Any] = {}
    for name, parameter in inspect.signature(function).parameters.items():
        if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD, parameter.POSITIONAL_ONLY):
            raise TypeError(f"task {function.__name__}: parameter {name} must be passable by keyword")
        if name not in hints:
            raise TypeError(f"task {function.__name__}: parameter {name} needs a type annotation")
        default = ... if parameter.default is parameter.empty else parameter.default
        if name != without:
            fields[name] = (hints[name], default)
    model: type[BaseModel] = create_model(f"{function.__name__}_arguments", __base__=_Arguments, **fields)
    return model


def _loaded(stored: bytes | None, annotation: Any) -> Any:
    """A parent's stored result (bytes as they are, text as UTF-8, anything else as JSON) as the
    value for a parameter annotated ``annotation``, for its model to validate."""
    if stored is None or annotation is bytes:
        return stored
    if annotation is not str:
        try:
            return json.loads(stored)
        except ValueError:
            pass
    return stored.decode(errors="replace")


def _item_type(annotation: Any) -> Any:
    """The type of one item of a sequence annotation (``list[int]``: int; else Any)."""
    if get_origin(annotation) in (list, tuple, Sequence, abc.Sequence) and get_args(annotation):
        return get_args(annotation)[0]
    return Any


class Task(Generic[P, R]):
    """A typed task: ``defer`` enqueues a call of it, ``handle`` runs a job of it.

    Parameters
    ----------
    function : callable
        The task's code (async, or sync to run in a thread); every parameter annotated.
    entrypoint : str
        The jobs' entrypoint.
    priority : int
        The jobs' priority unless ``spec``'s caller changes it.
    """

    def __init__(self, function: Callable[P, R], entrypoint: str, priority: int = 0) -> None:
        self.function = function
        self.entrypoint = entrypoint
        self.priority = priority
        self.arguments = _model(function)
        self.signature = inspect.signature(function)
        self.returns: Any = get_type_hints(function).get("return", Any)
        """The return annotation (of an async function, what it returns when awaited)."""
        self._partial_models: dict[str | None, type[BaseModel]] = {None: self.arguments}

    def spec(self, *args: P.args, **kwargs: P.kwargs) -> JobSpec:
        """Return the job of a call with these arguments (``dataclasses.replace`` it to add a
        delay, a dedup key, ...).

        Raises
        ------
        TypeError
            If the arguments do not fit the signature.
        pydantic.ValidationError
            If a value does not fit its annotation.
        """
        bound = self.signature.bind(*args, **kwargs)
        payload = self.arguments.model_validate(dict(bound.arguments)).model_dump_json().encode()
        return JobSpec(self.entrypoint, payload, self.priority)

    def s(self, *args: Any, **kwargs: Any) -> Signature:
        """Return a signature of a call with these arguments, for a workflow (``chain``,
        ``group``): the first parameter without a default that they leave unbound gets the
        parents' results (the one result, or the list of a group's); if there is none, the
        step runs without them (``Job.parent_results`` still has them).

        Raises
        ------
        TypeError
            If the arguments do not fit the signature.
        pydantic.ValidationError
            If a value does not fit its annotation.
        """
        bound = self.signature.bind_partial(*args, **kwargs)
        unbound = (
            name for name, parameter in self.signature.parameters.items() if name not in bound.arguments
        )
        receiver = next((name for name in unbound if not self.has_default(name)), None)
        model = self._partial_models.get(receiver)
        if model is None:
            model = self._partial_models[receiver] = _model(self.function, without=receiver)
        arguments = model.model_validate(dict(bound.arguments)).model_dump(mode="json")
        return Signature(self, arguments, receiver)

    def has_default(self, name: str) -> bool:
        """Whether parameter ``name`` has a default."""
        return self.signature.parameters[name].default is not inspect.Parameter.empty

    async def defer(self, queue: Any, /, *args: P.args, **kwargs: P.kwargs) -> Job:
        """Enqueue a call with these arguments into ``queue``; returns the job once durable."""
        jobs: list[Job] = await queue.enqueue_many([self.spec(*args, **kwargs)])
        return jobs[0]

    async def result(self, queue: Any, job_id: Job | str, /, timeout: timedelta | None = None) -> Any:  # noqa: ASYNC109
        """Wait until a job of this task is finished and return what the function returned, as
        its return annotation types it (``decode_result``); ``queue.result`` keeps the bytes.

        Raises
        ------
        JobFailedError, JobCancelledError, TimeoutError
            As ``queue.result`` does.
        pydantic.ValidationError
            If the stored result does not fit the return annotation.
        """
        plain_id = job_id if isinstance(job_id, str) else job_id.id
        return self.decode_result(await queue.result(plain_id, timeout=timeout))

    def decode_result(self, stored: bytes | None) -> Any:
        """Return a result as the worker stored it (bytes as they are, text as UTF-8, anything
        else as JSON) as the function's return annotation types it: a pydantic model, a
        dataclass, a ``list[int]``...; None for none."""
        if stored is None:
            return None
        if self.returns is bytes:
            return stored
        if self.returns is str:
            return stored.decode()
        if self.returns is Any:  # unannotated: JSON if it is, else text
            try:
                return json.loads(stored)
            except ValueError:
                return stored.decode(errors="replace")
        return self._result_adapter.validate_json(stored)

    def _encoded(self, returned: object) -> object:
        """What the handler returns for the worker to keep: the function's value as its return
        annotation encodes it (models and dataclasses too), bytes and text as they are."""
        if returned is None or self.returns in (bytes, str, Any):
            return returned
        return self._result_adapter.dump_json(returned)

    @functools.cached_property
    def _result_adapter(self) -> TypeAdapter[Any]:
        """The return annotation's validator and encoder, built once (it costs a schema)."""
        return TypeAdapter(self.returns)

    def _arguments_of(self, job: Job) -> dict[str, Any]:
        try:  # an empty payload (a cron tick's, a CLI enqueue without one) is a call without arguments
            if job.after:
                return dict(self.arguments.model_validate(self._with_parents(job)))
            return dict(self.arguments.model_validate_json(job.payload or b"{}"))
        except (ValidationError, ValueError) as exc:  # this payload will never fit: no retry helps
            raise Fail(f"the payload does not fit {self.entrypoint}'s arguments: {exc}") from None

    def _with_parents(self, job: Job) -> dict[str, Any]:
        """The arguments of a workflow's step: its payload, and its parents' results in the
        parameter its signature left unbound (``PARENTS_KEY``)."""
        arguments = json.loads(job.payload or b"{}")
        if not isinstance(arguments, dict):
            raise ValueError("the payload is not a JSON object")
        receiving = arguments.pop(PARENTS_KEY, None)
        if receiving is None:
            return arguments
        name, gathered = receiving["into"], receiving["gathered"]
        annotation = self.arguments.model_fields[name].annotation
        if gathered:
            item = _item_type(annotation)
            arguments[name] = [_loaded(result, item) for result in job.parent_results]
        else:
            arguments[name] = _loaded(job.parent_results[0], annotation)
        return arguments

    def handler(self) -> Callable[[Job], Awaitable[object]] | Callable[[Job], object]:
        """The worker's handler: the payload validated, then the function called with it."""
        function: Callable[..., Any] = self.function
        if inspect.iscoroutinefunction(function):

            async def run_async(job: Job) -> object:
                return self._encoded(await function(**self._arguments_of(job)))

            run_async.__qualname__ = f"task {function.__qualname__}"  # the worker's start line
            return run_async

        def run_sync(job: Job) -> object:
            return self._encoded(function(**self._arguments_of(job)))

        run_sync.__qualname__ = f"task {function.__qualname__}"
        return run_sync

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        """Call the function itself, as if undecorated."""
        return self.function(*args, **kwargs)
