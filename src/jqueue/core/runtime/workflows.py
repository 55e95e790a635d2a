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
from collections.abc import Iterable, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from jqueue.domain.models import Job, ParentFailure, new_job_id
from jqueue.domain.spec import JobSpec

if TYPE_CHECKING:
    from jqueue.core.runtime.tasks import Task

PARENTS_KEY = "@parents"
"""The payload key that names the parameter a step's parents' results go to, and whether they
come as one result or as the list of a group's; no parameter can be named so."""


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
        values = [await signature.task.result(queue, signature.id, timeout=timeout) for signature in tails]
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
        ``dedup_key``, ``on_parent_failure``.
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
        dedup_key: str | None = None,
        on_parent_failure: ParentFailure | str | None = None,
        id: str | None = None,
    ) -> Signature:
        """Return this signature with these job options (those given) and, if given, this id."""
        given = {
            "priority": priority,
            "delay": delay,
            "max_attempts": max_attempts,
            "ttl": ttl,
            "dedup_key": dedup_key,
            "on_parent_failure": on_parent_failure,
        }
        options = self.options | {name: value for name, value in given.items() if value is not None}
        return dataclasses.replace(self, options=options, id=self.id if id is None else id)

    def spec(self, after: Sequence[str] = (), gathered: bool = False) -> JobSpec:
        """Return the job of this call after the jobs ``after``, whose results it gets: the list of
        them if ``gathered`` (a group's), else the one.

        Raises
        ------
        TypeError
            If the job has a receiver but no parent to give it a value.
        """
        payload = dict(self.arguments)
        if self.receiver is not None:
            if after:
                payload[PARENTS_KEY] = {"into": self.receiver, "gathered": gathered}
            else:
                raise TypeError(
                    f"{self.task.entrypoint}.s(): parameter {self.receiver!r} is unbound, "
                    "and no parent gives it a value"
                )
        options = {"priority": self.task.priority} | self.options
        body = json.dumps(payload, separators=(",", ":")).encode()
        return JobSpec(self.task.entrypoint, body, id=self.id, after=tuple(after) or None, **options)


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
    iterable); what follows it gets the list of their results, in this order, a nested group's
    flattened into it.

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
    node: Workflow, after: tuple[str, ...], gathered: bool, laid_out: list[JobSpec]
) -> tuple[tuple[Signature, ...], bool]:
    """Append ``node``'s jobs to ``laid_out``, its first steps after the jobs ``after``; return
    its last steps and whether what follows gets their results as a list."""
    if isinstance(node, Signature):
        laid_out.append(node.spec(after, gathered))
        return (node,), False
    if isinstance(node, Chain):
        tails: tuple[Signature, ...] = ()
        for step in node.steps:
            ends, gathered = _lay_out(step, after, gathered, laid_out)
            tails, after = ends, tuple(signature.id for signature in ends)
        return tails, gathered
    if isinstance(node, Group):
        members: list[Signature] = []
        for member in node.members:
            members.extend(_lay_out(member, after, gathered, laid_out)[0])
        return tuple(members), True
    raise TypeError(f"not a workflow: {node!r}")
