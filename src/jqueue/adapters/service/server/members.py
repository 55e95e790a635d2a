"""``Members``: the brokers that serve one root together, known through the bucket alone.

The members record (``ROOT/_brokers.json``, changed by compare-and-swap) names every member
and its address; each member keeps a beat of its own (``ROOT/_member-OWNER.json``), which it
raises every ``renew_every`` while another member watches it (a broker alone on its root
writes nothing on a timer), apart from its looks so that a slow look never stops it. Every
member reads the record, and the beats of the two members after it on the ring of ids
(``watched``), every ``renew_every``; a beat that has not changed for ``stale_after`` on the
watcher's own monotonic clock (no clocks compared, as ``BrokerTenure`` does) is a dead member,
which the watcher takes out of the record. A member that finds itself taken out (it was frozen, or cut
off from the bucket) joins again. Which member serves which queue follows from the record
(``domain.placement``); the queue's own log fences its commits (``Owned``, ADR 0022).
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Callable

import msgspec

from jqueue.adapters.service.wire.root import (
    BrokerRecord,
    MembersRecord,
    member_storage,
    members_record,
    members_storage,
)
from jqueue.core.loop.store import StorageUse
from jqueue.domain.errors import CASConflictError, JQueueError
from jqueue.domain.times import utc_now
from jqueue.ports.storage import ObjectStoragePort, RemovableStoragePort

logger = logging.getLogger(__name__)

WATCHED = 2
"""How many members each member watches (see ``watched``)."""
CHANGE_ATTEMPTS = 20
"""Lost compare-and-swaps of the members record retried before a change fails."""


class Members:
    """This broker's membership of ``root``, and what it knows of the other members.

    Parameters
    ----------
    root : str
        The root (a directory or a storage URL prefix).
    owner, address : str
        This broker's id and the URL it advertises.
    renew_every, stale_after : float
        Seconds between looks (and renewals while watched), and how long a beat may stay
        unchanged before its member counts as dead.
    clock : callable
        The monotonic clock beats are judged by (seconds).
    """

    def __init__(
        self,
        root: str,
        owner: str,
        address: str,
        *,
        renew_every: float,
        stale_after: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if stale_after <= 2 * renew_every:
            raise ValueError("stale_after must be longer than two renew_every")
        self.root, self.owner, self.address = root, owner, address
        self.renew_every, self.stale_after = renew_every, stale_after
        self.clock = clock
        self.record = MembersRecord()
        self.registry = members_storage(root)
        self._beat = member_storage(root, owner)
        self._beat_etag: str | None = None
        self._beats = 0
        self._renewing = asyncio.Lock()
        self._record_etag: str | None = None
        self.changed = True
        """Whether the members record changed since the look before the last (placements may have
        moved a queue away from this member and back meanwhile)."""
        self._seen: dict[str, tuple[str | None, float]] = {}  # member -> (its beat's etag, since when)
        self._held: dict[str, tuple[ObjectStoragePort, StorageUse]] = {}
        """The storages this member reads and writes every look, each held open (one client for all
        its looks, not one a call): the record's, its own beat's and the watched beats'."""

    async def open(self) -> None:
        """Hold the members record and this member's beat open until ``close``."""
        await self._hold({"": self.registry, self.owner: self._beat})

    async def close(self) -> None:
        """Let go of every storage held open."""
        held, self._held = self._held, {}
        for _, use in held.values():
            await use.__aexit__(None, None, None)

    async def _hold(self, storages: dict[str, ObjectStoragePort]) -> None:
        for key, storage in storages.items():
            if key not in self._held:
                use = StorageUse(storage)
                await use.__aenter__()
                self._held[key] = (storage, use)

    async def _watched_beats(self, members: list[str]) -> list[ObjectStoragePort]:
        """The beats of ``members``, held open while they are watched (those no longer watched are
        let go)."""
        keep = {"", self.owner, *members}
        for gone in [key for key in self._held if key not in keep]:
            await self._held.pop(gone)[1].__aexit__(None, None, None)
        await self._hold({m: member_storage(self.root, m) for m in members if m not in self._held})
        return [self._held[m][0] for m in members]

    @property
    def addresses(self) -> dict[str, str]:
        """The live members as last read, by id: their addresses (this one's included once joined)."""
        return dict(self.record.members)

    async def join(self) -> None:
        """Write this member's beat and add it to the members record."""
        await self._renew(fresh=True)
        await self._change(lambda members: members.__setitem__(self.owner, self.address))
        count = len(self.record.members)
        logger.warning("joined the brokers of %s as %s (members now: %d)", self.root, self.address, count)

    async def leave(self) -> None:
        """Take this member out of the record and remove its beat (a clean stop; a beat that
        cannot be removed is marked released)."""
        await self._change(lambda members: members.pop(self.owner, None))
        try:
            if isinstance(self._beat, RemovableStoragePort):
                await self._beat.remove()
                return
            record = BrokerRecord(self.address, 0, self._beats + 1, self.owner, utc_now().isoformat(), True)
            await self._beat.write(msgspec.json.encode(record), if_match=self._beat_etag)
        except JQueueError as exc:
            logger.warning("the beat of %s was not removed or marked released: %s", self.owner, exc)

    async def step(self) -> bool:
        """One look: read the record, raise this member's beat while others watch it, and take
        out the members whose beat stopped. Returns whether this member had been taken out (it
        joins again, and must give up the queues it served)."""
        content, etag = await self.registry.read()
        self.record = members_record(content, _where(self.registry)) if etag is not None else MembersRecord()
        self.changed, self._record_etag = etag != self._record_etag, etag
        if self.owner not in self.record.members:
            logger.warning("%s is no longer a member of %s's brokers: joining again", self.owner, self.root)
            await self.join()
            return True
        others = [member for member in self.record.members if member != self.owner]
        dead = await self._dead(watched(self.owner, others))
        if dead:
            logger.warning("taking out the brokers of %s whose beat stopped: %s", self.root, ", ".join(dead))

            def take_out(members: dict[str, str]) -> None:
                for member in dead:
                    members.pop(member, None)

            await self._change(take_out)
            await self._remove_beats(dead)
        return False

    async def beat(self) -> None:
        """Raise this member's beat if other members watch it (a member alone on its root writes
        nothing on a timer). Called every ``renew_every`` apart from ``step``, so that a slow look
        (queues to open on a slow bucket) never stops the beat and gets its member taken out."""
        if self.owner in self.record.members and len(self.record.members) > 1:
            await self._renew(fresh=False)

    async def _remove_beats(self, dead: list[str]) -> None:
        """Remove the beats of members taken out, so that brokers that come and go leave nothing
        behind. One that was only frozen writes its beat again when it joins again."""
        for member in dead:
            held = self._held.pop(member, None)
            if held is None:
                continue
            beat, use = held
            try:
                if isinstance(beat, RemovableStoragePort):
                    await beat.remove()
            except JQueueError as exc:
                logger.warning("the beat of %s was not removed: %s", member, exc)
            finally:
                await use.__aexit__(None, None, None)

    async def _dead(self, others: list[str]) -> list[str]:
        """Read the others' beats; return those unchanged for ``stale_after`` (or released)."""
        now = self.clock()
        self._seen = {member: seen for member, seen in self._seen.items() if member in others}
        reads = await asyncio.gather(*(beat.read() for beat in await self._watched_beats(others)))
        dead = []
        for member, (content, etag) in zip(others, reads, strict=True):
            released = etag is not None and _released(content)
            before = self._seen.get(member)
            if before is None or before[0] != etag:
                self._seen[member] = (etag, now)
            elif now - before[1] >= self.stale_after:
                dead.append(member)
            if released:
                dead.append(member)
        return sorted(set(dead))

    async def _renew(self, *, fresh: bool) -> None:
        async with self._renewing:  # ``join`` (in a look) and ``beat`` write the same object
            self._beats += 1
            record = BrokerRecord(self.address, 0, self._beats, self.owner, utc_now().isoformat())
            if fresh:
                self._beat_etag = (await self._beat.read())[1]
            try:
                encoded = msgspec.json.encode(record)
                self._beat_etag = await self._beat.write(encoded, if_match=self._beat_etag)
            except CASConflictError:
                self._beat_etag = (await self._beat.read())[1]  # written by an earlier life: next time

    async def _change(self, edit: Callable[[dict[str, str]], object]) -> None:
        """Apply ``edit`` to the newest members and write them back by compare-and-swap, unless
        it changes nothing (both watchers of a dead member take it out: the second need not
        race the others for the one key every member writes)."""
        for attempt in range(CHANGE_ATTEMPTS):
            content, etag = await self.registry.read()
            record = members_record(content, _where(self.registry)) if etag is not None else MembersRecord()
            before = dict(record.members)
            edit(record.members)
            if etag is not None and record.members == before:
                self.record = record
                return
            try:
                await self.registry.write(msgspec.json.encode(record), if_match=etag)
            except CASConflictError:
                await asyncio.sleep(random.uniform(0, 0.05 * (attempt + 1)))
                continue
            self.record = record
            return
        raise CASConflictError(f"the members record at {_where(self.registry)} kept changing")


def watched(me: str, others: list[str]) -> list[str]:
    """The members whose beat ``me`` reads: the ``WATCHED`` that follow it on the ring of ids, so
    that each member is watched by that many and a look costs O(members) reads in all, not
    O(members²). A run of more than ``WATCHED`` members dying together is found a few at a time."""
    ring = sorted(others)
    after = [member for member in ring if member > me] + [member for member in ring if member < me]
    return after[:WATCHED]


def _released(content: bytes) -> bool:
    try:
        return msgspec.json.decode(content, type=BrokerRecord).released
    except (msgspec.DecodeError, UnicodeDecodeError):
        return False  # not a beat: it counts as one that does not change


def _where(storage: object) -> str:
    return str(getattr(storage, "url", storage))
