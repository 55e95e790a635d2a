"""Workflows of typed tasks: signatures composed into chains, groups and chords, enqueued in one
commit, with each step's parents' results passed to it (ADR 0019).

``task.s(...)`` is a ``Signature``: a call of a task with its job's id chosen at once, and
its first parameter without a default that the call leaves unbound kept for its parents'
results. ``chain(a, b,
c)`` (or ``a | b | c``) runs each step after the one before and gives it that step's result;
``group(a, b)`` runs its members side by side; ``group(a, b) | c`` (a chord) runs ``c`` once
every member is acked, with the list of their results in the group's order. A workflow's
``defer(queue)`` enqueues all of its jobs in one ``enqueue_many``: one commit, and the queue
releases each step in the commit that acks its last parent, so a callback is released once.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Iterable, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from pydantic import TypeAdapter

from jqueue.domain.models import Job, ParentFailure, new_job_id
from jqueue.domain.spec import JobSpec

if TYPE_CHECKING:
    from jqueue.core.runtime.tasks import Task

PARENTS_KEY = "@parents"
"""The payload key of a step's ``Receiving``: no parameter can be named so."""
STORED = ("bytes", "text", "json", "any")
"""How a worker keeps a task's result, by its return annotation: ``bytes`` as they are, ``str`` as
UTF-8 text, an unannotated one as it came (bytes, text, else JSON), anything else as JSON."""


def stored_as(returns: Any) -> str:
    """How the results of a task whose return annotation is ``returns`` are kept (``STORED``)."""
    return "bytes" if returns is bytes else "text" if returns is str else "any" if returns is Any else "json"


@dataclasses.dataclass(frozen=True)
class Receiving:
    """What a step does with its parents' results, carried in its payload under ``PARENTS_KEY``.

    Attributes
    ----------
    into : str
        The parameter they go to.
    gathered : bool
        Whether it gets the list of them (after a group), else the one.
    stored : tuple of str
        How each parent's result is kept (``STORED``), in the order of ``after``.
    """

    into: str
    gathered: bool
    stored: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        """The payload's form: ``stored`` as one word when every parent's is the same."""
        same = len(set(self.stored)) == 1
        return {
            "into": self.into,
            "gathered": self.gathered,
            "stored": self.stored[0] if same else self.stored,
        }

    @classmethod
    def read(cls, value: object) -> Receiving:
        """Return the ``Receiving`` of a payload's ``PARENTS_KEY`` entry.

        Raises
        ------
        ValueError
            If it is not one.
        """
        if not isinstance(value, dict) or not isinstance(value.get("into"), str):
            raise ValueError(f"{PARENTS_KEY} does not name a parameter: {value!r}")
        stored = value.get("stored")
        kinds = (stored,) if isinstance(stored, str) else tuple(stored) if isinstance(stored, list) else ()
        if not kinds or any(kind not in STORED for kind in kinds):
            raise ValueError(f"{PARENTS_KEY} does not say how the results are kept: {value!r}")
        return cls(value["into"], value.get("gathered") is True, kinds)

    def value(self, results: Sequence[bytes | None], adapter: TypeAdapter[Any]) -> Any:
        """Return the parameter's value from the parents' ``results``, validated by ``adapter``:
        JSON results as JSON (exactly as a call's arguments are), the others decoded first.

        Raises
        ------
        ValueError
            If the results do not match the parents, or a result does not fit (pydantic's
            ``ValidationError`` is one).
        """
        stored = self.stored * len(results) if len(self.stored) == 1 else self.stored
        if len(stored) != len(results) or not results or (not self.gathered and len(results) != 1):
            raise ValueError(f"{len(results)} parent results for {PARENTS_KEY} {self.to_json()}")
        if all(kind == "json" for kind in stored):
            documents = [b"null" if result is None else result for result in results]
            return adapter.validate_json(
                b"[" + b",".join(documents) + b"]" if self.gathered else documents[0]
            )
        values = [_decoded(result, kind) for result, kind in zip(results, stored, strict=True)]
        return adapter.validate_python(values if self.gathered else values[0])


def _decoded(result: bytes | None, kind: str) -> Any:
    if result is None or kind == "bytes":
        return result
    if kind != "text":
        try:
            return json.loads(result)
        except ValueError:
            if kind == "json":
                raise
    return result.decode()


class Workflow:
    """What ``chain``, ``group`` and ``Signature`` have in common: ``|`` chains, ``specs`` lays
    the jobs out, ``defer`` enqueues them in one commit, ``result`` waits for the outcome."""

    def __or__(self, after: Workflow) -> Chain:
        return chain(self, after)

    def specs(self) -> list[JobSpec]:
        """Return the workflow's jobs, each after the jobs it waits for, ready for ``enqueue_many``.

        Raises
        ------
        ValueError
            If a signature appears twice (make another with ``.s()``).
        TypeError
            If a first step leaves a parameter without a default unbound (no parent gives it).
        """
        laid_out: list[JobSpec] = []
        _lay_out(self, (), False, laid_out)
        ids = [spec.id for spec in laid_out]
        if len(set(ids)) != len(ids):
            raise ValueError("a signature appears twice in the workflow; make another with .s()")
        return laid_out

    async def defer(self, queue: Any, /) -> list[Job]:
        """Enqueue the workflow into ``queue`` in one commit; returns its jobs in ``specs``' order.

        Deferring the same workflow object again adds nothing: its ids are taken, so the
        queue answers with the jobs it holds (or has acked within its history).
        """
        jobs: list[Job] = await queue.enqueue_many(self.specs())
        return jobs

    async def result(self, queue: Any, /, timeout: timedelta | None = None) -> Any:  # noqa: ASYNC109
        """Wait for the workflow's last steps and return their result as ``Task.result`` does: one
        value for a signature or a chain, the list of the members' for a group."""
        tails, gathered = _lay_out(self, (), False, [])
        deadline = None if timeout is None else time.monotonic() + timeout.total_seconds()
        values = []
        for signature in tails:  # one timeout for them all
            left = None if deadline is None else timedelta(seconds=max(0.0, deadline - time.monotonic()))
            values.append(await signature.task.result(queue, signature.id, timeout=left))
        return values if gathered else values[0]


@dataclasses.dataclass(frozen=True, eq=False)
class Signature(Workflow):
    """One call of a typed task, not enqueued yet: made by ``Task.s``.

    Attributes
    ----------
    task : Task
        The task called.
    arguments : dict
        The arguments given, validated, with the defaults of those not given.
    receiver : str or None
        The parameter that gets the parents' results: the first one without a default left
        unbound (None: there is none, and the results are left to ``Job.parent_results``).
    id : str
        The job's id, chosen at once.
    options : dict
        ``JobSpec`` options for the job: ``priority``, ``delay``, ``max_attempts``, ``ttl``,
        ``on_parent_failure`` (``set``).
    """

    task: Task[..., Any]
    arguments: dict[str, Any]
    receiver: str | None
    id: str = dataclasses.field(default_factory=new_job_id)
    options: dict[str, Any] = dataclasses.field(default_factory=dict)

    def set(
        self,
        *,
        priority: int | None = None,
        delay: timedelta | None = None,
        max_attempts: int | None = None,
        ttl: timedelta | None = None,
        on_parent_failure: ParentFailure | str | None = None,
        id: str | None = None,
    ) -> Signature:
        """Return the same call with these job options (those given) and, if given, this id (else
        its own: it is still the same job, so a workflow takes only one of the two).

        No dedup key: a job answered by another that holds its key would leave the steps after
        it waiting for a job that is not there. A workflow is deduplicated by its ids instead
        (``defer`` it again: nothing is added)."""
        given = {
            "priority": priority,
            "delay": delay,
            "max_attempts": max_attempts,
            "ttl": ttl,
            "on_parent_failure": on_parent_failure,
        }
        options = self.options | {name: value for name, value in given.items() if value is not None}
        return dataclasses.replace(self, options=options, id=self.id if id is None else id)

    def spec(self, parents: Sequence[Signature] = (), gathered: bool = False) -> JobSpec:
        """Return the job of this call after the jobs of ``parents``, whose results it gets: the
        list of them if ``gathered`` (a group's), else the one.

        Raises
        ------
        TypeError
            If the job has a receiver but no parent to give it a value.
        """
        payload = dict(self.arguments)
        after = tuple(parent.id for parent in parents)
        if self.receiver is not None:
            if parents:
                stored = tuple(parent.task.stored_as for parent in parents)
                payload[PARENTS_KEY] = Receiving(self.receiver, gathered, stored).to_json()
            else:
                raise TypeError(
                    f"{self.task.entrypoint}.s(): parameter {self.receiver!r} is unbound, "
                    "and no parent gives it a value"
                )
        options = {"priority": self.task.priority} | self.options
        body = json.dumps(payload, separators=(",", ":")).encode()
        return JobSpec(self.task.entrypoint, body, id=self.id, after=after or None, **options)


@dataclasses.dataclass(frozen=True, eq=False)
class Chain(Workflow):
    """Steps run one after the other, each given the result(s) of the one before."""

    steps: tuple[Workflow, ...]


@dataclasses.dataclass(frozen=True, eq=False)
class Group(Workflow):
    """Members run side by side; what comes after gets the list of their results, in order."""

    members: tuple[Workflow, ...]


def chain(*steps: Workflow) -> Chain:
    """Return the workflow that runs ``steps`` one after another, each given the result of the
    step before (the list of results, after a group).

    Raises
    ------
    ValueError
        If no step is given.
    """
    if not steps:
        raise ValueError("a chain needs at least one step")
    flat: list[Workflow] = []
    for step in steps:
        flat.extend(step.steps if isinstance(step, Chain) else (step,))
    return Chain(tuple(flat))


def group(*members: Workflow | Iterable[Workflow]) -> Group:
    """Return the workflow that runs ``members`` side by side (given one by one or as one
    iterable); what follows it gets the list of their results, in this order: a member's last
    step's result, or, for a member that is (or ends with) a group, each of that group's, in
    place (flattened).

    Raises
    ------
    ValueError
        If no member is given.
    """
    flat: list[Workflow] = []
    for member in members:
        flat.extend((member,) if isinstance(member, Workflow) else member)
    if not flat:
        raise ValueError("a group needs at least one member")
    return Group(tuple(flat))


def _lay_out(
    node: Workflow, after: tuple[Signature, ...], gathered: bool, laid_out: list[JobSpec]
) -> tuple[tuple[Signature, ...], bool]:
    """Append ``node``'s jobs to ``laid_out``, its first steps after the jobs of ``after``;
    return its last steps and whether what follows gets their results as a list."""
    if isinstance(node, Signature):
        laid_out.append(node.spec(after, gathered))
        return (node,), False
    if isinstance(node, Chain):
        for step in node.steps:
            after, gathered = _lay_out(step, after, gathered, laid_out)
        return after, gathered
    if isinstance(node, Group):
        members: list[Signature] = []
        for member in node.members:
            members.extend(_lay_out(member, after, gathered, laid_out)[0])
        return tuple(members), True
    raise TypeError(f"not a workflow: {node!r}")
