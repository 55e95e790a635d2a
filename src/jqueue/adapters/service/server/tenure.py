"""``BrokerTenure``: which ``jqueue serve`` process serves a root, kept in a record in the storage.

The active broker reads the record (``ROOT/_broker.json``) every ``renew_every``; while a
standby watches, it rewrites it instead, with a compare-and-swap raising its ``beat``, so
that a broker alone on its root writes nothing on a timer. A standby reads the record as
often; when it has not changed for a while, the standby raises the beat itself (a watch:
the active broker, seeing a beat it did not write under its own owner and epoch, renews
from then on, for ``WATCH_LASTS``). When the record still has not changed for
``stale_after`` (measured on the standby's own monotonic clock, so clocks need not agree),
and the broker had time to answer the watch, the standby takes it over by compare-and-swap
with the next epoch. A broker that finds another owner or epoch in the record, or that
could not read or renew it for ``stale_after``, stops serving. Two brokers at once would
only cost conflicts: every commit is a compare-and-swap anyway.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
import uuid
from datetime import datetime, timedelta
from enum import StrEnum

import msgspec

from jqueue.adapters.service.wire.root import BrokerRecord, broker_record
from jqueue.domain.errors import CASConflictError, CorruptStateError, JQueueError
from jqueue.domain.times import utc_now
from jqueue.ports.storage import ObjectStoragePort

logger = logging.getLogger(__name__)

DEFAULT_RENEW_EVERY = timedelta(seconds=1)
DEFAULT_STALE_AFTER = timedelta(seconds=3)
WATCH_LASTS = timedelta(seconds=60)
"""How long an active broker renews after it last saw a standby's watch."""
QUIET_RENEWALS = 1.5
"""How many ``renew_every`` a record may stay unchanged before a standby watches it."""
_NEVER = -math.inf


class Role(StrEnum):
    """What a ``jqueue serve`` process is doing for its root."""

    ACTIVE = "active"
    STANDBY = "standby"


class BrokerTenure:
    """Holds (or waits for) the broker record of a root.

    Parameters
    ----------
    storage : ObjectStoragePort
        Where the record lives.
    address : str
        This process's URL for clients (``http://host:port``).
    renew_every, stale_after : timedelta
        How often the record is looked at (and renewed while watched), and how long a record
        that does not change is trusted before a standby takes over.
    watch_lasts : timedelta
        How long the active broker renews after a standby's last watch.
    member : bool
        Whether this process is one of the root's members, which serve their share of the queues
        whoever holds the record (the record only names the root's front door then).

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
        watch_lasts: timedelta = WATCH_LASTS,
        member: bool = False,
    ) -> None:
        if stale_after <= renew_every:
            raise ValueError("stale_after must be longer than renew_every")
        self.member = member
        self.storage = storage
        self.address = address
        self.owner = uuid.uuid4().hex
        self.renew_every = renew_every.total_seconds()
        self.stale_after = stale_after.total_seconds()
        self.watch_lasts = watch_lasts.total_seconds()
        self.role = Role.STANDBY
        self.record: BrokerRecord | None = None
        self.since: datetime | None = None
        self._etag: str | None = None
        self._seen_at = time.monotonic()
        self._watched_at: float | None = None  # a standby: since when a watch waits for an answer
        self._watch_seen_at = _NEVER  # a standby: the last watch of this broker (any standby's)
        self._confirmed_at = _NEVER  # the active broker: when it last found the record its own
        self._renew_until = _NEVER  # the active broker: renew (not only read) until then
        self._told: str | None = None  # the broker last said to be served while standing by

    def serving(self) -> bool:
        """Whether this process is the broker now: active, and its record confirmed within
        ``stale_after``."""
        fresh = time.monotonic() - self._confirmed_at < self.stale_after
        return self.role is Role.ACTIVE and fresh

    @property
    def epoch(self) -> int:
        """The epoch of the record last seen (0 before any)."""
        return 0 if self.record is None else self.record.epoch

    async def run(self) -> None:
        """Look at the record every ``renew_every`` until cancelled (after a first ``look``)."""
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
        """One look: as the broker, renew the record while watched, else read it; standing by,
        watch it, and take it over if it is missing, released, or stale though watched."""
        if self.role is Role.ACTIVE:
            if time.monotonic() < self._renew_until:
                await self._renew()
            else:
                await self._confirm(*await self.storage.read())
            return
        content, etag = await self.storage.read()
        now = time.monotonic()
        if etag != self._etag or self.record is None:
            self._saw(_decoded(content, self.storage) if etag is not None else None, etag, now)
        if self.record is None or self.record.released or self._unanswered(now):
            await self._write(self.epoch + 1, 1)
        elif self._watched_at is None and (
            now - self._seen_at >= QUIET_RENEWALS * self.renew_every or self._watch_seen_at == _NEVER
        ):  # quiet, or a broker no watch was seen of yet: it may not know of any standby
            await self._watch(self.record)
        elif self.record.owner != self._told:
            self._told = self.record.owner
            said = (
                "%s is the root's front door (%s, epoch %d); taking the record over if it goes %g s unrenewed"
                if self.member
                else "standing by: %s serves %s (epoch %d); taking over if its record goes %g s unrenewed"
            )
            record = self.record
            logger.warning(said, record.address, _where(self.storage), record.epoch, self.stale_after)

    def _saw(self, record: BrokerRecord | None, etag: str | None, now: float) -> None:
        """A standby read a changed record: another broker (start watching it afresh), a renewal
        (a sign of life), or another standby's watch (no sign of life: ours need not follow)."""
        previous, self.record, self._etag = self.record, record, etag
        if record is None or previous is None or _tenure(record) != _tenure(previous):
            self._seen_at, self._watched_at, self._watch_seen_at = now, None, _NEVER
        elif record.renewed_at != previous.renewed_at or record.released:
            self._seen_at, self._watched_at = now, None
        else:
            self._watch_seen_at = now
            self._watched_at = now if self._watched_at is None else self._watched_at

    def _unanswered(self, now: float) -> bool:
        """Whether the record went ``stale_after`` unchanged while its broker had to renew it (it
        renewed after a watch of it, within ``watch_lasts``), or a watch since had time for an
        answer."""
        if now - self._seen_at < self.stale_after:
            return False
        renewing = (
            self._watch_seen_at
            < self._seen_at
            < self._watch_seen_at + self.watch_lasts - 2 * self.renew_every
        )
        if renewing:
            return True
        answered_in = max(self.renew_every, self.stale_after - QUIET_RENEWALS * self.renew_every)
        return self._watched_at is not None and now - self._watched_at >= answered_in

    async def release(self) -> None:
        """Stop serving, marking the record released so that a standby takes over at once."""
        if self.role is Role.ACTIVE and self.record is not None:
            self._confirmed_at = _NEVER
            with contextlib.suppress(JQueueError):
                await self._write(self.epoch, self.record.beat + 1, released=True)
                logger.warning("stopped serving %s: released its broker record", _where(self.storage))
            self.role = Role.STANDBY

    async def _renew(self) -> None:
        """Raise the beat; when another process changed the record meanwhile, look at it."""
        assert self.record is not None
        record = BrokerRecord(
            self.address, self.epoch, self.record.beat + 1, self.owner, utc_now().isoformat()
        )
        try:
            self._etag = await self.storage.write(msgspec.json.encode(record), if_match=self._etag)
        except CASConflictError:
            await self._confirm(*await self.storage.read())
            return
        self.record, self._confirmed_at = record, time.monotonic()

    async def _confirm(self, content: bytes, etag: str | None) -> None:
        """The active broker read the record: its own (unchanged, or a standby's watch: renew from
        now on), or another's (deposed)."""
        now = time.monotonic()
        if etag is not None and etag == self._etag:
            self._confirmed_at = now
            return
        try:
            record = _decoded(content, self.storage) if etag is not None else None
        except CorruptStateError:
            self.role, self._etag, self.record = Role.STANDBY, None, None
            raise
        if record is None or (record.owner, record.epoch, record.released) != (self.owner, self.epoch, False):
            logger.warning("deposed: another broker took over %s", _where(self.storage))
            self.role, self._etag, self.record = Role.STANDBY, None, None  # the next step reads it
            return
        self._etag, self.record, self._confirmed_at = etag, record, now
        self._renew_until = now + self.watch_lasts
        await self._renew()  # at once: the standby waits for an answer only so long

    async def _watch(self, record: BrokerRecord) -> None:
        """Raise the record's beat, unchanged otherwise: an active broker that stopped renewing
        (nobody watched) renews again; a dead one does not, and is then taken over."""
        raised = msgspec.structs.replace(record, beat=record.beat + 1)
        try:
            self._etag = await self.storage.write(msgspec.json.encode(raised), if_match=self._etag)
        except CASConflictError:
            self._etag = None  # changed meanwhile: the next step reads it
            return
        self.record, self._watched_at = raised, time.monotonic()
        self._watch_seen_at = self._watched_at

    async def _write(self, epoch: int, beat: int, *, released: bool = False) -> None:
        record = BrokerRecord(self.address, epoch, beat, self.owner, utc_now().isoformat(), released)
        try:
            self._etag = await self.storage.write(msgspec.json.encode(record), if_match=self._etag)
        except CASConflictError:
            if self.role is Role.ACTIVE:
                logger.warning("deposed: another broker took over %s", _where(self.storage))
                self.role, self.record = Role.STANDBY, None
            self._etag = None  # the next step reads it (a standby compares it with the last seen)
            return
        if released:
            self.record = record
            return
        now = time.monotonic()
        if self.role is Role.STANDBY:
            logger.warning("serving as the broker of %s, epoch %d", _where(self.storage), epoch)
            self.since = utc_now()
        self.role, self.record, self._confirmed_at = Role.ACTIVE, record, now


def _tenure(record: BrokerRecord) -> tuple[str, int]:
    """Which broker holds a record, whatever its beat."""
    return record.owner, record.epoch


def _where(storage: ObjectStoragePort) -> str:
    return str(getattr(storage, "url", storage))


def _decoded(content: bytes, storage: ObjectStoragePort) -> BrokerRecord:
    return broker_record(content, _where(storage))
