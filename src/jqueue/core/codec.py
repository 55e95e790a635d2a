"""``QueueState`` to JSON bytes and back: the documented codec, over the single-object format.

``encode`` writes what a single-object queue stores (``core/formats/single.py`` knows the
wire format); ``decode`` reads it, and an empty object reads as an empty state, as a queue
that was never written does.
"""

from __future__ import annotations

from jqueue.core.formats.single import decode_index, encode_index
from jqueue.domain.effects import Added
from jqueue.domain.index import QueueIndex
from jqueue.domain.models import QueueState
from jqueue.domain.schema import domain_values, job_from

__all__ = ["decode", "encode"]


def encode(state: QueueState) -> bytes:
    """Serialise ``state`` to the JSON bytes a single-object queue stores.

    Raises
    ------
    ValueError
        If two jobs share an id or a job's values do not fit together.
    """
    index = QueueIndex()
    index.apply_all(Added(*domain_values(job)) for job in state.jobs)
    return encode_index(index, state.version, None)


def decode(data: bytes, location: str = "<bytes>") -> QueueState:
    """Deserialise JSON bytes (as ``encode`` or a single-object queue wrote them) to a state.

    Raises
    ------
    CorruptStateError
        If ``data`` is not a jqueue state; ``location`` names where it came from.
    """
    index = decode_index(data, location)
    jobs = []
    for record in index.in_order():
        assert isinstance(record.payload, bytes)  # a decoded single object holds every payload
        jobs.append(job_from(record.as_added(), record.payload))
    return QueueState(jobs=tuple(jobs), version=index.version)
