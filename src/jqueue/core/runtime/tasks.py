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
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any, Generic, ParamSpec, TypeVar, get_type_hints

from pydantic import BaseModel, ConfigDict, TypeAdapter, ValidationError, create_model
from pydantic_core import PydanticSerializationError

from jqueue.core.runtime.outcomes import error_message
from jqueue.core.runtime.steering import Fail, ResultError
from jqueue.core.runtime.workflows import PARENTS_KEY, Receiving, Signature, stored_as
from jqueue.domain.models import Job
from jqueue.domain.spec import JobSpec

P = ParamSpec("P")
R = TypeVar("R")


class _Arguments(BaseModel):
    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=False)


def _annotations(function: Callable[..., Any]) -> dict[str, Any]:
    """``function``'s annotations, resolved, with their ``Annotated`` constraints (``Field(gt=0)``)."""
    return get_type_hints(function, include_extras=True)


def _model(function: Callable[..., Any], without: str | None = None) -> type[BaseModel]:
    """A pydantic model of ``function``'s parameters (keyword-compatible ones only), all but
    ``without``."""
    hints = _annotations(function)
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
        self.returns: Any = _annotations(function).get("return", Any)
        """The return annotation (of an async function, what it returns when awaited)."""
        self.stored_as = stored_as(self.returns)
        """How the worker keeps this task's results (``workflows.STORED``)."""
        self._partial_models: dict[str | None, type[BaseModel]] = {None: self.arguments}
        self._adapters: dict[str, TypeAdapter[Any]] = {}

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
        step runs without them (``Job.parent_results`` still has them). It raises as ``spec``
        does.
        """
        bound = self.signature.bind_partial(*args, **kwargs)
        receiver = next(
            (
                name
                for name, parameter in self.signature.parameters.items()
                if name not in bound.arguments and parameter.default is parameter.empty
            ),
            None,
        )
        model = self._partial_model(receiver)
        arguments = json.loads(model.model_validate(dict(bound.arguments)).model_dump_json())
        return Signature(self, arguments, receiver)

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
        annotation encodes it (models and dataclasses too), bytes and text as they are.

        Raises
        ------
        ResultError
            If the value does not fit the annotation, or its encoding would not decode as it
            (``result`` would fail): the job dies with the reason.
        """
        if self.returns is Any:
            return returned  # the worker's rule: bytes, text or JSON
        if self.returns in (bytes, str):
            if isinstance(returned, bytes if self.returns is bytes else str):
                return returned
            raise ResultError(self._misfit(returned))
        try:
            encoded = self._result_adapter.dump_json(returned, warnings="error")
            self._result_adapter.validate_json(encoded)
        except (PydanticSerializationError, ValidationError) as exc:
            raise ResultError(self._misfit(returned, error_message(exc))) from None
        return None if returned is None else encoded

    def _misfit(self, returned: object, detail: str = "") -> str:
        """The reason a returned value cannot be this task's result."""
        expected = getattr(self.returns, "__name__", None) or repr(self.returns)
        got = type(returned).__name__
        why = f"{self.entrypoint} returned {got}, which its return annotation {expected} refuses"
        return f"{why}: {detail}" if detail else why

    @functools.cached_property
    def _result_adapter(self) -> TypeAdapter[Any]:
        """The return annotation's validator and encoder, built once (it costs a schema)."""
        return TypeAdapter(self.returns)

    def _arguments_of(self, job: Job) -> dict[str, Any]:
        try:  # an empty payload (a cron tick's, a CLI enqueue without one) is a call without arguments
            if job.after:
                return self._with_parents(job)
            return dict(self.arguments.model_validate_json(job.payload or b"{}"))
        except (ValidationError, ValueError) as exc:  # this payload will never fit: no retry helps
            why = error_message(exc)
            raise Fail(f"the payload does not fit {self.entrypoint}'s arguments: {why}") from None

    def _with_parents(self, job: Job) -> dict[str, Any]:
        """The arguments of a workflow's step: its payload, and its parents' results in the
        parameter its signature left unbound (``Receiving``)."""
        arguments = json.loads(job.payload or b"{}")
        if not isinstance(arguments, dict):
            raise ValueError("the payload is not a JSON object")
        if PARENTS_KEY not in arguments:
            return dict(self.arguments.model_validate_json(job.payload or b"{}"))
        receiving = Receiving.read(arguments.pop(PARENTS_KEY))
        name = receiving.into
        if name not in self.signature.parameters:
            raise ValueError(f"it has no parameter {name!r} for its parents' results")
        rest = dict(self._partial_model(name).model_validate_json(json.dumps(arguments)))
        try:
            rest[name] = receiving.value(job.parent_results, self._parameter_adapter(name))
        except ValueError as exc:  # a ValidationError too
            raise ValueError(f"its parents' results do not fit parameter {name!r}: {exc}") from None
        return rest

    def _partial_model(self, without: str | None) -> type[BaseModel]:
        """The model of the arguments but ``without`` (built once each)."""
        model = self._partial_models.get(without)
        if model is None:
            model = self._partial_models[without] = _model(self.function, without=without)
        return model

    def _parameter_adapter(self, name: str) -> TypeAdapter[Any]:
        """The validator of parameter ``name``'s annotation (built once each)."""
        adapter = self._adapters.get(name)
        if adapter is None:
            adapter = self._adapters[name] = TypeAdapter(_annotations(self.function)[name])
        return adapter

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
