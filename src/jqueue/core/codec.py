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

from jqueue.core.log_codec import decode_marker
from jqueue.domain.effects import from_micros
from jqueue.domain.errors import CorruptStateError
from jqueue.domain.index import QueueIndex
from jqueue.domain.models import Job, JobStatus, QueueState

_AwareDatetime = Annotated[datetime, msgspec.Meta(tz=True)]


class _WireJob(msgspec.Struct):
    id: str
    entrypoint: str
    payload: bytes
    status: JobStatus
    priority: int
    created_at: _AwareDatetime
    heartbeat_at: _AwareDatetime | None = None
    attempts: int = 0
    lease: str | None = None
    lease_expires_at: _AwareDatetime | None = None


class _WireState(msgspec.Struct):
    version: int
    jobs: list[_WireJob]
    commit: str | None = None


_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(_WireState)


def encode(state: QueueState, commit_id: str | None = None) -> bytes:
    """Serialise a state to JSON bytes.

    ``commit_id`` tags the bytes with the commit that wrote them, so that two
    writers producing the same state never produce the same object.
    """
    wire = _WireState(
        commit=commit_id,
        version=state.version,
        jobs=[
            _WireJob(
                j.id,
                j.entrypoint,
                j.payload,
                j.status,
                j.priority,
                j.created_at,
                j.heartbeat_at,
                j.attempts,
                j.lease,
                j.lease_expires_at,
            )
            for j in state.jobs
        ],
    )
    return _encoder.encode(wire)


def encode_index(index: QueueIndex, version: int, commit_id: str) -> bytes:
    """Serialise every job of an index (payloads in memory) as a state at ``version``."""
    jobs = []
    for r in index.in_order():
        if not isinstance(r.payload, bytes):
            raise ValueError(f"payload of {r.id} is not in memory")
        heartbeat = None if r.heartbeat is None else from_micros(r.heartbeat)
        expires = None if r.expires is None else from_micros(r.expires)
        wire = (r.id, r.entrypoint, r.payload, r.status, r.priority, from_micros(r.created), heartbeat)
        jobs.append(_WireJob(*wire, r.attempts, r.lease, expires))
    return _encoder.encode(_WireState(version=version, jobs=jobs, commit=commit_id))


def decode(data: bytes, location: str = "<bytes>") -> QueueState:
    """Deserialise JSON bytes to a state; empty bytes are an empty queue.

    Raises
    ------
    CorruptStateError
        If ``data`` is not a jqueue state; ``location`` names it in the message.
    """
    if not data:
        return QueueState()
    try:
        wire = _decoder.decode(data)
    except msgspec.DecodeError as exc:
        if decode_marker(data)[0]:
            raise CorruptStateError(
                location, "this queue uses the log-structured layout; open it with layout 'auto' or 'log'"
            ) from exc
        raise CorruptStateError(location, str(exc)) from exc
    jobs = tuple(
        Job.model_construct(
            id=w.id,
            entrypoint=w.entrypoint,
            payload=w.payload,
            status=w.status,
            priority=w.priority,
            created_at=w.created_at,
            heartbeat_at=w.heartbeat_at,
            attempts=w.attempts,
            lease=w.lease,
            lease_expires_at=w.lease_expires_at,
        )
        for w in wire.jobs
    )
    if len({j.id for j in jobs}) != len(jobs):
        raise CorruptStateError(location, "two jobs share an id")
    return QueueState.model_construct(jobs=jobs, version=wire.version)
