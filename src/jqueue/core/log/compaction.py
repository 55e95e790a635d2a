"""``Compactor``: deletes what a checkpoint older than the retention covers.

It remembers, for each checkpoint this process wrote or loaded, the segments (log entries,
or the base of a migrated queue) that hold the payloads of the jobs live at it, and the
slabs it names. Compaction uses only such a checkpoint: every job live at it keeps its
payload entry, and a job removed before it was removed longer than the retention ago. A
bulk write's part goes once no job live at such a checkpoint refers to it and it was
written ``part_age`` before it: a write links only parts younger than
``LogSettings.part_lifetime``, and ``part_age`` adds the retention to that (a checkpoint's
writer may have missed the newest half-retention of commits), so no commit that the
checkpoint does not cover can refer to it.

A slab goes once it is older than the retention and no checkpoint names it, listed after
the checkpoints compaction deletes are gone (architecture.md §6, rule 5).
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

from jqueue.core.formats.checkpoint import named_slabs
from jqueue.core.formats.entry import (
    CHECKPOINT_PREFIX,
    ENTRY_PREFIX,
    checkpoint_key,
    checkpoint_name,
    entry_name,
    entry_seq,
)
from jqueue.core.formats.slab import SLAB_PREFIX, slab_written_at
from jqueue.core.log.parts import PART_PREFIX, part_name, part_segment, part_written_at
from jqueue.core.loop.store import describe_named
from jqueue.ports.storage import KeyedStoragePort

DELETE_CONCURRENCY = 16


async def checkpoint_covers(keyed: KeyedStoragePort, seq: int) -> bool:
    """Whether a checkpoint of entry ``seq`` or a later one exists.

    Compaction deletes entries only up to a checkpoint it keeps, and deletes that checkpoint
    only for a newer one: once entry ``seq`` was compacted, a checkpoint at or past it exists
    for good. Without one, entry ``seq`` was never compacted.
    """
    keys = filter(None, map(checkpoint_key, await keyed.list_names(CHECKPOINT_PREFIX)))
    return any(checkpoint_seq >= seq for checkpoint_seq, _ in keys)


class Compactor:
    """Compaction of one log-structured queue.

    Parameters
    ----------
    keyed : KeyedStoragePort
        The queue's storage.
    part_age : timedelta
        How old a part must be, at a checkpoint that no job of it is live at, to be deleted.
    """

    def __init__(self, keyed: KeyedStoragePort, part_age: timedelta) -> None:
        self.keyed = keyed
        self.part_age = part_age
        self._checkpoint_segments: dict[str, set[int]] = {}
        self._named: dict[str, set[str]] = {}
        self._compacted_through = -1
        self._kept_segments: set[int] = set()

    def remember(self, checkpoint: str, segments: set[int], slabs: set[str]) -> None:
        """Record the segments that hold the payloads of a checkpoint written or loaded here, and
        the slabs it names."""
        self._checkpoint_segments[checkpoint] = segments
        self._named[checkpoint] = slabs

    async def compact(self, cutoff: int, base: str | None) -> None:
        """Delete what the newest known checkpoint taken before ``cutoff`` (epoch microseconds: now
        minus the retention, normally) covers, except the payloads that checkpoint references;
        ``base`` names the object holding a migrated queue's first jobs (segment 0), if any."""
        keys = sorted(filter(None, map(checkpoint_key, await self.keyed.list_names(CHECKPOINT_PREFIX))))
        mine = self._checkpoint_segments
        known = [key for key in keys if key[1] <= cutoff and checkpoint_name(*key) in mine]
        if not known:
            return
        keep = max(known)
        referenced = mine[checkpoint_name(*keep)]
        doomed = [checkpoint_name(seq, at) for seq, at in keys if seq < keep[0]]
        listed = await self.keyed.list_names(ENTRY_PREFIX, start_after=entry_name(self._compacted_through))
        candidates = {s for s in map(entry_seq, listed) if s is not None and s <= keep[0]}
        candidates |= self._kept_segments
        if base is not None and self._compacted_through < 0:
            candidates.add(0)
        self._kept_segments = candidates & referenced
        doomed += [
            base if s == 0 and base else entry_name(s) for s in sorted(candidates - self._kept_segments)
        ]
        doomed += await self._unused_parts(keep[1], referenced)
        await self._delete(doomed)
        self._compacted_through = max(self._compacted_through, keep[0])
        for name in [n for n in mine if (checkpoint_key(n) or keep) < keep]:
            del mine[name]
        await self._delete(await self._unnamed_slabs(cutoff))

    async def _delete(self, names: list[str]) -> None:
        gate = asyncio.Semaphore(DELETE_CONCURRENCY)

        async def delete(name: str) -> None:
            async with gate:
                await self.keyed.delete(name)

        await asyncio.gather(*(delete(name) for name in names))

    async def _unused_parts(self, checkpoint_at: int, referenced: set[int]) -> list[str]:
        """Return the parts that no job live at a checkpoint taken at ``checkpoint_at`` (epoch
        microseconds) refers to, written longer than ``part_age`` before it."""
        written_before = checkpoint_at // 1_000_000 - int(self.part_age.total_seconds())
        segments = filter(None, map(part_segment, await self.keyed.list_names(PART_PREFIX)))
        return [part_name(s) for s in segments if s not in referenced and part_written_at(s) < written_before]

    async def _unnamed_slabs(self, cutoff: int) -> list[str]:
        """Return the slabs written before ``cutoff`` that no checkpoint names, listing the
        checkpoints after the doomed ones are gone (and reading those this process neither
        wrote nor loaded): a checkpoint created after that listing builds on one that still
        existed then, or finds its base gone and checks its slabs (``Checkpoints``)."""
        checkpoints = [n for n in await self.keyed.list_names(CHECKPOINT_PREFIX) if checkpoint_key(n)]
        for gone in self._named.keys() - set(checkpoints):
            del self._named[gone]
        named: set[str] = set()
        for checkpoint in checkpoints:
            if checkpoint not in self._named:
                data = await self.keyed.get(checkpoint)
                if data is None:  # compacted by another process meanwhile: it names nothing now
                    continue
                self._named[checkpoint] = named_slabs(data, describe_named(self.keyed, checkpoint))
            named |= self._named[checkpoint]
        slabs = await self.keyed.list_names(SLAB_PREFIX)
        return [s for s in slabs if s not in named and (slab_written_at(s) or cutoff + 1) <= cutoff]
