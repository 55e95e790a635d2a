"""The forms of a job written out by hand for speed, and the bulk-write forms, agree with ``FIELDS``.

``set_claim_state``, ``public_constructor`` and ``domain_values`` name each field themselves
(a loop over ``FIELDS`` costs half as much again on every claim); these tests derive what
each must do from ``FIELDS`` and fail when one drifts. ``PartRow`` and ``AddPart``'s columns
must hold exactly the fields a bulk write's rows may set (``WRITTEN_FIELDS``).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from jqueue import DirectQueue, InMemoryStorage, Job, JobStatus, QueuePolicy, Retry, Worker
from jqueue.core.formats.part_runs import COLUMN_OF, AddPart
from jqueue.core.log.parts import PartRow, write_part
from jqueue.domain.effects import Added
from jqueue.domain.records import JobRecord
from jqueue.domain.schema import (
    CHANGING_FIELDS,
    FIELDS,
    WRITTEN_FIELDS,
    JobFields,
    Kind,
    domain_values,
    job_from,
    public_constructor,
)
from jqueue.domain.spec import LONGEST_SPAN
from jqueue.domain.times import from_micros, span_micros, span_of, to_micros
from test_job_schema import T0, sample


def every_field_set() -> Added:
    return Added(**{f.name: sample(f, n) for n, f in enumerate(FIELDS)})


def only_required_set() -> Added:
    return Added(**{f.name: sample(f, n) for n, f in enumerate(FIELDS) if f.required})


def public_keywords(job: JobFields, payload: bytes) -> dict[str, Any]:
    """What ``public_constructor`` must pass, derived from ``FIELDS``: each field under its public
    name, in the order of ``Job``'s fields, times as datetimes and spans as timedeltas."""
    by_public = {f.public: f for f in FIELDS}
    keywords = {}
    for name in Job.model_fields:
        f = by_public[name]
        value = getattr(job, f.name)
        if f.kind is Kind.PAYLOAD:
            value = payload
        elif f.kind is Kind.TIME and value is not None:
            value = from_micros(value)
        elif f.kind is Kind.TIMES:
            value = tuple(map(from_micros, value))
        elif f.kind is Kind.SPAN and value is not None:
            value = span_of(value)
        keywords[name] = value
    return keywords


def values_of_public(job: Any) -> tuple[Any, ...]:
    """What ``domain_values`` must return, derived from ``FIELDS``."""
    values = []
    for f in FIELDS:
        value = getattr(job, f.public)
        if f.kind is Kind.TIME and value is not None:
            value = to_micros(value)
        elif f.kind is Kind.TIMES:
            value = tuple(map(to_micros, value))
        elif f.kind is Kind.SPAN and value is not None:
            value = span_micros(value)
        values.append(value)
    return tuple(values)


@pytest.mark.parametrize("added", [every_field_set(), only_required_set()], ids=["every", "required"])
def test_the_public_form_passes_every_field_by_its_public_name_in_jobs_order(added: Added) -> None:
    def keywords(**given: Any) -> dict[str, Any]:
        return given

    made = public_constructor(keywords)(added, b"p")
    expected = public_keywords(added, b"p")
    assert list(made.items()) == list(expected.items())
    assert list(job_from(added, b"p").__dict__.items()) == list(expected.items())


@pytest.mark.parametrize("added", [every_field_set(), only_required_set()], ids=["every", "required"])
def test_domain_values_read_every_field_by_its_public_name(added: Added) -> None:
    job = job_from(added, b"p")
    assert domain_values(job) == values_of_public(job)
    assert Added(*domain_values(job)) == Added(
        **{**{f.name: getattr(added, f.name) for f in FIELDS}, "payload": b"p"}
    )


def test_setting_a_claim_state_sets_each_changing_field_in_order() -> None:
    record = JobRecord.from_added(every_field_set(), 0)
    unchanged = {f.name: getattr(record, f.name) for f in FIELDS if not f.changes}
    state = tuple(f"state-{name}" for name in CHANGING_FIELDS)
    record.set_claim_state(state)
    assert {name: getattr(record, name) for name in CHANGING_FIELDS} == dict(
        zip(CHANGING_FIELDS, state, strict=True)
    )
    assert {f.name: getattr(record, f.name) for f in FIELDS if not f.changes} == unchanged
    with pytest.raises(ValueError, match="unpack"):
        record.set_claim_state((*state, "one more"))


def test_a_part_row_holds_the_written_fields_payload_first() -> None:
    assert PartRow._fields[0] == "payload"
    assert set(PartRow._fields) == {f.name for f in WRITTEN_FIELDS}
    assert set(COLUMN_OF) >= set(PartRow._field_defaults), "each field a row sets has a column in an add_part"
    assert set(COLUMN_OF.values()) == set(
        AddPart.__struct_fields__[AddPart.__struct_fields__.index("batch") + 1 :]
    )


async def test_each_written_field_travels_as_its_own_column_and_comes_back() -> None:
    """A part whose rows set one field keeps one column, and the commit's jobs have its values;
    rows at ``PartRow``'s defaults keep none and make jobs with the fields' defaults."""
    storage = InMemoryStorage()
    values = {name: sample(f, n) for n, f in enumerate(FIELDS) if (name := f.name) in PartRow._field_defaults}
    values["on_parent_failure"], values["after"] = "run", ("parent",)
    plain = await write_part(storage, "bulk", T0, [PartRow(b"a"), PartRow(b"b")])
    assert plain.columns == {}
    [first, second] = plain.jobs(T0)
    assert (first.priority, first.after, first.awaiting, first.status) == (0, (), (), JobStatus.QUEUED)
    assert second.id != first.id
    for name, value in values.items():
        part = await write_part(storage, "bulk", T0, [PartRow(b"a", **{name: value}), PartRow(b"b")])
        assert list(part.columns) == [name]
        [job, default] = part.jobs(T0)
        assert getattr(job, name) == value
        assert getattr(default, name) == PartRow._field_defaults[name] or name == "id"


async def test_the_attempts_and_delay_limits_are_checked_where_they_are_taken() -> None:
    with pytest.raises(ValueError, match=r"^max_attempts must be at least 1, got 0$"):
        QueuePolicy(max_attempts=0)
    with pytest.raises(ValueError, match=r"^delay must not be negative, got -1 s$"):
        Retry(timedelta(seconds=-1))
    with pytest.raises(ValueError, match=r"^delay must be at most 365000 days"):
        Retry(LONGEST_SPAN + timedelta(seconds=1))
    assert Retry(LONGEST_SPAN).delay == LONGEST_SPAN
    async with DirectQueue(InMemoryStorage()) as queue:
        with pytest.raises(ValueError, match=r"^max_attempts must be at least 1, got 0$"):
            Worker(queue, max_attempts=0)
        assert Worker(queue, max_attempts=1).max_attempts == 1
