"""Every form of a job follows ``JobFields``: a copy that drifts (a field missing, renamed, in
another order, not converted, or changing where the schema says it does not) fails here.

The sample job sets every field to a value other than its default, built from each field's
kind, so a field added to ``JobFields`` is covered without editing this file.
"""

from __future__ import annotations

import copy
import dataclasses
import pickle
import uuid
from datetime import datetime
from typing import Any

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from jqueue import DirectQueue, InMemoryStorage, Job, JobSpec, JobStatus
from jqueue.adapters.service.wire.bodies import WIRE_FORM, api_job, job_of
from jqueue.adapters.spark.reader import JOB_COLUMNS, JOBS_SCHEMA, job_row
from jqueue.core.formats import entry as entry_format
from jqueue.core.formats import single as single_format
from jqueue.core.formats.checkpoint import decode_manifest
from jqueue.core.formats.payload_refs import payload_ref
from jqueue.core.log.slab_load import loaded
from jqueue.core.log.slab_plan import plan
from jqueue.core.log.slabs import SlabSet
from jqueue.domain.effects import Added, Beat, Claimed, Died, Effect, ParentSettled, Published, Requeued
from jqueue.domain.index import QueueIndex
from jqueue.domain.models import fencing_job, new_job_id
from jqueue.domain.records import JobRecord
from jqueue.domain.schema import (
    CHANGING_FIELDS,
    FIELD_NAMES,
    FIELDS,
    PUBLIC_FORM,
    STORED_FIELDS,
    JobField,
    JobFields,
    Kind,
    domain_values,
    job_from,
)
from jqueue.domain.times import from_micros

T0 = 1_800_000_000_000_000


def sample(field: JobField, n: int) -> Any:
    """A value of ``field``'s kind that is not its default (``n`` makes it distinct)."""
    values: dict[Kind, Any] = {
        Kind.TEXT: f"{field.name}-{n}",
        Kind.NAME: f"{field.name}-{n}",
        Kind.INT64: -(2**40) - n,
        Kind.COUNT: 3 + n,
        Kind.TIME: T0 + n * 1_000_003,
        Kind.TIMES: (T0 + n, T0 + 2 * n + 1),
        Kind.STATUS: JobStatus.IN_PROGRESS,
        Kind.PAYLOAD: b"payload-%d" % n,
        Kind.FRACTION: 1 / (n + 2),
        Kind.SPAN: 1_000_000 + n,
        Kind.IDS: (f"{field.name}-{n}", f"{field.name}-{n + 1}"),
        Kind.RESULTS: (b"result-%d" % n, None),
    }
    return values[field.kind]


def full_job(job_id: str = "job-1") -> Added:
    values = {f.name: sample(f, n) for n, f in enumerate(FIELDS)}
    values["id"] = job_id
    added = Added(**values)
    for f in FIELDS:
        assert getattr(added, f.name) != f.default or f.required, f"the sample of {f.name} is its default"
    return added


def stored_values(job: JobFields) -> dict[str, Any]:
    return {f.name: getattr(job, f.name) for f in STORED_FIELDS if f.kind is not Kind.PAYLOAD}


def test_the_classes_have_exactly_the_schema_fields() -> None:
    assert tuple(f.name for f in dataclasses.fields(Added)) == FIELD_NAMES
    record_fields = tuple(f.name for f in dataclasses.fields(JobRecord))
    assert record_fields == (*FIELD_NAMES, "order", "place", "stamp")
    assert set(Job.model_fields) == {f.public for f in FIELDS}


def test_fields_kept_only_in_memory_come_last() -> None:
    stored = [f.stored for f in FIELDS]
    assert stored == sorted(stored, reverse=True)
    assert all(f.required is False for f in FIELDS if not f.stored)


def test_the_public_job_round_trips() -> None:
    added = full_job()
    job = job_from(added, added.payload)  # type: ignore[arg-type]
    assert isinstance(job.created_at, datetime)
    assert Added(*domain_values(job)) == added


def test_the_services_wire_form_of_a_record_is_its_public_jobs_wire_form() -> None:
    """The service answers with ``WIRE_FORM``, made from a record without a public ``Job``: it
    must be what the ``Job`` of the same record becomes on the wire, field by field."""
    added = full_job()
    payload: bytes = added.payload  # type: ignore[assignment]
    assert WIRE_FORM.of_record(added, payload) == api_job(job_from(added, payload))
    assert PUBLIC_FORM.of_record(added, payload) == job_from(added, payload)
    job = job_from(added, payload)
    back = job_of(api_job(job))  # what a client makes of the answer
    assert back == job
    assert back.__dict__ == job.__dict__
    assert back.model_fields_set == job.model_fields_set


async def _found(queue: DirectQueue, job_id: str) -> Job:
    job = await queue.find(job_id)
    assert job is not None
    return job


async def test_a_queue_answers_in_the_wire_form_what_it_answers_as_jobs() -> None:
    """Each call that takes a form answers, in ``WIRE_FORM``, the wire form of the ``Job`` it
    answers: new jobs, a dedup key's job found in the history, claims, claims with acks."""
    async with DirectQueue(InMemoryStorage()) as queue:
        [done] = await queue.enqueue_many([JobSpec("mail", b"done", dedup_key="k")])
        await queue.ack(done, result=b"ok")
        specs = [JobSpec("mail", b"a", priority=2), JobSpec("mail", b"b", dedup_key="k")]
        answers = await queue.enqueue_as(WIRE_FORM, specs)
        assert [a.status for a in answers] == [JobStatus.QUEUED, JobStatus.ACKED]
        assert answers[1].id == done.id
        assert answers[1:] == [api_job(job) for job in await queue.enqueue_many(specs[1:])]
        await queue.enqueue("mail", b"c")
        [claimed] = await queue.dequeue_as(WIRE_FORM, "mail")
        assert claimed == api_job(await _found(queue, claimed.id))
        outcomes, [next_one] = await queue.ack_and_dequeue_as(WIRE_FORM, [(claimed.id, None)], "mail")
        assert outcomes == [None]
        assert next_one == api_job(await _found(queue, next_one.id))


def test_a_job_built_from_trusted_fields_is_the_job_pydantic_constructs() -> None:
    added = full_job()
    job = job_from(added, added.payload)  # type: ignore[arg-type]
    constructed = Job.model_construct(**dict(job))
    validated = Job.model_validate(job.model_dump())
    for other in (constructed, validated):
        assert job == other
        assert repr(job) == repr(other)
        assert job.model_fields_set == other.model_fields_set
        assert job.model_dump_json() == other.model_dump_json()
        assert hash(job) == hash(other)
        assert job.model_copy(update={"attempts": 9}) == other.model_copy(update={"attempts": 9})
        assert pickle.loads(pickle.dumps(job)) == other
        assert copy.deepcopy(job) == other
    assert job.model_fields_set is not job_from(added, b"").model_fields_set  # none shared
    with pytest.raises(ValueError, match="frozen"):
        job.attempts = 1


def test_a_fencing_job_is_a_plain_job_with_an_id_and_a_lease() -> None:
    fence = fencing_job("j1", "lease-1")
    made = Job.model_construct(id="j1", entrypoint="", payload=b"", lease="lease-1")
    assert fence.model_dump(exclude={"created_at"}) == made.model_dump(exclude={"created_at"})
    assert (fence.id, fence.lease, fencing_job("j2", "l2").id) == ("j1", "lease-1", "j2")
    assert Job.model_validate(fence.model_dump()) == fence


def test_job_has_nothing_a_trusted_build_would_skip() -> None:
    assert all(f.alias is None and f.validation_alias is None for f in Job.model_fields.values())
    assert not Job.__private_attributes__
    assert Job.__pydantic_post_init__ is None
    assert Job.model_config.get("extra") in (None, "ignore", "forbid")


def test_a_log_entry_keeps_every_field_in_schema_order() -> None:
    added = full_job()
    encoded = entry_format.encode_entry(5, "c", T0, [added])
    [wire] = msgspec.json.decode(encoded)["effects"]
    assert wire[0] == "add"
    assert len(wire) == 1 + len(STORED_FIELDS)
    decoded = entry_format.decode_entry(encoded, 5, "mem")
    [back] = decoded.effects
    assert isinstance(back, Added)
    assert stored_values(back) == stored_values(added)
    assert decoded.payloads == [added.payload]
    assert back.payload == payload_ref(5, 0)


def test_the_single_object_keeps_every_field() -> None:
    index = QueueIndex()
    index.apply(full_job())
    data = single_format.encode_index(index, 3, "c")
    [wire_job] = msgspec.json.decode(data)["jobs"]
    assert set(wire_job) == {f.public for f in STORED_FIELDS}
    [record] = single_format.decode_index(data, "mem").in_order()
    assert stored_values(record) == stored_values(full_job())


def test_a_checkpoint_and_its_slab_keep_every_field() -> None:
    index = QueueIndex()
    added = full_job()
    added.payload = payload_ref(2, 7)
    index.apply(added)
    made = plan(SlabSet(), index.freeze(), T0, "0", every_job=True)
    assert made.segments == {2}
    assert made.slab is not None
    manifest = decode_manifest(made.manifest(T0), "mem")
    back, _, _ = loaded(manifest, [made.content], ["mem"], "mem")
    [record] = back.in_order()
    assert stored_values(record) == stored_values(added)
    assert record.payload == payload_ref(2, 7)


def test_the_spark_table_names_job_attributes() -> None:
    assert set(JOB_COLUMNS) <= set(Job.model_fields)
    assert [column.split()[0] for column in JOBS_SCHEMA.split(", ")] == list(JOB_COLUMNS)
    added = full_job()
    row = job_row(job_from(added, b"p"))
    assert row[JOB_COLUMNS.index("status")] == "in_progress"
    assert row[JOB_COLUMNS.index("payload")] == b"p"


TRANSITIONS: list[tuple[JobStatus, Effect]] = [
    (JobStatus.QUEUED, Claimed("job-1", T0 + 9, "lease", T0 + 99)),
    (JobStatus.IN_PROGRESS, Beat("job-1", T0 + 50)),
    (JobStatus.IN_PROGRESS, Requeued("job-1", T0 + 70, "boom")),
    (JobStatus.DEAD, Requeued("job-1", None, None, reset=True)),
    (JobStatus.IN_PROGRESS, Died("job-1", T0 + 80, "max_attempts", "boom")),
    (JobStatus.STAGED, Published("batch-18")),
    (JobStatus.WAITING, ParentSettled("job-1", "parent-1", b"result")),
]


@pytest.mark.parametrize(("status", "effect"), TRANSITIONS, ids=lambda x: type(x).__name__)
def test_transitions_change_only_the_changing_fields(status: JobStatus, effect: Effect) -> None:
    index = QueueIndex()
    added = full_job()
    added.status = status
    added.batch = "batch-18"
    added.after = added.awaiting = ("parent-0", "parent-1")
    index.apply(added)
    before = dataclasses.astuple(index.records["job-1"])
    index.apply(effect)
    after = dataclasses.astuple(index.records["job-1"])
    changed = {
        name
        for name, old, new in zip((*FIELD_NAMES, "order", "place", "stamp"), before, after, strict=True)
        if old != new
    }
    assert changed - {"stamp"} <= set(CHANGING_FIELDS)
    assert changed - {"stamp"}


def test_the_wire_history_has_every_field_of_a_history_record() -> None:
    from jqueue.core.formats.wire import WireHistory
    from jqueue.domain.records import HistoryRecord

    assert WireHistory.__struct_fields__ == HistoryRecord.__slots__


def _sample_history() -> Any:
    from jqueue.domain.records import HistoryRecord

    return HistoryRecord(
        "job-1", "email", 1_000_000, (2_000_000, 5_000_000), 9_000_000, 2, JobStatus.DEAD,
        "Traceback\nValueError: boom", "failed", "key", b"result",
    )  # fmt: skip


def test_every_form_of_a_history_record_keeps_its_fields() -> None:
    from jqueue.core.formats.wire import history_from_wire, wire_history
    from jqueue.domain.records import HISTORY_FIELDS

    record = _sample_history()
    assert history_from_wire(wire_history([record])) == [record]
    public = record.public()
    assert list(public) == [f.public for f in HISTORY_FIELDS]
    assert public["created_at"] == from_micros(1_000_000)
    assert public["claimed_at"] == (from_micros(2_000_000), from_micros(5_000_000))
    job = record.as_job()
    shown = {f.job: public[f.public] for f in HISTORY_FIELDS if f.job}
    assert {name: getattr(job, name) for name in shown} == shown
    assert (job.status, job.last_error, job.dead_reason) == (JobStatus.DEAD, record.error, "failed")
    assert (record.wait_seconds, record.run_seconds) == (1.0, 4.0)


@given(st.lists(st.tuples(st.sampled_from(["add", "drop", "undo", "encode"]), st.integers(1, 5))))
def test_a_history_encoded_a_record_at_a_time_reads_as_it_was(steps: list[tuple[str, int]]) -> None:
    from jqueue.core.formats.checkpoint import HistoryEncoder
    from jqueue.core.formats.wire import wire_history

    encoder, history, made = HistoryEncoder(), [], 0
    for action, count in steps:
        if action == "add":  # a new record each time, as a finished job makes
            for _ in range(count):
                made += 1
                history.append(dataclasses.replace(_sample_history(), job_id=f"job-{made}"))
        elif action == "drop":
            del history[:count]
        elif action == "undo" and history:  # a commit that failed: its records go again
            del history[-min(count, len(history)) :]
        else:
            assert bytes(encoder.encode(list(history))) == msgspec.json.encode(wire_history(history))
    assert bytes(encoder.encode(list(history))) == msgspec.json.encode(wire_history(history))


def test_the_spark_history_table_types_each_column_by_its_kind() -> None:
    from jqueue.adapters.spark.reader import HISTORY_COLUMNS, HISTORY_SCHEMA, history_row

    record = _sample_history()
    columns = dict(column.split(" ") for column in HISTORY_SCHEMA.split(", "))
    assert list(columns) == list(HISTORY_COLUMNS)
    assert (columns["created_at"], columns["attempts"], columns["wait_seconds"]) == (
        "timestamp",
        "bigint",
        "double",
    )
    row = dict(zip(HISTORY_COLUMNS, history_row(record), strict=True))
    assert row["first_claimed_at"] == from_micros(2_000_000)
    assert row["last_claimed_at"] == from_micros(5_000_000)
    assert (row["outcome"], row["error"], row["run_seconds"]) == ("dead", record.error, 4.0)


def test_job_ids_are_distinct_random_uuids_in_canonical_form() -> None:
    ids = [new_job_id() for _ in range(2000)] + [Job(entrypoint="e", payload=b"").id]
    assert len(set(ids)) == len(ids)
    for job_id in ids:
        parsed = uuid.UUID(job_id)
        assert (parsed.version, parsed.variant, str(parsed)) == (4, uuid.RFC_4122, job_id)
    for shift in (0, 40, 80, 127):  # random bits, not fixed ones
        assert {int(uuid.UUID(job_id)) >> shift & 1 for job_id in ids} == {0, 1}


def _sample_effect(effect: type[Any], n: int) -> Any:
    import types
    from typing import Annotated, Union, get_args, get_origin, get_type_hints

    plain = {bool: True, str: f"text-{n}", bytes: b"bytes"}
    by_kind = {Kind.TIME: T0 + n, Kind.COUNT: 5 + n, Kind.FRACTION: 0.25, Kind.SPAN: 1_000_000}
    arguments = []
    for hint in get_type_hints(effect, include_extras=True).values():
        if get_origin(hint) in (Union, types.UnionType):
            hint = get_args(hint)[0]  # the type that is not None
        arguments.append(by_kind[get_args(hint)[1]] if get_origin(hint) is Annotated else plain[hint])
    return effect(*arguments)


def test_every_effect_has_a_tag_and_round_trips_through_an_entry_with_every_field_set() -> None:
    from typing import get_args

    from jqueue.core.formats.entry import TAGS

    assert set(get_args(Effect)) == {Added, *TAGS}
    assert len(set(TAGS.values())) == len(TAGS)
    effects = [_sample_effect(effect, n) for n, effect in enumerate(TAGS)]
    for effect in effects:  # every field differs from its default
        assert all(getattr(effect, f.name) != f.default for f in dataclasses.fields(effect))
    decoded = entry_format.decode_entry(entry_format.encode_entry(3, "c", T0, effects), 3, "log/3")
    assert decoded.effects == effects
