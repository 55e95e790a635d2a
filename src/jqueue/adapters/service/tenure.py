"""``BrokerTenure``: which ``jqueue serve`` process serves a root, kept in a record in the storage.

The active broker rewrites the record (``ROOT/_broker.json``) every ``renew_every`` with a
compare-and-swap, raising its ``beat``. A standby reads the record as often; when it has not
changed for ``stale_after`` (measured on the standby's own monotonic clock, so clocks need
not agree), the standby takes it over by compare-and-swap with the next epoch. A broker
whose renewal loses its race, or that could not renew for ``stale_after``, stops serving.
Two brokers at once would only cost conflicts: every commit is a compare-and-swap anyway.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from datetime import datetime, timedelta
from enum import StrEnum

import msgspec

from jqueue.domain.errors import CASConflictError, CorruptStateError, JQueueError
from jqueue.domain.times import utc_now
from jqueue.ports.storage import ObjectStoragePort

logger = logging.getLogger(__name__)

RECORD_NAME = "_broker.json"
"""The broker record's name under the root (no queue name starts with ``_``)."""
DEFAULT_RENEW_EVERY = timedelta(seconds=1)
DEFAULT_STALE_AFTER = timedelta(seconds=3)


class Role(StrEnum):
    """What a ``jqueue serve`` process is doing for its root."""

    ACTIVE = "active"
    STANDBY = "standby"


class BrokerRecord(msgspec.Struct, forbid_unknown_fields=True):
    """The record: who serves the root (its advertised URL), since which epoch, a beat that
    every renewal raises, and whether its broker stopped (then anyone may take over at once)."""

    address: str
    epoch: int
    beat: int
    owner: str
    renewed_at: str
    released: bool = False


_decoder = msgspec.json.Decoder(BrokerRecord)


class BrokerTenure:
    """Holds (or waits for) the broker record of a root.

    Parameters
    ----------
    storage : ObjectStoragePort
        Where the record lives.
    address : str
        This process's URL for clients (``http://host:port``).
    renew_every, stale_after : timedelta
        How often the record is renewed (or looked at), and how long a record that does not
        change is trusted before a standby takes over.

    Attributes
    ----------
    since : datetime or None
        When this process last became the broker.
    """

    def __init__(
        self,
        storage: ObjectStoragePort,
        address: str,
        *,
        renew_every: timedelta = DEFAULT_RENEW_EVERY,
        stale_after: timedelta = DEFAULT_STALE_AFTER,
    ) -> None:
        if stale_after <= renew_every:
            raise ValueError("stale_after must be longer than renew_every")
        self.storage = storage
        self.address = address
        self.owner = uuid.uuid4().hex
        self.renew_every = renew_every.total_seconds()
        self.stale_after = stale_after.total_seconds()
        self.role = Role.STANDBY
        self.record: BrokerRecord | None = None
        self.since: datetime | None = None
        self._etag: str | None = None
        self._seen_at = time.monotonic()
        self._renewed_at = -float("inf")
        self._told: str | None = None  # the broker last said to be served while standing by

    def serving(self) -> bool:
        """Whether this process is the broker now: active, and renewed within ``stale_after``."""
        fresh = time.monotonic() - self._renewed_at < self.stale_after
        return self.role is Role.ACTIVE and fresh

    @property
    def epoch(self) -> int:
        """The epoch of the record last seen (0 before any)."""
        return 0 if self.record is None else self.record.epoch

    async def run(self) -> None:
        """Renew or watch the record every ``renew_every`` until cancelled (after a first
        ``look``)."""
        while True:
            await asyncio.sleep(self.renew_every)
            await self.look()

    async def look(self) -> None:
        """``step``, with a storage failure logged (and retried at the next look) instead of raised."""
        try:
            await self.step()
        except JQueueError as exc:
            logger.warning("the broker record at %s: %s", _where(self.storage), exc)

    async def step(self) -> None:
        """One look: renew the record if ours, else take it over if it is missing or stale."""
        if self.role is Role.ACTIVE:
            await self._write(self.epoch, self.record.beat + 1 if self.record else 1)
            return
        content, etag = await self.storage.read()
        now = time.monotonic()
        if etag != self._etag or self.record is None:
            self.record = _decoded(content, self.storage) if etag is not None else None
            self._etag, self._seen_at = etag, now
        released = self.record is not None and self.record.released
        if etag is None or released or now - self._seen_at >= self.stale_after:
            await self._write(self.epoch + 1, 1)
        elif self.record is not None and self.record.owner != self._told:
            self._told = self.record.owner
            logger.warning(
                "standing by: %s serves %s (epoch %d); taking over if its record goes %g s unrenewed",
                self.record.address, _where(self.storage), self.record.epoch, self.stale_after,
            )  # fmt: skip

    async def release(self) -> None:
        """Stop serving, marking the record released so that a standby takes over at once."""
        if self.role is Role.ACTIVE and self.record is not None:
            self._renewed_at = -float("inf")
            with contextlib.suppress(JQueueError):
                await self._write(self.epoch, self.record.beat + 1, released=True)
                logger.warning("stopped serving %s: released its broker record", _where(self.storage))
            self.role = Role.STANDBY

    async def _write(self, epoch: int, beat: int, *, released: bool = False) -> None:
        record = BrokerRecord(self.address, epoch, beat, self.owner, utc_now().isoformat(), released)
        try:
            self._etag = await self.storage.write(msgspec.json.encode(record), if_match=self._etag)
        except CASConflictError:
            if self.role is Role.ACTIVE:
                logger.warning("deposed: another broker took over %s", _where(self.storage))
            self.role, self._etag, self.record = Role.STANDBY, None, None  # the next step reads it
            return
        if released:
            self.record = record
            return
        if self.role is Role.STANDBY:
            logger.warning("serving as the broker of %s, epoch %d", _where(self.storage), epoch)
            self.since = utc_now()
        self.role, self.record, self._renewed_at = Role.ACTIVE, record, time.monotonic()


def _where(storage: ObjectStoragePort) -> str:
    return str(getattr(storage, "url", storage))


def _decoded(content: bytes, storage: ObjectStoragePort) -> BrokerRecord:
    try:
        return _decoder.decode(content)
    except (msgspec.DecodeError, UnicodeDecodeError) as exc:
        raise CorruptStateError(_where(storage), f"not a broker record: {exc}") from exc
