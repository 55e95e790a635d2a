"""The wire format: the one place that knows how a ``QueueState`` becomes bytes.

The object is compact JSON with the documented fields, plus ``commit``, the
random id of the commit that wrote it::

    {"version": 3, "jobs": [{"id": "...", "entrypoint": "send_email",
      "payload": "<base64>", "status": "queued", "priority": 0,
      "created_at": "2024-01-01T12:00:00Z", "heartbeat_at": null}],
     "commit": "5f0c..."}

States written by the original jqueue (pretty-printed, ``+00:00`` offsets) decode
unchanged. Decoding validates the structure in one pass with msgspec, so a foreign
or damaged object is rejected before anything could overwrite it.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

import msgspec

from jqueue.core.log_codec import (
    UNDECODABLE,
    Count,
    Int64,
    WireControls,
    WireHistory,
    controls_from_wire,
    decode_marker,
    history_from_wire,
    wire_history,
)
from jqueue.domain.effects import MAX_MICROS, MIN_MICROS, Added, from_micros
from jqueue.domain.errors import CorruptStateError
from jqueue.domain.index import QueueIndex
from jqueue.domain.models import Job, JobStatus, QueueState
from jqueue.domain.records import added_from

_AwareDatetime = Annotated[datetime, msgspec.Meta(tz=True)]


class _WireJob(msgspec.Struct):
    id: str
    entrypoint: str
    payload: bytes
    status: JobStatus
    priority: Int64
    created_at: _AwareDatetime
    heartbeat_at: _AwareDatetime | None = None
    attempts: Count = 0
    lease: str | None = None
    lease_expires_at: _AwareDatetime | None = None
    max_attempts: Count | None = None
    not_before: _AwareDatetime | None = None
    deadline: _AwareDatetime | None = None
    dedup_key: str | None = None
    last_error: str | None = None
    dead_reason: str | None = None
    dead_at: _AwareDatetime | None = None
    claimed_at: tuple[_AwareDatetime, ...] = ()
    batch: str | None = None


_JOB_FIELDS = _WireJob.__struct_fields__


class _WireState(msgspec.Struct, omit_defaults=True):
    version: Count
    jobs: list[_WireJob]
    commit: str | None = None
    history: list[WireHistory] = []
    controls: WireControls | None = None


_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(_WireState)


def encode(state: QueueState, commit_id: str | None = None) -> bytes:
    """Serialise a state to JSON bytes.

    ``commit_id`` tags the bytes with the commit that wrote them, so that two
    writers producing the same state never produce the same object.
    """
    jobs = [_WireJob(*(getattr(j, name) for name in _JOB_FIELDS)) for j in state.jobs]
    return _encoder.encode(_WireState(commit=commit_id, version=state.version, jobs=jobs))


def _datetime(micros: int | None) -> datetime | None:
    return None if micros is None else from_micros(micros)


def encode_index(index: QueueIndex, version: int, commit_id: str) -> bytes:
    """Serialise every job of an index (payloads in memory), its history and its controls as a
    state at ``version``."""
    jobs = []
    for r in index.in_order():
        if not isinstance(r.payload, bytes):
            raise ValueError(f"payload of {r.id} is not in memory")
        head = (
            r.id,
            r.entrypoint,
            r.payload,
            r.status,
            r.priority,
            from_micros(r.created),
            _datetime(r.heartbeat),
        )
        times = (_datetime(r.not_before), _datetime(r.deadline))
        wire = _WireJob(*head, r.attempts, r.lease, _datetime(r.expires), r.max_attempts, *times, r.dedup_key)
        wire.last_error, wire.dead_reason, wire.dead_at = r.last_error, r.dead_reason, _datetime(r.dead_at)
        wire.claimed_at, wire.batch = tuple(map(from_micros, r.claims)), r.batch
        jobs.append(wire)
    controls = index.controls.to_dict()
    state = _WireState(
        version=version,
        jobs=jobs,
        commit=commit_id,
        history=wire_history(list(index.history)),
        controls=WireControls(**controls) if any(controls.values()) else None,
    )
    return _encoder.encode(state)


def _decode_wire(data: bytes, location: str) -> _WireState:
    try:
        wire = _decoder.decode(data)
    except UNDECODABLE as exc:
        if decode_marker(data)[0]:
            raise CorruptStateError(
                location, "this queue uses the log-structured layout; open it with layout 'auto' or 'log'"
            ) from exc
        raise CorruptStateError(location, str(exc)) from exc
    if len({w.id for w in wire.jobs}) != len(wire.jobs):
        raise CorruptStateError(location, "two jobs share an id")
    return wire


def _jobs(wire: _WireState) -> tuple[Job, ...]:
    return tuple(Job.model_construct(**{name: getattr(w, name) for name in _JOB_FIELDS}) for w in wire.jobs)


def decode(data: bytes, location: str = "<bytes>") -> QueueState:
    """Deserialise JSON bytes to a state (its jobs); empty bytes are an empty queue.

    Raises
    ------
    CorruptStateError
        If ``data`` is not a jqueue state; ``location`` names it in the message.
    """
    if not data:
        return QueueState()
    wire = _decode_wire(data, location)
    return QueueState.model_construct(jobs=_jobs(wire), version=wire.version)


def _in_range(added: Added) -> Added:
    """Return ``added`` if each of its times fits a datetime (as UTC), else raise ValueError."""
    a = added
    times = (a.created, a.heartbeat, a.expires, a.not_before, a.deadline, a.dead_at, *a.claims)
    if any(t is not None and not MIN_MICROS <= t <= MAX_MICROS for t in times):
        raise ValueError(f"job {a.job_id} has a time outside the years 1 to 9999")
    return added


def decode_index(data: bytes, location: str = "<bytes>") -> QueueIndex:
    """Deserialise JSON bytes to an index with the jobs, history and controls they hold.

    Raises
    ------
    CorruptStateError
        If ``data`` is not a jqueue state or its jobs do not fit together.
    """
    if not data:
        return QueueIndex()
    wire = _decode_wire(data, location)
    index = QueueIndex()
    try:
        index.apply_all(map(_in_range, map(added_from, _jobs(wire))))
    except ValueError as exc:
        raise CorruptStateError(location, str(exc)) from exc
    index.restore(history_from_wire(wire.history), controls_from_wire(wire.controls))
    index.version = wire.version
    return index
