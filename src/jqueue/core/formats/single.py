"""The single-object format: the whole queue in one JSON object (the documented layout).

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

from typing import TYPE_CHECKING

import msgspec

from jqueue.core.formats import wire as shared
from jqueue.core.formats.entry import decode_marker
from jqueue.domain.effects import Added
from jqueue.domain.errors import CorruptStateError
from jqueue.domain.index import QueueIndex
from jqueue.domain.schema import STORED_FIELDS, TIME_FIELDS, domain_values, public_constructor
from jqueue.domain.times import checked_time

_DOCUMENTED = ("id", "entrypoint", "payload", "status", "priority", "created_at", "heartbeat_at")
"""The documented fields, first and in the documented order; the others follow in ``JobFields`` order."""
_FIELDS = sorted(STORED_FIELDS, key=lambda f: _DOCUMENTED.index(f.public) if f.public in _DOCUMENTED else 99)

if TYPE_CHECKING:

    class _WireJob(shared.DerivedStruct):
        """A job on the wire: its ``Job`` attribute names, times as ISO 8601; a nullable field may
        be missing."""

else:
    _WireJob = msgspec.defstruct(
        "_WireJob",
        [
            (f.public, shared.wire_type(f, shared.AwareDatetime))
            if f.required and not f.nullable
            else (f.public, shared.wire_type(f, shared.AwareDatetime), f.default)
            for f in _FIELDS
        ],
        kw_only=True,
    )
_wire_job = public_constructor(_WireJob)


class _WireState(msgspec.Struct, omit_defaults=True):
    version: shared.Count
    jobs: list[_WireJob]
    commit: str | None = None
    history: shared.WireHistories = []
    controls: shared.WireControls | None = None


_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(_WireState)


def encode_index(index: QueueIndex, version: int, commit_id: str | None) -> bytes:
    """Serialise every job of an index (payloads in memory), its history and its controls as a
    state at ``version``, tagged with the commit that writes it (so that two writers producing
    the same state never produce the same object)."""
    jobs = []
    index.dependencies.flatten()
    for record in index.in_order():
        if not isinstance(record.payload, bytes):
            raise ValueError(f"payload of {record.id} is not in memory")
        jobs.append(_wire_job(record, record.payload))
    controls = index.controls.to_dict()
    state = _WireState(
        version=version,
        jobs=jobs,
        commit=commit_id,
        history=shared.wire_history(list(index.history)),
        controls=shared.WireControls(**controls) if any(controls.values()) else None,
    )
    return _encoder.encode(state)


def _decode_wire(data: bytes, location: str) -> _WireState:
    try:
        wire = _decoder.decode(data)
    except shared.UNDECODABLE as exc:
        if decode_marker(data, location)[0]:
            raise CorruptStateError(
                location, "this queue uses the log-structured layout; open it with layout 'auto' or 'log'"
            ) from exc
        raise CorruptStateError(location, str(exc)) from exc
    if len({w.id for w in wire.jobs}) != len(wire.jobs):
        raise CorruptStateError(location, "two jobs share an id")
    return wire


def _in_range(added: Added) -> Added:
    """Return ``added`` if each of its times fits a datetime (as UTC), else raise ``TimeRangeError``."""
    for f in TIME_FIELDS:
        value = getattr(added, f.name)
        for time in value if isinstance(value, tuple) else (value,):
            if time is not None:
                checked_time(time, f"the {f.name} of job {added.id!r}")
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
        index.apply_all(_in_range(Added(*domain_values(job))) for job in wire.jobs)
    except ValueError as exc:
        raise CorruptStateError(location, str(exc)) from exc
    index.restore(shared.history_from_wire(wire.history), shared.controls_from_wire(wire.controls))
    index.version = wire.version
    return index
