"""``LogStore``: the log-structured layout, where each commit creates one immutable entry.

Committing entry ``seq`` means creating ``log/<seq>`` only if it is absent: winning
the create is winning the compare-and-swap, and it costs O(batch), whatever the
depth. A writer that loses reads the entries it missed, re-applies its batch and
tries the next number. Readers catch up with one GET per new entry, and learn that
they are up to date with one GET that finds nothing.

After every ``checkpoint_every`` changes (or one per 20 live jobs, if more) a
checkpoint of the jobs' metadata is written in the background (payloads stay in the
entry that first carried them), and old entries and checkpoints are compacted.
Compaction removes only what a checkpoint older than ``retention`` covers, and a
writer whose view of the log is older than half the retention looks for a newer
checkpoint before it commits, so no writer can re-create a compacted entry. That
assumes clocks agree to well within the retention.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
import uuid
from collections.abc import Sequence

from jqueue.core.log_codec import (
    CHECKPOINT_PREFIX,
    ENTRY_PREFIX,
    Entry,
    checkpoint_key,
    checkpoint_name,
    decode_checkpoint,
    decode_entry,
    encode_checkpoint,
    encode_entry,
    entry_commit_id,
    entry_name,
    entry_seq,
)
from jqueue.core.retry import RetryPolicy
from jqueue.core.segment_cache import SegmentCache
from jqueue.core.settings import LogSettings
from jqueue.core.store import CommitStore
from jqueue.domain.effects import Added, Effect, Payload, payload_place, payload_ref, to_micros
from jqueue.domain.errors import CASConflictError, CorruptStateError
from jqueue.domain.index import QueueIndex
from jqueue.domain.models import utc_now
from jqueue.domain.records import IndexSnapshot
from jqueue.ports.storage import KeyedStoragePort

logger = logging.getLogger("jqueue")

_FETCH_CONCURRENCY = 16


class LogStore(CommitStore):
    """A queue kept as a log of immutable entries plus periodic checkpoints.

    Parameters
    ----------
    storage : KeyedStoragePort
        The backend; its main object holds the layout marker.
    retry : RetryPolicy
        How often and how patiently to retry a conflicting commit.
    settings : LogSettings
        Checkpoint interval, retention and payload cache size.
    base : str or None
        The object holding the jobs a migrated queue started with (segment 0).
    """

    def __init__(
        self, storage: KeyedStoragePort, retry: RetryPolicy, settings: LogSettings, base: str | None = None
    ) -> None:
        super().__init__(storage, retry)
        self.keyed = storage
        self.settings = settings
        self.base = base
        self._cache = SegmentCache(settings.payload_cache_bytes)
        self._confirmed_at = -math.inf
        self._read_back: dict[int, bytes] = {}
        self._changes_since_checkpoint = 0
        self._background: asyncio.Task[None] | None = None
        self._compacted_through = -1
        self._kept_segments: set[int] = set()
        self._base_applied = False
        self._loading: dict[int, asyncio.Future[list[bytes]]] = {}

    def where(self, name: str) -> str:
        """Return the location of a named object, for messages."""
        return f"{self.location}.d/{name}"

    def _segment_name(self, segment: int) -> str:
        if segment == 0:
            if self.base is None:
                raise CorruptStateError(self.location, "a payload refers to a base object it does not have")
            return self.base
        return entry_name(segment)

    # --- catching up ------------------------------------------------------------------

    async def refresh(self) -> None:
        """Apply every entry committed since this store's version."""
        if self._view_is_old():
            await self._load_newest_checkpoint()
        while True:
            asked_at = time.monotonic()
            seq = self.index.version + 1
            data = self._read_back.pop(seq, None) or await self.keyed.get(entry_name(seq))
            if data is None:
                self._confirmed_at = asked_at
                self._read_back.clear()
                return
            self._apply_entry(decode_entry(data, seq, self.where(entry_name(seq))))

    def _view_is_old(self) -> bool:
        return time.monotonic() - self._confirmed_at > self.settings.retention.total_seconds() / 2

    async def _load_newest_checkpoint(self) -> None:
        """Start from the newest checkpoint if it is ahead of us, then fetch the entries after it."""
        asked_at = time.monotonic()
        while True:
            keys = sorted(filter(None, map(checkpoint_key, await self.keyed.list_names(CHECKPOINT_PREFIX))))
            if not keys or keys[-1][0] <= self.index.version:
                break
            name = checkpoint_name(*keys[-1])
            data = await self.keyed.get(name)
            if data is None:
                continue  # compacted while we looked; list again
            self.index = decode_checkpoint(data, self.where(name))
            self._base_applied = True  # the checkpoint covers it
            self._changes_since_checkpoint = 0
            break
        if self.base is not None and not self._base_applied:
            await self._load_base()
        await self._fetch_listed_entries()
        self._confirmed_at = asked_at

    async def _load_base(self) -> None:
        assert self.base is not None
        data = await self.keyed.get(self.base)
        if data is None:
            raise CorruptStateError(self.where(self.base), "the migrated queue's base object is missing")
        self._apply_entry(decode_entry(data, 0, self.where(self.base)))
        self._base_applied = True

    async def _fetch_listed_entries(self) -> None:
        """Fetch the entries after our version in parallel (a fresh open), and apply them in order."""
        names = await self.keyed.list_names(ENTRY_PREFIX, start_after=entry_name(self.index.version))
        seqs = [s for s in map(entry_seq, names) if s is not None]
        expected = self.index.version + 1
        seqs = seqs[: next((i for i, s in enumerate(seqs) if s != expected + i), len(seqs))]
        gate = asyncio.Semaphore(_FETCH_CONCURRENCY)

        async def fetch(seq: int) -> bytes | None:
            async with gate:
                return await self.keyed.get(entry_name(seq))

        for start in range(0, len(seqs), 256):
            chunk = seqs[start : start + 256]
            for seq, data in zip(chunk, await asyncio.gather(*(fetch(s) for s in chunk)), strict=True):
                if data is None:
                    return
                self._apply_entry(decode_entry(data, seq, self.where(entry_name(seq))))

    def _apply_entry(self, entry: Entry) -> None:
        try:
            self.index.apply_all(entry.effects)
        except ValueError as exc:
            location = self.where(self._segment_name(entry.seq))
            self.index, self._confirmed_at = QueueIndex(), -math.inf  # start over next time
            self._base_applied = False
            raise CorruptStateError(location, f"does not replay on the state before it: {exc}") from exc
        self.index.version = entry.seq
        self._changes_since_checkpoint += len(entry.effects)
        self._cache.put(entry.seq, entry.payloads)

    # --- committing -------------------------------------------------------------------

    def needs_refresh(self) -> bool:
        """Refresh before committing when our view of the log may predate a compaction."""
        return super().needs_refresh() or self._view_is_old()

    async def _commit(self, effects: Sequence[Effect]) -> None:
        if self._view_is_old():  # the transition took long: refresh (outside it) and retry
            raise CASConflictError(f"{self.location}: the view of the log is too old to commit on")
        seq = self.index.version + 1
        commit_id = uuid.uuid4().hex
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
        self.index.version = seq
        self._changes_since_checkpoint += len(effects)
        self._confirmed_at = asked_at
        added = [e for e in effects if isinstance(e, Added)]
        for position, effect in enumerate(added):
            self.index.move_payload(effect.job_id, payload_ref(seq, position))
        self._cache.put(seq, [e.payload for e in added if isinstance(e.payload, bytes)])
        self._maybe_checkpoint()

    # --- payloads ---------------------------------------------------------------------

    async def payloads(self, payloads: Sequence[Payload]) -> list[bytes]:
        """Return each payload's bytes, reading the segments that are not cached."""
        found: list[bytes] = []
        for payload in payloads:
            if isinstance(payload, bytes):
                found.append(payload)
                continue
            segment, position = payload_place(payload)
            payloads_there = self._cache.get(segment) or await self._load_segment(segment)
            if position >= len(payloads_there):
                raise CorruptStateError(self.where(self._segment_name(segment)), f"has no payload {position}")
            found.append(payloads_there[position])
        return found

    async def _load_segment(self, segment: int) -> list[bytes]:
        """Fetch a segment once, however many callers need it at the same time."""
        loading = self._loading.get(segment)
        if loading is None:
            loading = self._loading[segment] = asyncio.ensure_future(self._fetch_segment(segment))
            loading.add_done_callback(lambda _: self._loading.pop(segment, None))
        return await asyncio.shield(loading)

    async def _fetch_segment(self, segment: int) -> list[bytes]:
        name = self._segment_name(segment)
        data = await self.keyed.get(name)
        if data is None:
            raise CorruptStateError(self.where(name), "a live job's payload entry is missing")
        entry = decode_entry(data, segment, self.where(name))
        self._cache.put(segment, entry.payloads)
        return entry.payloads

    # --- checkpoints and compaction ---------------------------------------------------

    def _maybe_checkpoint(self) -> None:
        due = self._changes_since_checkpoint >= self.settings.interval(len(self.index))
        if due and (self._background is None or self._background.done()):
            snapshot = self._freeze()
            self._background = asyncio.create_task(self._checkpoint_and_compact(snapshot))

    def _freeze(self) -> tuple[QueueIndex, IndexSnapshot, int]:
        self._changes_since_checkpoint = 0
        return self.index, self.index.freeze(), to_micros(utc_now())

    async def _checkpoint_and_compact(self, frozen: tuple[QueueIndex, IndexSnapshot, int]) -> None:
        try:
            segments = await self._write_checkpoint(frozen)
            retention = int(self.settings.retention.total_seconds() * 1_000_000)
            await self.compact(segments, to_micros(utc_now()) - retention)
        except Exception as exc:
            logger.warning("checkpoint or compaction of %s failed: %r", self.location, exc)

    async def _write_checkpoint(self, frozen: tuple[QueueIndex, IndexSnapshot, int]) -> set[int]:
        """Encode a frozen snapshot in a thread (commits go on meanwhile) and store it."""
        index, snapshot, at = frozen
        try:
            content = await asyncio.to_thread(encode_checkpoint, snapshot, at)
        finally:
            index.thaw()
        with contextlib.suppress(CASConflictError):  # another process wrote the same checkpoint
            await self.keyed.create(checkpoint_name(snapshot.version, at), content)
        return snapshot.segments

    async def checkpoint(self) -> set[int]:
        """Write a checkpoint of the newest state; returns the live payload segments."""
        if self._background is not None:
            await self._background
        async with self._turn:
            await self.refresh()
            self._loaded = True
            frozen = self._freeze()
        return await self._write_checkpoint(frozen)

    async def compact(self, referenced: set[int], cutoff: int) -> None:
        """Delete what the newest checkpoint taken before ``cutoff`` covers, except live payloads.

        ``referenced`` are the payload segments of live jobs at that checkpoint or later;
        ``cutoff`` is in epoch microseconds (now minus the retention, normally).
        """
        keys = sorted(filter(None, map(checkpoint_key, await self.keyed.list_names(CHECKPOINT_PREFIX))))
        old = [seq for seq, at in keys if at <= cutoff]
        if not old:
            return
        keep = max(old)
        doomed = [checkpoint_name(seq, at) for seq, at in keys if seq < keep]
        listed = await self.keyed.list_names(ENTRY_PREFIX, start_after=entry_name(self._compacted_through))
        candidates = {s for s in map(entry_seq, listed) if s is not None and s <= keep} | self._kept_segments
        if self.base is not None and self._compacted_through < 0:
            candidates.add(0)
        self._kept_segments = {s for s in candidates if s in referenced}
        doomed += [self._segment_name(s) for s in sorted(candidates - self._kept_segments)]
        gate = asyncio.Semaphore(_FETCH_CONCURRENCY)

        async def delete(name: str) -> None:
            async with gate:
                await self.keyed.delete(name)

        await asyncio.gather(*(delete(name) for name in doomed))
        self._compacted_through = keep

    async def close(self) -> None:
        """Wait for a checkpoint or compaction in progress."""
        if self._background is not None:
            await self._background
            self._background = None
