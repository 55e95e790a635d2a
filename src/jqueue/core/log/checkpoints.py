"""``Checkpoints``: reading a checkpoint and its slabs into an index, and writing the next one
from what changed since (ADR 0015).

A checkpoint builds on the slabs of the last one this process wrote or loaded (its base).
Compaction deletes a slab only once no checkpoint names it, after deleting the checkpoints
it dooms (``Compactor``), so a new checkpoint whose base still exists once it is written
names only slabs that stay. A first checkpoint, or one after a failed write, writes every
live job into one new slab.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING

from jqueue.core.formats.checkpoint import HistoryEncoder, decode_manifest
from jqueue.core.formats.collections_paused import collections_paused
from jqueue.core.formats.slab import slab_name
from jqueue.core.log.compaction import Compactor
from jqueue.core.log.slab_load import loaded
from jqueue.core.log.slab_plan import Merge, Merged, Plan, merge, merge_due, plan
from jqueue.core.log.slabs import Slab, SlabSet
from jqueue.core.loop.memory import RECORDS_WORTH_IT, give_back_memory, spilled
from jqueue.core.loop.retry import RetryPolicy
from jqueue.core.loop.store import describe, describe_named
from jqueue.core.loop.switching import quick_switches
from jqueue.domain.errors import CorruptStateError
from jqueue.domain.index import QueueIndex
from jqueue.domain.records import Frozen
from jqueue.domain.times import span_micros, to_micros, utc_now
from jqueue.ports.storage import KeyedStoragePort, MappedStoragePort

if TYPE_CHECKING:
    from jqueue.core.log.store import LogSettings

_READ_CONCURRENCY = 8
logger = logging.getLogger(__name__)


class SlabsLostError(CorruptStateError):
    """A checkpoint just written may name slabs that compaction deleted meanwhile."""


@dataclass(frozen=True)
class Pending:
    """A checkpoint begun: the frozen index, when, the slabs it builds on, whether it writes
    every job (then with each slab's rows taken at the freeze), and when the merged slab it
    names first was stored (epoch microseconds), if it names one."""

    index: QueueIndex
    jobs: Frozen
    at: int
    slabs: SlabSet
    every_job: bool
    taken: dict[int, bytes]
    merged_at: int | None


class Checkpoints:
    """The checkpoints of one log-structured queue, as one process reads and writes them.

    Parameters
    ----------
    keyed : KeyedStoragePort
        The queue's storage.
    retry : RetryPolicy
        How often to retry a failed read.
    settings : LogSettings
        The retention (and the part lifetime, for compaction).
    """

    def __init__(
        self,
        keyed: KeyedStoragePort,
        retry: RetryPolicy,
        settings: LogSettings,
    ) -> None:
        self.keyed = keyed
        self.retry = retry
        self.compactor = Compactor(keyed, settings.part_lifetime + settings.retention)
        self.slabs = SlabSet()
        self.history = HistoryEncoder()
        """Encodes the history of this queue's checkpoints (in the plan's thread)."""
        self._retention = span_micros(settings.retention)
        self._merging: tuple[Merge, asyncio.Future[Merged]] | None = None

    async def read(self, name: str) -> QueueIndex | str:
        """Return the index a checkpoint holds, or the name of the object that is gone if it or
        one of its slabs is (compacted since it was listed); the next checkpoint builds on it.

        Raises
        ------
        CorruptStateError
            If it or a slab is damaged, or they do not fit together.
        """
        data = await self.retry.get(self.keyed, name)
        if data is None:
            return name
        manifest = decode_manifest(data, describe_named(self.keyed, name))
        gate = asyncio.Semaphore(_READ_CONCURRENCY)

        async def fetch(slab: str) -> bytes | memoryview | None:
            async with gate:
                return await self.retry.mapped(self.keyed, slab)

        contents = await asyncio.gather(*(fetch(entry.name) for entry in manifest.slabs))
        present = [content for content in contents if content is not None]
        for entry, content in zip(manifest.slabs, contents, strict=True):
            if content is None:
                return entry.name
        locations = [describe_named(self.keyed, entry.name) for entry in manifest.slabs]
        with collections_paused():
            index, self.slabs, segments = loaded(
                manifest, present, locations, describe_named(self.keyed, name)
            )
        self.compactor.remember(name, segments, {entry.name for entry in manifest.slabs})
        return index

    def _late(self, written_at: int, bound: int | None = None) -> bool:
        """Whether ``written_at`` is more than ``bound`` (half the retention) ago."""
        return to_micros(utc_now()) - written_at > (self._retention // 2 if bound is None else bound)

    async def _withdraw(self, plan: Plan) -> None:
        """Delete a checkpoint just created that may name a lost slab, while it is younger than
        half the retention: no compaction can have kept it as the one it compacts up to (it
        stays otherwise, and the checkpoint of every job that follows replaces it)."""
        if not self._late(plan.at):
            await self.keyed.delete(plan.checkpoint)

    def forget(self) -> None:
        """The index was replaced by one no checkpoint holds: the next checkpoint writes every job."""
        self.slabs = SlabSet()

    def freeze(self, index: QueueIndex) -> Pending:
        """Freeze ``index`` for the next checkpoint, which names the slab of a merge done since
        the last (on the event loop, O(1) unless it writes every job)."""
        merged_at = self._take_merge()
        slabs = self.slabs
        every_job = slabs.checkpoint is None
        taken = slabs.taken_now() if every_job else {}
        at = to_micros(utc_now())
        return Pending(index, index.freeze(every_job=every_job), at, slabs, every_job, taken, merged_at)

    def _start_merge(self, slabs: SlabSet, version: int) -> None:
        """Begin the merge ``slabs`` call for, unless one runs (between plans, on the event loop)."""
        if self._merging is None and slabs is self.slabs and (begun := merge_due(slabs)) is not None:
            self._merging = (begun, asyncio.ensure_future(self._merge(begun, version)))

    async def _merge(self, begun: Merge, version: int) -> Merged:
        """Run a merge in a thread and store its slab (mapped from then on, where it can be)."""
        with quick_switches(), collections_paused():
            merged = await asyncio.to_thread(merge, begun)
        if merged.slab is not None:
            merged.written_at = to_micros(utc_now())
            merged.slab.name = slab_name(version, merged.written_at, uuid.uuid4().hex[:8])
            await self.keyed.create(merged.slab.name, merged.content)
            merged.content = b""
            await self._keep(merged.slab)
            if merged.slab.rows >= RECORDS_WORTH_IT:  # what the merge made and let go of
                await asyncio.to_thread(give_back_memory)
        return merged

    def _take_merge(self) -> int | None:
        """Put a merge done (and stored young enough) in place of the slabs it retires; return
        when its slab was stored, or None if there is none to name."""
        if self._merging is None or not self._merging[1].done():
            return None
        begun, task = self._merging
        self._merging = None
        try:
            merged: Merged | None = task.result()
        except Exception as exc:  # the retired slabs stay; compaction deletes what it wrote
            logger.warning("a merge of the slabs of %s failed: %r", describe(self.keyed), exc)
            merged = None
        stored = None if merged is None or merged.slab is None else merged.written_at
        young = stored is None or not self._late(stored, self._retention // 4)
        taken = merged is not None and young and self.slabs.take_merge(merged)
        for slab in begun.retired:
            slab.drops_since = None
        return stored if taken else None

    async def merged(self) -> None:
        """Wait for a merge in progress, if any (its slab is named by the next checkpoint)."""
        if self._merging is not None:
            with contextlib.suppress(Exception):
                await asyncio.shield(self._merging[1])

    async def close(self) -> None:
        """Stop a merge in progress and wait for its thread."""
        if self._merging is not None:
            begun, task = self._merging
            self._merging = None
            begun.stop.set()
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await task
            for slab in begun.retired:
                slab.drops_since = None

    async def write(self, pending: Pending) -> None:
        """Make the checkpoint of a frozen index in a thread (commits go on meanwhile) and store
        its new slab, then itself; a checkpoint that fails makes the next one write every job.

        Raises
        ------
        SlabsLostError
            If compaction may have deleted a slab it names (its base went meanwhile, or its
            slab took half the retention): it is deleted again, and the next checkpoint,
            which writes every job, should follow at once.
        """
        base = None if pending.every_job else pending.slabs.checkpoint
        try:
            plan = await self._plan(pending)
            await self._store(plan, base, pending.merged_at)
        except BaseException:
            pending.slabs.forget()
            raise
        pending.slabs.adopt(plan, pending.index)
        if plan.slab is not None:  # the set's own slab: adopting it made a new one
            number = plan.slab.number
            if (stored := next((s for s in pending.slabs.slabs if s.number == number), None)) is not None:
                await self._keep(stored)
        self._start_merge(pending.slabs, plan.version)
        if len(plan.claimable) >= RECORDS_WORTH_IT:  # records let go of (most of them)
            await asyncio.to_thread(give_back_memory)

    async def _keep(self, slab: Slab) -> None:
        """Read ``slab``, just stored, from a mapping from now on: of its object where the
        storage maps it, else of a temporary file (``spilled``); it stays in memory if there is
        none (a map is only a saving)."""
        with contextlib.suppress(Exception):
            held: bytes | memoryview | None
            if isinstance(self.keyed, MappedStoragePort):
                held = await self.keyed.mapped(slab.name)
            else:
                held = await asyncio.to_thread(spilled, slab.opened.data)
            if held is not None and held is not slab.opened.data:
                slab.opened = slab.opened.moved_to(held)

    async def _plan(self, pending: Pending) -> Plan:
        """Run the plan in a thread, and thaw the index once the thread is done with it (even if
        this call is cancelled meanwhile)."""
        tag = uuid.uuid4().hex[:8]
        # Commits go on meanwhile: their waits for the interpreter lock stay short, and neither
        # thread sets off collections over the rows the plan makes and drops.
        with quick_switches(), collections_paused():
            planning = asyncio.ensure_future(
                asyncio.to_thread(
                    plan,
                    pending.slabs,
                    pending.jobs,
                    pending.at,
                    tag,
                    every_job=pending.every_job,
                    taken=pending.taken,
                    history=self.history,
                )
            )
            try:
                return await asyncio.shield(planning)
            finally:
                try:
                    if not planning.done():
                        await asyncio.wait({planning})
                finally:
                    pending.index.thaw()

    async def _store(self, plan: Plan, base: str | None, merged_at: int | None) -> None:
        """Create the new slab, then the checkpoint, then make sure that the slabs it names
        outlive it (§6 of architecture.md, rule 5): its base still exists, and its new slab
        (and the merged slab it names first, stored at ``merged_at``) was named no more than
        half the retention before the checkpoint was created."""
        name = plan.checkpoint
        where, written_at = describe_named(self.keyed, name), to_micros(utc_now())
        manifest = plan.manifest(written_at)
        if plan.slab is not None:
            await self.keyed.create(plan.slab.name, plan.content)
        if merged_at is not None:
            written_at = min(written_at, merged_at)
        if self._late(written_at):
            raise TimeoutError(f"{where}: its slab took over half the retention to write")
        try:
            await self.keyed.create(name, manifest)
        except BaseException:  # it may have landed: it must not stay unchecked
            with contextlib.suppress(Exception):
                await self._withdraw(plan)
            raise
        named = {slab.name for slab in plan.slabs}
        if self._late(written_at) or (base is not None and base not in await self.keyed.list_names(base)):
            await self._withdraw(plan)
            raise SlabsLostError(where, "a slab it names may have been compacted while it was written")
        self.compactor.remember(name, plan.segments, named)
