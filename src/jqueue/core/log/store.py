"""``LogStore``: the log-structured layout, where each commit creates one immutable entry.

Committing entry ``seq`` means creating ``log/<seq>`` only if it is absent: winning
the create is winning the compare-and-swap, and it costs O(batch), whatever the
depth. A writer that loses reads the entries it missed, re-applies its batch and
tries the next number. Readers catch up with one GET per new entry (past 8, with a listing
and parallel GETs, from the newest checkpoint if it is ahead), and learn that they are up to
date with one GET that finds nothing.

After every ``checkpoint_every`` changes (or one per 20 live jobs up to 50,000, if more) in at
least 64 entries (``LogSettings.checkpoint_due``), a checkpoint of the jobs' metadata is
written in the background (payloads stay in the entry that first carried them), and old
entries and checkpoints are compacted.
Compaction removes only what a checkpoint older than ``retention`` covers. A writer
whose view of the log is older than half the retention looks for a newer checkpoint
before it commits, and a create or a catch-up that answers later than that is checked
against the checkpoints, so no commit that re-created a compacted entry is acknowledged.
That assumes clocks agree to well within half the retention (docs/architecture.md, §6).

A payload stays in the object that first carried it (a log entry, a bulk write's part, or the
base of a migrated queue); ``PayloadReader`` reads it by reference, recent segments from a
``SegmentCache``, others fetched once however many callers wait.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import sys
import time
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta

from jqueue.core.formats.entry import (
    CHECKPOINT_PREFIX,
    ENTRY_PREFIX,
    GENESIS,
    Entry,
    checkpoint_key,
    checkpoint_name,
    decode_entry,
    decode_marker,
    decode_payloads,
    encode_entry,
    encode_genesis,
    encode_marker,
    entry_commit_id,
    entry_name,
    entry_seq,
)
from jqueue.core.formats.payload_refs import payload_place, payload_ref
from jqueue.core.log.checkpoints import Checkpoints, Pending, SlabsLostError
from jqueue.core.log.compaction import checkpoint_covers
from jqueue.core.log.parts import is_part, part_name
from jqueue.core.loop.retry import RetryPolicy
from jqueue.core.loop.store import CommitStore, check_not_empty, describe_named
from jqueue.domain.effects import Added, Effect
from jqueue.domain.errors import CASConflictError, CommitUnknownError, CorruptStateError
from jqueue.domain.index import QueueIndex
from jqueue.domain.schema import Payload
from jqueue.domain.spec import POSITIVE_SPAN
from jqueue.domain.times import span_micros, to_micros, utc_now
from jqueue.domain.values import Bounds
from jqueue.ports.storage import KeyedStoragePort

logger = logging.getLogger("jqueue")

_FETCH_CONCURRENCY = 16
_SEQUENTIAL_CATCH_UP = 8
"""Entries a refresh reads one by one before it lists the rest (and the newest checkpoint) and
fetches them in parallel."""


def segment_name(segment: int, base: str | None, location: str) -> str:
    """Return the name of the object holding payload segment ``segment``: a part, an entry, or
    for segment 0 the ``base`` of a migrated queue (a queue at ``location`` without one has none)."""
    if is_part(segment):
        return part_name(segment)
    if segment == 0:
        if base is None:
            raise CorruptStateError(location, "a payload refers to a base object it does not have")
        return base
    return entry_name(segment)


class PayloadReader:
    """Reads payloads by reference, through a cache of recent segments.

    Parameters
    ----------
    keyed : KeyedStoragePort
        The queue's storage.
    location : str
        The queue's main object, for messages.
    cache_bytes : int
        Payload bytes of recent segments kept in memory.
    """

    def __init__(self, keyed: KeyedStoragePort, location: str, cache_bytes: int) -> None:
        self.keyed = keyed
        self.location = location
        self.cache = SegmentCache(cache_bytes)
        self._loading: dict[int, asyncio.Future[Sequence[bytes]]] = {}

    def where(self, name: str) -> str:
        """Return the location of a named object of the queue, for messages."""
        return describe_named(self.keyed, name)

    async def payloads(self, payloads: Sequence[Payload], base: str | None) -> list[bytes]:
        """Return each payload's bytes, reading the segments that are not cached (``base``: the
        object of segment 0, if the queue was migrated)."""
        found: list[bytes] = []
        for payload in payloads:
            if isinstance(payload, bytes):
                found.append(payload)
                continue
            segment, position = payload_place(payload)
            payloads_there = self.cache.get(segment) or await self._load(segment, base)
            if position >= len(payloads_there):
                name = segment_name(segment, base, self.location)
                raise CorruptStateError(self.where(name), f"has no payload {position}")
            found.append(payloads_there[position])
        return found

    async def _load(self, segment: int, base: str | None) -> Sequence[bytes]:
        """Fetch a segment once, however many callers need it at the same time."""
        loading = self._loading.get(segment)
        if loading is None:
            loading = self._loading[segment] = asyncio.ensure_future(self._fetch(segment, base))
            loading.add_done_callback(lambda _: self._loading.pop(segment, None))
        return await asyncio.shield(loading)

    async def _fetch(self, segment: int, base: str | None) -> Sequence[bytes]:
        name = segment_name(segment, base, self.location)
        data = await self.keyed.get(name)
        if data is None:
            raise CorruptStateError(self.where(name), "a live job's payload entry is missing")
        payloads = decode_payloads(data, segment, self.where(name))
        self.cache.put(segment, payloads)
        return payloads


MIN_RETENTION = timedelta(seconds=1)
RETENTION = Bounds(ge=MIN_RETENTION)
"""The bounds of ``LogSettings.retention``."""
CHECKPOINT_EVERY = Bounds(ge=1)
"""The bounds of ``LogSettings.checkpoint_every``."""
JOBS_PER_CHECKPOINT_CHANGE = 20
CHECKPOINT_INTERVAL_CAP = 50_000
"""The most changes a deep queue leaves between checkpoints (unless ``checkpoint_every`` says
more): what a new reader replays, and holds as records, before its first call."""
ENTRIES_PER_CHECKPOINT = 64
"""The fewest log entries between checkpoints (or ``checkpoint_every``, if fewer), unless the
changes reach ``CHECKPOINT_INTERVAL_CAP``: a checkpoint costs several requests on object
storage, and a group commit folds hundreds of changes into one entry."""


@dataclass(frozen=True)
class LogSettings:
    """How a log-structured queue checkpoints, compacts and caches.

    Attributes
    ----------
    checkpoint_every : int
        Changes (effects: an enqueue, a claim, an ack...) between checkpoints of the
        jobs' metadata, at least, in at least ``ENTRIES_PER_CHECKPOINT`` log entries (or
        this many, if fewer). A checkpoint writes the rows of the jobs changed since
        the last one, plus a manifest of a byte per stored row (compressed), and a new
        reader replays every change after it, so a deep queue waits for one change per
        ``JOBS_PER_CHECKPOINT_CHANGE`` live jobs, up to ``CHECKPOINT_INTERVAL_CAP``
        changes: the manifests stay flat per change, and so does a new reader's replay.
    retention : timedelta
        How long entries and checkpoints stay after a newer checkpoint covers them
        (the history that readers and analytics can still see), at least one second.
        Writers whose view is older than half of it look for a newer checkpoint before
        committing; a commit answered later than that is acknowledged only if no
        checkpoint covers it (else ``CommitUnknownError``), so the clocks of all
        processes must agree to well within half of it.
    payload_cache_bytes : int
        Memory the payloads of recent entries kept to answer dequeues take at most.
    part_lifetime : timedelta
        How long a bulk write's part (payloads written beside the queue) may wait to be
        linked: ``stage_parts`` refuses older parts, and compaction deletes a part that no
        job refers to once it is this old (the parts of writes that died, too).
    """

    checkpoint_every: int = 1000
    retention: timedelta = timedelta(hours=1)
    payload_cache_bytes: int = 64 * 1024 * 1024
    part_lifetime: timedelta = timedelta(days=1)

    def interval(self, live_jobs: int) -> int:
        """Return how many changes to leave between checkpoints of ``live_jobs`` jobs."""
        deep = min(live_jobs // JOBS_PER_CHECKPOINT_CHANGE, CHECKPOINT_INTERVAL_CAP)
        return max(self.checkpoint_every, deep)

    def checkpoint_due(self, changes: int, entries: int, live_jobs: int) -> bool:
        """Whether ``changes`` in ``entries`` log entries since the last checkpoint call for the
        next one, with ``live_jobs`` jobs (``interval``, ``ENTRIES_PER_CHECKPOINT``)."""
        if changes < self.interval(live_jobs):
            return False
        return (
            entries >= min(ENTRIES_PER_CHECKPOINT, self.checkpoint_every)
            or changes >= CHECKPOINT_INTERVAL_CAP
        )

    def __post_init__(self) -> None:
        CHECKPOINT_EVERY.check("checkpoint_every", self.checkpoint_every)
        RETENTION.check("retention", self.retention)
        POSITIVE_SPAN.check("part_lifetime", self.part_lifetime)


class SegmentCache:
    """Least-recently-used payloads by segment number, up to ``max_bytes`` of memory.

    A segment's payloads are kept as a tuple: a tuple of bytes is one the cyclic collector
    stops tracking, so a full collection does not visit the tens of thousands a shallow queue
    caches (a list it would).

    Parameters
    ----------
    max_bytes : int
        Memory the payloads kept take at most, their objects' and tuples' own included (a
        payload of 100 bytes takes 141); a segment larger than that is not kept.
    """

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._segments: OrderedDict[int, tuple[bytes, ...]] = OrderedDict()
        self._sizes: dict[int, int] = {}
        self._total = 0

    def get(self, segment: int) -> tuple[bytes, ...] | None:
        """Return the payloads of ``segment`` if cached."""
        payloads = self._segments.get(segment)
        if payloads is not None:
            self._segments.move_to_end(segment)
        return payloads

    def put(self, segment: int, payloads: Sequence[bytes]) -> None:
        """Keep the payloads of ``segment``, evicting the least recently used."""
        kept = tuple(payloads)
        size = sys.getsizeof(kept) + sum(map(sys.getsizeof, kept))
        if not kept or size > self.max_bytes or segment in self._segments:
            return
        self._segments[segment] = kept
        self._sizes[segment] = size
        self._total += size
        while self._total > self.max_bytes:
            evicted, _ = self._segments.popitem(last=False)
            self._total -= self._sizes.pop(evicted)


class LogStore(CommitStore):
    """A queue kept as a log of immutable entries plus periodic checkpoints.

    A lost race here means another writer created the next entry: the loser reads the entries
    it missed and tries again within ``conflict_delay`` (40 ms at most, not the policy's 0.32
    s). While a process's commit waits, so do its other callers (a group commit's acks and
    heartbeats); longer waits let a process fall ever further behind busy peers until its
    leases ran out. A single object's race window is its whole state's encoding, so there the
    racers keep the policy's longer spacing.

    Parameters
    ----------
    storage : KeyedStoragePort
        The backend; its main object holds the layout marker.
    retry : RetryPolicy
        How often and how patiently to retry a conflicting commit or a failed read.
    settings : LogSettings
        Checkpoint interval, retention and payload cache size.
    base : str or None
        The object holding the jobs a migrated queue started with (segment 0).
    created : bool
        Whether the queue exists; if not, it reads as empty and its first commit creates
        it (``GENESIS``, then the marker), so that reading never creates anything.
    """

    conflict_delay = 0.04
    applies_ahead = True

    def __init__(
        self,
        storage: KeyedStoragePort,
        retry: RetryPolicy,
        settings: LogSettings,
        base: str | None = None,
        *,
        created: bool = True,
    ) -> None:
        super().__init__(storage, retry)
        self.keyed = storage
        self.settings = settings
        self.base = base
        self.created = created
        self._payloads = PayloadReader(storage, self.location, settings.payload_cache_bytes)
        self._cache = self._payloads.cache
        self._confirmed_at = -math.inf
        self._read_back: dict[int, bytes] = {}
        self._changes_since_checkpoint = self._entries_since_checkpoint = 0
        self._background: asyncio.Task[None] | None = None
        self._explicit = asyncio.Lock()
        self._checkpoints = Checkpoints(storage, retry, settings)
        self._base_applied = False

    def where(self, name: str) -> str:
        """Return the location of a named object (or with "" of the namespace), for messages."""
        return self._payloads.where(name)

    def _segment_name(self, segment: int) -> str:
        return segment_name(segment, self.base, self.location)

    # --- catching up ------------------------------------------------------------------

    async def refresh(self) -> None:
        """Apply every entry committed since this store's version: one by one, and when that
        finds ``_SEQUENTIAL_CATCH_UP`` of them, from the newest checkpoint ahead of it and the
        entries listed after, fetched in parallel."""
        if not self.created and not await self._marker_found():
            return
        if self._view_is_old():
            await self._load_newest_checkpoint()
        for _ in range(_SEQUENTIAL_CATCH_UP):
            asked_at = time.monotonic()
            seq = self.index.version + 1
            data = self._read_back.pop(seq, None) or await self.keyed.get(entry_name(seq))
            if self._view_is_old():  # too late to tell the end, or an entry, from one compaction re-made
                break
            if data is None:
                self._confirmed_at = asked_at
                self._read_back.clear()
                return
            self._apply_entry(decode_entry(data, seq, self.where(entry_name(seq))))
        self._read_back.clear()  # far behind (a broker that stood by, a reader of a busy queue)
        await self._load_newest_checkpoint()

    async def _marker_found(self) -> bool:
        """Look whether the queue was created since (it reads as empty until then)."""
        asked_at = time.monotonic()
        content, etag = await self.keyed.read()
        if etag is None:
            self._confirmed_at = asked_at
            return False
        check_not_empty(content, etag, self.location)
        is_log, base = decode_marker(content, self.location)
        if not is_log:
            raise CorruptStateError(
                self.location, "another process created this queue in the single-object layout; reopen it"
            )
        self.base, self.created, self._confirmed_at = base, True, -math.inf
        return True

    def _view_is_old(self) -> bool:
        return self._is_late(self._confirmed_at)

    def _is_late(self, since: float) -> bool:
        """Whether ``since`` (monotonic) is more than half the retention ago: an entry that was
        absent then may have been created and compacted since (the other half of the retention
        is the margin for the clocks of other processes)."""
        return time.monotonic() - since > self.settings.retention.total_seconds() / 2

    async def _load_newest_checkpoint(self) -> None:
        """Start from the newest checkpoint if it is ahead of us, then fetch the entries after it."""
        asked_at = time.monotonic()
        loaded = False
        vanished = CHECKPOINT_PREFIX
        for attempt in range(self.retry.max_retries + 1):
            keys = sorted(filter(None, map(checkpoint_key, await self.keyed.list_names(CHECKPOINT_PREFIX))))
            if not keys or keys[-1][0] <= self.index.version:
                break
            name = checkpoint_name(*keys[-1])
            read = await self._checkpoints.read(name)
            if isinstance(read, QueueIndex):
                self.index = read
                self._base_applied = loaded = True  # the checkpoint covers the base
                self._changes_since_checkpoint = self._entries_since_checkpoint = 0
                break
            vanished = read
            await self.retry.wait(attempt + 1)  # compacted while we looked: list again
        else:
            raise CorruptStateError(
                self.where(vanished), "the newest checkpoint, or an object it names, keeps vanishing"
            )
        if self.base is not None and not self._base_applied:
            await self._load_base()
        await self._fetch_listed_entries()
        if self.index.version == 0 and self.base is None and not loaded and await self._get(GENESIS) is None:
            raise CorruptStateError(
                self.where(""), "the queue's log is missing or empty (was its directory or prefix deleted?)"
            )
        self._confirmed_at = asked_at

    async def _get(self, name: str) -> bytes | None:
        return await self.retry.get(self.keyed, name)

    async def _load_base(self) -> None:
        assert self.base is not None
        data = await self._get(self.base)
        if data is None:
            raise CorruptStateError(self.where(self.base), "the migrated queue's base object is missing")
        self._apply_entry(decode_entry(data, 0, self.where(self.base)))
        self._base_applied = True

    async def _fetch_listed_entries(self) -> None:
        """Fetch the entries after our version in parallel (a fresh open) and apply them in order;
        a missing entry before a present one is a hole in the log, never its end."""
        names = await self.keyed.list_names(ENTRY_PREFIX, start_after=entry_name(self.index.version))
        seqs = [s for s in map(entry_seq, names) if s is not None]
        expected = self.index.version + 1
        for offset, seq in enumerate(seqs):
            if seq != expected + offset:
                hole = entry_name(expected + offset)
                raise CorruptStateError(self.where(hole), f"this entry is missing but entry {seq} exists")
        gate = asyncio.Semaphore(_FETCH_CONCURRENCY)

        async def fetch(seq: int) -> bytes | None:
            async with gate:
                return await self._get(entry_name(seq))

        for start in range(0, len(seqs), 256):
            chunk = seqs[start : start + 256]
            fetched = await asyncio.gather(*(fetch(s) for s in chunk), return_exceptions=True)
            for seq, data in zip(chunk, fetched, strict=True):
                if isinstance(data, BaseException):
                    raise data  # what came before it is applied and kept
                if data is None:
                    raise CorruptStateError(self.where(entry_name(seq)), "listed, then missing")
                self._apply_entry(decode_entry(data, seq, self.where(entry_name(seq))))

    def _apply_entry(self, entry: Entry) -> None:
        try:
            self.index.apply_all(entry.effects)
        except Exception as exc:  # any effect that does not fit the state before it
            location = self.where(self._segment_name(entry.seq))
            self.index, self._confirmed_at = QueueIndex(), -math.inf  # start over next time
            self._checkpoints.forget()
            self._base_applied = False
            raise CorruptStateError(location, f"does not replay on the state before it: {exc}") from exc
        self.index.version = entry.seq
        self._changes_since_checkpoint += len(entry.effects)
        self._entries_since_checkpoint += 1
        self._cache.put(entry.seq, entry.payloads)

    # --- committing -------------------------------------------------------------------

    def needs_refresh(self) -> bool:
        """Refresh before committing when our view of the log may predate a compaction."""
        return super().needs_refresh() or self._view_is_old()

    async def _create_queue(self) -> None:
        """Create the queue: ``GENESIS`` first, then the marker (only if absent).

        Raises ``CASConflictError`` if another process created the main object first.
        """
        with contextlib.suppress(CASConflictError):  # a creator that lost the marker race wrote it
            await self.keyed.create(GENESIS, encode_genesis(to_micros(utc_now())))
        await self.keyed.write(encode_marker(), if_match=None)
        self.created = True

    async def _commit(self, effects: Sequence[Effect]) -> None:
        confirmed_at = self._confirmed_at  # when we last saw the log end at our version
        if self._is_late(confirmed_at):  # the transition took long: refresh (outside it) and retry
            raise CASConflictError(f"{self.location}: the view of the log is too old to commit on")
        if not self.created:
            await self._create_queue()
        seq = self.index.version + 1
        commit_id = self.new_commit_id()
        content = encode_entry(seq, commit_id, to_micros(utc_now()), effects)
        asked_at = time.monotonic()
        try:
            await self.keyed.create(entry_name(seq), content)
        except CASConflictError:
            existing = await self.keyed.get(entry_name(seq))
            if existing is None:
                self._confirmed_at = -math.inf  # an entry vanished: look for checkpoints first
                raise
            if entry_commit_id(existing) != commit_id:
                self._read_back[seq] = existing
                raise
            # The entry is this very commit: a retried request whose first attempt landed.
        if self._is_late(confirmed_at):
            await self._check_late_landing(seq, time.monotonic() - confirmed_at)
        self.index.version = seq
        self._confirmed_at = asked_at

    async def _check_late_landing(self, seq: int, elapsed: float) -> None:
        """Keep a create that answered past the bound only if no checkpoint covers its entry: then
        none was compacted and readers read this one. Otherwise its outcome is unknown (our view
        stays old, so we reload from the checkpoints rather than read entry seq back)."""
        if await checkpoint_covers(self.keyed, seq):
            raise CommitUnknownError(
                self.where(entry_name(seq)),
                f"its create answered {elapsed:.3g} s after the log was last read, over half the "
                "retention, and a checkpoint covers it: compaction may have deleted an earlier entry "
                f"{seq}, and then no reader sees this one",
            )

    def _landed(self, effects: Sequence[Effect]) -> None:
        seq = self.index.version
        self._changes_since_checkpoint += len(effects)
        self._entries_since_checkpoint += 1
        added = [(e.id, e.payload) for e in effects if isinstance(e, Added) and isinstance(e.payload, bytes)]
        for position, (job_id, _) in enumerate(added):
            self.index.store_payload(job_id, payload_ref(seq, position))
        self._cache.put(seq, [payload for _, payload in added])
        self._maybe_checkpoint()

    # --- payloads ---------------------------------------------------------------------

    async def payloads(self, payloads: Sequence[Payload]) -> list[bytes]:
        """Return each payload's bytes, reading the segments that are not cached."""
        return await self._payloads.payloads(payloads, self.base)

    # --- checkpoints and compaction ---------------------------------------------------

    def wants_quiet_landing(self) -> bool:
        """Whether a checkpoint would start: it freezes the state as committed, so the commit
        that starts it lands with nothing applied ahead on it."""
        due = self.settings.checkpoint_due(
            self._changes_since_checkpoint, self._entries_since_checkpoint, len(self.index)
        )
        idle = self._background is None or self._background.done()
        return due and idle and not self._explicit.locked() and not self.index.frozen

    def _maybe_checkpoint(self) -> None:
        if self.wants_quiet_landing() and not self.index.journal.open:
            snapshot = self._freeze()
            self._background = asyncio.create_task(self._checkpoint_and_compact(snapshot))

    def _freeze(self) -> Pending:
        self._changes_since_checkpoint = self._entries_since_checkpoint = 0
        return self._checkpoints.freeze(self.index)

    async def _checkpoint_and_compact(self, frozen: Pending) -> None:
        try:
            await self._write_checkpoint(frozen)
            await self.compact(to_micros(utc_now()) - span_micros(self.settings.retention))
        except Exception as exc:
            logger.warning("checkpoint or compaction of %s failed: %r", self.location, exc)

    async def _write_checkpoint(self, frozen: Pending) -> None:
        try:
            await self._checkpoints.write(frozen)
        except SlabsLostError as exc:
            logger.warning("%s; writing a checkpoint of every job", exc)
            async with self.lock:  # between transactions
                frozen = self._freeze()
            await self._checkpoints.write(frozen)

    async def checkpoint(self) -> bool:
        """Write a checkpoint of the newest state."""
        async with self._explicit:  # no background checkpoint starts meanwhile
            if self._background is not None:
                await self._background
            await self._checkpoints.merged()  # its slab is named by this checkpoint
            async with self.lock:
                await self.refresh()
                self._loaded = True
                frozen = self._freeze()
            await self._write_checkpoint(frozen)
        return True

    async def compact(self, cutoff: int) -> None:
        """Delete what the newest checkpoint taken before ``cutoff`` (epoch microseconds) covers;
        see ``Compactor``."""
        await self._checkpoints.compactor.compact(cutoff, self.base)

    async def close(self) -> None:
        """Wait for a checkpoint or compaction in progress, and stop a merge of slabs."""
        if self._background is not None:
            await self._background
            self._background = None
        await self._checkpoints.close()
