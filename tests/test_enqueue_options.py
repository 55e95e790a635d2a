"""The options of a job are declared once (``JobSpec``); every form that restates them follows it.

``enqueue``'s keywords, ``SyncQueue.enqueue``, the HTTP API's ``NewJob`` (names, types and
limits) and the ``jqueue enqueue`` flags are each checked against ``SPEC_FIELDS``, so that a
field added to ``JobSpec`` and missed in one of them fails here.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any, get_type_hints

import msgspec
import pytest
import typer

from jqueue import BrokerQueue, InMemoryStorage
from jqueue.adapters.cli.app import build_app
from jqueue.adapters.service.wire.bodies import NewJob, decode, encode, new_job, spec_of
from jqueue.core.queue import EnqueueCalls
from jqueue.domain.models import ParentFailure
from jqueue.domain.spec import SPEC_FIELDS, EnqueueOptions, JobSpec, SpecField
from jqueue.sync import SyncQueue

OPTIONS = [f for f in SPEC_FIELDS if f.name not in ("entrypoint", "payload", "priority")]

PARENT = "parent-1"
TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
SAMPLES: dict[Any, Any] = {
    str: "sample",
    int: 7,
    timedelta: timedelta(hours=2),
    datetime: datetime(2031, 1, 2, 3, 4, 5, tzinfo=UTC),
    Sequence[str]: (PARENT,),
    ParentFailure: ParentFailure.RUN,
}
EVERY_OPTION = JobSpec(
    "email",
    b"\x00payload",
    -3,
    **{f.name: SAMPLES[f.base] for f in OPTIONS if f.name != "delay"}  # delay: not with not_before
    | {"traceparent": TRACEPARENT},  # a text with a form of its own
)
"""A spec whose every option but ``delay`` differs from its default, whatever options there are."""


def test_enqueue_options_are_the_spec_fields_after_priority() -> None:
    assert list(get_type_hints(EnqueueOptions)) == [f.name for f in OPTIONS]
    assert [f.name for f in SPEC_FIELDS[:3]] == ["entrypoint", "payload", "priority"]
    for call in (EnqueueCalls.enqueue, SyncQueue.enqueue):
        parameters = inspect.signature(call).parameters
        assert list(parameters)[1:4] == ["entrypoint", "payload", "priority"]
        assert parameters["options"].kind is inspect.Parameter.VAR_KEYWORD


def test_every_option_a_spec_sets_differs_from_its_default() -> None:
    # so that the round trips below would notice an option dropped on the way
    unset = {f.name for f in SPEC_FIELDS if getattr(EVERY_OPTION, f.name) == f.default}
    assert unset == {"delay"}  # not_before is set instead: they do not go together
    assert replace(EVERY_OPTION, not_before=None, delay=timedelta(seconds=90)).delay == timedelta(seconds=90)


async def test_enqueue_takes_every_option_by_keyword() -> None:
    async with BrokerQueue(InMemoryStorage()) as queue:
        await queue.enqueue("parent", b"", id=PARENT)
        options: dict[str, Any] = {f.name: getattr(EVERY_OPTION, f.name) for f in OPTIONS}
        job = await queue.enqueue("email", b"x", 4, **options)
        assert (
            job.id,
            job.dedup_key,
            job.max_attempts,
            job.not_before,
            job.after,
            job.on_parent_failure,
        ) == (
            "sample",
            "sample",
            7,
            EVERY_OPTION.not_before,
            (PARENT,),
            "run",
        )
        with pytest.raises(TypeError, match=r"enqueue\(\) got an unexpected keyword argument 'colour'"):
            await queue.enqueue("email", b"x", colour="red")  # type: ignore[call-arg]


@pytest.mark.parametrize("spec", [EVERY_OPTION, replace(EVERY_OPTION, not_before=None, delay=timedelta(90))])
@pytest.mark.parametrize("msgpack", [False, True])
def test_new_job_carries_every_option(spec: JobSpec, msgpack: bool) -> None:
    decoded = decode(encode(new_job(spec, "sample"), msgpack), NewJob, msgpack)
    assert spec_of(decoded) == spec


def test_new_job_has_a_field_per_spec_field_with_its_default() -> None:
    wire = {f.name: f for f in msgspec.structs.fields(NewJob)}
    assert len(wire) == len(SPEC_FIELDS)
    for spec_field in SPEC_FIELDS:
        name = f"{spec_field.name}_seconds" if spec_field.base is timedelta else spec_field.name
        assert name in wire, name
        assert wire[name].required == spec_field.required
        if not spec_field.required:
            assert wire[name].default == spec_field.default


def _out_of_range(spec_field: SpecField) -> list[Any]:
    limit, values = spec_field.bounds, []
    for bound, step in ((limit.ge, -1), (limit.gt, 0), (limit.le, 1)):
        if bound is not None:
            unit = timedelta(seconds=1) if isinstance(bound, timedelta) else 1
            values.append(bound + step * unit)
    if limit.max_length is not None:
        values.append("x" * (limit.max_length + 1))
    if limit.min_length:
        values.append("")
    return values


LIMITED = [(f, value) for f in SPEC_FIELDS for value in _out_of_range(f)]


def test_every_declared_limit_is_checked() -> None:
    limited = {
        *(
            "entrypoint",
            "priority",
            "delay",
            "max_attempts",
            "ttl",
            "id",
            "traceparent",
            "tenant",
            "after",
            "timeout",
        )
    }
    assert {f.name for f, _ in LIMITED} == limited


@pytest.mark.parametrize(("spec_field", "value"), LIMITED, ids=lambda v: str(getattr(v, "name", v))[:20])
def test_a_value_out_of_its_limit_is_refused_in_python_and_on_the_wire(
    spec_field: SpecField, value: Any
) -> None:
    arguments: dict[str, Any] = {"entrypoint": "email", "payload": b"x", spec_field.name: value}
    with pytest.raises(ValueError, match=spec_field.name):
        JobSpec(**arguments)
    body: dict[str, Any] = {"entrypoint": "email", "payload": ""}
    if isinstance(value, timedelta):
        body[f"{spec_field.name}_seconds"] = value.total_seconds()
    else:
        body[spec_field.name] = value
    with pytest.raises(msgspec.ValidationError):
        msgspec.json.decode(msgspec.json.encode(body), type=NewJob)


def test_jqueue_enqueue_has_a_flag_for_every_option() -> None:
    command = typer.main.get_command(build_app())
    assert isinstance(command, typer.core.TyperGroup)
    enqueue = command.commands["enqueue"]
    flags = {flag for parameter in enqueue.params for flag in getattr(parameter, "opts", ())}
    wanted = {"--priority"} | {"--" + f.name.replace("_", "-") for f in OPTIONS}
    assert wanted <= flags, wanted - flags
